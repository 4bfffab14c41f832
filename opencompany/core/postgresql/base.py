"""Django's PostgreSQL backend, with a pool that notices dead connections and comes back quickly.

With `OPTIONS["pool"]` (Django's built-in psycopg pool, on unless `DB_POOL=0`) a process holds at most
`max_size` connections whatever its thread count: a thread takes one for a request, a websocket frame or
a run's step and gives it back when Django closes it (`CONN_MAX_AGE = 0`). This backend changes three
things of that pool:

- a connection handed out is first checked without a round trip: if the server wrote to it while it sat
  idle (a terminated session, a restarted server), it is checked with one and replaced when dead, so a
  database restart does not fail the next request of every pooled connection;
- after an outage, connections are tried again every `RECONNECT_MAX_DELAY_S` at most (psycopg_pool's
  own back-off doubles without bound), so waiting callers get one soon after the database is back;
- each new session is set up once (`configure_session`), not on every checkout.
"""

from __future__ import annotations

import select
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from psycopg import Connection
from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from opencompany.core.db import configure_session

# The longest wait between two attempts to reconnect a pool slot while the database is unreachable.
RECONNECT_MAX_DELAY_S = 0.5


def _server_spoke(conn: Connection[Any]) -> bool:
    """Whether the server sent anything on an idle connection (only an ending session does: no
    LISTEN runs here). One poll of the socket, no round trip."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def check_idle_connection(conn: Connection[Any]) -> None:
    """The pool's `check`: raise for a connection that is closed, or that the server wrote to while it
    was idle and that then fails a round trip."""
    if conn.closed or conn.broken:
        raise ConnectionError("the connection is closed")
    if _server_spoke(conn):
        ConnectionPool.check_connection(conn)


class _Reattempt(AttemptWithBackoff):
    """psycopg_pool's reconnection back-off, capped at `RECONNECT_MAX_DELAY_S`."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_MAX_DELAY_S)


class QuickReconnectPool(ConnectionPool[Any]):
    """A `ConnectionPool` whose reconnection attempts back off to `RECONNECT_MAX_DELAY_S` at most.

    psycopg_pool starts a reconnection with a fresh attempt object and passes the same object on to
    every retry; starting it with a capped one caps them all."""

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        super()._add_connection(attempt or _Reattempt(timeout=self.reconnect_timeout), growing)


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool[Any] | None:
        options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not options:
            return None
        pools: dict[str, ConnectionPool[Any]] = self._connection_pools  # type: ignore[attr-defined]
        if self.alias not in pools:
            # setdefault: threads racing here build a pool each (not yet opened); the first one stays.
            pools.setdefault(self.alias, self._new_pool({} if options is True else options))
        return pools[self.alias]

    def _new_pool(self, options: dict[str, Any]) -> ConnectionPool[Any]:
        """The pool as Django builds it (its connection parameters, autocommit, its session set-up),
        of our class and with our check unless health checks are on (a round trip per checkout)."""
        if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
            raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
        kwargs = self.get_connection_params()
        kwargs["autocommit"] = True
        check = ConnectionPool.check_connection if self.settings_dict["CONN_HEALTH_CHECKS"] else None
        return QuickReconnectPool(
            kwargs=kwargs,
            open=False,
            configure=self._configure_connection,  # type: ignore[arg-type]
            **{"check": check or check_idle_connection, **options},
        )

    def _configure_connection(self, connection: Any) -> bool:
        commit: bool = super()._configure_connection(connection)  # type: ignore[misc]
        return configure_session(connection) or commit
