"""Writes of the conversation store.

Every write runs under the head row's lock (`select_for_update`), bumps `revision` and publishes
`context.updated {workflow_id, generation, agent_node_id, length, revision}` to the owner's group after
commit. A refused or no-op write writes nothing and publishes nothing.

Messages are validated as MessageWire and stored normalized; `digest[i] = sha256(digest[i-1] +
canonical_json(wire[i]))`, so a cursor `(length, digest)` is checked against one stored row.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Sum
from django.utils import timezone

from conversations import errors
from conversations.models import AgentConversation, BranchSnapshot, ConversationArchive, ConversationMessage
from conversations.selectors import (
    conversation_cursor,
    conversation_for_update,
    conversation_list,
    conversation_load,
    notes_read,
)
from conversations.types import (
    ClearResult,
    ConversationCursor,
    ConversationKey,
    ConversationWrite,
    TokenUsage,
)
from graphs.hooks import ResetContext
from graphs.models import Workflow
from opencompany.core.db import hot_fetchone
from opencompany.core.errors import ApplicationError, invalid, not_found
from opencompany.core.events import owner_group, publish_on_commit
from opencompany.core.json import json_size
from opencompany.llm import wire

__all__ = [
    "archive_purge",
    "branch_snapshot_keep",
    "branch_snapshot_restore",
    "conversation_append",
    "conversation_clear",
    "conversation_cursor",
    "conversation_list",
    "conversation_load",
    "conversation_rewind",
    "conversation_save",
    "conversations_archive_for_reset",
    "conversations_archive_for_workflow",
    "notes_read",
]

logger = logging.getLogger(__name__)

BRANCH_SNAPSHOT_MAX_BYTES = 1_048_576
BRANCH_SNAPSHOTS_PER_THREAD = 50
_INSERT_BATCH = 500
# A NUL escape not itself escaped: PostgreSQL's jsonb cannot store U+0000.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _error(code: str, message: str, extra: dict[str, Any] | None = None) -> ApplicationError:
    return ApplicationError(code, message, extra, status=errors.STATUS[code])


# --- preparing messages (no database) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Prepared:
    wires: list[dict[str, Any]]
    texts: list[str]
    encoded: list[bytes]  # the UTF-8 of each text: sizes and digests
    sizes: list[int]


def _prepare(messages: Sequence[Any]) -> _Prepared:
    """Validate and normalize each message; compute its canonical text and size once."""
    if not isinstance(messages, list | tuple):
        raise _error(errors.INVALID_MESSAGE, "messages must be a list of MessageWire objects.")
    wires: list[dict[str, Any]] = []
    texts: list[str] = []
    encoded: list[bytes] = []
    for index, message in enumerate(messages):
        try:
            normalized, text = wire.encode_message(message, index=index)
        except wire.WireError as exc:
            raise _error(errors.INVALID_MESSAGE, str(exc), {"index": index}) from exc
        # The substring test is a fast C scan; the regex (escaped backslashes) only runs on a hit.
        if "\\u0000" in text and _NUL_ESCAPE.search(text):
            raise _error(
                errors.INVALID_MESSAGE,
                f"message[{index}]: NUL characters cannot be stored.",
                {"index": index},
            )
        wires.append(normalized)
        texts.append(text)
        encoded.append(text.encode("utf-8"))
    return _Prepared(wires=wires, texts=texts, encoded=encoded, sizes=[len(data) for data in encoded])


def _chain(encoded: Sequence[bytes], prev: str) -> list[str]:
    """The chained digests (same as `wire.digest_chain`, reusing the canonical UTF-8 already built)."""
    out: list[str] = []
    for data in encoded:
        prev = hashlib.sha256(prev.encode() + data).hexdigest()
        out.append(prev)
    return out


# --- head row -----------------------------------------------------------------------------------------


def _workflow_owner_id(workflow_id: str) -> int:
    owner_id = Workflow.objects.filter(pk=workflow_id).values_list("owner_id", flat=True).first()
    if owner_id is None:
        raise not_found("workflow")
    return int(owner_id)


def _lock_head(key: ConversationKey, *, create: bool) -> AgentConversation | None:
    """Lock the head row of `key`, creating it when asked. Call inside the service's transaction."""
    head = conversation_for_update(key=key)
    if head is not None or not create:
        return head
    owner_id = _workflow_owner_id(key.workflow_id)
    try:
        with transaction.atomic():
            return AgentConversation.objects.create(owner_id=owner_id, **key.filter_kwargs())
    except IntegrityError:
        # Another writer created it first; its commit released the unique index, now wait on its row.
        head = conversation_for_update(key=key)
        if head is None:
            raise
        return head


