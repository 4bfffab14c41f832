"""The Vertex and RLM runtimes in Chromium: a chat turn with a tool call on each (the agent moved from
Vertex to RLM between them), against loopback servers speaking their wire, and the Context panel
showing each request's runtime with its declared fidelity and the conversation's badge."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from graphs import services as graph_services
from graphs.models import Workflow
from tests.conftest import demo_graph, make_workflow
from tests.e2e.conftest import Console, LiveServer, db_read
from tests.e2e.test_chat_page import open_chat, send, wait_answers
from tests.llm.loopback import LoopbackServer, Received, Reply
from tests.llm.vertex_rlm_support import chat_call, chat_text, credentials_file, token_reply, vertex_text

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def providers() -> Iterator[LoopbackServer]:
    server = LoopbackServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def runtime_settings(tmp_path: Path, providers: LoopbackServer, settings: Any) -> dict[str, str]:
    """Vertex and RLM configured at the loopback provider server, here (deploy checks that the agent can
    answer) and for the server."""
    values = {
        "VERTEX_PROJECT": "oc-project",
        "VERTEX_LOCATION": "us-central1",
        "VERTEX_CREDENTIALS_FILE": str(credentials_file(tmp_path, providers.base_url)),
        "VERTEX_BASE_URL": providers.base_url,
        "RLM_BASE_URL": providers.base_url + "/v1",
    }
    for name, value in values.items():
        setattr(settings, name, value)
    return values


@pytest.fixture
def asgi_server(
    transactional_db: Any, tmp_path: Path, runtime_settings: dict[str, str]
) -> Iterator[LiveServer]:
    """The real ASGI server, configured for Vertex and RLM at the loopback provider server."""
    server = LiveServer(tmp_path / "daphne.log")
    server.env.update(runtime_settings)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def e2e_workflow(e2e_owner: Any, runtime_settings: dict[str, str]) -> Any:
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": "vertex", "model": "gemini-3-pro-preview"})
    return make_workflow(e2e_owner, graph)


def _vertex_call(received: Received) -> Reply:
    chunk = (
        b'data: {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "memory", '
        b'"args": {"operation": "remember", "content": "likes tea"}}, "thoughtSignature": "c2ln"}]}, '
        b'"finishReason": "STOP"}], "responseId": "vx-1", "usageMetadata": {"promptTokenCount": 300, '
        b'"candidatesTokenCount": 9, "totalTokenCount": 309}}\r\n\r\n'
    )
    return Reply(raw=chunk)


def _move_to_rlm(workflow_id: str) -> None:
    workflow = Workflow.objects.get(pk=workflow_id)
    graph = copy.deepcopy(workflow.graph)
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": "rlm", "model": "rlm-model"})
    graph_services.workflow_save(workflow=workflow, graph=graph, expected_revision=workflow.revision)
    workflow.refresh_from_db()
    graph_services.workflow_deploy(workflow=workflow)


def test_vertex_and_rlm_turns_show_their_declared_fidelity_in_the_context_panel(
    live_server_url: str,
    e2e_owner: Any,
    e2e_workflow: Any,
    new_page: Any,
    console: Console,
    providers: LoopbackServer,
) -> None:
    providers.replies.extend([token_reply, _vertex_call, Reply(raw=vertex_text("Noted: tea."))])
    page = open_chat(new_page, live_server_url, e2e_owner)
    expect(page.locator("#ctx-fidelity")).to_have_text("none yet")

    send(page, "Remember that I like tea.")
    wait_answers(page, 1)
    labels = page.locator("#ctx-turns li.ctx-turn .ctx-turn-label")
    expect(labels).to_have_text(["vertex · observable", "vertex · observable"])
    expect(page.locator("#ctx-fidelity")).to_have_text("vertex · observable")
    expect(page.locator("#ctx-messages")).to_have_text("4")

    db_read(lambda: _move_to_rlm(e2e_workflow.pk))
    providers.replies.extend(
        [
            chat_call("q1", "llm_query", '{"prompt":"Anything else to keep?"}'),
            chat_text("Nothing else."),
            chat_call("m1", "memory", '{"operation":"recall","query":"tea"}'),
            chat_text("You like tea."),
        ]
    )
    send(page, "What do you know about me?")
    wait_answers(page, 2)
    expect(labels).to_have_text(
        ["rlm · observable", "rlm · observable", "vertex · observable", "vertex · observable"]
    )
    expect(page.locator("#ctx-fidelity")).to_have_text("rlm · observable")
    assert providers.failures == []
    console.assert_clean()
