"""The periodic outbox drain on the task worker (`manage.py db_worker`).

`drain_outbox_task` drains the due rows, then enqueues its own next run
`OPENCOMPANY_OUTBOX_DRAIN_INTERVAL_S` later unless another run is already waiting, so one chain runs
however many workers there are. `manage.py drain_outbox --schedule` starts the chain (idempotent); a
chain whose pass fails still schedules its successor.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.tasks import TaskResultStatus, task
from django.utils import timezone
from django_tasks_db.backend import DatabaseBackend
from django_tasks_db.models import DBTaskResult

from graphs.services import outbox_drain_due

logger = logging.getLogger(__name__)


@task()
def drain_outbox_task() -> dict[str, int]:
    try:
        return outbox_drain_due()
    finally:
        outbox_drain_schedule()


def _waiting() -> bool:
    """Whether a drain is already enqueued and not started (known for the database backend only)."""
    if not isinstance(drain_outbox_task.get_backend(), DatabaseBackend):
        return False
    return DBTaskResult.objects.filter(
        task_path=drain_outbox_task.module_path, status=TaskResultStatus.READY
    ).exists()


def outbox_drain_schedule(*, delay_s: float | None = None) -> bool:
    """Enqueue the next periodic drain `delay_s` (default `OPENCOMPANY_OUTBOX_DRAIN_INTERVAL_S`) from
    now unless one is waiting. False when nothing was enqueued (one is waiting, or the task backend
    cannot run a task later)."""
    if not drain_outbox_task.get_backend().supports_defer or _waiting():
        return False
    delay = float(settings.OPENCOMPANY_OUTBOX_DRAIN_INTERVAL_S if delay_s is None else delay_s)
    try:
        drain_outbox_task.using(run_after=timezone.now() + timedelta(seconds=delay)).enqueue()
    except Exception:
        logger.exception("could not schedule the outbox drain")
        return False
    return True
