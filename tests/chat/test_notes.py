"""Notes to the agent: ratings and branch moves reach the agent once, as bracketed lines
ahead of the owner's text in the stored user message, never in the system prompt."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from chat import services
from chat.executor import execute_run
from chat.executor import run as executor  # where execute_run looks up get_provider
from chat.models import ChatMessage, ChatNote, ChatRun
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from opencompany.llm.wire import text_of
from tests.conftest import node_id

pytestmark = pytest.mark.django_db(transaction=True)


class RecordingProvider:
    """The real provider, with every request it was sent kept for inspection."""

    def __init__(self, inner: Any, requests: list[Any]) -> None:
        self.inner = inner
        self.name = inner.name
        self.fidelity = inner.fidelity
        self.requests = requests

    def stream(self, request: Any) -> Any:
        self.requests.append(request)
        return self.inner.stream(request)


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    sent: list[Any] = []
    real = executor.get_provider
    monkeypatch.setattr(
        executor, "get_provider", lambda model, config: RecordingProvider(real(model, config=config), sent)
    )
    return sent


def key_of(workflow: Any) -> ConversationKey:
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))


def send_and_run(workflow: Any, text: str) -> services.Admission:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    async_to_sync(execute_run)(admission.run.run_id)
    return admission


def user_texts(workflow: Any) -> list[str]:
    return [text_of(m) for m in conversation_load(key=key_of(workflow)) if m["role"] == "user"]


def feedback_line(rating: str, answer: str) -> str:
    return (
        "[feedback]"
        + json.dumps({"rating": rating, "answer": answer}, ensure_ascii=False, separators=(", ", ": "))
        + "[/feedback]"
    )


def no_system_block_mentions(requests: list[Any], marker: str) -> bool:
    return all(marker not in block for request in requests for block in request.system_blocks)


def test_a_rating_reaches_the_agent_once_ahead_of_the_owners_text(workflow, requests):
    first = send_and_run(workflow, "Hello there")
    answer = ChatRun.objects.get(run_id=first.run.run_id).draft_text
    services.chat_feedback(workflow=workflow, message_uid=first.run.reply_message_uid, value="up")

    send_and_run(workflow, "Next question")
    send_and_run(workflow, "Third question")

    assert user_texts(workflow) == [
        "Hello there",
        feedback_line("good", " ".join(answer.split())) + "\n\nNext question",
        "Third question",
    ]
    assert ChatNote.objects.get().delivered_at is not None
    assert len(requests) == 3
    assert no_system_block_mentions(requests, "[feedback]")


def test_a_down_rating_is_told_as_bad_and_taking_it_back_before_the_next_turn_tells_nothing(
    workflow, requests
):
    first = send_and_run(workflow, "Hello there")
    reply = first.run.reply_message_uid
    services.chat_feedback(workflow=workflow, message_uid=reply, value="down")
    assert '"rating": "bad"' in ChatNote.objects.get().text

    services.chat_feedback(workflow=workflow, message_uid=reply, value=None)
    send_and_run(workflow, "Next question")

    assert user_texts(workflow) == ["Hello there", "Next question"]
    assert ChatNote.objects.exists() is False


def test_a_long_answer_is_excerpted_to_300_characters_in_the_rating(workflow):
    first = send_and_run(workflow, "Hello there")
    reply = first.run.reply_message_uid
    ChatMessage.objects.filter(uid=reply).update(text="word  \n " * 100)  # a long, unevenly spaced answer

    services.chat_feedback(workflow=workflow, message_uid=reply, value="up")

    payload = json.loads(ChatNote.objects.get().text.removeprefix("[feedback]").removesuffix("[/feedback]"))
    assert payload == {"rating": "good", "answer": ("word " * 60)[:299] + "…"}


def test_a_branch_move_reaches_the_agent_once_ahead_of_the_owners_text(workflow, requests):
    original = send_and_run(workflow, "Original question")

    edit = services.chat_edit(workflow=workflow, message_uid=original.message.uid, text="Edited question")
    async_to_sync(execute_run)(edit.run.run_id)
    send_and_run(workflow, "Follow-up")

    note = ChatNote.objects.get()
    assert note.key == f"branch:{original.run.run_id}"
    assert note.text.startswith("[update]{")
    assert note.text.endswith("}[/update]")
    assert user_texts(workflow) == [note.text + "\n\nEdited question", "Follow-up"]
    assert note.delivered_at is not None
    assert no_system_block_mentions(requests, "[update]")


def test_a_switch_back_tells_the_agent_on_its_next_turn(workflow):
    original = send_and_run(workflow, "Original question")
    edit = services.chat_edit(workflow=workflow, message_uid=original.message.uid, text="Edited question")
    async_to_sync(execute_run)(edit.run.run_id)

    services.chat_switch(workflow=workflow, message_uid=original.message.uid)
    send_and_run(workflow, "Back here")

    switch_note = ChatNote.objects.get(key=f"branch:{edit.run.run_id}")
    assert user_texts(workflow)[-1] == switch_note.text + "\n\nBack here"
    assert switch_note.delivered_at is not None


def _provider_that_stops_before_answering(workflow: Any, run_id: str) -> Any:
    class StopsFirst:
        name = "offline"
        fidelity = "portable"

        async def stream(self, request: Any) -> Any:
            await database_sync_to_async(services.chat_stop)(workflow=workflow, run_id=run_id)
            await asyncio.sleep(30)  # the stop ends the stream long before this
            yield None  # pragma: no cover

    return StopsFirst()


def test_a_run_stopped_without_a_reply_does_not_mark_its_notes_told(workflow, monkeypatch):
    first = send_and_run(workflow, "Hello there")
    services.chat_feedback(workflow=workflow, message_uid=first.run.reply_message_uid, value="up")
    note_text = ChatNote.objects.get().text
    stopped = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Stopped early")
    real = executor.get_provider
    monkeypatch.setattr(
        executor,
        "get_provider",
        lambda model, config: _provider_that_stops_before_answering(workflow, stopped.run.run_id),
    )

    outcome = async_to_sync(execute_run)(stopped.run.run_id)

    run = ChatRun.objects.get(run_id=stopped.run.run_id)
    note = ChatNote.objects.get()
    assert outcome == "stopped"
    assert run.state == "stopped"
    assert run.draft_text == ""
    assert note.claimed_run_id == run.run_id
    assert note.delivered_at is None

    monkeypatch.setattr(executor, "get_provider", real)
    later = send_and_run(workflow, "Try again later")

    note.refresh_from_db()
    assert note.claimed_run_id == later.run.run_id
    assert note.delivered_at is not None
    assert user_texts(workflow)[-1] == note_text + "\n\nTry again later"


def test_a_run_that_errors_does_not_mark_its_notes_told(workflow):
    first = send_and_run(workflow, "Hello there")
    services.chat_feedback(workflow=workflow, message_uid=first.run.reply_message_uid, value="up")
    from graphs.models import Deployment

    deployment = Deployment.objects.get(workflow=workflow, state="live")
    graph = deployment.graph
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"]["provider"] = "no-such-provider"
    Deployment.objects.filter(pk=deployment.pk).update(graph=graph)

    failed = send_and_run(workflow, "This one fails")

    failed_run = ChatRun.objects.get(run_id=failed.run.run_id)
    assert (failed_run.state, failed_run.error_code) == ("error", "provider_not_configured")
    assert ChatNote.objects.get().delivered_at is None


def test_a_note_changed_after_its_claim_is_not_marked_told(workflow):
    first = send_and_run(workflow, "Hello there")
    reply = first.run.reply_message_uid
    services.chat_feedback(workflow=workflow, message_uid=reply, value="up")
    services.notes_claim(thread_id=ChatNote.objects.get().thread_id, run_id="run_x")

    services.chat_feedback(workflow=workflow, message_uid=reply, value="down")
    told = services.notes_deliver(run_id="run_x")

    assert told == 0
    assert ChatNote.objects.get().delivered_at is None
