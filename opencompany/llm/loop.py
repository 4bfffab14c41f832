"""The agent loop: stream the model, run the tools it asks for, commit every step through a sink.

Commit order per iteration: the complete assistant message before any of its tools runs;
each tool result before the next provider request; the final answer (with the run's usage) last. A sink
failure ends the run at that boundary (``persist_failed``) and nothing more reaches the sink.

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
import hashlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from opencompany.core.json import canonical_json, json_size

from .context import CompactionPolicy, ContextAdapter, context_adapter, estimate_tokens
from .fidelity import PORTABLE, stamp
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
from .tools import ToolContext, ToolSpec, tool_error, tools_by_name, validate_arguments
from .wire import Message, make_assistant, make_text, make_tool_result, make_user, text_of, tool_calls_of

logger = logging.getLogger(__name__)

PERSIST_FAILED = "persist_failed"
CONTEXT_CHANGED = "context_changed"
NOT_RUN_TEXT = "Not run: the owner stopped this answer before this tool call started."

LoopStatus = Literal["finished", "stopped", "error", "iteration_limit"]


class Sink(Protocol):
    """Where the loop commits the conversation. Each method returns once the write is durable."""

    async def assistant(self, message: Message) -> None:
        """An assistant message with tool calls, committed before any of them runs."""

    async def tool_result(self, message: Message) -> None:
        """One tool result (role ``tool``), committed before the next provider request."""

    async def final(self, message: Message, usage: Usage) -> None:
        """The run's last assistant message (complete, or partial with ``metadata.status == "stopped"``),
        with the usage summed over the run so far. Called at most once."""

    async def replace_all(self, messages: list[Message]) -> None:
        """Whole-list save (cleared old results): the transcript is now exactly ``messages``."""


class ContextSink(Protocol):
    """What a sink that keeps the agent's Context adds (the loop uses each method the sink has).

    ``record_call``: the ledger row and request record of one provider call, written when the call
    ends whatever its outcome; the conversation's pressure follows it when the request's head is
    still the stored one. ``compact``: activate a compaction candidate (a compare-and-swap on the head
    the candidate was cut from), returning the new notes block; raises an error with code
    ``context_changed`` when the head moved. ``compaction_attempt``: a refused or failed compaction.
    """

    async def record_call(self, call: CallRecord) -> None: ...

    async def compact(self, candidate: CompactionCandidate) -> str: ...

    async def compaction_attempt(self, attempt: CompactionReport) -> None: ...


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One provider call as the ledger and the request record keep it: no content, digests only.

    ``message_count``: the request sent the first ``message_count`` messages of the conversation.
    ``pressure``: the request's input tokens (the provider's count, or an estimate when
    ``pressure_estimated``)."""

    kind: str
    status: str
    provider: str
    model: str
    usage: Usage | None
    settings: dict[str, Any]
    system_digest: str
    notes_digest: str
    tools_digest: str
    message_count: int
    pressure: int
    pressure_estimated: bool
    output_headroom: int
    context_window: int
    runtime: str = ""
    fidelity: str = ""


@dataclass(frozen=True, slots=True)
class CompactionCandidate:
    """The conversation from ``boundary`` on, with the prefix's findings for the working-notes slot."""

    boundary: int
    messages_before: int
    messages: list[Message]
    findings: str
    tokens_before: int
    tokens_after: int
    system_digest: str


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """A compaction that was not applied: ``outcome`` ``refused`` or ``failed``, and why."""

    outcome: str
    reason: str
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    system_digest: str


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


class _PersistFailed(Exception):
    pass


