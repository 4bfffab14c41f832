"""SIGTERM on a real server mid-answer: the answer finishes within the grace period (or ends interrupted with
every character the owner saw kept), the socket is closed 4012 ("server restarting") after the run's
last event, the process exits, and the next send on the restarted server is admitted at once."""

from __future__ import annotations

import asyncio
import signal
from datetime import datetime

import pytest
from django.utils import timezone
from websockets.exceptions import ConnectionClosed

from chat.models import ChatMessage, ChatRun
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from opencompany.llm.wire import text_of
from tests.chat.liveclient import ChatClient
from tests.chat.wsclient import session_cookie
from tests.conftest import node_id
from tests.live import asgi_server_process

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


async def _answer_through_sigterm(
    url: str, workflow_id: str, cookie: str, server
) -> tuple[ChatClient, str, int | None, datetime]:
    """Send, read until part of the answer arrived, SIGTERM the server, then read every frame until the
    server closes the socket; returns the client, the run id, the close code (None: no close frame) and when SIGTERM was sent."""
    client = ChatClient(url, workflow_id, cookie)
    await client.open()
    ack = await client.request({"type": "send", "text": "Tell me a long story about lighthouses, please"})
    run_id = ack["run_id"]
    while client.runs.get(run_id) is None or client.runs[run_id].seq < 4:
        await client.recv()
    signalled = timezone.now()
    server.send_signal(signal.SIGTERM)
    try:
        while True:
            await client.recv(timeout=30)
    except ConnectionClosed as closed:
        return client, run_id, closed.rcvd.code if closed.rcvd is not None else None, signalled


def _exit_code(server) -> int:
    return server.wait(timeout=30)


def test_sigterm_lets_the_answer_finish_within_the_grace_period_and_closes_sockets_4012(workflow, owner):
    cookie = session_cookie(owner)
    with asgi_server_process(OPENCOMPANY_OFFLINE_PACING_MS=60, OPENCOMPANY_SHUTDOWN_GRACE_S=30) as (
        url,
        server,
    ):
        client, run_id, code, signalled = asyncio.run(
            _answer_through_sigterm(url, workflow.pk, cookie, server)
        )
        exited = _exit_code(server)

    run = ChatRun.objects.get(run_id=run_id)
    assert (run.state, run.error_code) == ("finished", "")
    assert run.finished_at > signalled  # the server kept answering after SIGTERM
    reply = ChatMessage.objects.get(run_id=run_id, role="assistant")
    assert (code, exited) == (4012, 0)
    assert client.runs[run_id].state == "finished"  # its last event came before the close
    assert (run.state, reply.status, reply.text) == ("finished", "complete", client.runs[run_id].text)


def test_sigterm_past_the_grace_period_ends_the_answer_interrupted_and_the_next_send_is_admitted(
    workflow, owner
):
    cookie = session_cookie(owner)
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    with asgi_server_process(OPENCOMPANY_OFFLINE_PACING_MS=150, OPENCOMPANY_SHUTDOWN_GRACE_S=0.5) as (
        url,
        server,
    ):
        client, run_id, code, signalled = asyncio.run(
            _answer_through_sigterm(url, workflow.pk, cookie, server)
        )
        exited = _exit_code(server)
        took = (timezone.now() - signalled).total_seconds()

    run = ChatRun.objects.get(run_id=run_id)
    reply = ChatMessage.objects.get(run_id=run_id, role="assistant")
    seen = client.runs[run_id]
    assert (code, exited) == (4012, 0)
    assert took < 10
    assert (seen.state, seen.events[-1]["code"]) == ("error", "interrupted")
    assert (run.state, run.error_code) == ("error", "interrupted")
    assert reply.text == seen.text != ""  # every character the owner saw is kept
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert text_of(stored[-1]) == seen.text  # and the agent's Context holds it as its answer so far

    with asgi_server_process() as (url, _):
        ack = asyncio.run(_send(url, workflow.pk, cookie))

    assert (ack["type"], ack["created"]) == ("ack", True)


async def _send(url: str, workflow_id: str, cookie: str) -> dict:
    client = ChatClient(url, workflow_id, cookie)
    await client.open()
    ack = await client.request({"type": "send", "text": "Are you still there?"})
    await client.close()
    return ack