def _publish(head: AgentConversation, *, length: int, revision: int) -> None:
    publish_on_commit(
        owner_group(head.owner_id),
        "context.updated",
        {
            "workflow_id": head.workflow_id,
            "generation": head.generation,
            "agent_node_id": head.agent_node_id,
            "length": length,
            "revision": revision,
        },
    )


def _state(head: AgentConversation | None, *, applied: bool = False) -> ConversationWrite:
    if head is None:
        return ConversationWrite(applied=applied, length=0, revision=0, bytes=0, digest="")
    return ConversationWrite(
        applied=applied,
        length=head.length,
        revision=head.revision,
        bytes=head.bytes,
        digest=head.head_digest,
        notes_revision=head.notes_revision,
    )


def _insert(
    head: AgentConversation, start: int, prepared: _Prepared, digests: list[str], offset: int
) -> None:
    """Insert `prepared[offset:]` as rows `start, start+1, …` (digests aligned with `prepared`)."""
    rows = [
        ConversationMessage(
            conversation=head,
            seq=start + i,
            wire=prepared.wires[offset + i],
            digest=digests[offset + i],
            size=prepared.sizes[offset + i],
        )
        for i in range(len(prepared.wires) - offset)
    ]
    if rows:
        ConversationMessage.objects.bulk_create(rows, batch_size=_INSERT_BATCH)


def _clean_notes(notes: Any) -> list[dict[str, Any]]:
    if not isinstance(notes, list) or not all(
        isinstance(n, Mapping) and isinstance(n.get("id"), str) and isinstance(n.get("text"), str)
        for n in notes
    ):
        raise invalid("notes must be a list of {id, text} entries.")
    return [{"id": n["id"], "text": n["text"]} for n in notes]


def _write_from(
    head: AgentConversation,
    *,
    start: int,
    prepared: _Prepared,
    digests: list[str],
    notes: list[dict[str, Any]] | None = None,
) -> ConversationWrite:
    """Make the stored conversation equal to `prepared`, keeping rows before `start` untouched.

    Precondition: `head` is locked and rows `< start` already equal `prepared[:start]`.
    """
    new_length = len(prepared.wires)
    if start < head.length:
        ConversationMessage.objects.filter(conversation=head, seq__gte=start).delete()
    _insert(head, start, prepared, digests, start)
    digest = digests[-1] if digests else ""
    total = sum(prepared.sizes)
    changes: dict[str, Any] = {
        "length": new_length,
        "bytes": total,
        "head_digest": digest,
        "revision": F("revision") + 1,
        "updated_at": timezone.now(),
    }
    notes_revision = head.notes_revision
    if notes is not None and notes != head.notes:
        changes["notes"] = notes
        changes["notes_revision"] = F("notes_revision") + 1
        notes_revision += 1
    AgentConversation.objects.filter(pk=head.pk).update(**changes)
    revision = head.revision + 1
    _publish(head, length=new_length, revision=revision)
    return ConversationWrite(
        applied=True,
        length=new_length,
        revision=revision,
        bytes=total,
        digest=digest,
        notes_revision=notes_revision,
        rewritten_from=start if start < head.length else None,
    )


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


# --- branch snapshots ---------------------------------------------------------------------------------


def _check_snapshot_key(thread_key: str, leaf_uid: str) -> None:
    if not isinstance(thread_key, str) or not thread_key or len(thread_key) > 255:
        raise invalid("thread_key must be a non-empty string of at most 255 characters.")
    if not isinstance(leaf_uid, str) or not leaf_uid or len(leaf_uid) > 64:
        raise invalid("leaf_uid must be a non-empty string of at most 64 characters.")


