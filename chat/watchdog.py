"""The chat watchdog loop: ends the runs nobody else will end (unclaimed, stuck stopping, too long, a
claimant that stopped heartbeating), so a lane always frees itself.

Every serving process (the ASGI application's startup), every task worker (`manage.py db_worker`) and
`bin/run` run the loop in a daemon thread; `manage.py chat_watchdog` runs it for cron. Sweeps take turns
cluster-wide (the chat store's sweep lock, an advisory lock on PostgreSQL). The first sweep runs as the
process starts, so a restarted server reclaims what its previous life left running once those runs'
heartbeats lapse.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.db.models import Count, Max
from django.utils import timezone

from chat.models import ChatProcess
from chat.services import process_beat, process_gone, watchdog_sweep

logger = logging.getLogger(__name__)
_started = threading.Event()


def sweep_interval_s() -> float:
    """Seconds between sweeps: the configured interval, but at most half the heartbeat timeout, so a
    dead claimant's run ends within about one timeout of its last heartbeat."""
    configured = float(settings.OPENCOMPANY_WATCHDOG_INTERVAL_S)
    return max(0.2, min(configured, float(settings.OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S) / 2))


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_watchdog_forever(
    interval_s: float | None = None, stop: threading.Event | None = None, *, role: str = "command"
) -> None:
    """Beat and sweep every `interval_s` seconds (default `sweep_interval_s()`) until `stop` is set; a
    failed sweep is logged, never raised."""
    stop = stop or threading.Event()
    name, started_at = process_name(), timezone.now()
    while not stop.is_set():
        try:
            process_beat(name=name, role=role, started_at=started_at)
            counts = watchdog_sweep()
            if counts and any(counts.values()):
                logger.info("chat watchdog %s", counts)
        except Exception:
            logger.exception("chat watchdog sweep failed")
        finally:
            close_old_connections()
        stop.wait(interval_s if interval_s is not None else sweep_interval_s())


def _forget_process(name: str) -> None:
    try:
        process_gone(name=name)
    except Exception:
        logger.debug("could not forget process %s", name)


def start_in_process_watchdog(role: str = "server") -> bool:
    """Start the loop in a daemon thread, once per process, unless `OPENCOMPANY_WATCHDOG_IN_PROCESS`
    is off. True when this call started it."""
    if not settings.OPENCOMPANY_WATCHDOG_IN_PROCESS or _started.is_set():
        return False
    _started.set()
    threading.Thread(
        target=run_watchdog_forever, kwargs={"role": role}, name="chat-watchdog", daemon=True
    ).start()
    atexit.register(_forget_process, process_name())
    return True


def workers_health() -> dict[str, Any]:
    """The health endpoint's `workers` check: processes whose loop beat within three sweeps. Down
    when runs execute on task workers (`OPENCOMPANY_RUN_EXECUTOR=tasks`) and none is beating."""
    since = timezone.now() - timedelta(seconds=3 * sweep_interval_s() + 5)
    rows: dict[str, dict[str, Any]] = {
        row["role"]: dict(row)
        for row in ChatProcess.objects.filter(beat_at__gte=since)
        .values("role")
        .annotate(n=Count("pk"), last=Max("beat_at"))
    }
    workers: dict[str, Any] = rows.get(ChatProcess.Role.WORKER, {})
    executor = str(settings.OPENCOMPANY_RUN_EXECUTOR)
    alive = int(workers.get("n", 0))
    return {
        "status": "down" if executor == "tasks" and not alive else "ok",
        "executor": executor,
        "workers": alive,
        "servers": int(rows.get(ChatProcess.Role.SERVER, {}).get("n", 0)),
        "last_worker_beat_at": workers["last"].isoformat() if workers.get("last") else None,
    }
