"""The agent loop: stream the model, run the tools it asks for, commit every step through a sink.

Commit order per iteration: the complete assistant message before any of its tools runs;
each tool result before the next provider request; the final answer (with the run's usage) last. Every
write goes through the run's :class:`~opencompany.llm.commit.Committer`: a sink failure ends the run at
that boundary (``persist_failed``, or ``context_changed`` when the Context moved under the run) and
nothing more reaches the sink.

Stop is honoured between stream events (and while waiting for the next one) and between tools:

* during streaming — the partial text becomes an assistant message with ``metadata.status = "stopped"``,
  committed through ``sink.final`` (nothing is committed when no text was written);
* between tools — the calls not started get ``not_run`` results, committed through ``sink.tool_result``,
  so the transcript stays well-formed.

The caller hands in a transcript with no open tool calls (apply ``close_unanswered_tool_calls`` on load).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from opencompany.core.json import canonical_json, json_size

from .commit import (
    CallRecord,
    CommitFailed,
    Committer,
    CompactionCandidate,
    CompactionReport,
    Sink,
    stopped_answer,
)
from .context import CompactionPolicy, ContextAdapter, estimate_tokens
from .policies import (
    DEFAULT_TOOL_RESULT_MAX_CHARS,
    DEFAULT_TRANSCRIPT_BUDGET_BYTES,
    SUMMARIZE_INSTRUCTION,
    Summarizer,
    cap_tool_results,
    clear_old_results,
    plan_compaction,
    render_for_summary,
)
from .providers.base import (
    PROVIDER_ERROR,
    Completed,
    ModelSettings,
    Provider,
    ProviderError,
    ProviderErrorEvent,
    ProviderEvent,
    Request,
    TextDelta,
    Usage,
)
from .registry import context_adapter
from .tools import ToolContext, ToolSpec, tool_error, tools_by_name, validate_arguments
from .wire import (
    Block,
    Message,
    make_tool_result,
    make_user,
    text_of,
    tool_calls_of,
)

logger = logging.getLogger(__name__)

NOT_RUN_TEXT = "Not run: the owner stopped this answer before this tool call started."

LoopStatus = Literal["finished", "stopped", "error", "iteration_limit"]


@dataclass(frozen=True, slots=True)
class ToolResultEvent:
    """Loop event for UI progress: a tool result was committed."""

    message: Message


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """Loop event: the transcript was compacted from ``before`` to ``after`` messages."""

    before: int
    after: int


LoopEvent = ProviderEvent | ToolResultEvent | CompactionEvent
OnEvent = Callable[[LoopEvent], "Awaitable[None] | None"]


@dataclass(frozen=True)
class LoopPolicies:
    """Transcript policies applied while the loop runs.

    ``compaction_ratio`` of ``settings.context_window`` triggers compaction (``None`` disables it);
    ``transcript_budget_bytes`` triggers clearing of older tool results (``0`` disables it);
    ``summarizer`` defaults to the run's own provider with a fixed summarizing instruction.
    """

    compaction_ratio: float | None = 0.8
    transcript_budget_bytes: int = DEFAULT_TRANSCRIPT_BUDGET_BYTES
    summarizer: Summarizer | None = None
    chars_per_token: int = 4
    adapter: ContextAdapter | None = None
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)


@dataclass
class LoopResult:
    status: LoopStatus
    usage: Usage = field(default_factory=Usage)
    iterations: int = 0
    error_code: str | None = None
    error_message: str | None = None
    error_extra: dict[str, Any] = field(default_factory=dict)
    final_message: Message | None = None
    messages: list[Message] = field(default_factory=list)
    compactions: int = 0
    compaction_failures: int = 0

    def fail(self, code: str, message: str, extra: dict[str, Any] | None = None) -> None:
        """End the run as an error with ``code``."""
        self.status = "error"
        self.error_code, self.error_message, self.error_extra = code, message, extra or {}


class ProviderSummarizer:
    """A :class:`Summarizer` backed by a provider: one request with a fixed instruction, no tools.

    The head is rendered as plain text, so any provider can summarize any transcript.
    """

    def __init__(self, provider: Provider, settings: ModelSettings) -> None:
        self.provider = provider
        self.settings = settings
        self.usage = Usage()
        self.last_usage: Usage | None = None
        self.last_request: Request | None = None

    async def summarize(self, messages: list[Message]) -> str:
        request = Request(
            system_blocks=[SUMMARIZE_INSTRUCTION],
            messages=[make_user(render_for_summary(messages))],
            tools=[],
            settings=self.settings,
        )
        self.last_request, self.last_usage = request, None
        parts: list[str] = []
        completed: Message | None = None
        async for event in self.provider.stream(request):
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif isinstance(event, Usage):
                self.usage = self.usage + event
                self.last_usage = event if self.last_usage is None else self.last_usage + event
            elif isinstance(event, Completed):
                completed = event.message
            elif isinstance(event, ProviderErrorEvent):
                raise ProviderError(
                    event.code, event.message, status=event.status, retry_after=event.retry_after
                )
        return text_of(completed) if completed is not None else "".join(parts)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _tools_digest(tools: Sequence[ToolSpec]) -> str:
    return _digest(
        canonical_json(
            [{"name": t.name, "description": t.description, "schema": t.input_schema} for t in tools]
        )
    )


def _settings_record(settings: ModelSettings) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(settings).items() if v is not None}


@dataclass
class _Streamed:
    message: Message | None = None
    text: list[str] = field(default_factory=list)
    usage: Usage | None = None
    error: ProviderError | None = None
    stopped: bool = False


async def _emit(on_event: OnEvent | None, event: LoopEvent) -> None:
    if on_event is None:
        return
    try:
        result = on_event(event)
        if inspect.isawaitable(result):
            await result
    except Exception:
        # Progress broadcasting is observational; it never fails the run.
        logger.warning("on_event callback failed for %s", type(event).__name__, exc_info=True)


async def _stream_once(
    provider: Provider, request: Request, stop: asyncio.Event, on_event: OnEvent | None
) -> _Streamed:
    out = _Streamed()

    async def consume() -> None:
        events = provider.stream(request)
        try:
            async for event in events:
                if isinstance(event, TextDelta):
                    out.text.append(event.text)
                elif isinstance(event, Usage):
                    out.usage = event if out.usage is None else out.usage + event
                elif isinstance(event, Completed):
                    out.message = event.message
                    continue
                elif isinstance(event, ProviderErrorEvent):
                    out.error = ProviderError(
                        event.code, event.message, status=event.status, retry_after=event.retry_after
                    )
                    return
                await _emit(on_event, event)
                if stop.is_set():
                    out.stopped = True
                    return
        except ProviderError as exc:
            out.error = exc
        except Exception as exc:
            logger.warning("provider %s raised %s", getattr(provider, "name", "?"), type(exc).__name__)
            out.error = ProviderError(PROVIDER_ERROR, f"The provider failed ({type(exc).__name__}).")
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    if stop.is_set():
        out.stopped = True
        return out
    consumer = asyncio.create_task(consume())
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({consumer, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not consumer.done():
            consumer.cancel()
            out.stopped = True
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
    if out.message is None and out.error is None and stop.is_set():
        out.stopped = True
    if out.message is None and out.error is None and not out.stopped:
        out.error = ProviderError(PROVIDER_ERROR, "The provider ended the stream without a message.")
    return out


def _result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


async def _run_tool(
    call: Mapping[str, Any], tools: Mapping[str, ToolSpec], context: ToolContext, max_chars: int
) -> Message:
    name = call.get("name", "")
    spec = tools.get(name)
    result: Any
    # A call kept raw is answered as such first: a malformed call may not even name its tool.
    if call.get("cut_off"):
        result = tool_error(
            "call_cut_off",
            f"This call was not run: {call.get('parse_error')}. Make the call again, with shorter "
            "arguments if they were long.",
        )
    elif "raw_arguments" in call:
        result = tool_error(
            "invalid_arguments",
            f"The arguments were not valid ({call.get('parse_error')}). "
            "Call the tool again with a JSON object that matches its schema.",
        )
    elif spec is None:
        available = ", ".join(sorted(tools)) or "none"
        result = tool_error("unknown_tool", f"There is no tool named {name!r}. Available tools: {available}.")
    else:
        arguments = call.get("arguments") or {}
        errors = validate_arguments(spec, arguments)
        if errors:
            result = tool_error(
                "invalid_arguments", "The arguments do not match the schema: " + "; ".join(errors)
            )
        else:
            scoped = dataclasses.replace(context, tool_call_id=call.get("id"))
            try:
                if inspect.iscoroutinefunction(spec.execute):
                    result = await spec.execute(scoped, dict(arguments))
                else:
                    result = await asyncio.to_thread(spec.execute, scoped, dict(arguments))
                    if inspect.isawaitable(result):
                        result = await result
            except Exception as exc:
                code, message = getattr(exc, "code", None), getattr(exc, "message", None)
                logger.warning(
                    "tool %s failed in run %s: %s", name, context.run_id, type(exc).__name__, exc_info=True
                )
                if isinstance(code, str) and isinstance(message, str):
                    result = tool_error(code, message)
                else:
                    result = tool_error(
                        "tool_failed", f"The tool failed unexpectedly ({type(exc).__name__})."
                    )
    status = "error" if isinstance(result, dict) and "error" in result else "ok"
    message_ = make_tool_result(call.get("id", ""), name, _result_text(result), status)
    return cap_tool_results([message_], max_chars)[0]


def _wire_size(message: Message) -> int:
    return len(canonical_json(message).encode("utf-8"))


async def run_agent_loop(
    request: Request,
    provider: Provider,
    tools: Mapping[str, ToolSpec] | Sequence[ToolSpec],
    sink: Sink,
    stop: asyncio.Event,
    *,
    tool_context: ToolContext,
    max_iterations: int = 25,
    tool_result_max_chars: int = DEFAULT_TOOL_RESULT_MAX_CHARS,
    policies: LoopPolicies | None = None,
    on_event: OnEvent | None = None,
    transcript_bytes: int | None = None,
) -> LoopResult:
    """Run one firing of an agent to its final answer, a stop, an error or the iteration limit.

    ``request.messages`` is the conversation so far (already committed by the caller); everything the
    loop adds goes through ``sink``. ``request.system_blocks[0]`` is sent unchanged on every request; the
    notes block after it changes only when a compaction writes findings into it.
    When ``request.tools`` is empty, the definitions of ``tools`` are offered to the model.
    ``transcript_bytes`` (the canonical JSON size of ``request.messages``, e.g. the stored head row's
    ``bytes``) spares the loop one pass over the transcript; the loop tracks the size from there.

    A sink with ``record_call`` gets one record per provider call (compaction calls included); a sink
    with ``compact`` lets the loop compact when the context passes ``compaction_ratio`` of the window
    and the runtime's capabilities allow it. A write refused with ``context_changed`` (the Context was
    cleared, reset or moved under the run) ends the run with that code.
    """
    loop = AgentLoop(
        request,
        provider,
        tools,
        sink,
        stop,
        tool_context=tool_context,
        max_iterations=max_iterations,
        tool_result_max_chars=tool_result_max_chars,
        policies=policies,
        on_event=on_event,
        transcript_bytes=transcript_bytes,
    )
    return await loop.run()


class AgentLoop:
    """One firing of an agent, step by step: compact when the context is full, stream one request,
    end on an answer, a stop or an error, else run the tools it asked for and clear old results.

    Every write goes through one :class:`Committer`; a write it could not make ends the run with the
    committer's code. Sizes are tracked to decide compaction without re-measuring the transcript:
    ``last_input`` (the provider's input tokens of the last request) plus what was added since.
    """

    def __init__(
        self,
        request: Request,
        provider: Provider,
        tools: Mapping[str, ToolSpec] | Sequence[ToolSpec],
        sink: Sink,
        stop: asyncio.Event,
        *,
        tool_context: ToolContext,
        max_iterations: int = 25,
        tool_result_max_chars: int = DEFAULT_TOOL_RESULT_MAX_CHARS,
        policies: LoopPolicies | None = None,
        on_event: OnEvent | None = None,
        transcript_bytes: int | None = None,
    ) -> None:
        self.provider = provider
        self.stop = stop
        self.tool_context = tool_context
        self.max_iterations = max_iterations
        self.tool_result_max_chars = tool_result_max_chars
        self.policies = policies or LoopPolicies()
        self.on_event = on_event
        self.tool_map = tools_by_name(tools)
        self.base = dataclasses.replace(
            request,
            tools=list(request.tools) or list(self.tool_map.values()),
            cancel=request.cancel if request.cancel is not None else stop,
        )
        self.settings = request.settings
        self.runtime = str(getattr(provider, "name", request.settings.provider))
        self.adapter = self.policies.adapter or context_adapter(self.runtime)
        capabilities = self.adapter.capabilities(request.settings)
        self.window = capabilities.context_window
        self.summarizer = self.policies.summarizer or ProviderSummarizer(provider, request.settings)
        self.committer = Committer(sink, run_id=tool_context.run_id, messages=list(request.messages))
        self.can_compact = capabilities.app_compaction and self.committer.can_compact
        self.result = LoopResult(status="finished")
        self.last_input = 0
        self.added_bytes = 0
        self.size = transcript_bytes if transcript_bytes is not None else json_size(request.messages)
        self.settings_record = _settings_record(request.settings)
        self.carried = getattr(provider, "request_fidelity", None)

    @property
    def messages(self) -> list[Message]:
        return self.committer.messages

    async def run(self) -> LoopResult:
        try:
            self.result.status = await self._iterate()
        except CommitFailed as exc:
            self.result.fail(exc.code, exc.message)
        self.result.messages = self.messages
        self.result.final_message = self.committer.final_message
        return self.result

    async def _iterate(self) -> LoopStatus:
        for iteration in range(1, self.max_iterations + 1):
            if self.stop.is_set():
                return "stopped"
            if self._context_is_full():
                await self.compact()
            self.result.iterations = iteration
            ended = await self.step()
            if ended is not None:
                return ended
            await self.clear_old_results()
        return "iteration_limit"

    # --- the steps ---------------------------------------------------------------------------------------

    async def step(self) -> LoopStatus | None:
        """One request and what follows from its answer: the status the run ends with, or None when
        the tools ran and the loop goes on."""
        sent = dataclasses.replace(self.base, messages=list(self.messages))
        streamed = await _stream_once(self.provider, sent, self.stop, self.on_event)
        if streamed.usage is not None:
            self.result.usage = self.result.usage + streamed.usage
            self.last_input, self.added_bytes = streamed.usage.input_tokens, 0
        else:
            self.last_input, self.added_bytes = 0, 0
        if streamed.error is not None:
            await self.record("step", "error", sent, streamed.usage)
            error = streamed.error
            self.result.fail(error.code, error.message, error.extra)
            return "error"
        if streamed.stopped or streamed.message is None:
            await self.record("step", "stopped", sent, streamed.usage)
            text = "".join(streamed.text)
            if text:
                runtime = str(getattr(self.provider, "name", "unknown"))
                await self.committer.final(stopped_answer(text, runtime=runtime), self.result.usage)
            return "stopped"
        message = streamed.message
        await self.record("step", "ok", sent, streamed.usage)
        calls = tool_calls_of(message)
        # A refused answer ends the run as it is: its calls are not run.
        if not calls or (message.get("metadata") or {}).get("refusal"):
            await self.committer.final(message, self.result.usage)
            return "finished"
        await self.committer.assistant(message)
        self._grew(message)
        return await self.run_tools(calls)

    async def run_tools(self, calls: list[Block]) -> LoopStatus | None:
        """Run the calls in order, each result committed before the next call starts; a Stop answers
        the calls not started with ``not_run``."""
        for call in calls:
            if self.stop.is_set():
                await self.committer.close_open_calls(NOT_RUN_TEXT, "not_run")
                return "stopped"
            tool_message = await _run_tool(call, self.tool_map, self.tool_context, self.tool_result_max_chars)
            await self.committer.tool_result(tool_message)
            self._grew(tool_message)
            await _emit(self.on_event, ToolResultEvent(tool_message))
        return None

    async def clear_old_results(self) -> None:
        """Past the transcript budget, older tool results are cleared and the whole list saved."""
        budget = self.policies.transcript_budget_bytes
        if not 0 < budget < self.size:
            return
        cleared = clear_old_results(self.messages, budget, size=self.size)
        if cleared is not self.messages:
            await self.committer.replace_all(cleared)
            self._measured_again()

    async def compact(self) -> None:
        """Summarize the head of the conversation into the notes block and keep the latest turns, when
        the summary is smaller and the kept turns replay; a refused attempt is recorded."""
        messages = self.messages
        plan = plan_compaction(messages)
        if plan is None or all((m.get("metadata") or {}).get("summary") for m in plan.head):
            return
        system_digest = _digest(self.base.system_blocks[0]) if self.base.system_blocks else ""
        before = estimate_tokens(
            system_blocks=self.base.system_blocks, messages=messages, tools=self.base.tools
        )
        report = functools.partial(
            CompactionReport,
            messages_before=len(messages),
            messages_after=len(plan.tail),
            tokens_before=before,
            system_digest=system_digest,
        )
        try:
            findings = await self.adapter.compact(plan.head, self.policies.compaction, self.summarizer)
        except Exception as exc:
            # Failure keeps the conversation as it was; the run goes on with the longer transcript.
            logger.warning("compaction summarizer failed: %s", type(exc).__name__)
            await self._record_summary(status="error")
            self.result.compaction_failures += 1
            await self.committer.compaction_attempt(
                report(outcome="failed", reason="summarizer_failed", tokens_after=0)
            )
            return
        await self._record_summary(status="ok")
        notes = self.base.system_blocks[1] if len(self.base.system_blocks) > 1 else ""
        after = estimate_tokens(
            system_blocks=[*self.base.system_blocks[:1], notes + "\n" + findings],
            messages=plan.tail,
            tools=self.base.tools,
        )
        refusal = None
        if not findings:
            refusal = "empty_summary"
        elif after >= before:
            refusal = "not_smaller"
        elif self.adapter.validate_replay(plan.tail):
            refusal = "invalid_replay"
        if refusal is not None:
            await self.committer.compaction_attempt(
                report(outcome="refused", reason=refusal, tokens_after=after)
            )
            return
        candidate = CompactionCandidate(
            boundary=plan.boundary,
            messages_before=len(messages),
            messages=plan.tail,
            findings=findings,
            tokens_before=before,
            tokens_after=after,
            system_digest=system_digest,
        )
        notes_block = await self.committer.compact(candidate)
        blocks = [self.base.system_blocks[0], notes_block] if notes_block else self.base.system_blocks[:1]
        if _digest(blocks[0]) != system_digest:  # the stored system prompt is never rewritten
            raise AssertionError("compaction changed the system prompt")
        self.base = dataclasses.replace(self.base, system_blocks=blocks)
        await _emit(self.on_event, CompactionEvent(len(messages), len(plan.tail)))
        self.result.compactions += 1
        self._measured_again()

    async def record(self, kind: str, status: str, sent: Request, usage: Usage | None) -> None:
        """The ledger record of one provider call (a sink without ``record_call`` keeps none)."""
        measure = self.adapter.measure_active_context(sent, reported=usage.input_tokens if usage else None)
        # What the request carried, known before the answer: a failed call is labelled too.
        fidelity = ""
        if kind == "step":
            carried = self.carried
            fidelity = carried(sent) if carried is not None else str(getattr(self.provider, "fidelity", ""))
        await self.committer.record_call(
            CallRecord(
                kind=kind,
                status=status,
                provider=self.runtime,
                model=self.settings.model,
                usage=usage,
                settings=self.settings_record,
                system_digest=_digest(sent.system_blocks[0]) if sent.system_blocks else "",
                notes_digest=_digest(sent.system_blocks[1]) if len(sent.system_blocks) > 1 else "",
                tools_digest=_tools_digest(sent.tools),
                message_count=len(self.messages) if kind == "step" else 0,
                pressure=measure.tokens,
                pressure_estimated=measure.estimated,
                output_headroom=sent.settings.max_output_tokens,
                context_window=self.window,
                runtime=self.runtime,
                fidelity=fidelity,
            )
        )

    # --- bookkeeping -------------------------------------------------------------------------------------

    def _context_is_full(self) -> bool:
        ratio = self.policies.compaction_ratio
        if not (ratio and self.window > 0 and self.can_compact):
            return False
        cpt = max(self.policies.chars_per_token, 1)
        if self.last_input:
            pressure = self.last_input + self.added_bytes // cpt
        else:
            pressure = (sum(len(b) for b in self.base.system_blocks) + self.size) // cpt
        return pressure >= ratio * self.window

    def _grew(self, message: Message) -> None:
        grown = _wire_size(message) + 1
        self.added_bytes, self.size = self.added_bytes + grown, self.size + grown

    def _measured_again(self) -> None:
        self.last_input, self.added_bytes, self.size = 0, 0, json_size(self.messages)

    async def _record_summary(self, *, status: str) -> None:
        """Count a summary call in the run's usage and record it (when the summarizer exposes its
        request)."""
        usage = getattr(self.summarizer, "last_usage", None)
        sent = getattr(self.summarizer, "last_request", None)
        if isinstance(usage, Usage):
            self.result.usage = self.result.usage + usage
        if isinstance(sent, Request):
            await self.record("compaction", status, sent, usage if isinstance(usage, Usage) else None)
