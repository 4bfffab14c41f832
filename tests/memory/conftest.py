from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memory.scope import MemoryScope, memory_scope
from memory.stores import (
    MemoryStore,
    PortableMemoryStore,
    PostgresMemoryStore,
    memory_store_use,
    store_for_database,
)
from tests.conftest import demo_graph, make_workflow, node_id


def two_memory_graph() -> dict[str, Any]:
    """The demo graph plus a second Memory node (`reset_policy: clear`) wired to the same agent."""
    graph = demo_graph()
    graph["nodes"].append(
        {
            "id": "mem2",
            "type": "simpleMemory",
            "position": {"x": 500, "y": 200},
            "data": {"label": "Memory 2", "parameters": {"reset_policy": "clear"}},
        }
    )
    graph["edges"].append(
        {
            "id": "e4",
            "source": "mem2",
            "sourceHandle": "output-tool",
            "target": "agent",
            "targetHandle": "input-tools",
        }
    )
    return graph


STORES: dict[str, type[MemoryStore]] = {"portable": PortableMemoryStore, "postgresql": PostgresMemoryStore}


@pytest.fixture(params=["portable", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[MemoryStore]:
    """Each memory store in turn, used by the services for the test.

    The portable store runs on every database; the PostgreSQL one only in the PostgreSQL pass.
    """
    chosen = STORES[request.param]()
    memory_store_use(chosen)
    yield chosen
    memory_store_use(store_for_database())


@pytest.fixture
def scope(workflow: Any) -> MemoryScope:
    return memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))


@pytest.fixture
def two_memory_workflow(owner: Any) -> Any:
    return make_workflow(owner, two_memory_graph(), name="Two memories")


@pytest.fixture
def other_scope(other_workflow: Any) -> MemoryScope:
    return memory_scope(workflow=other_workflow, memory_node_id=node_id(other_workflow, "simpleMemory"))


OWNER_ACTOR = "owner:1"
