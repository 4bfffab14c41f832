"""Compaction of a stored conversation: summarize the turns before the latest into one user message.

The summarizer (a model call) runs outside any transaction and without the head row's lock; the swap
is one short transaction that is refused (`conversation_conflict`) when the conversation changed
meanwhile. A summarizer failure raises and leaves the conversation as it was. Notes are kept.
"""

from __future__ import annotations

import inspect
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction

from conversations import errors
from conversations.policies import Summarizer, apply_compaction, plan_compaction
from conversations.selectors import conversation_cursor, conversation_load
from conversations.services._common import _error, _lock_head, _prepare, _state
from conversations.services.conversation import _save_locked
from conversations.types import ConversationCursor, ConversationKey, ConversationWrite


def _summarize(summarizer: Summarizer, messages: list[dict[str, Any]]) -> str:
    result: Any = summarizer.summarize(messages)
    if inspect.isawaitable(result):
        awaitable = result

        async def _wait() -> Any:
            return await awaitable

        result = async_to_sync(_wait)()
    if not isinstance(result, str):
        raise TypeError("a summarizer returns the summary text")
    return result


@transaction.atomic
def _swap(
    *, key: ConversationKey, before: ConversationCursor, messages: list[dict[str, Any]]
) -> ConversationWrite:
    head = _lock_head(key, create=False)
    length = head.length if head is not None else 0
    digest = head.head_digest if head is not None else ""
    if (length, digest) != (before.length, before.digest):
        raise _error(
            errors.CONVERSATION_CONFLICT,
            "The conversation changed while it was being summarized; nothing was replaced.",
            {"length": length, "expected_length": before.length},
        )
    return _save_locked(key, _prepare(messages))


def conversation_compact(*, key: ConversationKey, summarizer: Summarizer) -> ConversationWrite:
    """Replace the turns before the latest with one user message carrying their summary.

    A leading system message stays byte-identical in front; the latest turn stays verbatim; a tool
    call is never separated from its result. Nothing is written (`applied=False`) when there is
    nothing older than the latest turn or the summary would not shrink the transcript. Cursors taken
    before the swap no longer rewind (`cannot_rewind`).
    """
    before = conversation_cursor(key=key)
    messages = conversation_load(key=key)
    if len(messages) != before.length:
        raise _error(
            errors.CONVERSATION_CONFLICT,
            "The conversation changed while it was read; try again.",
            {"length": len(messages), "expected_length": before.length},
        )
    system = messages[:1] if messages and messages[0].get("role") == "system" else []
    body = messages[len(system) :]
    plan = plan_compaction(body)
    if plan is None:
        return _unchanged(key)
    compacted = apply_compaction(body, plan, _summarize(summarizer, plan.head))
    if compacted is None:
        return _unchanged(key)
    return _swap(key=key, before=before, messages=[*system, *compacted])


def _unchanged(key: ConversationKey) -> ConversationWrite:
    from conversations.selectors import conversation_get

    return _state(conversation_get(key=key))
