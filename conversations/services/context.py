"""The run's side of the Context: provider calls (the lifetime-usage ledger, the request record and the
conversation's pressure) and the one compaction service.

Every write here carries the head digest the run read. A call's ledger row is written whatever
happened (the ledger is billing, not Context); its pressure lands on the head only while the head is
still the one the request was built from. A compaction is activated by a compare-and-swap on the head
digest; when the head moved (Clear, Reset, a branch move), nothing is written but an attempt row, and
the caller gets `context_changed`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from conversations import errors
from conversations.models import AgentConversation, CompactionAttempt, ConversationMessage, ProviderCall
from conversations.services._common import (
    _error,
    _lock_head,
    _prepare,
    _workflow_owner_id,
    _write_from,
)
from conversations.services.notes import render_notes_block
from conversations.stores import Refused, chain_digests, conversation_store
from conversations.types import ConversationKey
from opencompany.core.errors import ApplicationError, invalid, not_found

logger = logging.getLogger(__name__)

FINDINGS_NOTE_ID = "findings"
_MILLION = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class CallScope:
    """Whose call it is: the agent (its conversation key, when it keeps one) and the run."""

    workflow_id: str
    generation: int
    agent_node_id: str
    run_id: str
    key: ConversationKey | None


@dataclass(frozen=True, slots=True)
class CallCounts:
    status: str
    kind: str
    provider: str
    model: str
    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int
    usage_reported: bool
    settings: dict[str, Any]
    system_digest: str
    notes_digest: str
    tools_digest: str
    message_count: int
    conversation_digest: str
    pressure: int
    pressure_estimated: bool
    output_headroom: int
    context_window: int
    runtime: str = ""
    fidelity: str = ""


def call_cost(*, model: str, input_tokens: int, cached_tokens: int, output_tokens: int) -> Decimal | None:
    """The cost of a call from the configured prices (`OPENCOMPANY_MODEL_PRICES`: model → USD per
    million `input`, `cached_input`, `output` tokens); None for a model the table does not know."""
    prices = (settings.OPENCOMPANY_MODEL_PRICES or {}).get(model)
    if not isinstance(prices, dict):
        return None
    try:
        fresh = Decimal(str(prices["input"]))
        cached = Decimal(str(prices.get("cached_input", prices["input"])))
        output = Decimal(str(prices["output"]))
    except (KeyError, ArithmeticError):
        return None
    uncached = max(input_tokens - cached_tokens, 0)
    total = (fresh * uncached + cached * cached_tokens + output * output_tokens) / _MILLION
    return total.quantize(Decimal("0.000001"))


def provider_call_record(*, scope: CallScope, counts: CallCounts) -> ProviderCall:
    """Append one provider call to the ledger (with its request record) and, when the conversation's
    head is still `counts.conversation_digest`, make its pressure that call's, all or nothing.

    The row holds counts and digests only. It is written for finished, stopped and failed calls alike,
    and never changed afterwards. A run records a call per step, so this goes through the conversation
    store (one prepared statement on PostgreSQL)."""
    call = {
        "workflow_id": scope.workflow_id,
        "generation": scope.generation,
        "agent_node_id": scope.agent_node_id,
        "run_id": scope.run_id[:200],
        "kind": counts.kind,
        "status": counts.status,
        "provider": counts.provider[:40],
        "model": counts.model[:200],
        "input_tokens": counts.input_tokens,
        "cached_tokens": counts.cached_tokens,
        "cache_write_tokens": counts.cache_write_tokens,
        "output_tokens": counts.output_tokens,
        "usage_reported": counts.usage_reported,
        "cost": call_cost(
            model=counts.model,
            input_tokens=counts.input_tokens,
            cached_tokens=counts.cached_tokens,
            output_tokens=counts.output_tokens,
        ),
        "settings": counts.settings,
        "system_digest": counts.system_digest,
        "notes_digest": counts.notes_digest,
        "tools_digest": counts.tools_digest,
        "message_start": 0,
        "message_end": counts.message_count,
        "conversation_digest": counts.conversation_digest,
        "runtime": counts.runtime[:40],
        "fidelity": counts.fidelity[:24],
    }
    sets_pressure = counts.kind == ProviderCall.Kind.STEP and (
        counts.usage_reported or counts.status != ProviderCall.Status.ERROR
    )
    # The compare-and-swap: a head cleared or moved since the request keeps its own pressure.
    row = conversation_store().call_record(
        call=call,
        pressure_of=scope.key if sets_pressure and counts.conversation_digest else None,
        pressure={
            "last_input_tokens": counts.pressure,
            "pressure_headroom_tokens": counts.output_headroom,
            "context_window": counts.context_window,
            "pressure_estimated": counts.pressure_estimated,
        },
        now=timezone.now(),
    )
    if isinstance(row, Refused):
        raise not_found("workflow")
    return row


def _attempt(
    key: ConversationKey, owner_id: int, run_id: str, outcome: str, reason: str, sizes: dict[str, Any]
) -> CompactionAttempt:
    return CompactionAttempt.objects.create(
        owner_id=owner_id,
        workflow_id=key.workflow_id,
        generation=key.generation,
        agent_node_id=key.agent_node_id,
        run_id=run_id[:200],
        outcome=outcome,
        reason=reason,
        **sizes,
    )


@transaction.atomic
def compaction_attempt_record(
    *, key: ConversationKey, run_id: str, outcome: str, reason: str, sizes: dict[str, Any]
) -> CompactionAttempt:
    """Record a compaction that was refused or failed (reason and sizes, no content); the
    conversation is not touched."""
    row = _attempt(key, _workflow_owner_id(key.workflow_id), run_id, outcome, reason, sizes)
    logger.info(
        "compaction not applied workflow=%s agent=%s outcome=%s reason=%s",
        key.workflow_id,
        key.agent_node_id,
        outcome,
        reason,
    )
    return row


@dataclass(frozen=True, slots=True)
class Compacted:
    length: int
    digest: str
    notes_block: str


def _with_findings(notes: list[dict[str, Any]], findings: str) -> list[dict[str, Any]]:
    """The notes with the findings entry (replacing an earlier one), cut to fit the notes' bounds."""
    kept = [dict(n) for n in notes if n.get("id") != FINDINGS_NOTE_ID]
    room = int(settings.OPENCOMPANY_NOTES_MAX_CHARS) - sum(len(n["text"]) for n in kept)
    limit = min(int(settings.OPENCOMPANY_NOTES_ENTRY_MAX_CHARS), room)
    if len(kept) >= int(settings.OPENCOMPANY_NOTES_MAX_ENTRIES) or limit < 1:
        return kept
    text = findings if len(findings) <= limit else findings[: max(limit - 1, 0)].rstrip() + "…"
    return [*kept, {"id": FINDINGS_NOTE_ID, "text": text}] if text.strip() else kept


