"""The conversation store: the statements every turn runs, one implementation per database backend.

A turn appends after the head it read, records each provider call in the ledger (with the pressure it
sets on the head), and the next firing loads the whole conversation. `postgres.PostgresConversationStore`
does each in one hand-written statement; every other database runs `portable.PortableConversationStore`
(the ORM and plain SQL). The implementation is chosen once, when the app loads
(`ConversationsConfig.ready()`), and services and selectors reach it through `conversation_store()`.
Both keep the same promises (`base.ConversationStore`), and one parametrized suite holds them to it.

The store writes rows and answers what it did; events and the wording of refusals stay in the services.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections

from conversations.stores.base import (
    INSERT_BATCH,
    PRESSURE_COLUMNS,
    AppendAnswer,
    Appended,
    Batch,
    ConversationStore,
    Head,
    Refused,
    Unchanged,
    chain_digests,
)
from conversations.stores.portable import PortableConversationStore
from conversations.stores.postgres import PostgresConversationStore

__all__ = [
    "INSERT_BATCH",
    "PRESSURE_COLUMNS",
    "AppendAnswer",
    "Appended",
    "Batch",
    "ConversationStore",
    "Head",
    "PortableConversationStore",
    "PostgresConversationStore",
    "Refused",
    "Unchanged",
    "chain_digests",
    "conversation_store",
    "conversation_store_use",
    "store_for_database",
]

_BY_VENDOR: dict[str, type[ConversationStore]] = {"postgresql": PostgresConversationStore}

_chosen: ConversationStore | None = None


def store_for_database(alias: str = DEFAULT_DB_ALIAS) -> ConversationStore:
    """A new store for the database `alias`: its own implementation when it has one, else the portable one."""
    return _BY_VENDOR.get(connections[alias].vendor, PortableConversationStore)()


def conversation_store_use(store: ConversationStore) -> None:
    """Make `store` the one every service and selector uses from now on."""
    global _chosen
    _chosen = store


def conversation_store() -> ConversationStore:
    """The store in use: the default database's, chosen when the app loaded."""
    if _chosen is None:
        raise ImproperlyConfigured("The conversation store is chosen when the conversations app loads.")
    return _chosen
