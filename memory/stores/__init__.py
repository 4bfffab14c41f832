"""The memory store: a whole remember, once per database backend.

PostgreSQL writes it in one hand-written statement (`postgres`); every other database runs the
portable implementation (`portable`: the ORM and plain SQL in one transaction). The implementation
is chosen once, when the app loads (`MemoryConfig.ready()`), and services reach it through
`memory_store()`. Both keep the promises of `base.MemoryStore`, and one parametrized suite holds
them to it. The store writes rows and answers what happened; events, replays' answers and refusal
messages stay in the services.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections

from memory.stores.base import (
    MemoryStore,
    Refused,
    Remembered,
    RememberOutcome,
    Replay,
    receipt_insert,
)
from memory.stores.portable import PortableMemoryStore
from memory.stores.postgres import PostgresMemoryStore

__all__ = [
    "MemoryStore",
    "PortableMemoryStore",
    "PostgresMemoryStore",
    "Refused",
    "RememberOutcome",
    "Remembered",
    "Replay",
    "memory_store",
    "memory_store_use",
    "receipt_insert",
    "store_for_database",
]

_BY_VENDOR: dict[str, type[MemoryStore]] = {"postgresql": PostgresMemoryStore}

_chosen: MemoryStore | None = None


def store_for_database(alias: str = DEFAULT_DB_ALIAS) -> MemoryStore:
    """A new store for the database `alias`: its own implementation when it has one, else the portable one."""
    return _BY_VENDOR.get(connections[alias].vendor, PortableMemoryStore)()


def memory_store_use(store: MemoryStore) -> None:
    """Make `store` the one the services use from now on."""
    global _chosen
    _chosen = store


def memory_store() -> MemoryStore:
    """The store in use: the default database's, chosen when the app loaded."""
    if _chosen is None:
        raise ImproperlyConfigured("The memory store is chosen when the memory app loads.")
    return _chosen
