"""The sink the agent loop commits to: every message appended to the agent's stored conversation, every
provider call recorded in the usage ledger, compactions activated through the one compaction service.

Every write carries the head digest the run last wrote (or read): a Clear, a Reset or a branch move
under the run makes its next write fail with `context_changed`, and nothing old is written back.

Every write is retried while the database cannot serve (`opencompany.core.retry.commit_retry`): the
run's last message until the database is back (nothing waits behind it but the lane, which only the
database can free), every other write for `OPENCOMPANY_RUN_COMMIT_RETRY_S` (past that the loop ends the
run at that boundary). What the owner saw streamed and the conversation has not kept is kept by
`keep_unsaved` when the run ends: the message whose write failed, else the streamed text as an
assistant turn marked `interrupted`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from conversations import services as conversations
from conversations.services import context as context_services
from conversations.services.context import CallCounts, CallScope
from conversations.types import ConversationKey
from opencompany.core.asyncdb import db_call
from opencompany.core.errors import ApplicationError
from opencompany.core.retry import commit_retry
from opencompany.core.unavailable import transient_database_error
from opencompany.llm.commit import CallRecord, CompactionCandidate, CompactionReport
from opencompany.llm.providers import Usage
from opencompany.llm.wire import Message, make_assistant, make_text

logger = logging.getLogger("chat.executor")


class ConversationSink:
    """Appends every committed message to the stored conversation (`conversation_append` with the
    expected length and head digest, so a concurrent writer is refused rather than merged). Assistant
    turns are stamped with the run's epoch. With a `scope`, provider calls go to the ledger."""

    def __init__(
        self,
        key: ConversationKey | None,
        length: int,
        digest: str = "",
        epoch: int = 1,
        *,
        scope: CallScope | None = None,
    ) -> None:
        self.key = key
        self.length = length
        self.digest = digest
        self.epoch = epoch
        self.scope = scope
        self.streamed: list[str] = []  # text of the current step not yet kept in a message
        self.unsaved: tuple[Message, Usage | None] | None = None  # a message whose write failed
        self.database_unavailable = False  # a write gave up on an unreachable database

    async def _write[T](self, what: str, call: Callable[[], Awaitable[T]], *, until_back: bool = False) -> T:
        budget = None if until_back else float(settings.OPENCOMPANY_RUN_COMMIT_RETRY_S)
        run = self.scope.run_id if self.scope else "-"
        try:
            return await commit_retry(call, budget_s=budget, what=f"{what} run={run}")
        except Exception as exc:
            self.database_unavailable = self.database_unavailable or transient_database_error(exc)
            raise

    async def _append(
        self, message: Message, usage: Usage | None = None, *, until_back: bool = False
    ) -> None:
        if message.get("role") == "assistant":
            message = {**message, "metadata": {**(message.get("metadata") or {}), "epoch": self.epoch}}
        if self.key is None:
            self.length += 1
            return
        key, length, digest = self.key, self.length, self.digest or None
        try:
            write = await self._write(
                "append",
                lambda: db_call(conversations.conversation_append)(
                    key=key,
                    messages=[message],
                    expected_length=length,
                    usage=usage.as_dict() if usage is not None else None,
                    expected_digest=digest,
                ),
                until_back=until_back,
            )
        except Exception:
            self.unsaved = (message, usage)
            raise
        self.unsaved = None
        self.length, self.digest = write.length, write.digest

    def stream(self, text: str) -> None:
        """Text the owner was just sent, part of the message the model is writing."""
        self.streamed.append(text)

    async def assistant(self, message: Message) -> None:
        await self._append(message)
        self.streamed.clear()

    async def tool_result(self, message: Message) -> None:
        await self._append(message)

    async def final(self, message: Message, usage: Usage) -> None:
        await self._append(message, usage, until_back=True)
        self.streamed.clear()

    async def keep_unsaved(self) -> None:
        """At the end of a run that did not finish: keep what the conversation lacks of what the owner
        was sent, waiting for the database as long as it takes. The message whose write failed is
        written again (a repeat of a write that landed changes nothing); else the text streamed since
        the last kept message becomes an assistant turn marked `interrupted`, so the next turn does not
        follow the owner's message alone. A Context cleared or moved under the run keeps nothing."""
        if self.key is None:
            return
        if self.unsaved is not None:
            message, usage = self.unsaved
        elif "".join(self.streamed).strip():
            message, usage = (
                make_assistant([make_text("".join(self.streamed))], {"status": "interrupted"}),
                None,
            )
        else:
            return
        try:
            await self._append(message, usage, until_back=True)
        except ApplicationError as exc:
            logger.warning(
                "interrupted answer not kept run=%s code=%s", self.scope and self.scope.run_id, exc.code
            )
            return
        self.streamed.clear()

    async def replace_all(self, messages: list[Message]) -> None:
        if self.key is not None:
            key, digest = self.key, self.digest
            write = await self._write(
                "save",
                lambda: db_call(conversations.conversation_save)(
                    key=key, messages=messages, expected_digest=digest
                ),
            )
            self.digest = write.digest
        self.length = len(messages)

    async def record_call(self, call: CallRecord) -> None:
        if self.scope is None:
            return
        usage = call.usage
        await self._write("call record", lambda: self._record(call, usage))

    async def _record(self, call: CallRecord, usage: Usage | None) -> Any:
        assert self.scope is not None  # noqa: S101 - checked by record_call
        return await db_call(context_services.provider_call_record)(
            scope=self.scope,
            counts=CallCounts(
                status=call.status,
                kind=call.kind,
                provider=call.provider,
                model=call.model,
                input_tokens=usage.input_tokens if usage else 0,
                cached_tokens=usage.cache_read_tokens if usage else 0,
                cache_write_tokens=usage.cache_write_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                usage_reported=usage is not None,
                settings=call.settings,
                system_digest=call.system_digest,
                notes_digest=call.notes_digest,
                tools_digest=call.tools_digest,
                message_count=call.message_count,
                conversation_digest=self.digest if call.kind == "step" else "",
                pressure=call.pressure,
                pressure_estimated=call.pressure_estimated,
                output_headroom=call.output_headroom,
                context_window=call.context_window,
                runtime=call.runtime,
                fidelity=call.fidelity,
            ),
        )

    async def compact(self, candidate: CompactionCandidate) -> str:
        if self.key is None:
            return ""
        key, length, digest = self.key, self.length, self.digest
        compacted = await self._write(
            "compaction",
            lambda: db_call(context_services.conversation_compact)(
                key=key,
                run_id=self.scope.run_id if self.scope else "",
                expected_length=length,
                expected_digest=digest,
                boundary=candidate.boundary,
                findings=candidate.findings,
                sizes=_sizes(candidate.messages_before, len(candidate.messages), candidate),
            ),
        )
        self.length, self.digest = compacted.length, compacted.digest
        return compacted.notes_block

    async def compaction_attempt(self, attempt: CompactionReport) -> None:
        if self.key is None:
            return
        key = self.key
        await self._write(
            "compaction attempt",
            lambda: db_call(context_services.compaction_attempt_record)(
                key=key,
                run_id=self.scope.run_id if self.scope else "",
                outcome=attempt.outcome,
                reason=attempt.reason,
                sizes=_sizes(attempt.messages_before, attempt.messages_after, attempt),
            ),
        )


def _sizes(before: int, after: int, source: CompactionCandidate | CompactionReport) -> dict[str, object]:
    return {
        "messages_before": before,
        "messages_after": after,
        "tokens_before": source.tokens_before,
        "tokens_after": source.tokens_after,
        "estimated": True,
        "system_digest": source.system_digest,
    }
