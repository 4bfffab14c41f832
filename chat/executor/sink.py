"""The sink the agent loop commits to: every message appended to the agent's stored conversation, every
provider call recorded in the usage ledger, compactions activated through the one compaction service.

Every write carries the head digest the run last wrote (or read): a Clear, a Reset or a branch move
under the run makes its next write fail with `context_changed`, and nothing old is written back."""

from __future__ import annotations

from conversations import services as conversations
from conversations.services import context as context_services
from conversations.services.context import CallCounts, CallScope
from conversations.types import ConversationKey
from opencompany.core.asyncdb import db_call
from opencompany.llm.loop import CallRecord, CompactionCandidate, CompactionReport
from opencompany.llm.providers import Usage
from opencompany.llm.wire import Message


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

    async def _append(self, message: Message, usage: Usage | None = None) -> None:
        if message.get("role") == "assistant":
            message = {**message, "metadata": {**(message.get("metadata") or {}), "epoch": self.epoch}}
        if self.key is None:
            self.length += 1
            return
        write = await db_call(conversations.conversation_append)(
            key=self.key,
            messages=[message],
            expected_length=self.length,
            usage=usage.as_dict() if usage is not None else None,
            expected_digest=self.digest or None,
        )
        self.length, self.digest = write.length, write.digest

    async def assistant(self, message: Message) -> None:
        await self._append(message)

    async def tool_result(self, message: Message) -> None:
        await self._append(message)

    async def final(self, message: Message, usage: Usage) -> None:
        await self._append(message, usage)

    async def replace_all(self, messages: list[Message]) -> None:
        if self.key is not None:
            write = await db_call(conversations.conversation_save)(
                key=self.key, messages=messages, expected_digest=self.digest
            )
            self.digest = write.digest
        self.length = len(messages)

    async def record_call(self, call: CallRecord) -> None:
        if self.scope is None:
            return
        usage = call.usage
        await db_call(context_services.provider_call_record)(
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
        compacted = await db_call(context_services.conversation_compact)(
            key=self.key,
            run_id=self.scope.run_id if self.scope else "",
            expected_length=self.length,
            expected_digest=self.digest,
            boundary=candidate.boundary,
            findings=candidate.findings,
            sizes=_sizes(candidate.messages_before, len(candidate.messages), candidate),
        )
        self.length, self.digest = compacted.length, compacted.digest
        return compacted.notes_block

    async def compaction_attempt(self, attempt: CompactionReport) -> None:
        if self.key is None:
            return
        await db_call(context_services.compaction_attempt_record)(
            key=self.key,
            run_id=self.scope.run_id if self.scope else "",
            outcome=attempt.outcome,
            reason=attempt.reason,
            sizes=_sizes(attempt.messages_before, attempt.messages_after, attempt),
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
