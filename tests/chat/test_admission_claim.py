"""In-process runs are claimed by the admitting transaction: `run.started` leaves with that commit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from chat import services
from chat.executor import dispatch_run, execute_run
from chat.models import ChatMessage, ChatRun, ChatThread
from opencompany.core.errors import ApplicationError
from opencompany.core.events import chat_group

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dispatched() -> Iterator[list[tuple[str, Any]]]:
    """Record what the admission hands to the run dispatcher instead of starting a run in a background
    thread (the test then drives `execute_run` itself, on its own loop)."""
    calls: list[tuple[str, Any]] = []

    def record(run_id: str, *, claimed: ChatRun | None = None) -> None:
        calls.append((run_id, claimed))

    services.run_dispatcher_register(dispatch=record)
    yield calls
    services.run_dispatcher_register(dispatch=dispatch_run)


def test_inprocess_send_claims_the_run_and_publishes_started_with_the_commit(
    settings: Any, workflow: Any, events: Any, dispatched: list[tuple[str, Any]]
) -> None:
    settings.OPENCOMPANY_RUN_EXECUTOR = "inprocess"
    events.subscribe(chat_group(workflow.pk))
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello")

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
    services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello")
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
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello")
    row = ChatRun.objects.get(run_id=admission.run.run_id)
    assert row.state == ChatRun.State.QUEUED
    assert row.claimant == ""
    assert row.last_seq == 0
    assert dispatched == [(row.run_id, None)]


@pytest.mark.postgres
def test_a_send_on_postgresql_is_one_statement_and_so_is_a_refusal(
    workflow: Any, events: Any, django_assert_num_queries: Any
) -> None:
    events.subscribe(chat_group(workflow.pk))
    first = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first"
    )  # opens the chat, then is admitted
    services.run_finish(run_id=first.run.run_id, claimant=None, outcome="finished", text="an answer", seq=1)
    events.drain()

    with django_assert_num_queries(1):
        second = services.chat_send(
            owner_id=workflow.owner_id, workflow_id=workflow.pk, text="second", client_message_id="c-2"
        )

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

    # Every other case is answered by the same statement with the precise code, writing nothing.
    again = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="second", client_message_id="c-2"
    )
    assert again.created is False
    assert again.run.run_id == second.run.run_id
    with pytest.raises(ApplicationError) as busy, django_assert_num_queries(1):
        services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="third")
    assert busy.value.code == "run_in_progress"
    assert busy.value.extra == {"run_id": second.run.run_id}
    with pytest.raises(ApplicationError) as stale:
        services.chat_send(
            owner_id=workflow.owner_id,
            workflow_id=workflow.pk,
            text="third",
            expected_revision=second.revision - 1,
        )
    assert stale.value.code in ("revision_conflict", "run_in_progress")


@pytest.mark.postgres
def test_a_send_checks_ownership_inside_the_one_statement(
    workflow: Any, other_owner: Any, django_assert_num_queries: Any
) -> None:
    first = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first")
    services.run_finish(run_id=first.run.run_id, claimant=None, outcome="finished", text="an answer", seq=1)

    with pytest.raises(ApplicationError) as foreign:
        services.chat_send(owner_id=other_owner.pk, workflow_id=workflow.pk, text="not yours")
    assert foreign.value.code == "not_found"
    assert ChatMessage.objects.filter(text="not yours").exists() is False
    assert ChatRun.objects.filter(thread__workflow=workflow).count() == 1

    with django_assert_num_queries(1):  # the owner's send never loads the workflow row
        mine = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="mine")
    assert mine.created is True
    assert ChatMessage.objects.get(uid=mine.message.uid).text == "mine"


@pytest.mark.parametrize(
    ("text", "client_message_id"),
    [("   ", None), ("x" * 50_001, None), ("hello", "not a valid id!")],
)
def test_a_send_to_a_foreign_or_unknown_workflow_is_not_found_before_the_messages_own_faults(
    workflow: Any, other_owner: Any, text: str, client_message_id: str | None
) -> None:
    for owner_id, workflow_id in ((other_owner.pk, workflow.pk), (workflow.owner_id, "wf_nope")):
        with pytest.raises(ApplicationError) as refused:
            services.chat_send(
                owner_id=owner_id, workflow_id=workflow_id, text=text, client_message_id=client_message_id
            )
        assert refused.value.code == "not_found"
    assert ChatThread.objects.exists() is False
    assert ChatRun.objects.exists() is False


def test_the_owners_own_faulty_message_gets_its_own_code_and_writes_nothing(workflow: Any) -> None:
    with pytest.raises(ApplicationError) as blank:
        services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="   ")
    with pytest.raises(ApplicationError) as long:
        services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="x" * 50_001)

    assert (blank.value.code, long.value.code) == ("invalid_request", "message_too_long")
    assert ChatMessage.objects.exists() is False
    assert ChatRun.objects.exists() is False