@transaction.atomic
def branch_snapshot_keep(*, key: ConversationKey, thread_key: str, leaf_uid: str) -> bool:
    """Keep the conversation (messages and notes) under `(thread_key, leaf_uid, agent)`.

    Returns False when it is larger than 1 MiB: it is then not kept and any older snapshot under that
    key is dropped (coming back answers `branch_unavailable`). At most 50 snapshots per thread are
    kept; the oldest go first.
    """
    _check_snapshot_key(thread_key, leaf_uid)
    lookup = {"thread_key": thread_key, "leaf_uid": leaf_uid, "agent_node_id": key.agent_node_id}
    head = _lock_head(key, create=False)
    notes: list[dict[str, Any]] = list(head.notes) if head is not None else []
    too_large = head is not None and head.bytes > BRANCH_SNAPSHOT_MAX_BYTES
    messages: list[dict[str, Any]] = []
    size = 0
    if not too_large:
        messages = conversation_load(key=key) if head is not None and head.length else []
        size = json_size({"messages": messages, "notes": notes})
        too_large = size > BRANCH_SNAPSHOT_MAX_BYTES
    if too_large:
        BranchSnapshot.objects.filter(**lookup).delete()
        logger.info(
            "branch snapshot not kept (over %s bytes) workflow=%s agent=%s",
            BRANCH_SNAPSHOT_MAX_BYTES,
            key.workflow_id,
            key.agent_node_id,
        )
        return False
    owner_id = head.owner_id if head is not None else _workflow_owner_id(key.workflow_id)
    BranchSnapshot.objects.update_or_create(
        thread_key=thread_key,
        leaf_uid=leaf_uid,
        agent_node_id=key.agent_node_id,
        defaults={
            "owner_id": owner_id,
            "workflow_id": key.workflow_id,
            "generation": key.generation,
            "messages": messages,
            "notes": notes,
            "bytes": size,
            "created_at": timezone.now(),
        },
    )
    excess = list(
        BranchSnapshot.objects.filter(thread_key=thread_key)
        .order_by("-created_at", "-id")
        .values_list("pk", flat=True)[BRANCH_SNAPSHOTS_PER_THREAD:]
    )
    if excess:
        BranchSnapshot.objects.filter(pk__in=excess).delete()
    return True


@transaction.atomic
def branch_snapshot_restore(*, key: ConversationKey, thread_key: str, leaf_uid: str) -> ConversationWrite:
    """Make the conversation equal to the snapshot kept for `(thread_key, leaf_uid, agent)` (messages
    and notes). `branch_unavailable` when none was kept for this workflow and generation."""
    _check_snapshot_key(thread_key, leaf_uid)
    snapshot = BranchSnapshot.objects.filter(
        thread_key=thread_key,
        leaf_uid=leaf_uid,
        agent_node_id=key.agent_node_id,
        workflow_id=key.workflow_id,
        generation=key.generation,
    ).first()
    if snapshot is None:
        raise _error(
            errors.BRANCH_UNAVAILABLE,
            "That branch's conversation was not kept; it cannot be restored.",
            {"agent_node_id": key.agent_node_id},
        )
    return _save_locked(key, _prepare(list(snapshot.messages)), notes=_clean_notes(snapshot.notes))


# --- clear, archive, purge ----------------------------------------------------------------------------


