"""The database goes away during an answer (a real server behind a loopback proxy to PostgreSQL that the
test cuts): the answer keeps streaming; an outage shorter than a step's retry budget ends with the run
finished, a longer one with the run interrupted and every character the owner saw kept (in the reply and
in the agent's Context); either way the lane is free within 2 s of the database's return and the next
socket opens normally.

Slow by nature (about 20 s): the outage it is about lasts 10 s."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import pytest
from django.db import connection
from django.utils import timezone

from chat.models import ChatMessage, ChatRun
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from opencompany.llm.wire import text_of
from tests.chat.liveclient import ChatClient
from tests.chat.wsclient import session_cookie
from tests.conftest import node_id
from tests.live import asgi_server
from tests.tcpproxy import TcpProxy, tcp_proxy

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

BUDGET_S = 3


def _through(proxy: TcpProxy) -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{s['NAME']}"


async def _answer_across_outage(
    client: ChatClient, proxy: TcpProxy, outage_s: float, cookie: str
) -> tuple[str, datetime, dict]:
    """Send; once part of the answer is streamed, cut the database for `outage_s` while reading what
    streams; restore it and at once open another socket; read until the run ends. Returns the run id, when
    the database came back and the first frame of the socket opened then."""
    ack = await client.request(
        {"type": "send", "text": "Tell me a long story about lighthouses, please. " * 6}
    )
    run_id = ack["run_id"]
    while client.runs.get(run_id) is None or client.runs[run_id].seq < 3:
        await client.recv()
    proxy.cut()
    deadline = time.monotonic() + outage_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            await client.recv(timeout=left)
        except TimeoutError:
            break
    proxy.restore()
    back = timezone.now()
    first = ChatClient(client.base_url, client.workflow_id, cookie)
    opened = await first.open()  # the first socket after the database's return
    await first.close()
    await client.until_ended(run_id, timeout=30)
    return run_id, back, opened


async def _next_socket(url: str, workflow_id: str, cookie: str) -> tuple[dict, dict]:
    client = ChatClient(url, workflow_id, cookie)
    thread = await client.open()
    ack = await client.request({"type": "send", "text": "Are you still there?"})
    await client.close()
    return thread, ack


def test_a_database_outage_mid_answer_loses_nothing_and_frees_the_lane_when_it_returns(workflow, owner):
    cookie = session_cookie(owner)
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    with tcp_proxy(int(connection.settings_dict["PORT"] or 5432)) as proxy:
        env = {
            "DATABASE_URL": _through(proxy),
            "OPENCOMPANY_OFFLINE_PACING_MS": 150,
            "OPENCOMPANY_RUN_COMMIT_RETRY_S": BUDGET_S,
        }
        with asgi_server(**env) as url:
            client = ChatClient(url, workflow.pk, cookie)

            async def outages() -> list[tuple[str, datetime, dict]]:
                await client.open()
                # Shorter, then longer than a step's retry budget.
                return [
                    await _answer_across_outage(client, proxy, outage_s, cookie) for outage_s in (2.5, 10)
                ]

            short, long = asyncio.run(outages())
            thread, ack = asyncio.run(_next_socket(url, workflow.pk, cookie))

    short_run, long_run = ChatRun.objects.get(run_id=short[0]), ChatRun.objects.get(run_id=long[0])
    short_reply = ChatMessage.objects.get(run_id=short_run.run_id, role="assistant")
    long_reply = ChatMessage.objects.get(run_id=long_run.run_id, role="assistant")
    seen_short, seen_long = client.runs[short_run.run_id], client.runs[long_run.run_id]

    # The short outage: the answer waited for the database and finished whole.
    assert (short_run.state, seen_short.state) == ("finished", "finished")
    assert short_reply.text == seen_short.text != ""
    # The long one: interrupted, with every character the owner saw kept.
    assert (long_run.state, long_run.error_code, seen_long.state) == ("error", "interrupted", "error")
    assert long_reply.text == seen_long.text != ""
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored[:5]] == ["user", "assistant", "user", "assistant", "user"]
    assert (text_of(stored[1]), (stored[1].get("metadata") or {}).get("status")) == (seen_short.text, None)
    assert (text_of(stored[3]), stored[3]["metadata"]["status"]) == (seen_long.text, "interrupted")
    # The long outage's run was only waiting for the database to write its end: the lane was free
    # within 2 s of the database's return.
    assert (long_run.finished_at - long[1]).total_seconds() < 2
    assert short_run.finished_at > short[1]
    # The first socket after each return opened normally, and so did the next, whose send was admitted.
    assert (short[2]["type"], long[2]["type"], thread["type"]) == ("thread", "thread", "thread")
    assert (ack["type"], ack["created"]) == ("ack", True)
