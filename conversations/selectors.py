"""Reads of the conversation store."""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from django.db import DatabaseError
from django.db.models import Count, Q, QuerySet, Sum, TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from conversations import errors
from conversations.models import AgentConversation, ConversationMessage, ProviderCall
from conversations.stores import PRESSURE_COLUMNS, conversation_store
from conversations.types import ConversationCursor, ConversationKey, NotesState
from opencompany.core.errors import ApplicationError
from opencompany.llm.fidelity import lowest, turn_fidelity

logger = logging.getLogger(__name__)


def conversation_get(*, key: ConversationKey) -> AgentConversation | None:
    """The head row of `key`, or None when nothing was ever stored under it."""
    return AgentConversation.objects.filter(**key.filter_kwargs()).first()


def conversation_for_update(*, key: ConversationKey) -> AgentConversation | None:
    """The head row of `key`, locked until the end of the current transaction (None when missing).

    Call inside an atomic block. Callers locking several conversations lock them in key order
    (workflow_id, generation, agent_node_id) so two movers never deadlock. Every turn takes it, so it
    goes through the conversation store.
    """
    return conversation_store().head_lock(key=key)


def conversation_load(*, key: ConversationKey) -> list[dict[str, Any]]:
    """The stored messages in seq order (`[]` when none). A database error is raised loudly as
    `conversation_load_failed`: an agent never runs with silently missing context.

    One indexed query written by hand (the store's), not the ORM: this runs on every firing and the
    ORM's per-call overhead was the larger part of loading a short conversation.
    """
    try:
        return conversation_store().load(key=key)
    except DatabaseError as exc:
        logger.exception(
            "conversation load failed workflow=%s generation=%s agent=%s",
            key.workflow_id,
            key.generation,
            key.agent_node_id,
        )
        raise ApplicationError(
            errors.CONVERSATION_LOAD_FAILED,
            "The stored conversation could not be read; the run cannot continue without it.",
            status=errors.STATUS[errors.CONVERSATION_LOAD_FAILED],
        ) from exc


# The head's context-pressure fields: the last request's size and what was left of its window.
PRESSURE_FIELDS = PRESSURE_COLUMNS


def conversation_cursor(*, key: ConversationKey) -> ConversationCursor:
    """The cursor of the stored conversation as it is now: `(generation, length, digest, notes,
    pressure)`."""
    row = (
        AgentConversation.objects.filter(**key.filter_kwargs())
        .values("length", "head_digest", "notes", *PRESSURE_FIELDS)
        .first()
    )
    if row is None:
        return ConversationCursor(generation=key.generation, length=0, digest="", notes=[])
    return ConversationCursor(
        generation=key.generation,
        length=row["length"],
        digest=row["head_digest"],
        notes=list(row["notes"] or []),
        pressure={name: row[name] for name in PRESSURE_FIELDS},
    )


def head_cursor(*, key: ConversationKey, head: AgentConversation | None) -> ConversationCursor:
    """`conversation_cursor` from a head row the caller locked and has not changed since (None: no
    row), without reading it again."""
    if head is None:
        return ConversationCursor(generation=key.generation, length=0, digest="", notes=[])
    return ConversationCursor(
        generation=key.generation,
        length=head.length,
        digest=head.head_digest,
        notes=list(head.notes or []),
        pressure={name: getattr(head, name) for name in PRESSURE_FIELDS},
    )


def head_notes(*, head: AgentConversation | None) -> NotesState:
    """`notes_read` from a head row the caller locked and has not changed since (None: no row)."""
    if head is None:
        return NotesState()
    return NotesState(
        entries=list(head.notes or []), notes_revision=head.notes_revision, revision=head.revision
    )


def conversation_runtime_binding(*, key: ConversationKey) -> dict[str, Any]:
    """The agent program's session binding of the conversation (`{}` when none). Runtime state: it is
    never exported nor shown in the API."""
    value = (
        AgentConversation.objects.filter(**key.filter_kwargs())
        .values_list("runtime_binding", flat=True)
        .first()
    )
    return dict(value) if isinstance(value, dict) else {}


def conversation_list(
    *, workflow_id: str, generation: int | None = None, agent_node_id: str | None = None
) -> QuerySet[AgentConversation]:
    """Every conversation of a workflow (metadata only), newest generation first, then by agent;
    `generation` and `agent_node_id` narrow it to one generation or one agent."""
    rows = AgentConversation.objects.filter(workflow_id=workflow_id)
    if generation is not None:
        rows = rows.filter(generation=generation)
    if agent_node_id is not None:
        rows = rows.filter(agent_node_id=agent_node_id)
    return rows.order_by("-generation", "agent_node_id").only(
        "id",
        "owner_id",
        "workflow_id",
        "generation",
        "agent_node_id",
        "length",
        "bytes",
        "revision",
        "notes",
        "notes_revision",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "last_input_tokens",
        "pressure_headroom_tokens",
        "context_window",
        "pressure_estimated",
        "created_at",
        "updated_at",
    )


