"""What the conversation writes share: message preparation and digests (no database), the head row's
lock, the after-commit event, and the row writer every write path ends in. The entry points own the
transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from conversations import errors
from conversations.models import AgentConversation, ConversationMessage
from conversations.selectors import PRESSURE_FIELDS, conversation_for_update
from conversations.stores import INSERT_BATCH, Batch
from conversations.types import ConversationKey, ConversationWrite
from graphs.models import Workflow
from opencompany.core.errors import ApplicationError, invalid, not_found
from opencompany.core.events import owner_group, publish_on_commit
from opencompany.llm import wire

# A NUL escape not itself escaped: PostgreSQL's jsonb cannot store U+0000.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _error(code: str, message: str, extra: dict[str, Any] | None = None) -> ApplicationError:
    return ApplicationError(code, message, extra, status=errors.STATUS[code])


# --- preparing messages (no database) ---------------------------------------------------------------


def _prepare(messages: Sequence[Any]) -> Batch:
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
    return Batch(wires=wires, texts=texts, encoded=encoded, sizes=[len(data) for data in encoded])


# --- context pressure ---------------------------------------------------------------------------------

# An emptied conversation has sent no request.
EMPTY_PRESSURE: dict[str, Any] = {
    "last_input_tokens": 0,
    "pressure_headroom_tokens": 0,
    "context_window": 0,
    "pressure_estimated": False,
}


def pressure_of(head: AgentConversation | None) -> dict[str, Any]:
    """The head's pressure fields as a JSON-safe dict (kept with branch snapshots and cursors)."""
    if head is None:
        return dict(EMPTY_PRESSURE)
    return {name: getattr(head, name) for name in PRESSURE_FIELDS}


def clean_pressure(value: Any) -> dict[str, Any] | None:
    """Pressure fields read back from a snapshot or cursor (None when they are not there or malformed)."""
    if not isinstance(value, Mapping) or set(value) != set(PRESSURE_FIELDS):
        return None
    out: dict[str, Any] = {}
    for name in PRESSURE_FIELDS:
        raw = value[name]
        if name == "pressure_estimated":
            if not isinstance(raw, bool):
                return None
        elif isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            return None
        out[name] = raw
    return out


# --- head row -----------------------------------------------------------------------------------------


def _workflow_owner_id(workflow_id: str) -> int:
    owner_id = Workflow.objects.filter(pk=workflow_id).values_list("owner_id", flat=True).first()
    if owner_id is None:
        raise not_found("workflow")
    return int(owner_id)


def _lock_head(key: ConversationKey, *, create: bool) -> AgentConversation | None:
    """Lock the head row of `key`, creating it when asked. Call inside the service's transaction."""
    if create:
        return _lock_or_create_head(key)
    return conversation_for_update(key=key)


def _lock_or_create_head(key: ConversationKey) -> AgentConversation:
    """Lock the head row of `key`, creating it when missing. Call inside the service's transaction."""
    head = conversation_for_update(key=key)
    if head is not None:
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


def _insert(head: AgentConversation, start: int, prepared: Batch, digests: list[str], offset: int) -> None:
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
        ConversationMessage.objects.bulk_create(rows, batch_size=INSERT_BATCH)


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
    prepared: Batch,
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
