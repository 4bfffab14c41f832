"""Every destructive admin action asks first on a page that counts everything it will erase, the rows
its service erases beyond the foreign-key cascade included, and does nothing until confirmed: workflow
delete (one and bulk), Clear Context, Clear Memory, the expiry and archive purges, the chat purge. A
user who owns workflows is not deleted; the page says why and links to transfer or delete each."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat import services as chat_services
from chat.models import ChatThread
from conversations.models import AgentConversation, BranchSnapshot, ConversationArchive, ConversationMessage
from conversations.services import conversation_append
from conversations.types import ConversationKey
from graphs.models import Workflow
from memory import services as memory_services
from memory.models import MemoryItem, MemoryNamespace, MemoryRevision
from memory.scope import memory_scope
from opencompany.llm.wire import make_assistant, make_text, make_user
from tests.conftest import make_workflow, node_id

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def staff_client(staff: Any) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def _totals(html: str) -> dict[str, int]:
    """The delete page's summary: label → count."""
    summary = html.split("<h2>Summary</h2>", 1)[1].split("</ul>", 1)[0]
    return {label: int(count) for label, count in re.findall(r"<li>([^<:]+): (\d+)</li>", summary)}


def _confirm_totals(html: str) -> dict[str, int]:
    return {
        label: int(count)
        for label, count in re.findall(r'<li data-key="[^"]*">([^<:]+): <strong>(\d+)</strong></li>', html)
    }


def _remember(workflow: Workflow, *contents: str) -> list[str]:
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    return [
        memory_services.memory_remember(scope=scope, content=c, actor=f"owner:{workflow.owner_id}").memory[
            "id"
        ]
        for c in contents
    ]


def _key(workflow: Workflow) -> ConversationKey:
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))


def test_the_workflow_delete_page_counts_the_memory_and_context_the_service_erases(staff_client, workflow):
    ids = _remember(workflow, "The boat is at pier 7", "Tea, no sugar")
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    memory_services.memory_update(
        scope=scope, memory_id=ids[0], expected_version=1, patch={"title": "Boat"}, actor="owner:1"
    )
    conversation_append(
        key=_key(workflow),
        messages=[make_user("hi"), make_assistant([make_text("hello")])],
        expected_length=0,
    )
    url = reverse("admin:graphs_workflow_delete", args=[quote(workflow.pk)])

    page = staff_client.get(url)

    assert page.status_code == 200
    totals = _totals(page.content.decode())
    assert {
        k: totals[k]
        for k in (
            "Workflows",
            "Memory items",
            "Memory revisions (history)",
            "Memory namespaces",
            "Contexts (agent conversations)",
            "Context messages",
            "Generations (deployments)",
        )
    } == {
        "Workflows": 1,
        "Memory items": 2,
        "Memory revisions (history)": 3,
        "Memory namespaces": 1,
        "Contexts (agent conversations)": 1,
        "Context messages": 2,
        "Generations (deployments)": 1,
    }
    assert MemoryItem.objects.count() == 2  # the page deletes nothing

    staff_client.post(url, {"post": "yes"})

    assert Workflow.objects.exists() is False
    assert (MemoryItem.objects.count(), MemoryRevision.objects.count()) == (0, 0)
    assert (AgentConversation.objects.count(), ConversationMessage.objects.count()) == (0, 0)


def test_the_bulk_workflow_delete_page_totals_every_selected_workflow(staff_client, owner):
    first, second = make_workflow(owner, name="One"), make_workflow(owner, name="Two")
    _remember(first, "a")
    _remember(second, "b", "c")

    page = staff_client.post(
        reverse("admin:graphs_workflow_changelist"),
        {"action": "delete_selected", "_selected_action": [first.pk, second.pk]},
    )

    assert page.status_code == 200
    totals = _totals(page.content.decode())
    assert (totals["Workflows"], totals["Memory items"], totals["Memory revisions (history)"]) == (2, 3, 3)
    assert Workflow.objects.count() == 2


