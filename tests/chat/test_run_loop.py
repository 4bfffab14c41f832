"""The process's run loop with the Redis layer: a run whose database call waits (here on a row lock
another client holds) does not hold up the other runs of the same server process."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from chat.models import ChatMessage
from conversations.models import AgentConversation
from tests import live
from tests.chat.liveclient import ChatClient
from tests.chat.wsclient import session_cookie
from tests.conftest import make_workflow

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

LIVE: dict[str, Any] = {"OPENCOMPANY_RUN_EXECUTOR": "inprocess", "OPENCOMPANY_OFFLINE_PACING_MS": 5}


def _lock_waiters(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    return int(row[0]) if row else 0


def test_a_run_waiting_on_the_database_does_not_hold_up_the_other_runs(owner: Any, workflow: Any) -> None:
    second = make_workflow(owner, name="Second")
    cookie = session_cookie(owner)
    with live.asgi_server(**LIVE) as url:
        asyncio.run(_scenario(url, live.test_database_url(), workflow.pk, second.pk, cookie))


async def _scenario(url: str, db_url: str, blocked_id: str, free_id: str, cookie: str) -> None:
    blocked, free = ChatClient(url, blocked_id, cookie), ChatClient(url, free_id, cookie)
    await blocked.open()
    await free.open()
    first = await blocked.request({"type": "send", "text": "Hello, a first question"})
    assert (await blocked.until_ended(first["run_id"])).state == "finished"
    head = await asyncio.to_thread(lambda: AgentConversation.objects.get(workflow_id=blocked_id).pk)

    holder: psycopg.Connection[Any] = psycopg.connect(db_url)
    watcher: psycopg.Connection[Any] = psycopg.connect(db_url, autocommit=True)
    try:
        # Another client holds the blocked chat's conversation head, which its run's turn must lock.
        await asyncio.to_thread(
            holder.execute, "SELECT id FROM conversations_agentconversation WHERE id = %s FOR UPDATE", [head]
        )
        waiting = await blocked.request({"type": "send", "text": "A second question, please"})
        assert waiting["type"] == "ack", waiting
        deadline = time.monotonic() + 20
        while await asyncio.to_thread(_lock_waiters, watcher) == 0:
            assert time.monotonic() < deadline, "the run never reached the locked row"
            await asyncio.sleep(0.05)

        ack = await free.request({"type": "send", "text": "Meanwhile, a question in another chat"})
        assert ack["type"] == "ack", ack
        done = await free.until_ended(ack["run_id"], timeout=20)
        assert done.state == "finished"
        reply = await asyncio.to_thread(ChatMessage.objects.get, run_id=ack["run_id"], role="assistant")
        assert reply.text == done.text
        assert (
            waiting["run_id"] not in blocked.runs or not blocked.runs[waiting["run_id"]].ended
        )  # still waiting on the lock
    finally:
        await asyncio.to_thread(holder.rollback)
        await asyncio.to_thread(holder.close)
        await asyncio.to_thread(watcher.close)

    assert (await blocked.until_ended(waiting["run_id"])).state == "finished"
    await blocked.close()
    await free.close()
