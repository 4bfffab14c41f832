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
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from opencompany.core.json import canonical_json, json_size

from .fidelity import PORTABLE, stamp
from .policies import (
    DEFAULT_TOOL_RESULT_MAX_CHARS,
    DEFAULT_TRANSCRIPT_BUDGET_BYTES,
    SUMMARIZE_INSTRUCTION,
    Summarizer,
    apply_compaction,
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
        """Whole-list save (compaction, cleared old results): the transcript is now exactly ``messages``."""


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

    async def summarize(self, messages: list[Message]) -> str:
        request = Request(
            system_blocks=[SUMMARIZE_INSTRUCTION],
            messages=[make_user(render_for_summary(messages))],
            tools=[],
            settings=self.settings,
        )
        parts: list[str] = []
        completed: Message | None = None
        async for event in self.provider.stream(request):
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif isinstance(event, Usage):
                self.usage = self.usage + event
            elif isinstance(event, Completed):
                completed = event.message
            elif isinstance(event, ProviderErrorEvent):
                raise ProviderError(
                    event.code, event.message, status=event.status, retry_after=event.retry_after
                )
        return text_of(completed) if completed is not None else "".join(parts)


class _PersistFailed(Exception):
    pass


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
    if "raw_arguments" in call:
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
    loop adds goes through ``sink``. ``request.system_blocks`` is sent unchanged on every request.
    When ``request.tools`` is empty, the definitions of ``tools`` are offered to the model.
    ``transcript_bytes`` (the canonical JSON size of ``request.messages``, e.g. the stored head row's
    ``bytes``) spares the loop one pass over the transcript; the loop tracks the size from there.
    """
    policies = policies or LoopPolicies()
    tool_map = tools_by_name(tools)
    base = dataclasses.replace(
        request,
        tools=list(request.tools) or list(tool_map.values()),
        cancel=request.cancel if request.cancel is not None else stop,
    )
    summarizer = policies.summarizer or ProviderSummarizer(provider, request.settings)
    messages: list[Message] = list(request.messages)
    result = LoopResult(status="finished", messages=messages)
    last_input = 0
    added_bytes = 0
    size = transcript_bytes if transcript_bytes is not None else json_size(messages)
    system_chars = sum(len(b) for b in base.system_blocks)
    window = request.settings.context_window
    cpt = max(policies.chars_per_token, 1)

    async def commit(coro: Awaitable[None]) -> None:
        try:
            await coro
        except Exception as exc:
            logger.warning(
                "sink failed in run %s: %s", tool_context.run_id, type(exc).__name__, exc_info=True
            )
            raise _PersistFailed from exc

    try:
        for iteration in range(1, max_iterations + 1):
            if stop.is_set():
                result.status = "stopped"
                return result
            if policies.compaction_ratio and window > 0:
                if last_input:
                    pressure = last_input + added_bytes // cpt
                else:
                    pressure = (system_chars + size) // cpt
                if pressure >= policies.compaction_ratio * window:
                    compacted = await _maybe_compact(messages, summarizer, result)
                    if compacted is not None:
                        await commit(sink.replace_all(compacted))
                        await _emit(on_event, CompactionEvent(len(messages), len(compacted)))
                        messages = compacted
                        result.messages = messages
                        result.compactions += 1
                        last_input, added_bytes, size = 0, 0, json_size(messages)

            result.iterations = iteration
            streamed = await _stream_once(
                provider, dataclasses.replace(base, messages=list(messages)), stop, on_event
            )
            if streamed.usage is not None:
                result.usage = result.usage + streamed.usage
                last_input, added_bytes = streamed.usage.input_tokens, 0
            else:
                last_input, added_bytes = 0, 0
            if streamed.error is not None:
                result.status = "error"
                result.error_code = streamed.error.code
                result.error_message = streamed.error.message
                result.error_extra = streamed.error.extra
                return result
            if streamed.stopped or streamed.message is None:
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
            calls = tool_calls_of(message)
            if not calls:
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
    except _PersistFailed:
        result.status = "error"
        result.error_code = PERSIST_FAILED
        result.error_message = "The conversation could not be saved; the run stopped at that point."
        return result


async def _maybe_compact(
    messages: list[Message], summarizer: Summarizer, result: LoopResult
) -> list[Message] | None:
    plan = plan_compaction(messages)
    if plan is None or all((m.get("metadata") or {}).get("summary") for m in plan.head):
        return None
    before = getattr(summarizer, "usage", None)
    try:
        summary = await summarizer.summarize(plan.head)
    except Exception as exc:
        # Failure leaves the conversation as it was; the run goes on with the longer transcript.
        logger.warning("compaction summarizer failed: %s", type(exc).__name__)
        result.compaction_failures += 1
        return None
    finally:
        after = getattr(summarizer, "usage", None)
        if isinstance(before, Usage) and isinstance(after, Usage):
            result.usage = result.usage + Usage(
                after.input_tokens - before.input_tokens,
                after.output_tokens - before.output_tokens,
                after.cache_read_tokens - before.cache_read_tokens,
                after.cache_write_tokens - before.cache_write_tokens,
            )
    return apply_compaction(messages, plan, summary)
