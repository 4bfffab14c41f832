"""A serving process's graceful shutdown: what happens between SIGTERM and exit.

`opencompany.server` calls `shut_down` once the process is told to stop (SIGTERM, SIGINT) and has stopped
listening. The process is then *draining* (`draining()`): the apps refuse new work that would run here
(the chat admits no run it would execute in this process), and the shutdown steps the apps registered in
`AppConfig.ready()` (`register_shutdown_step`) run in their order, on the serving loop: the chat lets
live answers finish within `OPENCOMPANY_SHUTDOWN_GRACE_S`, ends the rest interrupted with their text
kept, then closes every socket with 4012 ("server restarting") so the page reconnects.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from django.conf import settings

logger = logging.getLogger(__name__)

type ShutdownStep = Callable[[float], Awaitable[None]]

_draining = threading.Event()
_steps: list[tuple[int, str, ShutdownStep]] = []


def draining() -> bool:
    """Whether this process is shutting down (it takes no new work that would run in it)."""
    return _draining.is_set()


def register_shutdown_step(name: str, step: ShutdownStep, *, order: int) -> None:
    """Run `step(deadline)` when the process shuts down, after the steps of lower `order`; `deadline`
    is the `time.monotonic()` by which the grace period ends. Registering a name again replaces it."""
    _steps[:] = [entry for entry in _steps if entry[1] != name]
    _steps.append((order, name, step))
    _steps.sort(key=lambda entry: (entry[0], entry[1]))


async def shut_down(grace_s: float | None = None) -> None:
    """Drain this process: refuse new work, then run every shutdown step in order. A failing step is
    logged and the next one runs."""
    grace = float(settings.OPENCOMPANY_SHUTDOWN_GRACE_S) if grace_s is None else grace_s
    _draining.set()
    deadline = time.monotonic() + grace
    logger.warning("shutting down: draining for up to %.1f s", grace)
    for _order, name, step in tuple(_steps):
        try:
            await step(deadline)
        except Exception:
            logger.exception("shutdown step %s failed", name)
    logger.warning("shutdown drained")


async def wait_until(predicate: Callable[[], bool], deadline: float, poll_s: float = 0.05) -> bool:
    """Poll `predicate` until it holds or `deadline` (monotonic) passes; whether it held."""
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll_s)
    return True