def conversation_messages_page(
    *, key: ConversationKey, after_seq: int, limit: int
) -> tuple[list[ConversationMessage], bool]:
    """Up to `limit` messages with `seq >= after_seq` in seq order, and whether more follow."""
    rows = list(
        ConversationMessage.objects.filter(
            conversation__workflow_id=key.workflow_id,
            conversation__generation=key.generation,
            conversation__agent_node_id=key.agent_node_id,
            seq__gte=after_seq,
        )
        .order_by("seq")
        .only("seq", "wire", "digest", "created_at")[: limit + 1]
    )
    return rows[:limit], len(rows) > limit


_FIDELITY_SCAN = 16


def conversation_fidelity(*, key: ConversationKey) -> dict[str, Any] | None:
    """The conversation's badge (None when it holds no assistant turn): `runtime` and `epoch` of the
    latest assistant turn — the runtime the conversation is on — and `fidelity`, the lowest among the
    assistant turns it still holds, since the next request carries them all. The latest turn is read
    newest first, a few rows at a time; the fidelities are read as one distinct list of a JSON key."""
    rows = ConversationMessage.objects.filter(
        conversation__workflow_id=key.workflow_id,
        conversation__generation=key.generation,
        conversation__agent_node_id=key.agent_node_id,
    )
    newest = rows.order_by("-seq")
    before: int | None = None
    latest: dict[str, Any] | None = None
    while latest is None:
        page = newest if before is None else newest.filter(seq__lt=before)
        batch = list(page.values_list("seq", "wire")[:_FIDELITY_SCAN])
        for _, wire in batch:
            latest = turn_fidelity(wire) if isinstance(wire, dict) else None
            if latest is not None:
                break
        if latest is None and len(batch) < _FIDELITY_SCAN:
            return None
        before = batch[-1][0] if batch else None
    # Text extraction (->>), compared here: the column is `json` on PostgreSQL, which has no equality
    # operator, and the distinct pairs are a handful. The stored text is canonical JSON, so a plain
    # substring test keeps every assistant row (and little else) before any row is parsed.
    pairs = (
        rows.annotate(wire_text=Cast("wire", TextField()))
        .filter(wire_text__contains='"role":"assistant"')
        .annotate(wire_role=KT("wire__role"), wire_fidelity=KT("wire__metadata__fidelity"))
        .order_by()
        .values_list("wire_role", "wire_fidelity")
        .distinct()
    )
    return {**latest, "fidelity": lowest(f for role, f in pairs if role == "assistant")}


def notes_read(*, key: ConversationKey) -> NotesState:
    """The working notes of a conversation (empty when none)."""
    row = (
        AgentConversation.objects.filter(**key.filter_kwargs())
        .values("notes", "notes_revision", "revision")
        .first()
    )
    if row is None:
        return NotesState()
    return NotesState(
        entries=list(row["notes"] or []), notes_revision=row["notes_revision"], revision=row["revision"]
    )


# --- lifetime usage and request records ---------------------------------------------------------------


def usage_totals(*, workflow_id: str, agent_node_id: str | None = None) -> dict[str, Any]:
    """Lifetime usage of a workflow (or one of its agents) over every generation, chat and Clear:
    call count, token sums and the cost of the calls whose model has a configured price
    (`cost_complete` is False when some call's model has none)."""
    rows = ProviderCall.objects.filter(workflow_id=workflow_id)
    if agent_node_id is not None:
        rows = rows.filter(agent_node_id=agent_node_id)
    totals = rows.aggregate(
        calls=Count("id"),
        input_tokens=Sum("input_tokens"),
        cached_tokens=Sum("cached_tokens"),
        cache_write_tokens=Sum("cache_write_tokens"),
        output_tokens=Sum("output_tokens"),
        cost_sum=Sum("cost"),
        unpriced=Count("id", filter=Q(cost__isnull=True)),
    )
    unpriced, cost = totals.pop("unpriced"), totals.pop("cost_sum")
    out: dict[str, Any] = {name: int(value or 0) for name, value in totals.items()}
    out["cost"] = cost if cost is not None else Decimal(0)
    out["cost_complete"] = unpriced == 0
    return out


def provider_calls_for(*, key: ConversationKey) -> QuerySet[ProviderCall]:
    """The request records (provider calls) of one conversation key, newest first."""
    return ProviderCall.objects.filter(**key.filter_kwargs()).order_by("-id")


def request_messages(*, key: ConversationKey, call: ProviderCall) -> list[dict[str, Any]] | None:
    """What the agent saw on a call: the stored messages of its range, when the conversation still
    holds that exact prefix (checked by the chained digest); None once it was cleared, compacted or
    moved. The record keeps references only, so this is the one way to its content."""
    if call.message_end == 0:
        return []
    rows = ConversationMessage.objects.filter(
        conversation__workflow_id=key.workflow_id,
        conversation__generation=key.generation,
        conversation__agent_node_id=key.agent_node_id,
        seq__gte=call.message_start,
        seq__lt=call.message_end,
    ).order_by("seq")
    found = list(rows.values_list("seq", "digest", "wire"))
    if len(found) != call.message_end - call.message_start or found[-1][1] != call.conversation_digest:
        return None
    return [wire for _, _, wire in found]
