"""The offline model through the loop with the real `memory` and `notes` tools on the test database:
it remembers a fact in one run and recalls it in a later run of a new conversation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from conversations.selectors import notes_read
from conversations.types import ConversationKey
from memory.models import MemoryItem
from opencompany.llm.loop import run_agent_loop
from opencompany.llm.providers import ModelSettings, ProviderConfig, Usage
from opencompany.llm.providers.base import Request
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext, get_tool
from opencompany.llm.wire import Message, make_user, text_of
from tests.conftest import node_id

pytestmark = pytest.mark.django_db(transaction=True)


class ListSink:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def assistant(self, message: Message) -> None:
        self.messages.append(message)

    async def tool_result(self, message: Message) -> None:
        self.messages.append(message)

    async def final(self, message: Message, usage: Usage) -> None:
        self.messages.append(message)

    async def replace_all(self, messages: list[Message]) -> None:
        self.messages = list(messages)


def _run(workflow: Any, run_id: str, text: str) -> tuple[str, ListSink]:
    provider = get_provider(ModelSettings(), config=ProviderConfig(offline_delay_ms=0))
    tools = [t for t in (get_tool("memory"), get_tool("notes")) if t is not None]
    context = ToolContext(
        run_id=run_id,
        workflow_id=workflow.pk,
        generation=1,
        agent_node_id=node_id(workflow, "aiAgent"),
        owner_id=workflow.owner_id,
        extras={"memory_node_id": node_id(workflow, "simpleMemory")},
    )
    sink = ListSink()
    request = Request(
        system_blocks=["You are helpful."], messages=[make_user(text)], tools=tools, settings=ModelSettings()
    )

    async def go() -> Any:
        return await run_agent_loop(request, provider, tools, sink, asyncio.Event(), tool_context=context)

    result = async_to_sync(go)()
    assert result.status == "finished"
    return text_of(sink.messages[-1]), sink


def test_remembers_in_one_run_and_recalls_in_a_new_conversation(workflow):
    first_answer, _ = _run(workflow, "run_one", "remember that the spare key is under the blue flowerpot")

    assert first_answer
    item = MemoryItem.objects.get()
    assert "spare key is under the blue flowerpot" in item.content
    assert item.created_by == "agent:run_one"

    answer, second = _run(workflow, "run_two", "what do you remember about the spare key?")

    assert [m["role"] for m in second.messages] == ["assistant", "tool", "assistant"]
    assert "blue flowerpot" in answer


def test_note_is_written_through_the_real_notes_tool(workflow):
    _run(workflow, "run_note", "note the owner prefers short answers")

    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    assert [e["text"] for e in notes_read(key=key).entries] == ["the owner prefers short answers"]
