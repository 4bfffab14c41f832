"""The conversation itself: append (one statement on PostgreSQL when the caller knows the head digest),
save (longest shared prefix, then append or rewrite from the first difference) and rewind to a cursor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, transaction
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
    _prepare,
    _Prepared,
    _publish,
    _state,
    _write_from,
)
from conversations.types import ConversationCursor, ConversationKey, ConversationWrite, TokenUsage
from opencompany.core.db import hot_fetchone
from opencompany.core.errors import invalid
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
    passes `expected_digest`: on PostgreSQL the check, the insert and the head update then go to the
    database as one statement (one round trip); any mismatch falls back to the locked path, which
    answers with the precise conflict.
    """
    if isinstance(expected_length, bool) or not isinstance(expected_length, int) or expected_length < 0:
        raise invalid("expected_length must be an integer ≥ 0.")
    prepared = _prepare(list(messages))
    usage_counts = TokenUsage.from_value(usage)
    if expected_digest and prepared.wires and connection.vendor == "postgresql":
        written = _append_one_statement(key, prepared, expected_length, expected_digest, usage_counts)
        if written is not None:
            return written
    return _append_locked(key, prepared, expected_length, usage_counts)


# The arrays go in binary (%b): length-prefixed elements. As text, psycopg would backslash-escape every
# quote of every message's JSON (in Python) and the server would parse the array literal back; this
# measured 0.17 ms per turn (docs/benchmarks.md).
_APPEND_SQL = """
WITH head AS (
    UPDATE conversations_agentconversation AS c SET
        length = c.length + %(count)s, bytes = c.bytes + %(bytes)s, revision = c.revision + 1,
        head_digest = %(head_digest)s, updated_at = %(now)s,
        input_tokens = c.input_tokens + %(input)s, output_tokens = c.output_tokens + %(output)s,
        cache_read_tokens = c.cache_read_tokens + %(cache_read)s,
        cache_write_tokens = c.cache_write_tokens + %(cache_write)s,
        last_input_tokens = COALESCE(%(last_input)s, c.last_input_tokens)
    WHERE c.workflow_id = %(workflow_id)s AND c.generation = %(generation)s AND c.agent_node_id = %(agent)s
      AND c.length = %(length)s AND c.head_digest = %(digest)s
    RETURNING c.id, c.owner_id, c.length, c.revision, c.bytes, c.notes_revision
), added AS (
    INSERT INTO conversations_conversationmessage (conversation_id, seq, wire, digest, size, created_at)
    SELECT head.id, %(length)s + m.ord - 1, m.wire, m.digest, m.size, %(now)s
    FROM head, unnest(%(wires)b::json[], %(digests)b::varchar[], %(sizes)b::int[])
         WITH ORDINALITY AS m(wire, digest, size, ord)
)
SELECT owner_id, length, revision, bytes, notes_revision FROM head
"""


def _append_one_statement(
    key: ConversationKey,
    prepared: _Prepared,
    expected_length: int,
    expected_digest: str,
    usage: TokenUsage | None,
) -> ConversationWrite | None:
    """The PostgreSQL fast path: None when the head is not exactly (`expected_length`, `expected_digest`).

    The head update is the compare-and-set: it takes the row lock, and a writer that committed first
    changed `length`, so after the lock wait the WHERE matches nothing and nothing is inserted. The
    insert takes its conversation id from the update's RETURNING, so rows only land with the head.
    """
    digests = _chain(prepared.encoded, expected_digest)
    params: dict[str, Any] = {
        "workflow_id": key.workflow_id,
        "generation": key.generation,
        "agent": key.agent_node_id,
        "length": expected_length,
        "digest": expected_digest,
        "wires": prepared.texts,
        "digests": digests,
        "sizes": prepared.sizes,
        "count": len(prepared.wires),
        "bytes": sum(prepared.sizes),
        "head_digest": digests[-1],
        "now": timezone.now(),
        "input": usage.input_tokens if usage else 0,
        "output": usage.output_tokens if usage else 0,
        "cache_read": usage.cache_read_tokens if usage else 0,
        "cache_write": usage.cache_write_tokens if usage else 0,
        "last_input": usage.input_tokens + usage.cache_read_tokens if usage else None,
    }
    row = hot_fetchone(_APPEND_SQL, params)
    if row is None:
        return None
    owner_id, length, revision, size, notes_revision = row
    publish_on_commit(
        owner_group(owner_id),
        "context.updated",
        {
            "workflow_id": key.workflow_id,
            "generation": key.generation,
            "agent_node_id": key.agent_node_id,
            "length": length,
            "revision": revision,
        },
    )
    return ConversationWrite(
        applied=True,
        length=length,
        revision=revision,
        bytes=size,
        digest=digests[-1],
        notes_revision=notes_revision,
    )


@transaction.atomic
def _append_locked(
    key: ConversationKey, prepared: _Prepared, expected_length: int, usage_counts: TokenUsage | None
) -> ConversationWrite:
    has_write = bool(prepared.wires) or usage_counts is not None
    head = _lock_head(key, create=has_write and expected_length == 0)
    current = head.length if head is not None else 0
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
        changes["last_input_tokens"] = usage_counts.input_tokens + usage_counts.cache_read_tokens
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
) -> ConversationWrite:
    digests = _chain(prepared.encoded, "")
    head = _lock_head(key, create=bool(prepared.wires) or bool(notes))
    if head is None:
        return _state(None)
    start = _shared_prefix(head, digests)
    notes_change = notes is not None and notes != head.notes
    if start == head.length == len(prepared.wires) and not notes_change:
        return _state(head)
    return _write_from(head, start=start, prepared=prepared, digests=digests, notes=notes)


@transaction.atomic
def conversation_save(*, key: ConversationKey, messages: Sequence[Mapping[str, Any]]) -> ConversationWrite:
    """Store exactly `messages` (the whole list): keep the longest prefix already stored (by digest),
    then append or rewrite from the first difference. An identical list writes nothing."""
    return _save_locked(key, _prepare(list(messages)))


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
        head = _lock_head(key, create=True)
        assert head is not None  # noqa: S101 - create=True never answers None
    notes_change = notes is not None and notes != head.notes
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
