"""Two real ASGI servers with the Redis pub/sub layer and a task worker: one chat, seen alike from
both; a client that moves servers mid-stream ends with exactly the final text."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async as sync_to_async

from chat.models import ChatMessage
from tests.chat.liveclient import ChatClient
from tests.chat.wsclient import session_cookie
from tests.live import asgi_server, task_worker

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

LIVE = {"OPENCOMPANY_RUN_EXECUTOR": "tasks", "OPENCOMPANY_OFFLINE_PACING_MS": 20}


def test_two_servers_see_the_same_events_and_a_moved_client_resumes(workflow, owner, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "tasks"
    cookie = session_cookie(owner)
    with asgi_server(**LIVE) as one, asgi_server(**LIVE) as two, task_worker(**LIVE):
        asyncio.run(_scenario(one, two, workflow.pk, cookie))


async def _scenario(one: str, two: str, workflow_id: str, cookie: str) -> None:
    a, b = ChatClient(one, workflow_id, cookie), ChatClient(two, workflow_id, cookie)
    assert (await a.open())["type"] == "thread"
    assert (await b.open())["type"] == "thread"

    ack = await a.request({"type": "send", "text": "Hello from server one, tell me about the weather please"})
    assert ack["type"] == "ack", ack
    run_id = ack["run_id"]
    seen_a, seen_b = await asyncio.gather(a.until_ended(run_id), b.until_ended(run_id))

    sequence_a = [(f["type"], f["seq"]) for f in seen_a.events]
    sequence_b = [(f["type"], f["seq"]) for f in seen_b.events]
    assert sequence_a == sequence_b
    assert sequence_a[0] == ("run.started", 1)
    assert [s for _, s in sequence_a] == list(range(1, len(sequence_a) + 1))
    assert seen_a.text == seen_b.text
    reply = await sync_to_async(ChatMessage.objects.get)(run_id=run_id, role="assistant")
    assert seen_a.text == reply.text

    # A second run: b leaves server two mid-stream and resumes on server one.
    ack = await a.request(
        {"type": "send", "text": "Now a second, longer question about the same weather, thanks"}
    )
    run_id = ack["run_id"]
    while b.runs.get(run_id) is None or b.runs[run_id].seq < 4:
        await b.recv()
    await b.close()
    await asyncio.sleep(0.3)  # deltas keep flowing while b is away
    moved = ChatClient(one, workflow_id, cookie)
    moved.runs[run_id] = b.runs[run_id]
    await moved.open()
    snapshot = await moved.resume(run_id)
    assert snapshot["type"] == "run.snapshot"
    final = await moved.until_ended(run_id)

    reply = await sync_to_async(ChatMessage.objects.get)(run_id=run_id, role="assistant")
    assert final.text == reply.text
    assert final.state == "finished"

    # Stop sent through server one reaches the run executing on the worker process.
    ack = await a.request(
        {"type": "send", "text": "A third question, and please take your time answering it fully"}
    )
    run_id = ack["run_id"]
    while a.runs.get(run_id) is None or a.runs[run_id].seq < 3:
        await a.recv()
    stop = await moved.request({"type": "stop", "run_id": run_id})
    assert (stop["type"], stop["state"]) == ("ack", "stopping")
    stopped = await a.until_ended(run_id)
    assert stopped.state == "stopped"
    reply = await sync_to_async(ChatMessage.objects.get)(run_id=run_id, role="assistant")
    assert (reply.status, reply.text) == ("stopped", stopped.text)
    for client in (a, moved):
        await client.close()
