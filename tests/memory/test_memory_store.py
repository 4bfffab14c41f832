"""The one-statement remember on PostgreSQL: taken on the common path, and every other case (a new
namespace, a replay, a full namespace) answered exactly as before by the general path."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import services
from memory.models import MemoryItem, MemoryReceipt, MemoryRevision
from memory.scope import memory_scope
from opencompany.core.errors import ApplicationError
from tests.conftest import node_id

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def scope(workflow):
    return memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))


def test_common_remember_is_one_statement_and_writes_item_revision_and_receipt(scope, events):
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

    statements = [q["sql"] for q in queries.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    assert len(statements) == 1
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
    assert (revision.version, revision.operation, revision.actor) == (1, "remember", "agent:run_1")
    assert MemoryReceipt.objects.get(operation_id="op-1").result["memory_id"] == item.memory_id
    assert [e["data"]["memory_id"] for e in events.drain()] == [item.memory_id]


def test_replay_and_full_namespace_fall_back_to_the_general_answers(scope, settings):
    first = services.memory_remember(scope=scope, content="one", actor="owner:1", operation_id="op-a")
    again = services.memory_remember(scope=scope, content="one", actor="owner:1", operation_id="op-a")
    settings.OPENCOMPANY_MEMORY_MAX_ITEMS = 1

    with pytest.raises(ApplicationError) as full:
        services.memory_remember(scope=scope, content="two", actor="owner:1", operation_id="op-b")

    assert (again.receipt.applied, again.memory["id"]) == (False, first.memory["id"])
    assert full.value.code == "memory_quota_exceeded"
    assert MemoryItem.objects.count() == 1
    assert MemoryReceipt.objects.filter(operation_id="op-b").exists() is False
