"""Redis is an accelerator, not a dependency: a server whose Redis is unreachable still lets the owner
chat (events delivered inside the process), logs one warning for the outage, and says so on /healthz."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from chat.models import ChatMessage
from tests.chat.liveclient import ChatClient
from tests.chat.wsclient import session_cookie
from tests.live import asgi_server_process, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_with_redis_unreachable_the_chat_connects_streams_and_health_says_so(workflow, owner, tmp_path):
    cookie = session_cookie(owner)
    log = tmp_path / "server.log"
    closed = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    env = {"REDIS_URL": closed, "OPENCOMPANY_RUN_EXECUTOR": "inprocess", "OPENCOMPANY_OFFLINE_PACING_MS": 5}

    with asgi_server_process(log=log, **env) as (url, _):
        thread, first, second = asyncio.run(_chat(url, workflow.pk, cookie))
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:  # noqa: S310 - loopback
            health = json.loads(response.read())

    assert thread["type"] == "thread"
    for view, run_id in (first, second):
        reply = ChatMessage.objects.get(run_id=run_id, role="assistant")
        assert (view.state, view.text) == ("finished", reply.text)
        assert reply.text != ""
    assert health["status"] == "degraded"
    assert health["checks"]["database"]["status"] == "ok"
    assert health["checks"]["channel_layer"] == {
        "status": "down",
        "backend": "redis",
        "in_process_only": True,
    }
    warnings = [line for line in log.read_text().splitlines() if "channel layer unreachable" in line]
    assert len(warnings) == 1
    assert "Hello" not in log.read_text()  # no content in the log


async def _chat(url: str, workflow_id: str, cookie: str):
    client = ChatClient(url, workflow_id, cookie)
    thread = await client.open()
    results = []
    for text in ("Hello without Redis, how are you?", "Hello again, still without Redis?"):
        ack = await client.request({"type": "send", "text": text})
        assert ack["type"] == "ack", ack
        results.append((await client.until_ended(ack["run_id"]), ack["run_id"]))
    await client.close()
    return thread, results[0], results[1]
