"""In-process runs are claimed by the admitting transaction: `run.started` leaves with that commit."""

from __future__ import annotations

from typing import Any

import pytest

from chat import services
from chat.executor import execute_run
from chat.models import ChatMessage, ChatRun, ChatThread
from opencompany.core.errors import ApplicationError
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


@pytest.mark.postgres
def test_a_send_on_postgresql_is_one_statement_and_writes_what_the_locked_path_writes(
    workflow: Any, events: Any, django_assert_num_queries: Any
) -> None:
    events.subscribe(chat_group(workflow.pk))
    first = services.chat_send(workflow=workflow, text="first")  # creates the thread: the locked path
    services.run_finish(run_id=first.run.run_id, claimant=None, outcome="finished", text="an answer", seq=1)
    events.drain()

    with django_assert_num_queries(1):
        second = services.chat_send(workflow=workflow, text="second", client_message_id="c-2")

    reply = f"a_{first.run.run_id}"
    assert second.created is True
    assert second.message.parent_uid == reply  # hangs under the answer, the active leaf
    stored = ChatMessage.objects.get(uid=second.message.uid)
    assert (stored.text, stored.parent_uid, stored.client_message_id) == ("second", reply, "c-2")
    assert stored.run_id == second.run.run_id
    assert stored.generation == first.message.generation
    thread = ChatThread.objects.get(workflow=workflow)
    assert thread.active_leaf_uid == second.message.uid
    assert thread.revision == second.revision
    assert ChatRun.objects.get(run_id=second.run.run_id).state == ChatRun.State.QUEUED
    assert [e["type"] for e in events.drain()] == ["thread.updated"]

    # Every other case falls back to the locked path and answers exactly as before.
    again = services.chat_send(workflow=workflow, text="second", client_message_id="c-2")
    assert again.created is False
    assert again.run.run_id == second.run.run_id
    with pytest.raises(ApplicationError) as busy:
        services.chat_send(workflow=workflow, text="third")
    assert busy.value.code == "run_in_progress"
    assert busy.value.extra == {"run_id": second.run.run_id}
    with pytest.raises(ApplicationError) as stale:
        services.chat_send(workflow=workflow, text="third", expected_revision=second.revision - 1)
    assert stale.value.code in ("revision_conflict", "run_in_progress")


@pytest.mark.postgres
def test_send_as_owner_checks_ownership_inside_the_one_statement(
    workflow: Any, other_owner: Any, django_assert_num_queries: Any
) -> None:
    first = services.chat_send(workflow=workflow, text="first")
    services.run_finish(run_id=first.run.run_id, claimant=None, outcome="finished", text="an answer", seq=1)
    loaded: list[str] = []

    def refuse() -> Any:
        loaded.append("asked")
        raise ApplicationError("not_found", "No such workflow.", status=404)

    with pytest.raises(ApplicationError) as foreign:
        services.chat_send_as_owner(
            owner_id=other_owner.pk, workflow_id=workflow.pk, load_workflow=refuse, text="not yours"
        )
    assert foreign.value.code == "not_found"
    assert loaded == ["asked"]
    assert not ChatMessage.objects.filter(text="not yours").exists()
    assert ChatRun.objects.filter(thread__workflow=workflow).count() == 1

    with django_assert_num_queries(1):
        mine = services.chat_send_as_owner(
            owner_id=workflow.owner_id, workflow_id=workflow.pk, load_workflow=refuse, text="mine"
        )
    assert mine.created is True
    assert loaded == ["asked"]  # the owner's send never needed the row
