"""A server killed mid-answer and started again frees the lane by itself: its watchdog loop ends the
orphaned run `interrupted`, keeps the draft as a stopped reply, and the next send is accepted. No
watchdog command runs."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from chat.models import ChatMessage, ChatRun
from tests.chat.liveclient import ChatClient
from tests.chat.wsclient import session_cookie
from tests.live import asgi_server_process

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

HEARTBEAT_TIMEOUT_S = 3
LIVE = {
    "OPENCOMPANY_RUN_EXECUTOR": "inprocess",
    "OPENCOMPANY_OFFLINE_PACING_MS": 150,
    "OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S": HEARTBEAT_TIMEOUT_S,
    "OPENCOMPANY_RUN_HEARTBEAT_S": 0.3,
}


def test_a_server_killed_mid_answer_frees_the_lane_after_it_restarts(workflow, owner):
    cookie = session_cookie(owner)
    with asgi_server_process(**LIVE) as (url, server):
        run_id = asyncio.run(_send_and_read_some(url, workflow.pk, cookie))
        while not ChatRun.objects.get(run_id=run_id).draft_text:  # part of the answer is saved
            time.sleep(0.05)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
    orphan = ChatRun.objects.get(run_id=run_id)
    assert orphan.state == "running"
    assert orphan.draft_text != ""

    with asgi_server_process(**LIVE) as (url, _):
        restarted = time.monotonic()
        while ChatRun.objects.get(run_id=run_id).state == "running":
            assert time.monotonic() - restarted < 2 * HEARTBEAT_TIMEOUT_S, "the lane did not free itself"
            time.sleep(0.1)
        ack = asyncio.run(_send(url, workflow.pk, cookie))

    run = ChatRun.objects.get(run_id=run_id)
    assert (run.state, run.error_code) == ("error", "interrupted")
    reply = ChatMessage.objects.get(run_id=run_id, role="assistant")
    # The dead server's last draft write may land just after the kill, so the reply is the run's final
    # draft, which begins with what was saved when it died.
    assert (reply.status, reply.error_code, reply.text) == ("stopped", "interrupted", run.draft_text)
    assert reply.text.startswith(orphan.draft_text)
    assert (ack["type"], ack["created"]) == ("ack", True)
    assert ChatRun.objects.filter(run_id=ack["run_id"]).exists()


async def _send_and_read_some(url: str, workflow_id: str, cookie: str) -> str:
    """Send, then read until part of the answer is streamed."""
    client = ChatClient(url, workflow_id, cookie)
    await client.open()
    ack = await client.request({"type": "send", "text": "Tell me a long story about lighthouses, please"})
    run_id = ack["run_id"]
    while client.runs.get(run_id) is None or client.runs[run_id].seq < 4:
        await client.recv()
    await client.close()
    return run_id


async def _send(url: str, workflow_id: str, cookie: str) -> dict:
    client = ChatClient(url, workflow_id, cookie)
    await client.open()
    ack = await client.request({"type": "send", "text": "Are you still there?"})
    await client.close()
    return ack
