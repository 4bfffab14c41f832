"""Retrying a write at a commit boundary while the database cannot serve.

A run writes at a few boundaries (each step the agent loop commits, its draft, its end). A database that
is restarting, unreachable, out of pooled connections, or that failed a transaction on a serialization
or deadlock race (`opencompany.core.unavailable.transient_database_error`) fails such a write as a
whole; `commit_retry` tries it again with back-off, for a budget of time or until it succeeds.

A write is only retried when repeating it is safe: it is all or nothing, and a repeat after an attempt
whose commit did land (the connection lost while the commit was in flight) changes nothing: the
conversation's append is a compare-and-set on the head digest and answers such a repeat as applied
(the chained digest of the same message after the same prefix is the operation's key); a run's end and
draft are conditional on the run's state and claimant.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from opencompany.core.logs import error_text
from opencompany.core.unavailable import DatabaseUnavailable, transient_database_error

logger = logging.getLogger(__name__)

FIRST_DELAY_S = 0.1
MAX_DELAY_S = 0.5


async def commit_retry[T](call: Callable[[], Awaitable[T]], *, budget_s: float | None, what: str) -> T:
    """Await `call()`, trying again after a transient database error (after 0.1 s, doubling to 0.5 s)
    until `budget_s` seconds have passed since the first attempt (None: until it succeeds). Any other
    error is raised; once the budget is spent, `DatabaseUnavailable`, even while an attempt is still
    waiting for a connection (it is left to finish on its own: a repeat of it is safe). `what` names
    the write in the log (ids only)."""
    started = time.monotonic()
    delay = FIRST_DELAY_S
    failures = 0
    while True:
        try:
            result = await _attempt(
                call, None if budget_s is None else budget_s - (time.monotonic() - started)
            )
        except Exception as exc:
            if not transient_database_error(exc):
                raise
            failures += 1
            if failures == 1:
                logger.warning("database unavailable at %s, retrying: %s", what, error_text(exc))
            if budget_s is not None and time.monotonic() - started + delay > budget_s:
                logger.warning(
                    "database still unavailable at %s after %d attempt(s): giving up", what, failures
                )
                raise DatabaseUnavailable(what) from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_S)
            continue
        if failures:
            logger.warning("database back at %s after %d failed attempt(s)", what, failures)
        return result


async def _attempt[T](call: Callable[[], Awaitable[T]], within_s: float | None) -> T:
    """One attempt, waited for at most `within_s` (None: as long as it takes)."""
    attempt = asyncio.ensure_future(call())
    if within_s is None:
        return await attempt
    done, _ = await asyncio.wait({attempt}, timeout=max(0.0, within_s))
    if not done:
        attempt.add_done_callback(_forget)
        raise DatabaseUnavailable("no answer from the database within the budget")
    return attempt.result()


def _forget(attempt: asyncio.Future[Any]) -> None:
    if not attempt.cancelled():
        attempt.exception()  # retrieved: an attempt left behind fails quietly
