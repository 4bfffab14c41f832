"""The run loop's database calls take turns: one runs at a time, so a busy process keeps one call's
worth of contention with the serving loop, and a call that waits past its turn runs anyway, so a call
stuck on a row lock does not hold up every other run."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from chat.executor.dispatch import TurnTakingExecutor, new_run_loop


def _overlap_of(executor: TurnTakingExecutor, calls: int, seconds: float) -> int:
    """The most calls that ran at once, over `calls` calls of `seconds` each submitted together."""
    running = peak = 0
    lock = threading.Lock()

    def call() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(seconds)
        with lock:
            running -= 1

    for future in [executor.submit(call) for _ in range(calls)]:
        future.result(timeout=10)
    return peak


def test_calls_shorter_than_the_wait_run_one_at_a_time() -> None:
    executor = TurnTakingExecutor(pass_after_s=1.0, max_workers=2)
    try:
        assert _overlap_of(executor, calls=6, seconds=0.02) == 1
    finally:
        executor.shutdown()


def test_a_call_that_waited_past_its_turn_runs_beside_a_stuck_one() -> None:
    executor = TurnTakingExecutor(pass_after_s=0.05, max_workers=2)
    release = threading.Event()
    try:
        stuck = executor.submit(release.wait, 10)
        time.sleep(0.02)  # the stuck call holds the turn
        started = time.monotonic()
        assert executor.submit(lambda: "done").result(timeout=5) == "done"
        waited = time.monotonic() - started
        assert 0.03 <= waited < 2, waited
        assert not stuck.done()
    finally:
        release.set()
        executor.shutdown()


def test_a_failing_call_gives_its_turn_back() -> None:
    executor = TurnTakingExecutor(pass_after_s=5.0, max_workers=2)

    def fail() -> None:
        raise ValueError("boom")

    try:
        failed = executor.submit(fail)
        assert isinstance(failed.exception(timeout=5), ValueError)
        started = time.monotonic()
        assert executor.submit(lambda: 1).result(timeout=5) == 1
        assert time.monotonic() - started < 1  # no wait for a turn nobody holds
    finally:
        executor.shutdown()


def test_the_run_loops_database_calls_take_turns_unless_turned_off(settings: Any) -> None:
    settings.OPENCOMPANY_RUN_DB_THREADS = 2
    for wait_ms, takes_turns in ((20, True), (0, False)):
        settings.OPENCOMPANY_RUN_DB_TURN_WAIT_MS = wait_ms
        loop = new_run_loop()

        async def executor_of() -> Any:
            return asyncio.get_running_loop()._default_executor  # type: ignore[attr-defined]

        try:
            executor = asyncio.run_coroutine_threadsafe(executor_of(), loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
        assert isinstance(executor, TurnTakingExecutor) is takes_turns
        assert executor._max_workers == 2
