"""Past chats: New chat archives the current chat (read-only, listed), rename, purge, the API and admin."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction
from django.utils import timezone

from chat import services
from chat.executor import execute_run
from chat.models import ChatFeedback, ChatMessage, ChatNote, ChatRun, ChatThread
from chat.selectors import chat_transcript, chats_of, derived_title
from conversations.models import ConversationArchive
from conversations.selectors import conversation_cursor, notes_read
from conversations.types import ConversationKey
from memory.models import MemoryItem
from opencompany.core.errors import ApplicationError
from opencompany.core.events import chat_group
from tests.conftest import make_workflow, node_id

pytestmark = pytest.mark.django_db(transaction=True)


def send_and_run(workflow: Any, text: str) -> services.Admission:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    assert async_to_sync(execute_run)(admission.run.run_id) == "finished"
    return admission


def key_of(workflow: Any) -> ConversationKey:
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))


def chats_url(workflow: Any, tail: str = "") -> str:
    return f"/api/v1/workflows/{workflow.pk}/chats{tail}"


def rows() -> dict[str, Any]:
    """Every chat row, for "nothing changed" assertions."""
    return {
        "threads": list(
            ChatThread.objects.order_by("id").values_list("id", "workflow_id", "title", "archived_at")
        ),
        "messages": ChatMessage.objects.count(),
        "runs": ChatRun.objects.count(),
        "notes": ChatNote.objects.count(),
        "feedback": ChatFeedback.objects.count(),
    }


# --- New chat archives ----------------------------------------------------------------------------


def test_new_chat_keeps_the_old_chat_read_only_and_gives_the_agent_a_new_mind(workflow):
    first = send_and_run(workflow, "remember that the boiler code is 4471")
    send_and_run(workflow, "note: check the boiler pressure")
    services.chat_feedback(workflow=workflow, message_uid=first.run.reply_message_uid, value="up")
    old = ChatThread.objects.get()
    assert len(notes_read(key=key_of(workflow)).entries) == 1

    result = services.chat_archive(workflow=workflow)

    assert result == {
        "cleared": True,
        "archived_chat_id": old.uid,
        "runs_ended": [],
        "conversations_archived": 1,
    }
    archived = ChatThread.objects.get(pk=old.pk)
    assert archived.workflow_id is None
    assert archived.home_workflow_id == workflow.pk
    assert archived.archived_at is not None
    assert ChatMessage.objects.filter(thread=archived).count() == 4
    assert ChatFeedback.objects.get().thread_id == archived.pk
    assert conversation_cursor(key=key_of(workflow)).length == 0
    assert notes_read(key=key_of(workflow)).entries == []
    assert ConversationArchive.objects.count() == 1
    assert list(MemoryItem.objects.values_list("content", flat=True)) == ["the boiler code is 4471"]


def test_the_next_message_starts_a_fresh_current_chat(workflow):
    send_and_run(workflow, "Hello there")
    services.chat_archive(workflow=workflow)

    admission = send_and_run(workflow, "A new start")

    current = ChatThread.objects.get(workflow=workflow)
    assert admission.message.thread_id == current.pk
    assert current.home_workflow_id == workflow.pk
    assert current.revision == 2
    assert ChatMessage.objects.get(uid=admission.message.uid).parent_uid == ""
    assert ChatThread.objects.filter(home_workflow=workflow).count() == 2


def test_new_chat_ends_a_live_run_and_keeps_its_draft_in_the_archived_chat(workflow, events):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hello")
    ChatRun.objects.filter(run_id=admission.run.run_id).update(
        state=ChatRun.State.RUNNING, draft_text="Half an answ", last_seq=4
    )
    events.subscribe(chat_group(workflow.pk))

    result = services.chat_archive(workflow=workflow)

    assert result["runs_ended"] == [admission.run.run_id]
    run = ChatRun.objects.get()
    assert (run.state, run.error_code) == ("error", "cleared")
    reply = ChatMessage.objects.get(uid=run.reply_message_uid)
    assert (reply.text, reply.status, reply.thread_id) == (
        "Half an answ",
        "error",
        admission.message.thread_id,
    )
    published = [e["type"] for e in events.drain()]
    assert published == ["run.error", "thread.updated", "chats.updated", "thread.updated"]
    assert services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Next").created


def test_new_chat_on_an_empty_chat_archives_nothing(workflow):
    result = services.chat_archive(workflow=workflow)

    assert result == {
        "cleared": False,
        "archived_chat_id": None,
        "runs_ended": [],
        "conversations_archived": 0,
    }
    assert ChatThread.objects.exists() is False


def test_a_thread_is_current_for_its_home_workflow_or_archived_never_both(workflow, owner):
    other = make_workflow(owner, name="Other")
    with pytest.raises(IntegrityError), transaction.atomic():
        ChatThread.objects.create(workflow=workflow, home_workflow=other)
    with pytest.raises(IntegrityError), transaction.atomic():
        ChatThread.objects.create(workflow=None, home_workflow=workflow)
    with pytest.raises(IntegrityError), transaction.atomic():
        ChatThread.objects.create(workflow=workflow, home_workflow=workflow, archived_at=timezone.now())
    assert ChatThread.objects.exists() is False


# --- archived chats are read-only -------------------------------------------------------------------


def test_an_archived_chat_takes_no_rating_edit_retry_or_switch(workflow):
    first = send_and_run(workflow, "Hello there")
    services.chat_archive(workflow=workflow)
    before = rows()
    reply = first.run.reply_message_uid

    refusals = [
        lambda: services.chat_feedback(workflow=workflow, message_uid=reply, value="down"),
        lambda: services.chat_edit(workflow=workflow, message_uid=first.message.uid, text="changed"),
        lambda: services.chat_retry(workflow=workflow, message_uid=reply),
        lambda: services.chat_switch(workflow=workflow, message_uid=first.message.uid),
    ]
    codes = []
    for refuse in refusals:
        with pytest.raises(ApplicationError) as caught:
            refuse()
        codes.append(caught.value.code)

    assert codes == ["not_found"] * 4
    assert rows() == before


def test_the_transcript_of_an_archived_chat_has_its_versions_and_ratings(workflow):
    first = send_and_run(workflow, "Tell me something")
    services.chat_feedback(workflow=workflow, message_uid=first.run.reply_message_uid, value="up")
    retry = services.chat_retry(workflow=workflow, message_uid=first.run.reply_message_uid)
    async_to_sync(execute_run)(retry.run.run_id)
    services.chat_archive(workflow=workflow)
    thread = ChatThread.objects.get()

    transcript = chat_transcript(thread=thread)

    path = transcript["path"]
    assert [m["id"] for m in path] == [first.message.uid, retry.run.reply_message_uid]
    assert path[1]["versions"] == {
        "index": 2,
        "count": 2,
        "ids": [first.run.reply_message_uid, retry.run.reply_message_uid],
    }
    assert [m["editable"] for m in path] == [False, False]
    assert transcript["chat"]["current"] is False
    assert transcript["chat"]["message_count"] == 3
    assert transcript["chat"]["title"] == "Tell me something"


# --- list, title, rename ----------------------------------------------------------------------------


def test_titles_come_from_the_first_line_of_the_first_message():
    assert derived_title("\n  Plan the   trip\nto Lisbon") == "Plan the trip"
    assert derived_title("# **Boiler** `code`\nmore") == "Boiler code"
    assert derived_title("```python\nprint(1)\n```") == "print(1)"
    assert derived_title("- [x] done item") == "done item"
    assert derived_title("") == "New chat"
    assert derived_title("x" * 100) == "x" * 79 + "…"


def test_chats_are_listed_newest_first_with_title_date_and_count(api_client, workflow):
    send_and_run(workflow, "First chat question")
    services.chat_archive(workflow=workflow)
    send_and_run(workflow, "Second chat\nwith two lines")
    send_and_run(workflow, "And more")
    first, second = ChatThread.objects.order_by("id")

    response = api_client.get(chats_url(workflow))

    assert response.status_code == 200
    body = response.json()
    assert (body["next_cursor"], body["has_more"]) == (None, False)
    assert [
        (c["id"], c["title"], c["titled"], c["current"], c["message_count"]) for c in body["results"]
    ] == [
        (second.uid, "Second chat", False, True, 4),
        (first.uid, "First chat question", False, False, 2),
    ]
    assert body["results"][1]["archived_at"] == first.archived_at.isoformat().replace("+00:00", "Z")
    assert body["results"][0]["archived_at"] is None


def test_the_chat_list_pages_with_a_cursor_in_a_fixed_number_of_queries(
    api_client, workflow, django_assert_num_queries
):
    for n in range(3):
        send_and_run(workflow, f"Chat {n}")
        services.chat_archive(workflow=workflow)

    with django_assert_num_queries(3):  # token auth, workflow, one page with its counts and titles
        first = api_client.get(chats_url(workflow), {"limit": 2})
    second = api_client.get(chats_url(workflow), {"limit": 2, "cursor": first.json()["next_cursor"]})

    assert [c["title"] for c in first.json()["results"]] == ["Chat 2", "Chat 1"]
    assert [c["title"] for c in second.json()["results"]] == ["Chat 0"]
    assert (second.json()["next_cursor"], second.json()["has_more"]) == (None, False)


def test_an_archived_chat_opens_read_only_through_the_api(api_client, workflow):
    first = send_and_run(workflow, "Hello there")
    services.chat_feedback(workflow=workflow, message_uid=first.run.reply_message_uid, value="down")
    services.chat_archive(workflow=workflow)
    thread = ChatThread.objects.get()

    response = api_client.get(chats_url(workflow, f"/{thread.uid}"))

    assert response.status_code == 200
    body = response.json()
    assert body["chat"]["id"] == thread.uid
    assert [(m["role"], m["feedback"], m["editable"]) for m in body["path"]] == [
        ("user", None, False),
        ("assistant", "down", False),
    ]


def test_rename_sets_a_title_and_a_blank_one_goes_back_to_the_first_message(api_client, workflow):
    send_and_run(workflow, "Hello there")
    services.chat_archive(workflow=workflow)
    thread = ChatThread.objects.get()

    renamed = api_client.patch(
        chats_url(workflow, f"/{thread.uid}"), {"title": "  Boiler   notes "}, format="json"
    )
    stored = ChatThread.objects.get().title
    cleared = api_client.patch(chats_url(workflow, f"/{thread.uid}"), {"title": ""}, format="json")

    assert renamed.status_code == 200
    assert (renamed.json()["title"], renamed.json()["titled"]) == ("Boiler notes", True)
    assert stored == "Boiler notes"
    assert (cleared.json()["title"], cleared.json()["titled"]) == ("Hello there", False)
    assert ChatThread.objects.get().title == ""


@pytest.mark.parametrize(
    ("body", "field"),
    [({"title": "x" * 201}, "title"), ({"title": 5}, "title"), ({}, "title")],
)
def test_a_bad_rename_is_refused_and_writes_nothing(api_client, workflow, body, field):
    send_and_run(workflow, "Hello there")
    thread = ChatThread.objects.get()
    before = rows()

    response = api_client.patch(chats_url(workflow, f"/{thread.uid}"), body, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert list(response.json()["extra"]["fields"]) == [field]
    assert rows() == before


def test_another_workflows_chat_id_is_not_found(api_client, workflow, owner):
    other = make_workflow(owner, name="Other")
    send_and_run(other, "Elsewhere")
    services.chat_archive(workflow=other)
    theirs = ChatThread.objects.get()
    before = rows()

    read = api_client.get(chats_url(workflow, f"/{theirs.uid}"))
    rename = api_client.patch(chats_url(workflow, f"/{theirs.uid}"), {"title": "mine"}, format="json")
    purge = api_client.post(chats_url(workflow, f"/{theirs.uid}/purge"), {"confirm": True}, format="json")

    assert [read.status_code, rename.status_code, purge.status_code] == [404, 404, 404]
    assert {read.json()["code"], rename.json()["code"], purge.json()["code"]} == {"not_found"}
    assert rows() == before


# --- purge --------------------------------------------------------------------------------------------


def test_purge_deletes_an_archived_chat_and_only_it(api_client, workflow):
    first = send_and_run(workflow, "Old chat")
    services.chat_feedback(workflow=workflow, message_uid=first.run.reply_message_uid, value="up")
    services.chat_archive(workflow=workflow)
    old = ChatThread.objects.get()
    kept = send_and_run(workflow, "Current chat")

    response = api_client.post(chats_url(workflow, f"/{old.uid}/purge"), {"confirm": True}, format="json")

    assert response.status_code == 200
    assert response.json() == {"purged": True, "chat_id": old.uid, "messages_deleted": 2}
    assert ChatThread.objects.filter(pk=old.pk).exists() is False
    assert set(ChatMessage.objects.values_list("thread_id", flat=True)) == {kept.message.thread_id}
    assert list(ChatRun.objects.values_list("run_id", flat=True)) == [kept.run.run_id]
    assert ChatFeedback.objects.exists() is False
    assert ChatNote.objects.filter(thread_id=old.pk).exists() is False


@pytest.mark.parametrize("body", [{}, {"confirm": False}, {"confirm": "yes please"}])
def test_purge_without_confirmation_is_refused_and_deletes_nothing(api_client, workflow, body):
    send_and_run(workflow, "Old chat")
    services.chat_archive(workflow=workflow)
    old = ChatThread.objects.get()
    before = rows()

    response = api_client.post(chats_url(workflow, f"/{old.uid}/purge"), body, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert list(response.json()["extra"]["fields"]) == ["confirm"]
    assert rows() == before


def test_the_current_chat_cannot_be_purged(api_client, workflow):
    send_and_run(workflow, "Current chat")
    current = ChatThread.objects.get()
    before = rows()

    response = api_client.post(chats_url(workflow, f"/{current.uid}/purge"), {"confirm": True}, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "chat_not_archived"
    assert response.json()["extra"] == {"chat_id": current.uid}
    assert rows() == before


def test_archive_endpoint_is_new_chat(api_client, workflow):
    send_and_run(workflow, "Hello there")
    thread = ChatThread.objects.get()

    response = api_client.post(f"/api/v1/workflows/{workflow.pk}/chat/archive")

    assert response.status_code == 200
    assert response.json()["archived_chat_id"] == thread.uid
    assert ChatThread.objects.get().archived_at is not None
    assert chats_of(workflow=workflow).get().message_count == 2


# --- admin ----------------------------------------------------------------------------------------


def test_staff_archive_a_current_chat_from_the_admin(client, staff, workflow):
    send_and_run(workflow, "Hello there")
    thread = ChatThread.objects.get()
    client.force_login(staff)

    response = client.post(
        "/admin/chat/chatthread/", {"action": "archive_chats", "_selected_action": [thread.pk]}, follow=True
    )

    assert response.status_code == 200
    assert "Archived 1 chat(s)." in response.content.decode()
    assert ChatThread.objects.get().archived_at is not None
    assert conversation_cursor(key=key_of(workflow)).length == 0


def test_staff_purge_an_archived_chat_only_after_the_confirmation_page(client, staff, workflow):
    send_and_run(workflow, "Old chat")
    services.chat_archive(workflow=workflow)
    old = ChatThread.objects.get()
    current = send_and_run(workflow, "Current chat").message.thread_id
    client.force_login(staff)
    selected = {"action": "purge_chats", "_selected_action": [old.pk, current]}

    page = client.post("/admin/chat/chatthread/", selected)

    assert page.status_code == 200
    html = page.content.decode()
    assert f"Chat {old.pk} of" in html
    assert "1 current chat(s) will be left alone" in html
    assert ChatThread.objects.count() == 2

    done = client.post("/admin/chat/chatthread/", {**selected, "confirm": "yes"}, follow=True)

    assert "Purged 1 archived chat(s). Skipped 1 current chat(s)" in done.content.decode()
    assert list(ChatThread.objects.values_list("pk", flat=True)) == [current]


def test_staff_see_current_and_archived_chats_with_their_counts(client, staff, workflow):
    send_and_run(workflow, "Old chat")
    services.chat_archive(workflow=workflow)
    send_and_run(workflow, "Current chat")
    client.force_login(staff)

    archived = client.get("/admin/chat/chatthread/", {"archived": "yes"})
    current = client.get("/admin/chat/chatthread/", {"archived": "no"})

    assert archived.status_code == 200
    assert current.status_code == 200
    assert archived.content.decode().count('<td class="field-state">archived</td>') == 1
    assert current.content.decode().count('<td class="field-state">current</td>') == 1
    assert 'class="field-messages">2<' in archived.content.decode()
