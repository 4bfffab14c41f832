"""In-process runs are claimed by the admitting transaction: `run.started` leaves with that commit."""

from __future__ import annotations

from typing import Any

import pytest

from chat import services
from chat.executor import execute_run
from chat.models import ChatRun
from opencompany.core.events import chat_group

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Record what the admission hands to the executor instead of starting a run in a background
    thread (the test then drives `execute_run` itself, on its own loop)."""
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(
        "chat.executor.dispatch_run", lambda run_id, claimed=None: calls.append((run_id, claimed))
    )
    return calls


def test_inprocess_send_claims_the_run_and_publishes_started_with_the_commit(
    settings: Any, workflow: Any, events: Any, dispatched: list[tuple[str, Any]]
) -> None:
    settings.OPENCOMPANY_RUN_EXECUTOR = "inprocess"
    events.subscribe(chat_group(workflow.pk))
    admission = services.chat_send(workflow=workflow, text="hello")

    row = ChatRun.objects.get(run_id=admission.run.run_id)
    assert row.state == ChatRun.State.RUNNING
    assert row.claimant
    assert row.started_at is not None
    assert row.heartbeat_at is not None
    assert row.last_seq == 1
    published = events.drain()
    assert [e["type"] for e in published] == ["thread.updated", "run.started"]
    started = published[1]["data"]
    assert started == {
        "run_id": row.run_id,
        "seq": 1,
        "workflow_id": workflow.pk,
        "kind": "message",
        "user_message_id": admission.message.uid,
        "reply_message_id": row.reply_message_uid,
    }
    [(run_id, claimed)] = dispatched
    assert run_id == row.run_id
    assert claimed is not None
    assert claimed.claimant == row.claimant


def test_a_claimed_run_executes_without_a_second_claim_or_a_second_started(
    settings: Any, workflow: Any, events: Any, dispatched: list[tuple[str, Any]]
) -> None:
    settings.OPENCOMPANY_RUN_EXECUTOR = "inprocess"
    events.subscribe(chat_group(workflow.pk))
    services.chat_send(workflow=workflow, text="hello")
    events.drain()
    [(run_id, claimed)] = dispatched

    from asgiref.sync import async_to_sync

    assert async_to_sync(execute_run)(run_id, claimed=claimed) == "finished"
    kinds = [e["type"] for e in events.drain() if e["data"].get("run_id") == run_id]
    assert "run.started" not in kinds
    assert kinds[-1] == "run.finished"
    assert ChatRun.objects.get(run_id=run_id).state == ChatRun.State.FINISHED


def test_other_executors_leave_the_run_queued_for_a_worker_to_claim(
    settings: Any, workflow: Any, dispatched: list[tuple[str, Any]]
) -> None:
    settings.OPENCOMPANY_RUN_EXECUTOR = "tasks"
    admission = services.chat_send(workflow=workflow, text="hello")
    row = ChatRun.objects.get(run_id=admission.run.run_id)
    assert row.state == ChatRun.State.QUEUED
    assert row.claimant == ""
    assert row.last_seq == 0
    assert dispatched == [(row.run_id, None)]
