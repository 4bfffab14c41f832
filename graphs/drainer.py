"""The periodic outbox drain in-process (the embedded default) or as `manage.py drain_outbox --loop`."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import close_old_connections, connections

from graphs.services import outbox_drain_due

logger = logging.getLogger(__name__)
_started = threading.Event()


def run_outbox_drain_forever(interval_s: float, stop: threading.Event | None = None) -> None:
    """Drain the due outbox rows every `interval_s` seconds until `stop` is set; a failed pass is logged,
    never raised."""
    stop = stop or threading.Event()
    try:
        while not stop.is_set():
            try:
                counts = outbox_drain_due()
                if any(counts.values()):
                    logger.info("outbox drain %s", counts)
            except Exception:
                logger.exception("outbox drain pass failed")
            finally:
                close_old_connections()
            stop.wait(interval_s)
    finally:
        connections.close_all()  # this thread's connections end with it


def start_in_process_outbox_drain(interval_s: float | None = None) -> None:
    """Start the periodic drain in a daemon thread once per process."""
    if _started.is_set():
        return
    _started.set()
    interval = float(settings.OPENCOMPANY_OUTBOX_DRAIN_INTERVAL_S if interval_s is None else interval_s)
    threading.Thread(
        target=run_outbox_drain_forever, args=(interval,), name="outbox-drain", daemon=True
    ).start()
