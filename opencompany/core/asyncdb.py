"""Database calls from async code.

Channels' `database_sync_to_async` is thread-sensitive by default: every call in a process goes
through one thread, so one busy chat would queue every other chat's queries behind its own. Our
services each own their transaction and keep no thread-local state between calls, so they run on the
thread pool instead (connections stay per thread and follow CONN_MAX_AGE)."""

from collections.abc import Callable
from typing import Any

from channels.db import DatabaseSyncToAsync


def db_call(func: Callable[..., Any]) -> Any:
    return DatabaseSyncToAsync(func, thread_sensitive=False)
