"""Database calls from async code.

Channels' `database_sync_to_async` is thread-sensitive by default: every call in a process goes
through one thread, so one busy chat would queue every other chat's queries behind its own. Our
services each own their transaction and keep no thread-local state between calls, so they run on the
thread pool instead.

Each call gives its connection back when it returns (Django's `close_old_connections` before and after,
as Channels does): with the connection pool that is what bounds a process's connections whatever its
threads, and it holds wherever the call runs, Channels' test harness (which turns Channels' own cleanup
off) included. A call never runs inside a caller's transaction: it is on its own thread.
"""

from collections.abc import Callable
from typing import Any

from asgiref.sync import SyncToAsync
from django.db import close_old_connections


class _ClosingSyncToAsync(SyncToAsync):  # type: ignore[type-arg]
    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            close_old_connections()


def db_call(func: Callable[..., Any]) -> Any:
    return _ClosingSyncToAsync(func, thread_sensitive=False)
