"""The Context archive outbox: rows written in the transaction of a graph change that removes a Context
(or deletes the workflow), drained by the registered archivers after commit and retried until done."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from graphs.hooks import context_archivers
from graphs.models import ContextArchiveOutbox
from opencompany.core.logs import error_text

logger = logging.getLogger(__name__)


def outbox_enqueue(*, workflow_id: str, owner_id: int, context_ids: set[str], reason: str) -> int:
    """Write one pending row per Context id (in id order) in the caller's transaction; returns the count."""
    rows = [
        ContextArchiveOutbox(workflow_id=workflow_id, owner_id=owner_id, context_node_id=cid, reason=reason)
        for cid in sorted(context_ids)
    ]
    ContextArchiveOutbox.objects.bulk_create(rows)
    return len(rows)


def outbox_drain_on_commit(*, workflow_id: str) -> None:
    """Drain this workflow's pending rows once the current transaction commits (failures are logged)."""
    transaction.on_commit(lambda: outbox_drain_or_log(workflow_id=workflow_id), robust=True)


def outbox_drain_or_log(*, workflow_id: str) -> None:
    """Drain this workflow's pending rows; an unexpected failure is logged, never raised."""
    try:
        outbox_drain(workflow_id=workflow_id)
    except Exception:
        logger.exception("outbox drain failed workflow=%s", workflow_id)


def outbox_drain(*, workflow_id: str | None = None, limit: int = 100) -> dict[str, int]:
    """Run the registered archivers for pending outbox rows (one transaction per row). A row whose
    archiver raises stays pending with `attempts` and `last_error` and is retried at the next drain."""
    pending = ContextArchiveOutbox.objects.filter(state=ContextArchiveOutbox.State.PENDING)
    if workflow_id is not None:
        pending = pending.filter(workflow_id=workflow_id)
    completed = failed = 0
    for row_id in list(pending.order_by("created_at", "id").values_list("id", flat=True)[:limit]):
        if _drain_one(row_id):
            completed += 1
        else:
            failed += 1
    return {"completed": completed, "pending": failed}


def _drain_one(row_id: str) -> bool:
    try:
        with transaction.atomic():
            row = (
                ContextArchiveOutbox.objects.select_for_update()
                .filter(pk=row_id, state=ContextArchiveOutbox.State.PENDING)
                .first()
            )
            if row is None:
                return True
            results: dict[str, Any] = {}
            for name, archiver in sorted(context_archivers().items()):
                results[name] = archiver(
                    workflow_id=row.workflow_id,
                    owner_id=row.owner_id,
                    context_node_id=row.context_node_id,
                    reason=row.reason,
                )
            ContextArchiveOutbox.objects.filter(pk=row.pk).update(
                state=ContextArchiveOutbox.State.DONE,
                completed_at=timezone.now(),
                attempts=F("attempts") + 1,
                result=results,
                last_error="",
            )
        return True
    except Exception as exc:
        logger.warning("context archive failed row=%s error=%s", row_id, type(exc).__name__)
        ContextArchiveOutbox.objects.filter(pk=row_id).update(
            attempts=F("attempts") + 1, last_error=error_text(exc)
        )
        return False
