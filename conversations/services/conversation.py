"""The conversation itself: append (the store's, whole on each database), save (longest shared prefix, then append or rewrite from the first difference) and rewind to a
cursor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from conversations import errors
from conversations.models import AgentConversation, ConversationMessage
from conversations.services._common import (
    _clean_notes,
    _error,
    _lock_head,
    _lock_or_create_head,
    _prepare,
    _publish,
    _state,
    _write_from,
    clean_pressure,
    pressure_of,
)
from conversations.stores import Batch, Head, Refused, Unchanged, chain_digests, conversation_store
from conversations.types import ConversationCursor, ConversationKey, ConversationWrite, TokenUsage
from opencompany.core.errors import NOT_FOUND, ApplicationError, invalid, not_found
from opencompany.core.events import owner_group, publish_on_commit

# --- the conversation ---------------------------------------------------------------------------------


def conversation_append(
    *,
    key: ConversationKey,
    messages: Sequence[Mapping[str, Any]],
    expected_length: int,
    usage: TokenUsage | Mapping[str, int] | None = None,
    expected_digest: str | None = None,
) -> ConversationWrite:
    """Append `messages` after exactly `expected_length` stored ones — the per-turn write.

    O(turn): the head row's update and one insert. A stale `expected_length` is refused with
    `conversation_conflict` (`extra.length` = the stored length); nothing is merged. `usage` adds to
    the lifetime token counters.

    A caller that knows the head digest it is appending after (the `digest` of its previous write)
    passes `expected_digest`: the store then checks the head and appends in one compare-and-set (one
    statement on PostgreSQL), and a stored conversation that no longer starts with the prefix the
    writer read (cleared, reset, rewound or rewritten under it) is `context_changed`; another writer's
    append after it is `conversation_conflict`.

    With `expected_digest`, an append repeated after its first attempt landed (its commit's answer lost
    with the connection) is answered with the stored state and `applied=False`, not a conflict: the
    head is exactly what this append makes of that prefix (the chained digest keys the operation), so
    a writer may retry it whenever it cannot tell whether it committed.
    """
    if isinstance(expected_length, bool) or not isinstance(expected_length, int) or expected_length < 0:
        raise invalid("expected_length must be an integer ≥ 0.")
    answer = conversation_store().append(
        key=key,
        expected_length=expected_length,
        expected_digest=expected_digest or None,
        batch=_prepare(list(messages)),
        usage=TokenUsage.from_value(usage),
        now=timezone.now(),
    )
    match answer:
        case Refused():
            raise _refused(answer)
        case Unchanged():
            return _written(answer.head, applied=False)
    head = answer.head
    publish_on_commit(
        owner_group(head.owner_id),
        "context.updated",
        {
            "workflow_id": key.workflow_id,
            "generation": key.generation,
            "agent_node_id": key.agent_node_id,
            "length": head.length,
            "revision": head.revision,
        },
    )
    return _written(head, applied=True)


def _written(head: Head, *, applied: bool) -> ConversationWrite:
    return ConversationWrite(
        applied=applied,
        length=head.length,
        revision=head.revision,
        bytes=head.bytes,
        digest=head.digest,
        notes_revision=head.notes_revision,
    )


# What each refusal of a conversation write says (the codes and their facts come with it).
_REFUSAL_MESSAGES = {
    errors.CONTEXT_CHANGED: "The Context was cleared or changed since it was read; nothing was written.",
    errors.CONVERSATION_CONFLICT: "The conversation changed since it was read; reload it and try again.",
}


def _refused(refusal: Refused) -> ApplicationError:
    if refusal.code == NOT_FOUND:
        return not_found("workflow")
    return _error(refusal.code, _REFUSAL_MESSAGES[refusal.code], refusal.extra)


def _context_changed(head: AgentConversation | None, expected_length: int) -> ApplicationError:
    length = head.length if head is not None else 0
    return _refused(Refused(errors.CONTEXT_CHANGED, {"length": length, "expected_length": expected_length}))


def _shared_prefix(head: AgentConversation, digests: list[str]) -> int:
    """How many leading stored messages equal the incoming ones (chained digests: equal at i ⇒ equal before)."""
    if head.length == 0:
        return 0
    if len(digests) >= head.length and digests[head.length - 1] == head.head_digest:
        return head.length
    stored = (
        ConversationMessage.objects.filter(conversation=head).order_by("seq").values_list("digest", flat=True)
    )
    shared = 0
    for mine, theirs in zip(stored, digests, strict=False):
        if mine != theirs:
            break
        shared += 1
    return shared


def _save_locked(
    key: ConversationKey,
    prepared: Batch,
    *,
    notes: list[dict[str, Any]] | None = None,
    expected_digest: str | None = None,
) -> ConversationWrite:
    digests = chain_digests(prepared.encoded, "")
    head = _lock_head(key, create=bool(prepared.wires) or bool(notes))
    if expected_digest is not None and (head.head_digest if head is not None else "") != expected_digest:
        raise _context_changed(head, len(prepared.wires))
    if head is None:
        return _state(None)
    start = _shared_prefix(head, digests)
    notes_change = notes is not None and notes != head.notes
    if start == head.length == len(prepared.wires) and not notes_change:
        return _state(head)
    return _write_from(head, start=start, prepared=prepared, digests=digests, notes=notes)


@transaction.atomic
def conversation_save(
    *, key: ConversationKey, messages: Sequence[Mapping[str, Any]], expected_digest: str | None = None
) -> ConversationWrite:
    """Store exactly `messages` (the whole list): keep the longest prefix already stored (by digest),
    then append or rewrite from the first difference. An identical list writes nothing.

    A writer that read the conversation (a run) passes the head digest it read as `expected_digest`:
    when the head is no longer that, `context_changed` is raised and nothing is written, so an old
    transcript is never written back over a Clear, a Reset or a branch move."""
    return _save_locked(key, _prepare(list(messages)), expected_digest=expected_digest)


@transaction.atomic
def conversation_rewind(
    *, key: ConversationKey, cursor: ConversationCursor | Mapping[str, Any]
) -> ConversationWrite:
    """Cut the conversation back to a recorded cursor (and restore the cursor's notes, when it has them).

    Refused with `cannot_rewind` when the stored conversation no longer starts with that prefix
    (it was compacted, cleared or rewritten since) or the cursor is of another generation.
    """
    target = ConversationCursor.from_value(cursor)
    notes = _clean_notes(target.notes) if target.notes is not None else None
    if target.generation != key.generation:
        raise _error(
            errors.CANNOT_REWIND,
            "The cursor belongs to another generation of this conversation.",
            {"generation": key.generation, "cursor_generation": target.generation},
        )
    head = _lock_head(key, create=False)
    length = head.length if head is not None else 0
    if target.length == 0:
        matches = target.digest == ""
    elif target.length > length or head is None:
        matches = False
    elif target.length == length:
        matches = head.head_digest == target.digest
    else:
        stored = (
            ConversationMessage.objects.filter(conversation=head, seq=target.length - 1)
            .values_list("digest", flat=True)
            .first()
        )
        matches = stored == target.digest
    if not matches:
        raise _error(
            errors.CANNOT_REWIND,
            "The stored conversation no longer starts with that prefix.",
            {"length": length, "cursor_length": target.length},
        )
    if head is None:
        if not notes:
            return _state(None)
        head = _lock_or_create_head(key)
    notes_change = notes is not None and notes != head.notes
    pressure = clean_pressure(target.pressure)
    if pressure is not None and pressure != pressure_of(head):
        AgentConversation.objects.filter(pk=head.pk).update(**pressure)
    if target.length == head.length and not notes_change:
        return _state(head)
    removed = 0
    if target.length < head.length:
        doomed = ConversationMessage.objects.filter(conversation=head, seq__gte=target.length)
        removed = int(doomed.aggregate(total=Sum("size"))["total"] or 0)
        doomed.delete()
    changes: dict[str, Any] = {
        "length": target.length,
        "bytes": F("bytes") - removed,
        "head_digest": target.digest,
        "revision": F("revision") + 1,
        "updated_at": timezone.now(),
    }
    notes_revision = head.notes_revision
    if notes_change:
        changes["notes"] = notes
        changes["notes_revision"] = F("notes_revision") + 1
        notes_revision += 1
    AgentConversation.objects.filter(pk=head.pk).update(**changes)
    revision = head.revision + 1
    _publish(head, length=target.length, revision=revision)
    return ConversationWrite(
        applied=True,
        length=target.length,
        revision=revision,
        bytes=head.bytes - removed,
        digest=target.digest,
        notes_revision=notes_revision,
        rewritten_from=target.length if target.length < head.length else None,
    )
