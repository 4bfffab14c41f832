from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conversations.stores import (
    ConversationStore,
    PortableConversationStore,
    PostgresConversationStore,
    conversation_store_use,
    store_for_database,
)
from conversations.types import ConversationKey
from opencompany.llm.wire import make_assistant, make_text, make_tool_call, make_tool_result, make_user
from tests.conftest import node_id

STORES: dict[str, type[ConversationStore]] = {
    "portable": PortableConversationStore,
    "postgresql": PostgresConversationStore,
}


@pytest.fixture(params=["portable", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[ConversationStore]:
    """Each conversation store in turn, used by every service and selector for the test.

    The portable store runs on every database; the PostgreSQL one only in the PostgreSQL pass.
    """
    chosen = STORES[request.param]()
    conversation_store_use(chosen)
    yield chosen
    conversation_store_use(store_for_database())


@pytest.fixture
def key(workflow: Any) -> ConversationKey:
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))


def user(text: str) -> dict[str, Any]:
    return make_user(text)


def assistant(text: str) -> dict[str, Any]:
    return make_assistant([make_text(text)])


def tool_turn(call_id: str, name: str = "memory", result: str = "ok") -> list[dict[str, Any]]:
    """An assistant tool call and its result."""
    return [
        make_assistant([make_tool_call(call_id, name, {"q": call_id})]),
        make_tool_result(call_id, name, result),
    ]


def turns(n: int, prefix: str = "m") -> list[dict[str, Any]]:
    """`n` alternating user/assistant messages with distinct text."""
    return [user(f"{prefix}{i}") if i % 2 == 0 else assistant(f"{prefix}{i}") for i in range(n)]
