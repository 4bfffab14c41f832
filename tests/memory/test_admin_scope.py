"""Through the admin's service path, the scope of an item is derived the one way, so an item of one
Memory node (or owner) can never be reached as another's, and a forged row is refused."""

from __future__ import annotations

import pytest

from memory import services
from memory.admin import scope_of_item
from memory.models import MemoryItem
from memory.scope import memory_scope
from opencompany.core.errors import ApplicationError
from tests.conftest import node_id

pytestmark = pytest.mark.django_db


def test_admin_scope_of_each_item_is_its_own_node_and_owner(two_memory_workflow, other_workflow):
    wf = two_memory_workflow
    first = memory_scope(workflow=wf, memory_node_id=node_id(wf, "simpleMemory", 1))
    second = memory_scope(workflow=wf, memory_node_id=node_id(wf, "simpleMemory", 2))
    foreign = memory_scope(workflow=other_workflow, memory_node_id=node_id(other_workflow, "simpleMemory"))
    ids = {
        name: services.memory_remember(scope=scope, content=f"{name} espresso", actor="owner:1").memory["id"]
        for name, scope in (("first", first), ("second", second), ("foreign", foreign))
    }

    derived = {name: scope_of_item(MemoryItem.objects.get(memory_id=mid)) for name, mid in ids.items()}

    assert derived == {"first": first, "second": second, "foreign": foreign}
    assert len({s.namespace for s in derived.values()}) == 3
    # The service refuses an item through another node's scope, exactly like a missing one.
    with pytest.raises(ApplicationError) as err:
        services.memory_update(
            scope=second, memory_id=ids["first"], expected_version=1, patch={"content": "x"}, actor="staff:1"
        )
    assert err.value.code == "not_found"
    assert MemoryItem.objects.get(memory_id=ids["first"]).content == "first espresso"


def test_a_row_moved_to_another_node_is_refused_by_the_admin_scope(two_memory_workflow):
    wf = two_memory_workflow
    first = memory_scope(workflow=wf, memory_node_id=node_id(wf, "simpleMemory", 1))
    mid = services.memory_remember(scope=first, content="kept here", actor="owner:1").memory["id"]
    MemoryItem.objects.filter(memory_id=mid).update(memory_node_id=node_id(wf, "simpleMemory", 2))

    with pytest.raises(ApplicationError) as err:
        scope_of_item(MemoryItem.objects.get(memory_id=mid))

    assert err.value.code == "not_found"
