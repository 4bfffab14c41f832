"""The memory store: the common remember in one all-or-nothing unit, once per database backend.

Remember's common case is a fresh receipt (or none) in a namespace that exists and has room.
PostgreSQL writes it in one hand-written statement (`opencompany.core.db`); every other database
runs the portable implementation (the ORM and plain SQL in one transaction). The implementation is
chosen once, when the app loads (`MemoryConfig.ready()`), and services reach it through
`memory_store()`. Both keep the same promises, and one parametrized suite holds them to it.

The store writes rows and nothing else: events, replays and quota errors stay in the services.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import F

from memory.models import MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from opencompany.core.db import hot_fetchone


def _insert_columns(obj: Any) -> tuple[list[str], list[Any]]:
    """Column names and database values of a model instance, without its auto primary key."""
    columns: list[str] = []
    values: list[Any] = []
    for field in type(obj)._meta.concrete_fields:
        if field.primary_key and getattr(obj, field.attname) is None:
            continue  # an auto primary key: the database assigns it
        columns.append(connection.ops.quote_name(field.column))
        values.append(field.get_db_prep_save(getattr(obj, field.attname), connection))
    return columns, values


def receipt_insert(receipt: MemoryReceipt) -> bool:
    """Insert `receipt` unless its `(namespace, operation_id)` is taken: True when this call inserted it.

    The unique index decides in one round trip, without a savepoint; a concurrent insert of the same
    key waits on the index until the first one commits or rolls back.
    """
    columns, values = _insert_columns(receipt)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(MemoryReceipt._meta.db_table)} ({', '.join(columns)}) "  # noqa: S608 - our table, values bound
            f"VALUES ({', '.join(['%s'] * len(values))}) "
            "ON CONFLICT (namespace, operation_id) DO NOTHING RETURNING id",
            values,
        )
        return cursor.fetchone() is not None


class MemoryStore(Protocol):
    """What the remember service needs from the database, whatever it is."""

    def remember_new(
        self,
        *,
        item: MemoryItem,
        revision: MemoryRevision,
        receipt: MemoryReceipt | None,
        limit: int,
        now: datetime,
    ) -> int | None:
        """Take one quota slot in the existing namespace `item.namespace` (fewer than `limit` items),
        insert `receipt` when given, then `item` and its first `revision`; each step only when the one
        before applied, all or nothing on its own, inside or outside a transaction.

        Returns the new item's primary key, or None with nothing written (no slot taken) when the
        namespace does not exist, is full or already holds the receipt's operation id.
        """
        ...


# --- PostgreSQL -------------------------------------------------------------------------------------


class PostgresMemoryStore(MemoryStore):
    """Remember in one statement, prepared on the connection (`opencompany.core.db`)."""

    def remember_new(
        self,
        *,
        item: MemoryItem,
        revision: MemoryRevision,
        receipt: MemoryReceipt | None,
        limit: int,
        now: datetime,
    ) -> int | None:
        namespace_table, receipt_table = MemoryNamespace._meta.db_table, MemoryReceipt._meta.db_table
        params: list[Any] = [now, item.namespace, limit]
        unclaimed = ""
        if receipt is not None:
            unclaimed = (
                f" AND NOT EXISTS (SELECT 1 FROM {receipt_table} WHERE namespace = %s AND operation_id = %s)"  # noqa: S608 - our table, values bound
            )
            params += [receipt.namespace, receipt.operation_id]
        parts = [
            f"ns AS (UPDATE {namespace_table} SET item_count = item_count + 1, updated_at = %s "  # noqa: S608 - our table, values bound
            f"WHERE id = %s AND item_count < %s{unclaimed} RETURNING 1)"
        ]
        source = "ns"
        if receipt is not None:
            receipt_columns, receipt_values = _insert_columns(receipt)
            parts.append(
                f"r AS (INSERT INTO {receipt_table} ({', '.join(receipt_columns)}) "  # noqa: S608 - our table, values bound
                f"SELECT {', '.join(['%s'] * len(receipt_values))} FROM ns "
                "ON CONFLICT (namespace, operation_id) DO NOTHING RETURNING 1)"
            )
            params += receipt_values
            source = "r"
        item_columns, item_values = _insert_columns(item)
        parts.append(
            f"it AS (INSERT INTO {MemoryItem._meta.db_table} ({', '.join(item_columns)}) "  # noqa: S608 - our table, values bound
            f"SELECT {', '.join(['%s'] * len(item_values))} FROM {source} RETURNING id)"
        )
        params += item_values
        revision_columns, revision_values = _insert_columns(revision)
        parts.append(
            f"rv AS (INSERT INTO {MemoryRevision._meta.db_table} ({', '.join(revision_columns)}) "  # noqa: S608 - our table, values bound
            f"SELECT {', '.join(['%s'] * len(revision_values))} FROM it RETURNING 1)"
        )
        params += revision_values
        sql = "WITH " + ", ".join(parts) + " SELECT (SELECT count(*) FROM ns), (SELECT id FROM it)"  # noqa: S608
        row = hot_fetchone(sql, params)
        if row is not None and row[1] is not None:
            return int(row[1])
        if row is not None and row[0]:
            # A concurrent request claimed the same operation id between the check and the insert, and
            # the statement committed the slot on its own: give it back.
            MemoryNamespace.objects.filter(pk=item.namespace).update(item_count=F("item_count") - 1)
        return None


# --- any database -----------------------------------------------------------------------------------


class PortableMemoryStore(MemoryStore):
    """The ORM and plain SQL in one transaction: runs on SQLite and on PostgreSQL (any database with
    `INSERT … ON CONFLICT DO NOTHING RETURNING`)."""

    def remember_new(
        self,
        *,
        item: MemoryItem,
        revision: MemoryRevision,
        receipt: MemoryReceipt | None,
        limit: int,
        now: datetime,
    ) -> int | None:
        with transaction.atomic():
            taken = MemoryNamespace.objects.filter(pk=item.namespace, item_count__lt=limit).update(
                item_count=F("item_count") + 1, updated_at=now
            )
            if not taken:
                return None
            if receipt is not None and not receipt_insert(receipt):
                transaction.set_rollback(True)  # gives the slot back
                return None
            item.save(force_insert=True)
            revision.save(force_insert=True)
        return item.pk


# --- the choice -------------------------------------------------------------------------------------

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
