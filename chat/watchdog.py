"""The chat watchdog, in-process (embedded default) or as `manage.py chat_watchdog`."""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections

from chat.services import watchdog_pass

logger = logging.getLogger(__name__)
_started = threading.Event()


def run_watchdog_forever(interval_s: float, stop: threading.Event | None = None) -> None:
    """Sweep every `interval_s` seconds until `stop` is set; a failed sweep is logged, never raised."""
    stop = stop or threading.Event()
    while not stop.is_set():
        try:
            counts = watchdog_pass()
            if any(counts.values()):
                logger.info("chat watchdog %s", counts)
        except Exception:
            logger.exception("chat watchdog sweep failed")
        finally:
            close_old_connections()
        stop.wait(interval_s)


def start_in_process_watchdog(interval_s: float = 10.0) -> None:
    """Start the watchdog in a daemon thread once per process."""
    if _started.is_set():
        return
    _started.set()
    threading.Thread(
        target=run_watchdog_forever, args=(interval_s,), name="chat-watchdog", daemon=True
    ).start()
