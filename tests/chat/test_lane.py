"""The lane: at most one live run per thread, and idempotent re-sends."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import IntegrityError, connection, transaction

from chat import services
from chat.executor import execute_run
from chat.models import ChatMessage, ChatRun, ChatThread
from opencompany.core.errors import ApplicationError

pytestmark = pytest.mark.django_db(transaction=True)


def _race(workflow: Any, texts: list[str]) -> list[Any]:
    """Send each text from its own thread (its own database connection), all released at once."""
    barrier = threading.Barrier(len(texts))
    results: list[Any] = [None] * len(texts)

    def send(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = services.chat_send(
                owner_id=workflow.owner_id, workflow_id=workflow.pk, text=texts[i]
            )
        except ApplicationError as exc:
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


@pytest.mark.postgres
def test_two_sends_at_once_admit_one_run_and_refuse_the_other_naming_it(workflow):
    results = _race(workflow, ["first", "second"])

    admitted = [r for r in results if isinstance(r, services.Admission)]
    refused = [r for r in results if isinstance(r, ApplicationError)]
    assert len(admitted) == 1
    assert len(refused) == 1
    run = ChatRun.objects.get()
    assert admitted[0].run.run_id == run.run_id
    assert refused[0].code == "run_in_progress"
    assert refused[0].status == 409
    assert refused[0].extra == {"run_id": run.run_id}
    assert ChatMessage.objects.get().uid == run.user_message_uid
    assert ChatThread.objects.get().revision == 1


@pytest.mark.postgres
def test_five_sends_at_once_on_a_fresh_workflow_admit_exactly_one(workflow):
    results = _race(workflow, [f"message {i}" for i in range(5)])

    codes = sorted(r.code for r in results if isinstance(r, ApplicationError))
    assert codes == ["run_in_progress"] * 4
    assert ChatRun.objects.count() == 1
    assert ChatMessage.objects.count() == 1
    assert ChatThread.objects.count() == 1


def test_a_send_while_a_run_is_live_is_refused_naming_the_run(workflow):
    first = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first")

    with pytest.raises(ApplicationError) as refused:
        services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="second")

    assert refused.value.code == "run_in_progress"
    assert refused.value.extra == {"run_id": first.run.run_id}
    assert ChatMessage.objects.count() == 1
    assert ChatRun.objects.count() == 1


def test_the_lane_frees_when_the_run_finishes(workflow):
    first = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first")
    async_to_sync(execute_run)(first.run.run_id)

    second = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="second")

    assert second.created is True
    assert second.message.parent_uid == first.run.reply_message_uid
    assert (
        ChatRun.objects.filter(state__in=["queued", "running", "stopping"]).get().run_id == second.run.run_id
    )


def test_the_partial_unique_constraint_refuses_a_second_live_run(workflow):
    first = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first")
    thread = ChatThread.objects.get()

    with pytest.raises(IntegrityError), transaction.atomic():
        ChatRun.objects.create(
            run_id="run_second",
            thread=thread,
            workflow_id=workflow.pk,
            generation=1,
            state=ChatRun.State.RUNNING,
            user_message_uid=first.message.uid,
            reply_message_uid="a_run_second",
        )

    assert list(ChatRun.objects.values_list("run_id", flat=True)) == [first.run.run_id]


def test_the_constraint_allows_any_number_of_ended_runs_beside_a_live_one(workflow):
    first = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first")
    thread = ChatThread.objects.get()

    for i, state in enumerate(["finished", "error", "stopped", "finished"]):
        ChatRun.objects.create(
            run_id=f"run_old{i}",
            thread=thread,
            workflow_id=workflow.pk,
            generation=1,
            state=state,
            user_message_uid=first.message.uid,
            reply_message_uid=f"a_run_old{i}",
        )

    assert ChatRun.objects.count() == 5
    assert ChatRun.objects.filter(state="queued").get().run_id == first.run.run_id


def test_a_resend_with_the_same_client_message_id_returns_the_first_message_and_run(workflow):
    first = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hello", client_message_id="cm-1"
    )

    again = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hello", client_message_id="cm-1"
    )

    assert again.created is False
    assert again.message.uid == first.message.uid
    assert again.run.run_id == first.run.run_id
    assert ChatMessage.objects.count() == 1
    assert ChatRun.objects.count() == 1
    assert ChatThread.objects.get().revision == 1


def test_a_resend_after_the_run_finished_still_returns_the_first_and_starts_nothing(workflow):
    first = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hello", client_message_id="cm-1"
    )
    async_to_sync(execute_run)(first.run.run_id)

    again = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hello", client_message_id="cm-1"
    )

    assert again.created is False
    assert again.message.uid == first.message.uid
    assert again.run.run_id == first.run.run_id
    assert again.run.state == "finished"
    assert ChatRun.objects.count() == 1


def test_a_resend_over_the_api_answers_the_same_ids(api_client, workflow):
    url = f"/api/v1/workflows/{workflow.pk}/chat/messages"
    first = api_client.post(url, {"text": "Hello", "client_message_id": "cm-7"}, format="json").json()

    again = api_client.post(url, {"text": "Hello", "client_message_id": "cm-7"}, format="json")

    assert again.status_code == 202
    assert again.json()["created"] is False
    assert again.json()["message"]["id"] == first["message"]["id"]
    assert again.json()["run"]["run_id"] == first["run"]["run_id"]
    assert ChatMessage.objects.count() == 1


@pytest.mark.postgres
def test_the_same_client_message_id_sent_twice_at_once_admits_one(workflow):
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]

    def send(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = services.chat_send(
                owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hello", client_message_id="cm-race"
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert sorted(r.created for r in results) == [False, True]
    assert results[0].run.run_id == results[1].run.run_id
    assert ChatMessage.objects.count() == 1
    assert ChatRun.objects.count() == 1