def test_a_user_who_owns_workflows_gets_a_page_with_links_to_transfer_or_delete_each(
    staff_client, workflow, owner
):
    url = reverse("admin:auth_user_delete", args=[owner.pk])

    page = staff_client.get(url)
    posted = staff_client.post(url, {"post": "yes"})

    assert page.status_code == 200
    html = page.content.decode()
    assert "“owner” owns workflows, so the account is not deleted." in html
    transfer = reverse("admin:graphs_workflow_transfer", args=[quote(workflow.pk)])
    delete = reverse("admin:graphs_workflow_delete", args=[quote(workflow.pk)])
    assert f'owner owns workflow “Demo”: <a href="{transfer}">transfer it to another owner</a>' in html
    assert f'<a href="{delete}">delete it</a>' in html
    assert "permission" not in html
    assert posted.status_code == 200
    assert User.objects.filter(pk=owner.pk).exists() is True


def test_the_bulk_user_delete_says_which_users_own_workflows_and_deletes_none(staff_client, workflow, owner):
    idle = User.objects.create_user(username="idle", password="idle-pass-123")
    changelist = reverse("admin:auth_user_changelist")

    page = staff_client.post(
        changelist, {"action": "delete_selected", "_selected_action": [owner.pk, idle.pk]}
    )
    confirmed = staff_client.post(
        changelist, {"action": "delete_selected", "_selected_action": [owner.pk, idle.pk], "post": "yes"}
    )

    html = page.content.decode()
    assert "Some of the selected users own workflows, so no user is deleted." in html
    assert "owner owns workflow “Demo”" in html
    assert "permission" not in html
    assert confirmed.status_code == 200
    assert set(User.objects.filter(pk__in=[owner.pk, idle.pk]).values_list("username", flat=True)) == {
        "owner",
        "idle",
    }


def test_a_user_without_workflows_is_deleted_after_the_usual_page(staff_client, other_owner):
    url = reverse("admin:auth_user_delete", args=[other_owner.pk])

    assert "Are you sure" in staff_client.get(url).content.decode()
    assert staff_client.post(url, {"post": "yes"}).status_code == 302
    assert User.objects.filter(pk=other_owner.pk).exists() is False


def test_clear_context_asks_first_with_the_messages_and_notes_it_removes(staff_client, workflow):
    conversation_append(
        key=_key(workflow),
        messages=[make_user("hi"), make_assistant([make_text("hello")]), make_user("again")],
        expected_length=0,
    )
    AgentConversation.objects.update(notes=[{"text": "a"}, {"text": "b"}])
    row = AgentConversation.objects.get()
    changelist = reverse("admin:conversations_agentconversation_changelist")
    selection = {"action": "clear_conversations", "_selected_action": [row.pk]}

    page = staff_client.post(changelist, selection)

    assert page.status_code == 200
    assert _confirm_totals(page.content.decode()) == {
        "Context messages removed": 3,
        "Working notes removed": 2,
        "Archives written (a copy of both)": 1,
    }
    assert ConversationMessage.objects.count() == 3

    done = staff_client.post(changelist, {**selection, "confirm": "yes"})

    assert done.status_code == 302
    assert ConversationMessage.objects.count() == 0
    assert ConversationArchive.objects.get().length == 3


def test_clear_memory_asks_first_with_the_items_and_revisions_it_erases(staff_client, workflow):
    ids = _remember(workflow, "one", "two")
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    memory_services.memory_update(
        scope=scope, memory_id=ids[1], expected_version=1, patch={"content": "two!"}, actor="owner:1"
    )
    namespace = MemoryNamespace.objects.get()
    changelist = reverse("admin:memory_memorynamespace_changelist")
    selection = {"action": "clear_memory", "_selected_action": [namespace.pk]}

    page = staff_client.post(changelist, selection)

    assert _confirm_totals(page.content.decode()) == {
        "Memory items removed": 2,
        "Revisions whose content is erased": 3,
        "Removal records written (no content)": 2,
        "Embeddings removed": 0,
    }
    assert MemoryItem.objects.count() == 2

    staff_client.post(changelist, {**selection, "confirm": "yes"})

    assert MemoryItem.objects.exists() is False
    assert (
        list(MemoryRevision.objects.filter(operation="clear").values_list("actor", flat=True))
        == [f"staff:{page.wsgi_request.user.pk}"] * 2
    )