class _ContextChanged(Exception):
    pass


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
    policies = policies or LoopPolicies()
    tool_map = tools_by_name(tools)
    base = dataclasses.replace(
        request,
        tools=list(request.tools) or list(tool_map.values()),
        cancel=request.cancel if request.cancel is not None else stop,
    )
    runtime_name = str(getattr(provider, "name", request.settings.provider))
    adapter = policies.adapter or context_adapter(runtime_name)
    capabilities = adapter.capabilities(request.settings)
    summarizer = policies.summarizer or ProviderSummarizer(provider, request.settings)
    record_call = getattr(sink, "record_call", None)
    can_compact = capabilities.app_compaction and getattr(sink, "compact", None) is not None
    messages: list[Message] = list(request.messages)
    result = LoopResult(status="finished", messages=messages)
    last_input = 0
    added_bytes = 0
    size = transcript_bytes if transcript_bytes is not None else json_size(messages)
    window = capabilities.context_window
    cpt = max(policies.chars_per_token, 1)
    settings_record = _settings_record(request.settings)

    async def commit(coro: Awaitable[None]) -> None:
        try:
            await coro
        except Exception as exc:
            if getattr(exc, "code", None) == CONTEXT_CHANGED:
                raise _ContextChanged from exc
            logger.warning(
                "sink failed in run %s: %s", tool_context.run_id, type(exc).__name__, exc_info=True
            )
            raise _PersistFailed from exc

    carried = getattr(provider, "request_fidelity", None)

    async def record(kind: str, status: str, sent: Request, usage: Usage | None) -> None:
        if record_call is None:
            return
        measure = adapter.measure_active_context(sent, reported=usage.input_tokens if usage else None)
        # What the request carried, known before the answer: a failed call is labelled too.
        fidelity = ""
        if kind == "step":
            fidelity = carried(sent) if carried is not None else str(getattr(provider, "fidelity", ""))
        await commit(
            record_call(
                CallRecord(
                    kind=kind,
                    status=status,
                    provider=runtime_name,
                    model=request.settings.model,
                    usage=usage,
                    settings=settings_record,
                    system_digest=_digest(sent.system_blocks[0]) if sent.system_blocks else "",
                    notes_digest=_digest(sent.system_blocks[1]) if len(sent.system_blocks) > 1 else "",
                    tools_digest=_tools_digest(sent.tools),
                    message_count=len(messages) if kind == "step" else 0,
                    pressure=measure.tokens,
                    pressure_estimated=measure.estimated,
                    output_headroom=sent.settings.max_output_tokens,
                    context_window=window,
                    runtime=runtime_name,
                    fidelity=fidelity,
                )
            )
        )

    async def compact() -> None:
        nonlocal base, messages, last_input, added_bytes, size
        plan = plan_compaction(messages)
        if plan is None or all((m.get("metadata") or {}).get("summary") for m in plan.head):
            return
        system_digest = _digest(base.system_blocks[0]) if base.system_blocks else ""
        before = estimate_tokens(system_blocks=base.system_blocks, messages=messages, tools=base.tools)

        async def refuse(outcome: str, reason: str, after: int = 0) -> None:
            report = getattr(sink, "compaction_attempt", None)
            if outcome == "failed":
                result.compaction_failures += 1
            if report is not None:
                await commit(
                    report(
                        CompactionReport(
                            outcome=outcome,
                            reason=reason,
                            messages_before=len(messages),
                            messages_after=len(plan.tail),
                            tokens_before=before,
                            tokens_after=after,
                            system_digest=system_digest,
                        )
                    )
                )

        try:
            findings = await adapter.compact(plan.head, policies.compaction, summarizer)
        except Exception as exc:
            # Failure keeps the conversation as it was; the run goes on with the longer transcript.
            logger.warning("compaction summarizer failed: %s", type(exc).__name__)
            await _record_summary(record, summarizer, result, status="error")
            await refuse("failed", "summarizer_failed")
            return
        await _record_summary(record, summarizer, result, status="ok")
        notes = base.system_blocks[1] if len(base.system_blocks) > 1 else ""
        after = estimate_tokens(
            system_blocks=[*base.system_blocks[:1], notes + "\n" + findings],
            messages=plan.tail,
            tools=base.tools,
        )
        if not findings:
            await refuse("refused", "empty_summary", after)
            return
        if after >= before:
            await refuse("refused", "not_smaller", after)
            return
        problems = adapter.validate_replay(plan.tail)
        if problems:
            await refuse("refused", "invalid_replay", after)
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
        notes_block: str = ""

        async def activate() -> None:
            nonlocal notes_block
            notes_block = await sink.compact(candidate)  # type: ignore[attr-defined]

        await commit(activate())
        blocks = [base.system_blocks[0], notes_block] if notes_block else base.system_blocks[:1]
        if _digest(blocks[0]) != system_digest:  # the stored system prompt is never rewritten
            raise AssertionError("compaction changed the system prompt")
        base = dataclasses.replace(base, system_blocks=blocks)
        await _emit(on_event, CompactionEvent(len(messages), len(plan.tail)))
        messages = list(plan.tail)
        result.messages = messages
        result.compactions += 1
        last_input, added_bytes, size = 0, 0, json_size(messages)

    try:
        for iteration in range(1, max_iterations + 1):
            if stop.is_set():
                result.status = "stopped"
                return result
            if policies.compaction_ratio and window > 0 and can_compact:
                if last_input:
                    pressure = last_input + added_bytes // cpt
                else:
                    system_chars = sum(len(b) for b in base.system_blocks)
                    pressure = (system_chars + size) // cpt
                if pressure >= policies.compaction_ratio * window:
                    await compact()

            result.iterations = iteration
            sent = dataclasses.replace(base, messages=list(messages))
            streamed = await _stream_once(provider, sent, stop, on_event)
            if streamed.usage is not None:
                result.usage = result.usage + streamed.usage
                last_input, added_bytes = streamed.usage.input_tokens, 0
            else:
                last_input, added_bytes = 0, 0
            if streamed.error is not None:
                await record("step", "error", sent, streamed.usage)
                result.status = "error"
                result.error_code = streamed.error.code
                result.error_message = streamed.error.message
                result.error_extra = streamed.error.extra
                return result
            if streamed.stopped or streamed.message is None:
                await record("step", "stopped", sent, streamed.usage)
                text = "".join(streamed.text)
                if text:
                    partial = make_assistant([make_text(text)], {"status": "stopped"})
                    # Only the visible text of a cut-off stream is kept: no continuation state.
                    partial = stamp(partial, runtime=getattr(provider, "name", "unknown"), fidelity=PORTABLE)
                    await commit(sink.final(partial, result.usage))
                    messages.append(partial)
                    result.final_message = partial
                result.status = "stopped"
                return result

            message = streamed.message
            await record("step", "ok", sent, streamed.usage)
            calls = tool_calls_of(message)
            # A refused answer ends the run as it is: its calls are not run.
            if not calls or (message.get("metadata") or {}).get("refusal"):
                await commit(sink.final(message, result.usage))
                messages.append(message)
                result.final_message = message
                result.status = "finished"
                return result

            await commit(sink.assistant(message))
            messages.append(message)
            grown = _wire_size(message) + 1
            added_bytes, size = added_bytes + grown, size + grown
            for index, call in enumerate(calls):
                if stop.is_set():
                    for pending in calls[index:]:
                        not_run = make_tool_result(
                            pending["id"], pending.get("name", ""), NOT_RUN_TEXT, "not_run"
                        )
                        await commit(sink.tool_result(not_run))
                        messages.append(not_run)
                    result.status = "stopped"
                    return result
                tool_message = await _run_tool(call, tool_map, tool_context, tool_result_max_chars)
                await commit(sink.tool_result(tool_message))
                messages.append(tool_message)
                grown = _wire_size(tool_message) + 1
                added_bytes, size = added_bytes + grown, size + grown
                await _emit(on_event, ToolResultEvent(tool_message))

            if 0 < policies.transcript_budget_bytes < size:
                cleared = clear_old_results(messages, policies.transcript_budget_bytes, size=size)
                if cleared is not messages:
                    await commit(sink.replace_all(cleared))
                    messages = cleared
                    result.messages = messages
                    last_input, added_bytes, size = 0, 0, json_size(messages)
        result.status = "iteration_limit"
        return result
    except _ContextChanged:
        result.status = "error"
        result.error_code = CONTEXT_CHANGED
        result.error_message = (
            "The Context was cleared or changed while the agent was answering; nothing of this run was "
            "written back."
        )
        return result
    except _PersistFailed:
        result.status = "error"
        result.error_code = PERSIST_FAILED
        result.error_message = "The conversation could not be saved; the run stopped at that point."
        return result


async def _record_summary(
    record: Callable[..., Awaitable[None]], summarizer: Summarizer, result: LoopResult, *, status: str
) -> None:
    """Count a summary call in the run's usage and record it (when the summarizer exposes its request)."""
    usage = getattr(summarizer, "last_usage", None)
    sent = getattr(summarizer, "last_request", None)
    if isinstance(usage, Usage):
        result.usage = result.usage + usage
    if isinstance(sent, Request):
        await record("compaction", status, sent, usage if isinstance(usage, Usage) else None)
