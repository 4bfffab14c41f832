"""The runs executing in this process (in-process executor), so a shutdown can wait for them and end
the ones that outlast its grace period.

A run is entered when it is dispatched (before its task starts, so a shutdown never misses one admitted
just before it) and leaves when `execute_run` has ended it. Interrupting a run sets its stop event on its
own loop: the agent loop ends at its next event with the text streamed so far, and the run ends
`error/interrupted` with that text kept.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

from opencompany.core.lifecycle import wait_until

logger = logging.getLogger("chat.executor")


@dataclass
class LiveRun:
    run_id: str
    interrupted: bool = False
    stop: asyncio.Event | None = None
    loop: asyncio.AbstractEventLoop | None = None


_lock = threading.Lock()
_runs: dict[str, LiveRun] = {}


def live_run_expect(run_id: str) -> None:
    """A run of this process is about to start."""
    with _lock:
        _runs.setdefault(run_id, LiveRun(run_id))


def live_run_attach(run_id: str, stop: asyncio.Event) -> LiveRun:
    """The run started on the running loop with this stop event; interrupted at once if a shutdown
    already asked for it."""
    loop = asyncio.get_running_loop()
    with _lock:
        live = _runs.setdefault(run_id, LiveRun(run_id))
        live.stop, live.loop = stop, loop
        if live.interrupted:
            stop.set()
        return live


def live_run_end(run_id: str) -> None:
    with _lock:
        _runs.pop(run_id, None)


def live_run_count() -> int:
    with _lock:
        return len(_runs)


def live_runs_interrupt() -> int:
    """Ask every live run of this process to end now, interrupted; how many were asked."""
    with _lock:
        runs = list(_runs.values())
        for live in runs:
            live.interrupted = True
    for live in runs:
        if live.stop is not None and live.loop is not None and not live.loop.is_closed():
            live.loop.call_soon_threadsafe(live.stop.set)
    return len(runs)


# How long interrupted runs get to write their end once the grace period is over.
INTERRUPT_WAIT_S = 5.0


async def live_runs_drain(deadline: float) -> None:
    """Shutdown step: let this process's runs finish until `deadline`, then interrupt the rest and give
    them `INTERRUPT_WAIT_S` to end (each keeps the text it streamed)."""
    if await wait_until(lambda: live_run_count() == 0, deadline):
        return
    asked = live_runs_interrupt()
    logger.warning("shutdown: interrupting %d run(s) still answering", asked)
    if not await wait_until(lambda: live_run_count() == 0, time.monotonic() + INTERRUPT_WAIT_S):
        logger.warning("shutdown: %d run(s) did not end; the watchdog ends them", live_run_count())