def test_the_expiry_purge_asks_first_and_counts_every_namespace(staff_client, workflow, owner):
    other = make_workflow(owner, name="Other")
    _remember(workflow, "stays")
    expired = _remember(workflow, "old") + _remember(other, "older")
    MemoryItem.objects.filter(memory_id__in=expired).update(expires_at=timezone.now() - timedelta(days=1))
    kept = MemoryItem.objects.get(content="stays")
    changelist = reverse("admin:memory_memoryitem_changelist")
    selection = {"action": "purge_expired", "_selected_action": [kept.pk]}

    page = staff_client.post(changelist, selection)

    assert _confirm_totals(page.content.decode())["Expired Memory items removed (every workflow)"] == 2
    assert MemoryItem.objects.count() == 3

    staff_client.post(changelist, {**selection, "confirm": "yes"})

    assert list(MemoryItem.objects.values_list("content", flat=True)) == ["stays"]


def test_the_archive_purge_asks_first_with_how_many_archives_are_past_retention(
    staff_client, workflow, settings
):
    settings.OPENCOMPANY_CONTEXT_ARCHIVE_DAYS = 30
    for text in ("one", "two"):
        conversation_append(key=_key(workflow), messages=[make_user(text)], expected_length=0)
        chat_services.chat_archive(workflow=workflow)
    old = ConversationArchive.objects.order_by("pk").first()
    assert old is not None
    ConversationArchive.objects.filter(pk=old.pk).update(archived_at=timezone.now() - timedelta(days=31))
    changelist = reverse("admin:conversations_conversationarchive_changelist")
    selection = {"action": "purge_expired", "_selected_action": [old.pk]}

    page = staff_client.post(changelist, selection)

    assert _confirm_totals(page.content.decode()) == {
        "Context archives older than 30 days (every workflow)": 1
    }
    assert ConversationArchive.objects.count() == 2

    staff_client.post(changelist, {**selection, "confirm": "yes"})

    assert ConversationArchive.objects.count() == 1


def test_the_chat_purge_counts_the_branch_snapshots_its_service_erases(staff_client, workflow, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    sent = chat_services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first")
    chat_services.chat_end_run(run_id=sent.run.run_id)
    thread = ChatThread.objects.get()
    chat_services.chat_archive(workflow=workflow)
    # A snapshot still kept under the archived chat's key: the purge service deletes it with the chat.
    BranchSnapshot.objects.create(
        created_at=timezone.now(),
        owner_id=workflow.owner_id,
        thread_key=thread.snapshot_key,
        leaf_uid="m_leaf",
        agent_node_id=node_id(workflow, "aiAgent"),
        workflow_id=workflow.pk,
        generation=1,
        messages=[],
        notes=[],
        bytes=2,
    )
    changelist = reverse("admin:chat_chatthread_changelist")
    selection = {"action": "purge_chats", "_selected_action": [thread.pk]}

    page = staff_client.post(changelist, selection)

    assert _confirm_totals(page.content.decode()) == {
        "Archived chats": 1,
        "Chat messages": 1,
        "Chat runs": 1,
        "Chat notes for the agent": 0,
        "Answer ratings": 0,
        "Branch snapshots": 1,
    }

    staff_client.post(changelist, {**selection, "confirm": "yes"})

    assert ChatThread.objects.filter(pk=thread.pk).exists() is False
    assert BranchSnapshot.objects.exists() is False
