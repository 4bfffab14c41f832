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

from opencompany.core.logs import error_text
from opencompany.core.unavailable import transient_database_error

logger = logging.getLogger(__name__)

FIRST_DELAY_S = 0.1
MAX_DELAY_S = 0.5


async def commit_retry[T](call: Callable[[], Awaitable[T]], *, budget_s: float | None, what: str) -> T:
    """Await `call()`, trying again after a transient database error (after 0.1 s, doubling to 0.5 s)
    until `budget_s` seconds have passed since the first attempt (None: until it succeeds). Any other
    error, and the last transient one once the budget is spent, is raised. `what` names the write in
    the log (ids only)."""
    started = time.monotonic()
    delay = FIRST_DELAY_S
    failures = 0
    while True:
        try:
            result = await call()
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
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_S)
            continue
        if failures:
            logger.warning("database back at %s after %d failed attempt(s)", what, failures)
        return result
