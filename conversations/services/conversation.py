"""The conversation itself: append (the store's compare-and-set when the caller knows the head
digest), save (longest shared prefix, then append or rewrite from the first difference) and rewind to a
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
    _chain,
    _clean_notes,
    _error,
    _insert,
    _lock_head,
    _lock_or_create_head,
    _prepare,
    _Prepared,
    _publish,
    _state,
    _write_from,
    clean_pressure,
    pressure_of,
)
from conversations.store import conversation_store
from conversations.types import ConversationCursor, ConversationKey, ConversationWrite, TokenUsage
from opencompany.core.errors import ApplicationError, invalid
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
    """Append `messages` after exactly `expected_length` stored ones — the per-turn fast path.

    O(turn): one locked read of the head row, one insert, one update. A stale `expected_length` is
    refused with `conversation_conflict` (`extra.length` = the stored length); nothing is merged.
    `usage` adds to the lifetime token counters.

    A caller that knows the head digest it is appending after (the `digest` of its previous write)
    passes `expected_digest`: the store then checks the head and appends in one compare-and-set (one
    statement on PostgreSQL); any mismatch falls back to the locked path, which answers with the
    precise conflict: `context_changed` when the stored conversation no longer starts with the prefix
    the writer read (it was cleared, reset, rewound or rewritten under the writer),
    `conversation_conflict` when another writer appended after it or the length is stale.

    With `expected_digest`, an append repeated after its first attempt landed (its commit's answer lost
    with the connection) is answered with the stored state and `applied=False`, not a conflict: the
    head is exactly what this append makes of that prefix (the chained digest keys the operation), so
    a writer may retry it whenever it cannot tell whether it committed.
    """
    if isinstance(expected_length, bool) or not isinstance(expected_length, int) or expected_length < 0:
        raise invalid("expected_length must be an integer ≥ 0.")
    prepared = _prepare(list(messages))
    usage_counts = TokenUsage.from_value(usage)
    if expected_digest and prepared.wires:
        written = _append_after_digest(key, prepared, expected_length, expected_digest, usage_counts)
        if written is not None:
            return written
    return _append_locked(key, prepared, expected_length, usage_counts, expected_digest or None)


def _extends(head: AgentConversation | None, length: int, digest: str) -> bool:
    """Whether the stored conversation still starts with the prefix `(length, digest)` a writer read:
    it is that prefix, or another writer appended after it (an ordinary race, `conversation_conflict`).
    Otherwise the prefix is gone — cleared, reset, rewound or rewritten — and the write is stale."""
    if head is None or head.length < length:
        return False
    if head.length == length:
        return head.head_digest == digest
    stored = (
        ConversationMessage.objects.filter(conversation=head, seq=length - 1)
        .values_list("digest", flat=True)
        .first()
    )
    return stored == digest


def _context_changed(head: AgentConversation | None, expected_length: int) -> ApplicationError:
    return _error(
        errors.CONTEXT_CHANGED,
        "The Context was cleared or changed since it was read; nothing was written.",
        {"length": head.length if head is not None else 0, "expected_length": expected_length},
    )


def _append_after_digest(
    key: ConversationKey,
    prepared: _Prepared,
    expected_length: int,
    expected_digest: str,
    usage: TokenUsage | None,
) -> ConversationWrite | None:
    """The store's compare-and-set append: None (nothing written) when the head is not exactly
    (`expected_length`, `expected_digest`)."""
    digests = _chain(prepared.encoded, expected_digest)
    head = conversation_store().append_after(
        key=key,
        expected_length=expected_length,
        expected_digest=expected_digest,
        wires=prepared.wires,
        texts=prepared.texts,
        digests=digests,
        sizes=prepared.sizes,
        usage=usage,
        now=timezone.now(),
    )
    if head is None:
        return None
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
    return ConversationWrite(
        applied=True,
        length=head.length,
        revision=head.revision,
        bytes=head.bytes,
        digest=digests[-1],
        notes_revision=head.notes_revision,
    )


def _already_appended(
    head: AgentConversation | None, prepared: _Prepared, expected_length: int, expected_digest: str | None
) -> bool:
    """Whether the head is exactly this append applied after (`expected_length`, `expected_digest`)."""
    if head is None or expected_digest is None or not prepared.wires:
        return False
    if head.length != expected_length + len(prepared.wires):
        return False
    return head.head_digest == _chain(prepared.encoded, expected_digest)[-1]


@transaction.atomic
def _append_locked(
    key: ConversationKey,
    prepared: _Prepared,
    expected_length: int,
    usage_counts: TokenUsage | None,
    expected_digest: str | None = None,
) -> ConversationWrite:
    has_write = bool(prepared.wires) or usage_counts is not None
    head = _lock_head(key, create=has_write and expected_length == 0)
    if expected_digest is not None and not _extends(head, expected_length, expected_digest):
        raise _context_changed(head, expected_length)
    current = head.length if head is not None else 0
    if _already_appended(head, prepared, expected_length, expected_digest):
        return _state(head)
    if current != expected_length:
        raise _error(
            errors.CONVERSATION_CONFLICT,
            "The conversation changed since it was read; reload it and try again.",
            {"length": current, "expected_length": expected_length},
        )
    if head is None or not has_write:
        return _state(head)
    digests = _chain(prepared.encoded, head.head_digest)
    _insert(head, head.length, prepared, digests, 0)
    added = sum(prepared.sizes)
    changes: dict[str, Any] = {
        "length": F("length") + len(prepared.wires),
        "bytes": F("bytes") + added,
        "revision": F("revision") + 1,
        "updated_at": timezone.now(),
    }
    if digests:
        changes["head_digest"] = digests[-1]
    if usage_counts is not None:
        changes["input_tokens"] = F("input_tokens") + usage_counts.input_tokens
        changes["output_tokens"] = F("output_tokens") + usage_counts.output_tokens
        changes["cache_read_tokens"] = F("cache_read_tokens") + usage_counts.cache_read_tokens
        changes["cache_write_tokens"] = F("cache_write_tokens") + usage_counts.cache_write_tokens
    AgentConversation.objects.filter(pk=head.pk).update(**changes)
    length = head.length + len(prepared.wires)
    revision = head.revision + 1
    _publish(head, length=length, revision=revision)
    return ConversationWrite(
        applied=True,
        length=length,
        revision=revision,
        bytes=head.bytes + added,
        digest=digests[-1] if digests else head.head_digest,
        notes_revision=head.notes_revision,
    )


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
    prepared: _Prepared,
    *,
    notes: list[dict[str, Any]] | None = None,
    expected_digest: str | None = None,
) -> ConversationWrite:
    digests = _chain(prepared.encoded, "")
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
