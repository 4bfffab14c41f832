"""The chat's hot statements behind one interface, one implementation per database: the send's
admission (opening the chat a first message needs), a run's locks (taken by every write of its
lifecycle), its notes' claim and delivery, its state (the Stop fallback's poll) and its draft save;
and the watchdog's cluster-wide sweep lock.

`postgres.PostgresChatStore` sends each as a prepared statement; `portable.PortableChatStore` performs
the same operations through the ORM, on any database. `ChatConfig.ready()` installs the implementation
for the default database once, the way Django picks a database backend; services reach it through
`chat_store()`. One parametrized suite runs the same cases over both.
"""

from __future__ import annotations

from django.db import connection

from chat.stores.base import WATCHDOG_LOCK_KEY, AdmitAnswer, Admitted, ChatStore, Refused, Replay
from chat.stores.portable import PortableChatStore
from chat.stores.postgres import PostgresChatStore

__all__ = [
    "WATCHDOG_LOCK_KEY",
    "AdmitAnswer",
    "Admitted",
    "ChatStore",
    "PortableChatStore",
    "PostgresChatStore",
    "Refused",
    "Replay",
    "chat_store",
    "chat_store_for_default_database",
    "chat_store_install",
]

_BY_VENDOR: dict[str, type[ChatStore]] = {"postgresql": PostgresChatStore}

_installed: ChatStore | None = None


def chat_store_for_default_database() -> ChatStore:
    """The implementation for the default database's backend (the portable one where it has none)."""
    return _BY_VENDOR.get(connection.vendor, PortableChatStore)()


def chat_store_install(store: ChatStore) -> None:
    """Make `store` the one `chat_store()` answers (`ChatConfig.ready()` installs the default's)."""
    global _installed
    _installed = store


def chat_store() -> ChatStore:
    """The installed store."""
    if _installed is None:
        raise RuntimeError("No chat store is installed; the chat app's ready() installs it.")
    return _installed
