"""Removing a Context archives through the outbox; Reset archives the closed generation;
archives are readable in the admin and purged after the retention window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from conversations.models import AgentConversation, ConversationArchive, ConversationMessage
from conversations.selectors import conversation_load
from conversations.services import conversation_append, conversation_clear, notes_add, notes_read
from conversations.types import ConversationKey
from graphs import services as graph_services
from graphs.models import ContextArchiveOutbox
from graphs.selectors import current_generation
from tests.conversations.conftest import turns

pytestmark = pytest.mark.django_db


def _without_context(workflow):
    graph = dict(workflow.graph)
    graph["nodes"] = [n for n in graph["nodes"] if n["type"] != "context"]
    graph["edges"] = [e for e in graph["edges"] if e.get("targetHandle") != "input-context"]
    return graph


def test_removing_the_context_node_archives_the_workflows_conversations(
    workflow, key, django_capture_on_commit_callbacks
):
    conversation_append(key=key, messages=turns(3), expected_length=0)
    notes_add(key=key, text="finding")

    with django_capture_on_commit_callbacks(execute=True):
        graph_services.workflow_save(
            workflow=workflow, graph=_without_context(workflow), expected_revision=workflow.revision
        )

    archive = ConversationArchive.objects.get()
    assert (archive.reason, archive.length, archive.messages) == ("context_removed", 3, turns(3))
    assert archive.notes == [{"id": "n1", "text": "finding"}]
    assert conversation_load(key=key) == []
    assert notes_read(key=key).entries == []
    assert ContextArchiveOutbox.objects.get().state == "done"


def test_the_archiver_is_idempotent_when_the_drain_retries(workflow, key):
    from conversations.services import conversations_archive_for_workflow

    conversation_append(key=key, messages=turns(2), expected_length=0)
    args = {
        "workflow_id": workflow.pk,
        "owner_id": workflow.owner_id,
        "context_node_id": "c",
        "reason": "context_removed",
    }

    first = conversations_archive_for_workflow(**args)
    second = conversations_archive_for_workflow(**args)

    assert first["conversations_archived"] == 1
    assert second["conversations_archived"] == 0
    assert ConversationArchive.objects.count() == 1


def test_deleting_the_workflow_erases_its_conversations_and_their_archives(
    workflow, key, django_capture_on_commit_callbacks
):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    conversation_clear(key=key)
    conversation_append(key=key, messages=turns(2), expected_length=0)

    with django_capture_on_commit_callbacks(execute=True):
        graph_services.workflow_delete(workflow=workflow)

    assert ConversationArchive.objects.exists() is False
    assert AgentConversation.objects.exists() is False
    assert ConversationMessage.objects.exists() is False


def test_reset_archives_the_closed_generation_and_wipes_its_notes(
    workflow, key, django_capture_on_commit_callbacks
):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    notes_add(key=key, text="gen 1 finding")

    with django_capture_on_commit_callbacks(execute=True):
        report = graph_services.workflow_reset(workflow=workflow)
    graph_services.workflow_deploy(workflow=workflow)

    archive = ConversationArchive.objects.get()
    assert (archive.reason, archive.generation, archive.notes) == (
        "reset",
        1,
        [{"id": "n1", "text": "gen 1 finding"}],
    )
    assert report["hooks"]["conversations"] == {"conversations_archived": 1}
    assert conversation_load(key=key) == []
    assert notes_read(key=key).entries == []
    new_key = ConversationKey(
        workflow_id=workflow.pk,
        generation=current_generation(workflow=workflow),
        agent_node_id=key.agent_node_id,
    )
    assert new_key.generation == 2
    assert notes_read(key=new_key).entries == []


def test_clear_context_never_touches_memory(workflow, key):
    from memory import models as memory_models

    before = {m.__name__: m.objects.count() for m in _memory_models(memory_models)}
    conversation_append(key=key, messages=turns(2), expected_length=0)

    conversation_clear(key=key)

    assert {m.__name__: m.objects.count() for m in _memory_models(memory_models)} == before


def _memory_models(module):
    from django.db import models

    return [
        v
        for v in vars(module).values()
        if isinstance(v, type)
        and issubclass(v, models.Model)
        and not v._meta.abstract
        and v._meta.app_label == "memory"
    ]


def test_purge_command_deletes_archives_past_the_retention_window(key, settings):
    conversation_append(key=key, messages=turns(1), expected_length=0)
    conversation_clear(key=key)
    conversation_append(key=key, messages=turns(1), expected_length=0)
    conversation_clear(key=key)
    old, fresh = ConversationArchive.objects.order_by("id")
    ConversationArchive.objects.filter(pk=old.pk).update(archived_at=timezone.now() - timedelta(days=31))
    ConversationArchive.objects.filter(pk=fresh.pk).update(archived_at=timezone.now() - timedelta(days=29))

    call_command("purge_context_archives")

    assert list(ConversationArchive.objects.values_list("pk", flat=True)) == [fresh.pk]


def test_purge_honours_the_retention_setting(key, settings):
    settings.OPENCOMPANY_CONTEXT_ARCHIVE_DAYS = 7
    conversation_append(key=key, messages=turns(1), expected_length=0)
    conversation_clear(key=key)
    ConversationArchive.objects.update(archived_at=timezone.now() - timedelta(days=8))

    call_command("purge_context_archives")

    assert ConversationArchive.objects.exists() is False


def test_archives_are_readable_in_the_admin(client, staff, key):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    conversation_clear(key=key)
    archive = ConversationArchive.objects.get()
    client.force_login(staff)

    listing = client.get("/admin/conversations/conversationarchive/")
    detail = client.get(f"/admin/conversations/conversationarchive/{archive.pk}/change/")

    assert listing.status_code == 200
    assert detail.status_code == 200
    assert "m1" in detail.content.decode()


def test_admin_purge_action_deletes_expired_archives(client, staff, key):
    conversation_append(key=key, messages=turns(1), expected_length=0)
    conversation_clear(key=key)
    archive = ConversationArchive.objects.get()
    ConversationArchive.objects.update(archived_at=timezone.now() - timedelta(days=40))
    client.force_login(staff)

    response = client.post(
        "/admin/conversations/conversationarchive/",
        {"action": "purge_expired", "_selected_action": [archive.pk], "confirm": "yes"},
    )

    assert response.status_code == 302
    assert ConversationArchive.objects.exists() is False


def test_conversation_admin_shows_messages_in_seq_order_with_role_and_preview(client, staff, key):
    conversation_append(key=key, messages=turns(3, prefix="turn-text-"), expected_length=0)
    head = AgentConversation.objects.get()
    client.force_login(staff)

    page = client.get(f"/admin/conversations/agentconversation/{head.pk}/change/").content.decode()
    listing = client.get("/admin/conversations/agentconversation/")

    assert listing.status_code == 200
    # distinctive texts: random ids elsewhere on the page may contain short strings like "m2"
    assert page.index("turn-text-0") < page.index("turn-text-1") < page.index("turn-text-2")
    assert "assistant" in page
