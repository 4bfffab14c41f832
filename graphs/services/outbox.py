"""The Context archive outbox: rows written in the transaction of a graph change that removes a Context
(or deletes the workflow), drained by the registered archivers after commit and retried until done.

A row whose archiver fails stays pending with `attempts`, `last_error` and a `next_attempt_at` that
backs off (30 s, 1 min, 2 min, … at most an hour). The periodic drain (`outbox_drain_due`: the task
worker's `drain_outbox_task`, the embedded default's in-process drainer, `manage.py drain_outbox`)
retries the rows that are due, of every workflow, deleted ones included, so nothing waits for a page
view. An explicit drain (after a write, a workflow's page, staff's "retry archive") retries at once.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
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


RETRY_BASE_S = 30
RETRY_MAX_S = 3600


def retry_delay(attempts: int) -> timedelta:
    """How long a row that has failed `attempts` times waits before the periodic drain retries it."""
    return timedelta(seconds=min(RETRY_BASE_S * 2 ** max(attempts - 1, 0), RETRY_MAX_S))


def outbox_drain(*, workflow_id: str | None = None, limit: int = 100) -> dict[str, int]:
    """Run the registered archivers for pending outbox rows now, backoff or not (one transaction per
    row). A row whose archiver raises stays pending with `attempts`, `last_error` and its next
    attempt time."""
    pending = ContextArchiveOutbox.objects.filter(state=ContextArchiveOutbox.State.PENDING)
    if workflow_id is not None:
        pending = pending.filter(workflow_id=workflow_id)
    return _drain_rows(list(pending.order_by("created_at", "id").values_list("id", flat=True)[:limit]))


def outbox_drain_due(*, now: datetime | None = None, limit: int = 100) -> dict[str, int]:
    """The periodic drain: the pending rows of every workflow (deleted ones included) whose next
    attempt is due at `now`, oldest first."""
    now = now or timezone.now()
    due = ContextArchiveOutbox.objects.filter(state=ContextArchiveOutbox.State.PENDING).filter(
        Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    )
    ids = list(due.order_by("created_at", "id").values_list("id", flat=True)[:limit])
    return _drain_rows(ids, now=now)


def outbox_next_due() -> datetime | None:
    """When the earliest pending row is due (None: nothing pending; a past time: due now)."""
    pending = ContextArchiveOutbox.objects.filter(state=ContextArchiveOutbox.State.PENDING)
    if pending.filter(next_attempt_at__isnull=True).exists():
        return timezone.now()
    return pending.order_by("next_attempt_at").values_list("next_attempt_at", flat=True).first()


def _drain_rows(row_ids: list[str], *, now: datetime | None = None) -> dict[str, int]:
    completed = failed = 0
    for row_id in row_ids:
        if _drain_one(row_id, now=now):
            completed += 1
        else:
            failed += 1
    return {"completed": completed, "pending": failed}


def _drain_one(row_id: str, *, now: datetime | None = None) -> bool:
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
                next_attempt_at=None,
            )
        return True
    except Exception as exc:
        logger.warning("context archive failed row=%s error=%s", row_id, type(exc).__name__)
        _record_failure(row_id, error_text(exc), now or timezone.now())
        return False


@transaction.atomic
def _record_failure(row_id: str, error: str, now: datetime) -> None:
    row = ContextArchiveOutbox.objects.select_for_update().filter(pk=row_id).first()
    if row is None:
        return
    attempts = row.attempts + 1
    ContextArchiveOutbox.objects.filter(pk=row_id).update(
        attempts=attempts, last_error=error, next_attempt_at=now + retry_delay(attempts)
    )
