"""The one committer between a runtime and its sink: the provider loop and the program turn both write
the conversation through :class:`Committer`, so they keep one order and end on the same codes.

Order: an assistant message with tool calls before any of their results; each open call answered once;
before the next assistant message (or the final answer) every call still open gets a result, so the
transcript stays well-formed; the final answer last, at most once.

A write the sink does not make raises :class:`CommitFailed`, and the run ends at that boundary with
nothing more written: ``context_changed`` when the Context was cleared, reset or moved under the run,
``persist_failed`` for any other failure.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .fidelity import PORTABLE, stamp
from .providers.base import Usage
from .wire import Message, make_assistant, make_text, make_tool_result, tool_calls_of, tool_result_of

logger = logging.getLogger(__name__)

PERSIST_FAILED = "persist_failed"
CONTEXT_CHANGED = "context_changed"
FAILURE_MESSAGES = {
    PERSIST_FAILED: "The conversation could not be saved; the run stopped at that point.",
    CONTEXT_CHANGED: (
        "The Context was cleared or changed while the agent was answering; nothing more of this run "
        "was written back."
    ),
}
UNANSWERED_TEXT = "This call has no result: the answer went on without it."


class Sink(Protocol):
    """Where a run commits the conversation. Each method returns once the write is durable."""

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
    """What a sink that keeps the agent's Context adds (a run uses each method the sink has).

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


class CommitFailed(Exception):
    """The sink did not make a write: the run ends with ``code`` and nothing more reaches the sink."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code
        self.message = FAILURE_MESSAGES[code]


def stopped_answer(text: str, *, runtime: str) -> Message:
    """The visible text of a cut-off answer as the run's final message: no continuation state is kept."""
    return stamp(make_assistant([make_text(text)], {"status": "stopped"}), runtime=runtime, fidelity=PORTABLE)


class Committer:
    """Commits one run's messages through ``sink`` in the order above and keeps the transcript so far.

    ``messages``: the conversation as the run found it (already stored); every committed message is
    appended. ``unanswered``: the result text given to calls still open when the run moves on.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        run_id: str | None,
        messages: list[Message] | None = None,
        unanswered: str = UNANSWERED_TEXT,
    ) -> None:
        self.sink = sink
        self.run_id = run_id or "-"
        self.messages: list[Message] = list(messages or [])
        self.unanswered = unanswered
        self.open_calls: dict[str, str] = {}  # committed calls awaiting a result: id -> tool name
        self.commits = 0
        self.final_message: Message | None = None

    async def _write[T](self, write: Callable[[], Awaitable[T]]) -> T:
        if self.final_message is not None:
            raise RuntimeError("the run's final answer is already committed")
        try:
            return await write()
        except Exception as exc:
            if getattr(exc, "code", None) == CONTEXT_CHANGED:
                raise CommitFailed(CONTEXT_CHANGED) from exc
            logger.warning("sink failed in run %s: %s", self.run_id, type(exc).__name__, exc_info=True)
            raise CommitFailed(PERSIST_FAILED) from exc

    async def _append(self, message: Message, write: Callable[[], Awaitable[None]]) -> None:
        await self._write(write)
        self.messages.append(message)
        self.commits += 1

    async def assistant(self, message: Message) -> None:
        """An assistant message with tool calls; its calls are open until answered."""
        await self.close_open_calls(self.unanswered, "interrupted")
        await self._append(message, lambda: self.sink.assistant(message))
        self.open_calls = {c["id"]: c.get("name", "") for c in tool_calls_of(message)}

    async def tool_result(self, message: Message) -> None:
        """The result of an open call; a result for a call that is not open is a caller error."""
        block = tool_result_of(message)
        call_id = str(block.get("tool_call_id")) if block is not None else ""
        if call_id not in self.open_calls:
            raise ValueError(f"no open tool call {call_id!r}")
        await self._append(message, lambda: self.sink.tool_result(message))
        del self.open_calls[call_id]

    async def close_open_calls(self, text: str, status: str) -> list[Message]:
        """Answer every open call with ``text`` and ``status`` (``not_run``, ``interrupted``)."""
        closed = []
        for call_id, name in list(self.open_calls.items()):
            closed.append(make_tool_result(call_id, name, text, status))
            await self.tool_result(closed[-1])
        return closed

    async def final(self, message: Message, usage: Usage) -> None:
        """The run's last answer, with the usage summed over the run."""
        await self.close_open_calls(self.unanswered, "interrupted")
        await self._append(message, lambda: self.sink.final(message, usage))
        self.final_message = message

    async def replace_all(self, messages: list[Message]) -> None:
        await self._write(lambda: self.sink.replace_all(messages))
        self.messages = list(messages)

    async def record_call(self, call: CallRecord) -> None:
        record = getattr(self.sink, "record_call", None)
        if record is not None:
            await self._write(lambda: record(call))

    @property
    def can_compact(self) -> bool:
        return getattr(self.sink, "compact", None) is not None

    async def compact(self, candidate: CompactionCandidate) -> str:
        """Activate ``candidate``; the transcript is its messages from here. Returns the notes block."""
        notes_block: str = await self._write(lambda: self.sink.compact(candidate))  # type: ignore[attr-defined]
        self.messages = list(candidate.messages)
        return notes_block

    async def compaction_attempt(self, attempt: CompactionReport) -> None:
        report = getattr(self.sink, "compaction_attempt", None)
        if report is not None:
            await self._write(lambda: report(attempt))
