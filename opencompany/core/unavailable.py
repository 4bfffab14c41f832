"""Database errors that say "not now" rather than "no": the database is unreachable, restarting, or the
process's pool had no connection free in time, or a transaction lost a serialization or deadlock race.

Every edge answers them the same way, never as a server error: the API and the pages with 503
`service_unavailable` and `Retry-After`, a websocket frame with that error, a websocket handshake by
closing 4013 ("try again later"). The run executor retries them at its commit boundary
(`opencompany.core.retry`).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg_pool import PoolClosed, PoolTimeout, TooManyRequests

from opencompany.core.errors import SERVICE_UNAVAILABLE, ApplicationError
from opencompany.core.logs import error_text, exception_chain

logger = logging.getLogger(__name__)

# Serialization failure, deadlock; the server shutting down, crashed, or not accepting connections yet.
_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "57P01", "57P02", "57P03"})
# What a client is told to wait before trying again.
RETRY_AFTER_S = 2


class DatabaseUnavailable(Exception):
    """A write gave up waiting for the database (`opencompany.core.retry.commit_retry`)."""


def transient_database_error(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a database failure that trying again later can cure: no
    connection could be had or kept (any SQLSTATE of class 08, or a connection error the server never
    answered), the server is going away or not ready, or a serialization or deadlock race was lost."""
    for error in exception_chain(exc):
        if isinstance(error, PoolTimeout | TooManyRequests | PoolClosed | DatabaseUnavailable):
            return True
        sqlstate = getattr(error, "sqlstate", None)
        if sqlstate:
            return sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES
        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            return True  # no SQLSTATE: the connection failed or was lost before the server answered
    return False


def unavailable_error() -> ApplicationError:
    """What a caller is told when the database cannot serve now."""
    return ApplicationError(
        SERVICE_UNAVAILABLE,
        "The service is busy or briefly cannot reach its database; try again shortly.",
        {"retry_after_s": RETRY_AFTER_S},
        status=503,
    )


# The websocket close code for "try again later": the page reconnects with back-off. (RFC 6455's own 1013
# is not one an application may send; 4013 mirrors it.)
CLOSE_TRY_AGAIN_LATER = 4013


class WebsocketUnavailableClose:
    """ASGI middleware for websockets: a database that cannot serve now while a socket is being set up
    (the session and user lookups, the consumer's first reads) closes the socket 4013 instead of
    failing the handshake with HTTP 500 or closing 1011."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        accepted = closed = False

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal accepted, closed
            if message["type"] == "websocket.accept":
                accepted = True
            elif message["type"] == "websocket.close":
                closed = True
            await send(message)

        try:
            await self.application(scope, receive, tracking_send)
        except Exception as exc:
            if closed or not transient_database_error(exc):
                raise
            logger.warning("database unavailable at a websocket: %s", error_text(exc))
            if not accepted:
                await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN_LATER})
