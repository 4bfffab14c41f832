"""Stop: the partial answer is saved as stopped, the lane frees; queued, twice, finished."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from chat import services
from chat.executor import execute_run
from chat.models import ChatMessage, ChatRun
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from opencompany.core.errors import ApplicationError
from opencompany.core.events import chat_group
from opencompany.llm.wire import text_of
from tests.conftest import node_id

pytestmark = pytest.mark.django_db(transaction=True)

LONG_QUESTION = " ".join(f"word{i}" for i in range(40))


def key_of(workflow: Any) -> ConversationKey:
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))


def stop_once_streaming(workflow: Any, run_id: str, answers: list[Any]) -> threading.Thread:
    """From another thread (its own connection): wait until the durable draft has text, then Stop."""

    def watch() -> None:
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                draft = ChatRun.objects.filter(run_id=run_id).values_list("draft_text", flat=True).first()
                if draft:
                    answers.append(services.chat_stop(workflow=workflow, run_id=run_id))
                    return
                time.sleep(0.02)
        finally:
            connection.close()

    thread = threading.Thread(target=watch)
    thread.start()
    return thread


def test_stop_during_streaming_saves_the_partial_answer_as_stopped_and_frees_the_lane(workflow, settings):
    settings.OPENCOMPANY_OFFLINE_PACING_MS = 150
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=LONG_QUESTION)
    answers: list[Any] = []
    watcher = stop_once_streaming(workflow, admission.run.run_id, answers)

    outcome = async_to_sync(execute_run)(admission.run.run_id)
    watcher.join(timeout=10)

    assert [a.state for a in answers] == ["stopping"]
    assert outcome == "stopped"
    run = ChatRun.objects.get(run_id=admission.run.run_id)
    assert run.state == "stopped"
    assert run.stop_requested_at is not None
    reply = ChatMessage.objects.get(role="assistant")
    assert reply.uid == run.reply_message_uid
    assert reply.status == "stopped"
    assert reply.text == run.draft_text
    assert reply.text
    assert "conversation." not in reply.text  # the full offline answer ends with this; it was cut short
    stored = conversation_load(key=key_of(workflow))
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[-1]["metadata"]["status"] == "stopped"
    assert text_of(stored[-1]) == reply.text

    following = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="And now?")

    assert following.created is True
    assert following.message.parent_uid == reply.uid


def test_stop_of_a_queued_run_ends_it_stopped_at_once(workflow, events):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    events.subscribe(chat_group(workflow.pk))

    run = services.chat_stop(workflow=workflow, run_id=admission.run.run_id)

    assert run.state == "stopped"
    assert run.finished_at is not None
    assert ChatRun.objects.get().state == "stopped"
    assert ChatMessage.objects.filter(role="assistant").exists() is False
    stopped = [e for e in events.drain() if e["type"] == "run.stopped"]
    assert [e["data"]["run_id"] for e in stopped] == [admission.run.run_id]
    assert async_to_sync(execute_run)(admission.run.run_id) == "not_claimed"
    assert (
        services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="again").created is True
    )


def test_stopping_a_queued_run_twice_answers_stopped_both_times_and_publishes_once(workflow, events):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    events.subscribe(chat_group(workflow.pk))
    first = services.chat_stop(workflow=workflow, run_id=admission.run.run_id)
    events.drain()

    second = services.chat_stop(workflow=workflow, run_id=admission.run.run_id)

    assert (first.state, second.state) == ("stopped", "stopped")
    assert second.last_seq == first.last_seq
    assert events.drain() == []


def test_stopping_a_running_run_twice_answers_stopping_both_times(workflow, events):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    services.run_claim(run_id=admission.run.run_id, claimant="worker-1")
    events.subscribe(services.run_control_group(admission.run.run_id))
    first = services.chat_stop(workflow=workflow, run_id=admission.run.run_id)
    requested_at = first.stop_requested_at
    assert [e["type"] for e in events.drain()] == ["run.stop"]

    second = services.chat_stop(workflow=workflow, run_id=admission.run.run_id)

    assert (first.state, second.state) == ("stopping", "stopping")
    assert second.stop_requested_at == requested_at
    assert events.drain() == []


def test_stop_of_a_finished_run_is_not_stoppable(workflow):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    async_to_sync(execute_run)(admission.run.run_id)

    with pytest.raises(ApplicationError) as refused:
        services.chat_stop(workflow=workflow, run_id=admission.run.run_id)

    assert refused.value.code == "not_stoppable"
    assert refused.value.status == 409
    assert refused.value.extra == {"state": "finished"}
    assert ChatRun.objects.get().state == "finished"


def test_stop_of_another_workflows_run_is_not_found(workflow, other_workflow):
    theirs = services.chat_send(owner_id=other_workflow.owner_id, workflow_id=other_workflow.pk, text="Hi")

    with pytest.raises(ApplicationError) as refused:
        services.chat_stop(workflow=workflow, run_id=theirs.run.run_id)

    assert refused.value.code == "not_found"
    assert ChatRun.objects.get().state == "queued"


def test_a_run_that_finishes_before_it_hears_the_stop_still_ends_stopped(workflow):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    services.run_claim(run_id=admission.run.run_id, claimant="worker-1")
    services.chat_stop(workflow=workflow, run_id=admission.run.run_id)

    ended = services.run_finish(
        run_id=admission.run.run_id, claimant="worker-1", outcome="finished", text="Full answer", seq=3
    )

    assert ended is not None
    assert ended.state == "stopped"
    assert ChatMessage.objects.get(role="assistant").status == "stopped"


# --- staff "end run" ---------------------------------------------------------------------------------------


def test_end_run_stops_a_live_run_keeping_its_draft_and_frees_the_lane(workflow):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    services.run_claim(run_id=admission.run.run_id, claimant="worker-1")
    services.run_save_draft(run_id=admission.run.run_id, claimant="worker-1", text="Half an", steps=[], seq=2)

    ended = services.chat_end_run(run_id=admission.run.run_id)

    assert ended is not None
    assert ended.state == "stopped"
    reply = ChatMessage.objects.get(role="assistant")
    assert (reply.text, reply.status) == ("Half an", "stopped")
    assert services.chat_end_run(run_id=admission.run.run_id) is None
    assert (
        services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="again").created is True
    )


def test_the_admin_end_run_action_ends_the_selected_live_runs(client, staff, workflow):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    client.force_login(staff)

    response = client.post(
        "/admin/chat/chatrun/",
        {"action": "end_runs", "_selected_action": [admission.run.run_id]},
        follow=True,
    )

    assert response.status_code == 200
    assert ChatRun.objects.get().state == "stopped"
    assert "Ended 1 run(s)." in response.content.decode()
