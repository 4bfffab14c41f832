"""The DRF chat endpoints: shapes, refusals with codes, throttling, and the authorization matrix."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.admin.utils import quote
from django.core.cache import cache
from django.urls import reverse

from chat import services
from chat.executor import execute_run
from chat.models import ChatFeedback, ChatMessage, ChatNote, ChatRun, ChatThread
from conversations.selectors import conversation_cursor
from conversations.types import ConversationKey
from tests.conftest import node_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_throttle_history() -> None:
    # The throttle counts in the cache, which outlives a test; user ids repeat between tests.
    cache.clear()


def chat_url(workflow: Any, tail: str = "") -> str:
    return f"/api/v1/workflows/{workflow.pk}/chat{tail}"


def answered(workflow: Any, text: str = "Hello there") -> services.Admission:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    assert async_to_sync(execute_run)(admission.run.run_id) == "finished"
    return admission


def reply_of(admission: services.Admission) -> ChatMessage:
    return ChatMessage.objects.get(uid=admission.run.reply_message_uid)


def key_of(workflow: Any) -> ConversationKey:
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))


def chat_state(workflow: Any) -> dict[str, Any]:
    """Everything a chat request could change, for "nothing changed" assertions."""
    threads = ChatThread.objects.order_by("id").values(
        "id", "workflow_id", "active_leaf_uid", "revision", "title", "archived_at"
    )
    return {
        "threads": list(threads),
        "messages": list(ChatMessage.objects.order_by("id").values_list("uid", "status", "text")),
        "runs": list(ChatRun.objects.order_by("run_id").values_list("run_id", "state")),
        "notes": list(ChatNote.objects.order_by("id").values_list("key", "text", "delivered_at")),
        "feedback": list(ChatFeedback.objects.values_list("message_uid", "value")),
        "cursor": conversation_cursor(key=key_of(workflow)).as_dict(),
    }


# --- happy paths ---------------------------------------------------------------------------------


def test_send_answers_202_with_the_message_and_its_queued_run(api_client, workflow):
    response = api_client.post(
        chat_url(workflow, "/messages"), {"text": "Hi agent", "client_message_id": "c-1"}, format="json"
    )

    assert response.status_code == 202
    body = response.json()
    message = ChatMessage.objects.get()
    run = ChatRun.objects.get()
    assert body["created"] is True
    assert body["revision"] == 1
    assert body["message"]["id"] == message.uid
    assert body["message"]["role"] == "user"
    assert body["message"]["text"] == "Hi agent"
    assert body["message"]["client_message_id"] == "c-1"
    assert body["message"]["parent_id"] is None
    assert body["message"]["versions"] == {"index": 1, "count": 1, "ids": [message.uid]}
    assert body["message"]["editable"] is True
    assert body["run"]["run_id"] == run.run_id
    assert body["run"]["state"] == "queued"
    assert body["run"]["kind"] == "message"
    assert body["run"]["user_message_id"] == message.uid
    assert body["run"]["reply_message_id"] == f"a_{run.run_id}"


def test_history_shows_the_active_path_versions_editable_ids_and_revision(api_client, workflow):
    admission = answered(workflow)
    reply = reply_of(admission)

    response = api_client.get(chat_url(workflow))

    assert response.status_code == 200
    body = response.json()
    assert body["workflow_id"] == workflow.pk
    assert body["generation"] == 1
    assert body["revision"] == 2
    assert [m["id"] for m in body["path"]] == [admission.message.uid, reply.uid]
    assert [m["role"] for m in body["path"]] == ["user", "assistant"]
    assert body["path"][1]["status"] == "complete"
    assert body["path"][1]["run_state"] == "finished"
    assert body["editable"] == [admission.message.uid, reply.uid]
    assert body["has_more"] is False
    assert body["active_runs"] == []


def test_history_pages_backwards_with_before_and_limit(api_client, workflow):
    first = answered(workflow, "one")
    second = answered(workflow, "two")

    newest = api_client.get(chat_url(workflow), {"limit": 2}).json()
    older = api_client.get(chat_url(workflow), {"limit": 2, "before": newest["path"][0]["id"]}).json()

    assert [m["id"] for m in newest["path"]] == [second.message.uid, reply_of(second).uid]
    assert newest["has_more"] is True
    assert [m["id"] for m in older["path"]] == [first.message.uid, reply_of(first).uid]
    assert older["has_more"] is False


def test_history_of_a_workflow_never_chatted_is_empty(api_client, workflow):
    response = api_client.get(chat_url(workflow))

    assert response.status_code == 200
    assert response.json() == {
        "workflow_id": workflow.pk,
        "generation": 1,
        "revision": 0,
        "path": [],
        "has_more": False,
        "editable": [],
        "active_runs": [],
        "marks": [],
    }


def test_history_limit_out_of_range_is_invalid_request(api_client, workflow):
    response = api_client.get(chat_url(workflow), {"limit": 0})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert list(response.json()["extra"]["fields"]) == ["limit"]


def test_delete_chat_archives_it_and_empties_the_agents_conversation(api_client, workflow):
    admission = answered(workflow)
    thread = ChatThread.objects.get()

    response = api_client.delete(chat_url(workflow))

    assert (response.status_code, response.content) == (204, b"")
    archived = ChatThread.objects.get(pk=thread.pk)
    assert archived.workflow_id is None
    assert archived.home_workflow_id == workflow.pk
    assert archived.archived_at is not None
    assert list(ChatMessage.objects.order_by("id").values_list("uid", flat=True)) == [
        admission.message.uid,
        admission.run.reply_message_uid,
    ]
    assert ChatRun.objects.get().state == "finished"
    assert conversation_cursor(key=key_of(workflow)).length == 0


def test_edit_answers_202_with_the_new_version_and_an_edit_run(api_client, workflow):
    admission = answered(workflow)

    response = api_client.post(
        chat_url(workflow, f"/messages/{admission.message.uid}/edit"),
        {"text": "Hello again", "expected_revision": 2},
        format="json",
    )

    assert response.status_code == 202
    body = response.json()
    edited = ChatMessage.objects.get(meta__edit_of=admission.message.uid)
    assert body["message"]["id"] == edited.uid
    assert body["message"]["versions"] == {"index": 2, "count": 2, "ids": [admission.message.uid, edited.uid]}
    assert body["run"]["kind"] == "edit"
    assert body["run"]["parent_run_id"] == admission.run.run_id
    assert body["revision"] == 3


def test_retry_answers_202_with_the_question_and_a_retry_run(api_client, workflow):
    admission = answered(workflow)
    reply = reply_of(admission)

    response = api_client.post(chat_url(workflow, f"/messages/{reply.uid}/retry"), {}, format="json")

    assert response.status_code == 202
    body = response.json()
    assert body["message"]["id"] == admission.message.uid
    assert body["run"]["kind"] == "retry"
    assert body["run"]["state"] == "queued"
    assert body["run"]["parent_run_id"] == admission.run.run_id
    assert ChatThread.objects.get().active_leaf_uid == admission.message.uid


def test_feedback_rates_and_takes_the_rating_back(api_client, workflow):
    reply = reply_of(answered(workflow))
    url = chat_url(workflow, f"/messages/{reply.uid}/feedback")

    up = api_client.post(url, {"value": "up"}, format="json")
    assert up.status_code == 200
    assert up.json() == {"message_id": reply.uid, "feedback": "up"}
    assert ChatFeedback.objects.get().value == "up"

    back = api_client.post(url, {"value": None}, format="json")
    assert back.status_code == 200
    assert back.json() == {"message_id": reply.uid, "feedback": None}
    assert ChatFeedback.objects.exists() is False
    assert ChatNote.objects.exists() is False


def test_feedback_with_an_unknown_value_is_invalid_request(api_client, workflow):
    reply = reply_of(answered(workflow))

    response = api_client.post(
        chat_url(workflow, f"/messages/{reply.uid}/feedback"), {"value": "meh"}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert ChatFeedback.objects.exists() is False


def test_switch_moves_the_path_to_the_other_version(api_client, workflow):
    admission = answered(workflow)
    edit = services.chat_edit(workflow=workflow, message_uid=admission.message.uid, text="Other")
    async_to_sync(execute_run)(edit.run.run_id)
    revision = ChatThread.objects.get().revision

    response = api_client.post(
        chat_url(workflow, "/switch"),
        {"message_id": admission.message.uid, "expected_revision": revision},
        format="json",
    )

    assert response.status_code == 200
    assert response.json() == {"leaf_id": reply_of(admission).uid, "revision": revision + 1, "changed": True}


def test_stop_of_a_queued_run_answers_stopped(api_client, workflow):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")

    response = api_client.post(chat_url(workflow, f"/runs/{admission.run.run_id}/stop"))

    assert response.status_code == 200
    assert response.json()["state"] == "stopped"
    assert ChatRun.objects.get().state == "stopped"


def test_stop_of_a_finished_run_is_not_stoppable(api_client, workflow):
    admission = answered(workflow)

    response = api_client.post(chat_url(workflow, f"/runs/{admission.run.run_id}/stop"))

    assert response.status_code == 409
    assert response.json() == {
        "code": "not_stoppable",
        "message": response.json()["message"],
        "extra": {"state": "finished"},
    }


def test_run_snapshot_carries_the_durable_draft(api_client, workflow):
    admission = answered(workflow)
    run = ChatRun.objects.get()

    response = api_client.get(chat_url(workflow, f"/runs/{admission.run.run_id}"))

    assert response.status_code == 200
    body = response.json()
    assert body["run_id"] == run.run_id
    assert body["state"] == "finished"
    assert body["text"] == run.draft_text
    assert body["seq"] == run.last_seq
    assert body["last_seq"] == run.last_seq
    assert body["steps"] == []


def test_unknown_run_is_404(api_client, workflow):
    response = api_client.get(chat_url(workflow, "/runs/run_nope"))

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_send_to_a_workflow_never_deployed_is_not_running(api_client, owner):
    from tests.conftest import make_workflow

    draft = make_workflow(owner, deploy=False, name="Draft")

    response = api_client.post(chat_url(draft, "/messages"), {"text": "Hi"}, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "not_running"
    assert ChatMessage.objects.exists() is False


# --- bad input: 4xx with codes, nothing written ------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"text": ""}, 400, "invalid_request", "text"),
        ({"text": "   \n "}, 400, "invalid_request", "text"),
        ({}, 400, "invalid_request", "text"),
        ({"text": 42}, 400, "invalid_request", "text"),
        ({"text": "x" * 50_001}, 400, "message_too_long", None),
        ({"text": "Hi", "client_message_id": "has space"}, 400, "invalid_request", "client_message_id"),
        ({"text": "Hi", "client_message_id": "x" * 101}, 400, "invalid_request", "client_message_id"),
        ({"text": "Hi", "client_message_id": 123}, 400, "invalid_request", "client_message_id"),
        ({"text": "Hi", "expected_revision": "3"}, 400, "invalid_request", "expected_revision"),
        ({"text": "Hi", "expected_revision": 1.5}, 400, "invalid_request", "expected_revision"),
        ({"text": "Hi", "expected_revision": True}, 400, "invalid_request", "expected_revision"),
        ({"text": "Hi", "expected_revision": -1}, 400, "invalid_request", "expected_revision"),
    ],
)
def test_bad_send_is_refused_with_a_code_and_writes_nothing(api_client, workflow, body, status, code, field):
    response = api_client.post(chat_url(workflow, "/messages"), body, format="json")

    assert response.status_code == status
    assert response.json()["code"] == code
    if field is not None:
        assert field in response.json()["extra"]["fields"]
    assert ChatThread.objects.exists() is False
    assert ChatMessage.objects.exists() is False
    assert ChatRun.objects.exists() is False


def test_message_too_long_names_the_limit(api_client, workflow):
    response = api_client.post(chat_url(workflow, "/messages"), {"text": "x" * 50_001}, format="json")

    assert response.json()["extra"] == {"limit": 50_000, "length": 50_001}


def test_a_message_of_exactly_50000_characters_is_admitted(api_client, workflow):
    response = api_client.post(chat_url(workflow, "/messages"), {"text": "x" * 50_000}, format="json")

    assert response.status_code == 202
    assert len(ChatMessage.objects.get().text) == 50_000


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"text": ""}, "invalid_request"),
        ({"text": "y" * 50_001}, "message_too_long"),
        ({"text": "ok", "client_message_id": "bad id!"}, "invalid_request"),
        ({"text": "ok", "expected_revision": "2"}, "invalid_request"),
    ],
)
def test_bad_edit_is_refused_with_a_code_and_writes_nothing(api_client, workflow, body, code):
    admission = answered(workflow)
    before = chat_state(workflow)

    response = api_client.post(
        chat_url(workflow, f"/messages/{admission.message.uid}/edit"), body, format="json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == code
    assert chat_state(workflow) == before


def test_retry_with_a_non_integer_revision_is_refused_and_writes_nothing(api_client, workflow):
    reply = reply_of(answered(workflow))
    before = chat_state(workflow)

    response = api_client.post(
        chat_url(workflow, f"/messages/{reply.uid}/retry"), {"expected_revision": "2"}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert chat_state(workflow) == before


def test_switch_without_a_message_id_is_invalid_request(api_client, workflow):
    answered(workflow)
    before = chat_state(workflow)

    response = api_client.post(chat_url(workflow, "/switch"), {}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert chat_state(workflow) == before


def test_malformed_json_body_is_invalid_request(api_client, workflow):
    response = api_client.post(chat_url(workflow, "/messages"), "{not json", content_type="application/json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert ChatMessage.objects.exists() is False


# --- throttling --------------------------------------------------------------------------------------


def test_sends_past_the_chat_send_rate_are_throttled(api_client, workflow, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "chat_send": "2/min"},
    }
    first = api_client.post(chat_url(workflow, "/messages"), {"text": "one"}, format="json")
    services.chat_stop(workflow=workflow, run_id=first.json()["run"]["run_id"])
    second = api_client.post(chat_url(workflow, "/messages"), {"text": "two"}, format="json")
    services.chat_stop(workflow=workflow, run_id=second.json()["run"]["run_id"])

    third = api_client.post(chat_url(workflow, "/messages"), {"text": "three"}, format="json")

    assert [first.status_code, second.status_code, third.status_code] == [202, 202, 429]
    assert third.json()["code"] == "throttled"
    assert third.has_header("Retry-After")
    assert ChatMessage.objects.count() == 2


# --- authorization matrix ---------------------------------------------------------------------------


def _endpoints(workflow: Any, admission: services.Admission) -> list[tuple[str, str, dict[str, Any] | None]]:
    question = admission.message.uid
    reply = admission.run.reply_message_uid
    run = admission.run.run_id
    chat = admission.message.thread_id
    return [
        ("get", chat_url(workflow), None),
        ("delete", chat_url(workflow), None),
        ("post", chat_url(workflow, "/messages"), {"text": "hijack"}),
        ("post", chat_url(workflow, f"/messages/{question}/edit"), {"text": "hijack"}),
        ("post", chat_url(workflow, f"/messages/{reply}/retry"), {}),
        ("post", chat_url(workflow, f"/messages/{reply}/feedback"), {"value": "down"}),
        ("post", chat_url(workflow, "/switch"), {"message_id": question}),
        ("get", chat_url(workflow, f"/runs/{run}"), None),
        ("post", chat_url(workflow, f"/runs/{run}/stop"), None),
        ("post", chat_url(workflow, "/archive"), None),
        ("get", f"{chat_url(workflow)}s", None),
        ("get", f"{chat_url(workflow)}s/{chat}", None),
        ("patch", f"{chat_url(workflow)}s/{chat}", {"title": "hijack"}),
        ("post", f"{chat_url(workflow)}s/{chat}/purge", {"confirm": True}),
    ]


ENDPOINT_NAMES = [
    "history",
    "clear",
    "send",
    "edit",
    "retry",
    "feedback",
    "switch",
    "run",
    "stop",
    "archive",
    "chats",
    "chat",
    "rename",
    "purge",
]


@pytest.mark.parametrize("index", range(len(ENDPOINT_NAMES)), ids=ENDPOINT_NAMES)
def test_another_owner_gets_404_and_nothing_changes(other_client, workflow, index):
    admission = answered(workflow)
    method, url, body = _endpoints(workflow, admission)[index]
    before = chat_state(workflow)

    response = getattr(other_client, method)(url, body, format="json")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert chat_state(workflow) == before


@pytest.mark.parametrize("index", range(len(ENDPOINT_NAMES)), ids=ENDPOINT_NAMES)
def test_unauthenticated_requests_are_refused_and_nothing_changes(anon_client, workflow, index):
    admission = answered(workflow)
    method, url, body = _endpoints(workflow, admission)[index]
    before = chat_state(workflow)

    response = getattr(anon_client, method)(url, body, format="json")

    assert response.status_code in (401, 403)
    assert response.json()["code"] in ("not_authenticated", "permission_denied")
    assert chat_state(workflow) == before


def test_another_owners_run_id_under_my_own_workflow_is_404(api_client, workflow, other_owner):
    from tests.conftest import make_workflow

    theirs = make_workflow(other_owner, name="Theirs")
    their_run = services.chat_send(owner_id=theirs.owner_id, workflow_id=theirs.pk, text="secret").run

    snapshot = api_client.get(chat_url(workflow, f"/runs/{their_run.run_id}"))
    stop = api_client.post(chat_url(workflow, f"/runs/{their_run.run_id}/stop"))

    assert snapshot.status_code == 404
    assert stop.status_code == 404
    assert ChatRun.objects.get(run_id=their_run.run_id).state == "queued"


# --- admin --------------------------------------------------------------------------------------------


def test_staff_see_the_thread_with_its_messages_by_parent_and_the_run_list(client, staff, workflow):
    admission = answered(workflow)
    edit = services.chat_edit(workflow=workflow, message_uid=admission.message.uid, text="Edited")
    client.force_login(staff)

    thread_page = client.get(f"/admin/chat/chatthread/{ChatThread.objects.get().pk}/change/")
    runs_page = client.get("/admin/chat/chatrun/", {"state__exact": "queued"})
    # Admin urls carry the key quoted: "run_22…" read raw would unquote to 'run"…'.
    run_page = client.get(reverse("admin:chat_chatrun_change", args=[quote(edit.run.run_id)]))

    assert thread_page.status_code == 200
    html = thread_page.content.decode()
    assert f"{admission.message.uid} <small>← root</small>" in html
    assert f"· {admission.run.reply_message_uid} <small>← {admission.message.uid}</small>" in html
    assert f"{edit.message.uid} <small>← root</small>" in html
    assert runs_page.status_code == 200
    assert edit.run.run_id in runs_page.content.decode()
    assert admission.run.run_id not in runs_page.content.decode()
    assert run_page.status_code == 200


def test_staff_can_open_the_note_and_feedback_lists(client, staff, workflow):
    admission = answered(workflow)
    services.chat_feedback(workflow=workflow, message_uid=admission.run.reply_message_uid, value="up")
    client.force_login(staff)

    assert client.get("/admin/chat/chatnote/").status_code == 200
    assert client.get("/admin/chat/chatfeedback/").status_code == 200
    assert client.get(f"/admin/chat/chatnote/{ChatNote.objects.get().pk}/change/").status_code == 200


# --- client_message_id: idempotent for the same message, refused for another -----------------------------


def test_a_resend_with_the_same_client_message_id_and_text_is_idempotent(api_client, workflow):
    first = api_client.post(
        chat_url(workflow, "/messages"), {"text": "Hi", "client_message_id": "c-1"}, format="json"
    )

    again = api_client.post(
        chat_url(workflow, "/messages"), {"text": "Hi", "client_message_id": "c-1"}, format="json"
    )

    assert (again.status_code, again.json()["created"]) == (202, False)
    assert again.json()["message"]["id"] == first.json()["message"]["id"]
    assert ChatMessage.objects.count() == 1


def test_a_client_message_id_reused_with_another_text_is_refused_and_writes_nothing(api_client, workflow):
    first = api_client.post(
        chat_url(workflow, "/messages"), {"text": "Hi", "client_message_id": "c-1"}, format="json"
    )
    services.chat_stop(workflow=workflow, run_id=first.json()["run"]["run_id"])
    before = chat_state(workflow)

    response = api_client.post(
        chat_url(workflow, "/messages"), {"text": "Something else", "client_message_id": "c-1"}, format="json"
    )

    assert response.status_code == 409
    assert response.json() == {
        "code": "idempotency_key_reused",
        "message": "This client_message_id was already used for a different message.",
        "extra": {"message_id": first.json()["message"]["id"]},
    }
    assert chat_state(workflow) == before


def test_an_edit_reusing_a_sends_client_message_id_is_refused_and_makes_no_edit(api_client, workflow):
    admission = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hello there", client_message_id="c-1"
    )
    assert async_to_sync(execute_run)(admission.run.run_id) == "finished"
    before = chat_state(workflow)

    response = api_client.post(
        chat_url(workflow, f"/messages/{admission.message.uid}/edit"),
        {"text": "Hello there", "client_message_id": "c-1"},
        format="json",
    )

    assert (response.status_code, response.json()["code"]) == (409, "idempotency_key_reused")
    assert chat_state(workflow) == before
    assert ChatMessage.objects.filter(meta__edit_of=admission.message.uid).exists() is False


def test_a_repeated_edit_with_its_client_message_id_is_idempotent(api_client, workflow):
    admission = answered(workflow)
    url = chat_url(workflow, f"/messages/{admission.message.uid}/edit")

    first = api_client.post(url, {"text": "Hello again", "client_message_id": "e-1"}, format="json")
    again = api_client.post(url, {"text": "Hello again", "client_message_id": "e-1"}, format="json")
    other = api_client.post(url, {"text": "Hello twice", "client_message_id": "e-1"}, format="json")

    assert (first.status_code, first.json()["created"]) == (202, True)
    assert (again.status_code, again.json()["created"]) == (202, False)
    assert again.json()["message"]["id"] == first.json()["message"]["id"]
    assert (other.status_code, other.json()["code"]) == (409, "idempotency_key_reused")
    assert ChatMessage.objects.filter(meta__edit_of=admission.message.uid).count() == 1


def test_retrying_an_answer_that_is_not_the_last_is_a_conflict_and_starts_no_run(api_client, workflow):
    first = answered(workflow, "First question")
    answered(workflow, "Second question")

    response = api_client.post(
        chat_url(workflow, f"/messages/{reply_of(first).uid}/retry"), {}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (409, "not_editable")
    assert ChatRun.objects.count() == 2
