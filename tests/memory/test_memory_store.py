"""Both memory stores (the PostgreSQL one and the portable one) perform a whole remember and answer
what happened: the common case in one all-or-nothing write, a new namespace created with its first
item, a replay or a refusal with nothing written, inside or outside a transaction."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from memory import services
from memory.models import MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from memory.services.remember import _draft
from memory.stores import MemoryStore, PortableMemoryStore, PostgresMemoryStore, Refused, Remembered, Replay
from opencompany.core.errors import ApplicationError

pytestmark = pytest.mark.django_db(transaction=True)

# What the common remember sends: PostgreSQL one statement; the portable store the slot's update and
# the receipt, item and revision inserts.
REMEMBER_STATEMENTS: dict[type[MemoryStore], int] = {PostgresMemoryStore: 1, PortableMemoryStore: 4}


def _statements(queries: CaptureQueriesContext) -> list[str]:
    """The statements sent, without the transaction's own (SQLite logs its BEGIN IMMEDIATE and COMMIT)."""
    return [q["sql"] for q in queries.captured_queries if q["sql"].split(" ")[0] not in ("BEGIN", "COMMIT")]


def _draft_for(scope, content, operation_id=None):
    return _draft(
        scope=scope,
        content=content,
        actor="agent:r",
        title=None,
        category=None,
        tags=None,
        expires_at=None,
        operation_id=operation_id,
    )


def _remember(store, draft, limit=100):
    return store.remember(
        item=draft.item, revision=draft.revision, receipt=draft.receipt, limit=limit, now=draft.now
    )


def test_common_remember_is_one_write_of_item_revision_and_receipt(scope, events, store):
    services.memory_remember(scope=scope, content="the namespace now exists", actor="owner:1")  # general path
    events.subscribe(f"owner.{scope.owner_id}")

    with CaptureQueriesContext(connection) as queries:
        result = services.memory_remember(
            scope=scope,
            content='green "tea", no sugar \\ NULL \u00a0🍵',
            title="Drinks",
            category="preference",
            actor="agent:run_1",
            tags=["tea", "morning"],
            expires_at="2031-01-02T03:04:05Z",
            operation_id="op-1",
        )

    assert len(_statements(queries)) == REMEMBER_STATEMENTS[type(store)]
    item = MemoryItem.objects.get(memory_id=result.memory["id"])
    assert (item.content, item.title, item.category, item.tags, item.version, item.created_by) == (
        'green "tea", no sugar \\ NULL \u00a0🍵',
        "Drinks",
        "preference",
        ["tea", "morning"],
        1,
        "agent:run_1",
    )
    assert item.expires_at == datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    revision = MemoryRevision.objects.get(memory_id=item.memory_id)
    assert (revision.version, revision.operation, revision.actor, revision.content) == (
        1,
        "remember",
        "agent:run_1",
        item.content,
    )
    receipt = MemoryReceipt.objects.get(operation_id="op-1")
    assert (receipt.namespace, receipt.operation, receipt.result["memory_id"], receipt.result["version"]) == (
        scope.namespace,
        "remember",
        item.memory_id,
        1,
    )
    assert "content" not in receipt.result
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 2
    assert (result.receipt.operation_id, result.receipt.applied) == ("op-1", True)
    assert events.drain() == [
        {
            "type": "memory.updated",
            "data": {
                "workflow_id": scope.workflow_id,
                "memory_node_id": scope.memory_node_id,
                "operation": "remember",
                "memory_id": item.memory_id,
                "version": 1,
            },
        }
    ]


def test_a_replay_and_a_full_namespace_are_answered_with_nothing_written(scope, settings, events, store):
    first = services.memory_remember(scope=scope, content="one", actor="owner:1", operation_id="op-a")
    events.subscribe(f"owner.{scope.owner_id}")
    again = services.memory_remember(scope=scope, content="one", actor="owner:1", operation_id="op-a")
    settings.OPENCOMPANY_MEMORY_MAX_ITEMS = 1

    with pytest.raises(ApplicationError) as full:
        services.memory_remember(scope=scope, content="two", actor="owner:1", operation_id="op-b")

    assert (again.receipt.applied, again.memory["id"]) == (False, first.memory["id"])
    assert full.value.code == "memory_quota_exceeded"
    assert full.value.extra == {"limit": 1}
    assert MemoryItem.objects.count() == 1
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 1
    assert MemoryReceipt.objects.filter(operation_id="op-b").exists() is False
    assert events.drain() == []


