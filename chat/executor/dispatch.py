"""Dispatch: where a run executes (the process's run loop, or the serving loop with the in-memory layer)
and how it is started for each executor.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings

from chat.executor.live import live_run_end, live_run_expect
from chat.executor.run import execute_run
from chat.executor.tasks import execute_run_task
from chat.models import ChatRun
from opencompany.core.events import serving_loop

logger = logging.getLogger("chat.executor")

_run_loop: asyncio.AbstractEventLoop | None = None
_run_loop_lock = threading.Lock()
_tasks: set[Any] = set()


def _lowered_priority() -> int | None:
    """The niceness for the run loop's threads: the creating (serving) thread's plus
    `OPENCOMPANY_RUN_THREAD_NICE`; None where threads have no priority of their own to set."""
    nice = int(settings.OPENCOMPANY_RUN_THREAD_NICE)
    if nice <= 0 or not hasattr(os, "setpriority"):
        return None
    return min(19, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) + nice)


def _set_thread_priority(niceness: int | None) -> None:
    """Give the calling thread `niceness` (Linux keeps one per thread).

    Threads share the interpreter lock, so on a saturated CPU every runnable run thread takes turns with
    the serving loop; at a lower OS priority the serving loop wins those turns and keeps admitting sends
    and delivering deltas on time, and the runs absorb the slowdown."""
    if niceness is None:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
    except OSError:
        logger.warning("could not lower the run loop's thread priority")


class TurnTakingExecutor(ThreadPoolExecutor):
    """A thread pool whose calls take turns: one runs at a time while the others wait for it, and a
    call that has waited `pass_after_s` runs anyway.

    Python runs one thread at a time, so a second call running beside the first mostly takes the
    interpreter from the serving loop (the first waits on the database with it released). Taking turns
    keeps one call's worth of contention; passing after a bounded wait keeps a call that waits on a
    row lock from holding up every other run of the process."""

    def __init__(self, *, pass_after_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._turn = threading.Lock()
        self._pass_after_s = pass_after_s

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        return super().submit(self._in_turn, fn, *args, **kwargs)

    def _in_turn(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        held = self._turn.acquire(timeout=self._pass_after_s)
        try:
            return fn(*args, **kwargs)
        finally:
            if held:
                self._turn.release()


def _run_forever(loop: asyncio.AbstractEventLoop, niceness: int | None) -> None:
    _set_thread_priority(niceness)
    loop.run_forever()


def new_run_loop() -> asyncio.AbstractEventLoop:
    """A run loop running in its own daemon thread, with `OPENCOMPANY_RUN_DB_THREADS` database threads
    whose calls take turns (see `TurnTakingExecutor`; `OPENCOMPANY_RUN_DB_TURN_WAIT_MS` 0 turns that
    off), all at a lower priority than the thread that made it."""
    niceness = _lowered_priority()
    loop = asyncio.new_event_loop()
    pool: dict[str, Any] = {
        "max_workers": int(settings.OPENCOMPANY_RUN_DB_THREADS),
        "thread_name_prefix": "chat-runs-db",
        "initializer": _set_thread_priority,
        "initargs": (niceness,),
    }
    turn_wait_ms = int(settings.OPENCOMPANY_RUN_DB_TURN_WAIT_MS)
    executor = (
        TurnTakingExecutor(pass_after_s=turn_wait_ms / 1000, **pool)
        if turn_wait_ms > 0
        else ThreadPoolExecutor(**pool)
    )
    loop.set_default_executor(executor)
    threading.Thread(target=_run_forever, args=(loop, niceness), name="chat-runs", daemon=True).start()
    return loop


def _dedicated_run_loop() -> asyncio.AbstractEventLoop:
    """The process's run loop: an event loop in a daemon thread with its own database threads.

    Runs execute here rather than on the serving loop, so a busy process's run work (preparing
    requests, the model loop, per-turn appends) queues behind itself and never ahead of websocket
    frames, admissions and event delivery on the serving loop."""
    global _run_loop
    with _run_loop_lock:
        if _run_loop is None or _run_loop.is_closed():
            _run_loop = new_run_loop()
        return _run_loop


def run_loop_for_process() -> asyncio.AbstractEventLoop:
    """Where in-process runs execute: the dedicated run loop, except with the in-memory channel layer
    (embedded default, tests), whose queues belong to one loop: there runs share the serving loop."""
    serving = serving_loop()
    if serving is not None and isinstance(get_channel_layer(), InMemoryChannelLayer):
        return serving
    return _dedicated_run_loop()


def _log_failure(future: Any) -> None:
    _tasks.discard(future)
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        logger.error("background run task failed: %s", type(exc).__name__, exc_info=exc)


def spawn(coro: Coroutine[Any, Any, Any]) -> None:
    """Start `coro` on the process's run loop without waiting for it.

    The task starts with an empty context: it must not inherit the caller's (a sync thread inside
    `database_sync_to_async`, whose executor marker would make every DB call look like a deadlock).
    """
    loop = run_loop_for_process()

    def create() -> None:
        task = loop.create_task(coro)
        _tasks.add(task)
        task.add_done_callback(_log_failure)

    loop.call_soon_threadsafe(create, context=contextvars.Context())


def dispatch_run(run_id: str, *, claimed: ChatRun | None = None) -> None:
    """Start a run wherever the settings say. Never raises into the caller (the admission committed;
    the watchdog ends a run nobody picked up). `claimed`: the run row as the admission claimed it
    (in-process executor), so execution starts without a second claim."""
    mode = str(settings.OPENCOMPANY_RUN_EXECUTOR)
    try:
        if mode == "tasks":
            execute_run_task.enqueue(run_id)
        elif mode == "inprocess":
            live_run_expect(run_id)
            spawn(execute_run(run_id, claimed=claimed))
        # "manual": the caller drives execute_run
    except Exception:
        live_run_end(run_id)  # it will not start here: a shutdown must not wait for it
        logger.exception("could not dispatch run=%s executor=%s", run_id, mode)
