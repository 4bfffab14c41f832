"""The sink the agent loop commits to: every message appended to the agent's stored conversation."""

from __future__ import annotations

from conversations import services as conversations
from conversations.types import ConversationKey
from opencompany.core.asyncdb import db_call
from opencompany.llm.providers import Usage
from opencompany.llm.wire import Message


class ConversationSink:
    """Appends every committed message to the stored conversation (`conversation_append` with the
    expected length, so a concurrent writer is refused rather than merged). Assistant turns are stamped
    with the run's epoch."""

    def __init__(self, key: ConversationKey | None, length: int, digest: str = "", epoch: int = 1) -> None:
        self.key = key
        self.length = length
        self.digest = digest
        self.epoch = epoch

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
            write = await db_call(conversations.conversation_save)(key=self.key, messages=messages)
            self.digest = write.digest
        self.length = len(messages)