def conversation_compact(
    *,
    key: ConversationKey,
    run_id: str,
    expected_length: int,
    expected_digest: str,
    boundary: int,
    findings: str,
    sizes: dict[str, Any],
) -> Compacted:
    """Activate a compaction: the stored conversation keeps its messages from `boundary` on (the
    committed prefix before it is dropped) and the prefix's findings go into the working-notes slot
    (entry `findings`); the other notes stay.

    A compare-and-swap on the head: when the stored conversation is no longer exactly
    (`expected_length`, `expected_digest`) — cleared, reset or moved meanwhile — nothing changes but an
    attempt row, and `context_changed` is raised. The head digest proves the stored prefix is the one
    the candidate was cut from, so the tail is taken from the store as it is. An applied compaction is
    recorded as an attempt row too (outcome `applied`); it is what the chat marks "Earlier messages
    summarized" from."""
    if isinstance(boundary, bool) or not isinstance(boundary, int) or not 0 < boundary < expected_length:
        raise invalid("boundary must lie inside the conversation.", {"boundary": [str(boundary)]})
    try:
        return _activate(
            key=key,
            run_id=run_id,
            expected_length=expected_length,
            expected_digest=expected_digest,
            boundary=boundary,
            findings=findings,
            sizes=sizes,
        )
    except ApplicationError as exc:
        if exc.code == errors.CONTEXT_CHANGED:
            compaction_attempt_record(
                key=key, run_id=run_id, outcome=CompactionAttempt.Outcome.FAILED, reason=exc.code, sizes=sizes
            )
        raise


@transaction.atomic
def _activate(
    *,
    key: ConversationKey,
    run_id: str,
    expected_length: int,
    expected_digest: str,
    boundary: int,
    findings: str,
    sizes: dict[str, Any],
) -> Compacted:
    head = _lock_head(key, create=False)
    if head is None or (head.length, head.head_digest) != (expected_length, expected_digest):
        raise _error(
            errors.CONTEXT_CHANGED,
            "The Context changed while it was being compacted; nothing was replaced.",
            {"length": head.length if head is not None else 0, "expected_length": expected_length},
        )
    stored = ConversationMessage.objects.filter(conversation=head, seq__gte=boundary).order_by("seq")
    prepared = _prepare(list(stored.values_list("wire", flat=True)))
    tail_digest = chain_digests(prepared.encoded, "")
    notes = _with_findings(list(head.notes or []), findings)
    write = _write_from(head, start=0, prepared=prepared, digests=tail_digest, notes=notes)
    _attempt(key, head.owner_id, run_id, CompactionAttempt.Outcome.APPLIED, "", sizes)
    AgentConversation.objects.filter(pk=head.pk).update(
        last_input_tokens=int(sizes.get("tokens_after", 0)), pressure_estimated=True
    )
    logger.info(
        "conversation compacted workflow=%s agent=%s messages=%s->%s",
        key.workflow_id,
        key.agent_node_id,
        expected_length,
        write.length,
    )
    return Compacted(length=write.length, digest=write.digest, notes_block=render_notes_block(notes))
