"""The run loop's threads run at a lower CPU priority than the serving loop, so a saturated process
keeps admitting sends and delivering deltas first."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from chat.executor.dispatch import new_run_loop


def test_the_run_loops_threads_yield_the_cpu_to_the_serving_loop(settings: Any) -> None:
    settings.OPENCOMPANY_RUN_THREAD_NICE = 7
    settings.OPENCOMPANY_RUN_DB_THREADS = 2
    serving = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    loop = new_run_loop()

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    async def on_the_loop() -> tuple[int, int]:
        return niceness(), await asyncio.get_running_loop().run_in_executor(None, niceness)

    try:
        loop_nice, db_nice = asyncio.run_coroutine_threadsafe(on_the_loop(), loop).result(timeout=10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert (loop_nice, db_nice) == (min(19, serving + 7),) * 2
    # The caller's own priority is untouched: only the run loop's threads were lowered.
    assert niceness() == serving