def test_the_store_creates_the_namespace_with_its_first_item(scope, store):
    draft = _draft_for(scope, "first", "op-1")

    outcome = _remember(store, draft)

    item = MemoryItem.objects.get()
    assert outcome == Remembered(item.pk)
    assert (item.memory_id, item.content) == (draft.item.memory_id, "first")
    namespace = MemoryNamespace.objects.get()
    assert (namespace.pk, namespace.item_count, namespace.owner_id, namespace.memory_node_id) == (
        scope.namespace,
        1,
        scope.owner_id,
        scope.memory_node_id,
    )
    assert MemoryRevision.objects.get().memory_id == item.memory_id
    assert MemoryReceipt.objects.get().operation_id == "op-1"


def test_the_store_refuses_a_full_namespace_and_writes_nothing(scope, store):
    services.memory_remember(scope=scope, content="one", actor="owner:1")

    outcome = _remember(store, _draft_for(scope, "two", "op-2"), limit=1)

    assert outcome == Refused("memory_quota_exceeded", {"limit": 1})
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 1
    assert list(MemoryItem.objects.values_list("content", flat=True)) == ["one"]
    assert MemoryRevision.objects.count() == 1
    assert MemoryReceipt.objects.exists() is False


def test_the_store_answers_the_same_request_again_with_its_receipt_and_writes_nothing(scope, store):
    services.memory_remember(scope=scope, content="one", actor="owner:1", operation_id="op-a")
    earlier = MemoryReceipt.objects.get(operation_id="op-a")

    outcome = _remember(store, _draft_for(scope, "one", "op-a"))

    assert outcome == Replay(earlier)
    assert outcome.receipt.result == earlier.result
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 1
    assert list(MemoryItem.objects.values_list("content", flat=True)) == ["one"]
    assert MemoryRevision.objects.count() == 1
    assert MemoryReceipt.objects.filter(operation_id="op-a").count() == 1


def test_the_store_refuses_another_request_under_a_used_operation_id_and_writes_nothing(scope, store):
    services.memory_remember(scope=scope, content="one", actor="owner:1", operation_id="op-a")

    outcome = _remember(store, _draft_for(scope, "one again", "op-a"))

    assert outcome == Refused("idempotency_key_reused")
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 1
    assert list(MemoryItem.objects.values_list("content", flat=True)) == ["one"]
    assert MemoryRevision.objects.count() == 1
    assert MemoryReceipt.objects.filter(operation_id="op-a").count() == 1


def test_the_store_answers_the_new_items_key(scope, store):
    services.memory_remember(scope=scope, content="one", actor="owner:1")
    draft = _draft_for(scope, "two")

    outcome = _remember(store, draft)

    item = MemoryItem.objects.get(content="two")
    assert outcome == Remembered(item.pk)
    assert item.memory_id == draft.item.memory_id
    assert MemoryRevision.objects.get(memory_id=item.memory_id).version == 1
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 2
    assert MemoryReceipt.objects.exists() is False


def test_the_store_remembers_inside_an_open_transaction_and_rolls_back_with_it(scope, store):
    services.memory_remember(scope=scope, content="one", actor="owner:1")

    with transaction.atomic():
        outcome = _remember(store, _draft_for(scope, "two", "op-2"))
        assert outcome == Remembered(MemoryItem.objects.get(content="two").pk)
        transaction.set_rollback(True)

    assert list(MemoryItem.objects.values_list("content", flat=True)) == ["one"]
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 1
    assert MemoryReceipt.objects.exists() is False


# The first remember in a namespace: PostgreSQL's statement, the reads of why it wrote nothing (the
# receipt, the namespace), the namespace's insert and the statement again; the portable store's claim,
# a slot it cannot take yet, the namespace's insert, then the slot, the item and the revision.
FIRST_REMEMBER_STATEMENTS: dict[type[MemoryStore], int] = {PostgresMemoryStore: 5, PortableMemoryStore: 6}


def test_the_first_remember_in_a_namespace_creates_it_in_a_few_statements(scope, store):
    with CaptureQueriesContext(connection) as queries:
        result = services.memory_remember(scope=scope, content="first", actor="owner:1", operation_id="op-1")

    assert len(_statements(queries)) == FIRST_REMEMBER_STATEMENTS[type(store)]
    assert MemoryItem.objects.get().memory_id == result.memory["id"]
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 1
