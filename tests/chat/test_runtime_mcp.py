"""The project's MCP server as a runtime program meets it: the real bridge process, launched the way the
programs launch it, speaking MCP to the run's tool server. The Memory tool keeps the built-in tool's
scope rules: the namespace comes from the run, never from the arguments."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from conversations.selectors import notes_read
from conversations.types import ConversationKey
from memory.models import MemoryItem, MemoryReceipt
from memory.scope import memory_scope
from memory.tools import MEMORY_TOOL_SCHEMA
from opencompany.llm.runtimes import McpEndpoint, McpToolServer
from opencompany.llm.tools import ToolContext, get_tool
from tests.conftest import node_id

pytestmark = pytest.mark.django_db(transaction=True)


def _context(workflow: Any) -> ToolContext:
    return ToolContext(
        run_id="run_mcp",
        workflow_id=workflow.pk,
        generation=1,
        agent_node_id=node_id(workflow, "aiAgent"),
        owner_id=workflow.owner_id,
        extras={"memory_node_id": node_id(workflow, "simpleMemory"), "actor": "agent:run_mcp"},
    )


def _key(workflow: Any) -> ConversationKey:
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))


def _tools() -> list[Any]:
    return [tool for tool in (get_tool("memory"), get_tool("notes")) if tool is not None]


async def _exchange(
    endpoint: McpEndpoint, messages: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], int]:
    """Launch the bridge as a program would, send `messages`, read one line per request; returns the
    answers and the bridge's exit status."""
    process = await asyncio.create_subprocess_exec(
        endpoint.command,
        *endpoint.args,
        env=endpoint.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    answers: list[dict[str, Any]] = []
    for message in messages:
        process.stdin.write(json.dumps(message).encode() + b"\n")
        await process.stdin.drain()
        if "id" in message:
            line = await asyncio.wait_for(process.stdout.readline(), 20)
            if not line:
                break
            answers.append(json.loads(line))
    process.stdin.close()
    return answers, await asyncio.wait_for(process.wait(), 20)


def _request(request_id: int, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _call(request_id: int, name: str, arguments: Any, call_id: str) -> dict[str, Any]:
    return _request(
        request_id, "tools/call", name=name, arguments=arguments, _meta={"claudecode/toolUseId": call_id}
    )


def test_the_memory_tool_over_mcp_writes_the_runs_namespace_and_nowhere_else(workflow, other_workflow):
    theirs = memory_scope(workflow=other_workflow, memory_node_id=node_id(other_workflow, "simpleMemory"))
    messages = [
        _request(1, "initialize", protocolVersion="2025-06-18", capabilities={}, clientInfo={"name": "t"}),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        _request(2, "tools/list"),
        _call(3, "memory", {"operation": "remember", "content": "The owner likes tea."}, "toolu_a"),
        _call(
            4, "memory", {"operation": "remember", "content": "Mine now.", "namespace": theirs.namespace}, "b"
        ),
        _call(5, "memory", {"operation": "remember", "content": "x", "workflow_id": other_workflow.pk}, "c"),
        _call(6, "shell", {"command": "ls"}, "d"),
        _request(7, "resources/list"),
        _request(8, "ping"),
        _call(9, "notes", {"operation": "add", "text": "The owner prefers tea."}, "toolu_n"),
    ]

    async def session() -> tuple[list[dict[str, Any]], int, int]:
        async with McpToolServer(_tools(), _context(workflow)) as server:
            answers, status = await _exchange(server.endpoint, messages)
            return answers, status, server.calls

    answers, status, calls = async_to_sync(session)()

    assert status == 0
    assert [a["id"] for a in answers] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert answers[0]["result"]["protocolVersion"] == "2025-06-18"
    assert answers[0]["result"]["capabilities"] == {"tools": {"listChanged": False}}
    tools = {tool["name"]: tool for tool in answers[1]["result"]["tools"]}
    assert sorted(tools) == ["memory", "notes"]
    assert tools["memory"]["inputSchema"] == MEMORY_TOOL_SCHEMA
    remembered = answers[2]["result"]
    assert remembered["isError"] is False
    assert json.loads(remembered["content"][0]["text"])["memory"]["content"] == "The owner likes tea."
    for refused in (answers[3], answers[4]):
        assert refused["result"]["isError"] is True
        assert json.loads(refused["result"]["content"][0]["text"])["error"]["code"] == "invalid_arguments"
    assert answers[5]["error"]["code"] == -32602
    assert answers[6]["error"]["code"] == -32601
    assert answers[7]["result"] == {}
    assert answers[8]["result"]["isError"] is False
    assert [n["text"] for n in notes_read(key=_key(workflow)).entries] == ["The owner prefers tea."]
    assert calls == 4
    ours = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    assert list(MemoryItem.objects.values_list("namespace", "content")) == [
        (ours.namespace, "The owner likes tea.")
    ]
    assert list(MemoryReceipt.objects.values_list("operation_id", flat=True)) == ["run_mcp:toolu_a"]


def test_a_repeated_call_replays_instead_of_writing_twice(workflow):
    call = _call(2, "memory", {"operation": "remember", "content": "Once."}, "toolu_same")

    async def session() -> list[dict[str, Any]]:
        async with McpToolServer(_tools(), _context(workflow)) as server:
            answers, _ = await _exchange(server.endpoint, [call, {**call, "id": 3}])
            return answers

    first, second = async_to_sync(session)()

    assert (
        json.loads(first["result"]["content"][0]["text"])["memory"]["id"]
        == json.loads(second["result"]["content"][0]["text"])["memory"]["id"]
    )
    assert MemoryItem.objects.count() == 1


def test_a_bridge_without_the_runs_token_gets_no_answer_and_reaches_nothing(workflow):
    remember = _call(1, "memory", {"operation": "remember", "content": "Sneaky."}, "toolu_x")

    async def session() -> tuple[list[dict[str, Any]], int]:
        async with McpToolServer(_tools(), _context(workflow)) as server:
            endpoint = server.endpoint
            forged = McpEndpoint(
                endpoint.command,
                endpoint.args,
                {**endpoint.env, "OPENCOMPANY_MCP_TOKEN": "not-the-token"},
                endpoint.tool_names,
            )
            return await _exchange(forged, [remember])

    answers, _ = async_to_sync(session)()

    assert answers == []
    assert MemoryItem.objects.exists() is False


def test_the_tool_server_is_gone_once_the_run_ends(workflow):
    async def session() -> tuple[list[dict[str, Any]], int]:
        async with McpToolServer(_tools(), _context(workflow)) as server:
            endpoint = server.endpoint
        return await _exchange(endpoint, [_call(1, "memory", {"operation": "list"}, "toolu_y")])

    answers, status = async_to_sync(session)()

    assert (answers, status) == ([], 1)