def _archive_and_empty(head: AgentConversation, reason: str) -> ConversationArchive:
    """Copy the conversation into an archive, then empty it (messages and notes).

    Precondition: call inside the transaction that locked `head`.
    """
    messages = list(
        ConversationMessage.objects.filter(conversation=head).order_by("seq").values_list("wire", flat=True)
    )
    archive = ConversationArchive.objects.create(
        owner_id=head.owner_id,
        workflow_id=head.workflow_id,
        generation=head.generation,
        agent_node_id=head.agent_node_id,
        reason=reason,
        messages=messages,
        notes=list(head.notes or []),
        length=head.length,
        bytes=head.bytes,
        revision=head.revision,
    )
    ConversationMessage.objects.filter(conversation=head).delete()
    changes: dict[str, Any] = {
        "length": 0,
        "bytes": 0,
        "head_digest": "",
        "revision": F("revision") + 1,
        "updated_at": timezone.now(),
    }
    if head.notes:
        changes["notes"] = []
        changes["notes_revision"] = F("notes_revision") + 1
    AgentConversation.objects.filter(pk=head.pk).update(**changes)
    _publish(head, length=0, revision=head.revision + 1)
    logger.info(
        "conversation archived archive=%s workflow=%s generation=%s agent=%s reason=%s length=%s",
        archive.pk,
        head.workflow_id,
        head.generation,
        head.agent_node_id,
        reason,
        head.length,
    )
    return archive


def _has_content(head: AgentConversation) -> bool:
    return head.length > 0 or bool(head.notes)


@transaction.atomic
def conversation_clear(
    *, key: ConversationKey, reason: str = ConversationArchive.Reason.CLEARED
) -> ClearResult:
    """Archive the conversation, then empty it, notes included. Memory is never touched.
    Clearing an empty conversation writes nothing."""
    if reason not in ConversationArchive.Reason.values:
        raise invalid(f"reason must be one of {sorted(ConversationArchive.Reason.values)}.")
    head = _lock_head(key, create=False)
    if head is None or not _has_content(head):
        return ClearResult(cleared=False, archive_id=None, length=0, revision=head.revision if head else 0)
    archive = _archive_and_empty(head, reason)
    return ClearResult(cleared=True, archive_id=archive.pk, length=0, revision=head.revision + 1)


def _archive_heads(heads: list[AgentConversation], reason: str) -> int:
    archived = 0
    for head in heads:
        if _has_content(head):
            _archive_and_empty(head, reason)
            archived += 1
    return archived


@transaction.atomic
def conversations_archive_for_workflow(
    *, workflow_id: str, owner_id: int, context_node_id: str, reason: str
) -> dict[str, Any]:
    """Outbox archiver: archive and empty every conversation of the workflow (all generations).

    Idempotent: a retried drain finds them empty and archives nothing more. When the workflow itself
    was deleted, the emptied head rows and the workflow's branch snapshots go too.
    """
    heads = list(
        AgentConversation.objects.select_for_update()
        .filter(workflow_id=workflow_id)
        .order_by("generation", "agent_node_id")
    )
    archived = _archive_heads(heads, ConversationArchive.Reason.CONTEXT_REMOVED)
    removed = 0
    if reason == "workflow_deleted":
        removed, _ = AgentConversation.objects.filter(workflow_id=workflow_id).delete()
        BranchSnapshot.objects.filter(workflow_id=workflow_id).delete()
    return {"conversations_archived": archived, "conversations_removed": removed}


@transaction.atomic
def conversations_archive_for_reset(ctx: ResetContext) -> dict[str, Any]:
    """Reset hook: archive (reason `reset`) and empty the closed generation's conversations, notes
    included. Runs inside Reset's transaction."""
    heads = list(
        AgentConversation.objects.select_for_update()
        .filter(workflow_id=ctx.workflow_id, generation=ctx.generation)
        .order_by("agent_node_id")
    )
    return {"conversations_archived": _archive_heads(heads, ConversationArchive.Reason.RESET)}


@transaction.atomic
def archive_purge(*, older_than_days: int | None = None) -> int:
    """Delete archives older than the retention window (`OPENCOMPANY_CONTEXT_ARCHIVE_DAYS`, 30 by
    default). Returns how many were deleted."""
    days = int(settings.OPENCOMPANY_CONTEXT_ARCHIVE_DAYS if older_than_days is None else older_than_days)
    if days < 0:
        raise invalid("older_than_days must be ≥ 0.")
    cutoff = timezone.now() - timedelta(days=days)
    deleted, _ = ConversationArchive.objects.filter(archived_at__lt=cutoff).delete()
    return int(deleted)
