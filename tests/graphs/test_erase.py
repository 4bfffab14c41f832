"""True erasure: forget and Clear Memory leave no content in any row, deleting a workflow deletes everything
kept for it, and an owner can erase all their data."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.core import serializers
from django.db import connection
from django.utils import timezone

from chat import services as chat_services
from chat.models import ChatMessage, ChatRun, ChatThread
from conversations.models import (
    AgentConversation,
    BranchSnapshot,
    CompactionAttempt,
    ConversationArchive,
    ConversationMessage,
    ProviderCall,
)
from conversations.services import branch_snapshot_keep, conversation_append, conversation_clear
from conversations.services.context import (
    CallCounts,
    CallScope,
    compaction_attempt_record,
    provider_call_record,
)
from conversations.types import ConversationKey
from graphs.models import ContextArchiveOutbox, Deployment, Workflow
from memory import services as memory_services
from memory.models import MemoryEmbedding, MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from memory.scope import memory_scope
from opencompany.llm.wire import make_assistant, make_text, make_user
from tests.conftest import make_workflow, node_id

pytestmark = pytest.mark.django_db

SECRET = "zebra cobalt 7741"
TITLE = "pin of the blue safe"


@pytest.fixture(autouse=True)
def _manual_runs(settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"


def rows_holding(text: str) -> list[str]:
    """Every table (each model's rows, and SQLite's full-text table) holding `text` anywhere."""
    found = []
    for model in apps.get_models():
        if model._meta.proxy or not model._meta.managed:
            continue
        if text in serializers.serialize("json", model._default_manager.all()):
            found.append(model._meta.label)
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT title, tags, category, content FROM memory_item_fts")
            if any(text in str(value) for row in cursor.fetchall() for value in row):
                found.append("memory_item_fts")
    return found


def _memory_base(workflow: Any) -> str:
    return f"/api/v1/workflows/{workflow.pk}/memory/{node_id(workflow, 'simpleMemory')}"


def _remember_and_update(api_client: Any, workflow: Any) -> dict[str, Any]:
    created = api_client.post(
        f"{_memory_base(workflow)}/items",
        {"content": f"The code is {SECRET}.", "title": TITLE, "category": "vault", "tags": ["safe"]},
        format="json",
        HTTP_IDEMPOTENCY_KEY="remember-1",
    ).json()["memory"]
    updated = api_client.patch(
        f"{_memory_base(workflow)}/items/{created['id']}",
        {"expected_version": 1, "content": f"The code is still {SECRET}."},
        format="json",
    ).json()["memory"]
    return updated


def test_forget_leaves_no_content_in_any_row_and_the_history_shows_no_text(api_client, workflow):
    item = _remember_and_update(api_client, workflow)
    assert rows_holding(SECRET) != []

    forgot = api_client.delete(f"{_memory_base(workflow)}/items/{item['id']}?expected_version=2")
    history = api_client.get(f"{_memory_base(workflow)}/items/{item['id']}/revisions")

    assert forgot.status_code == 204
    assert rows_holding(SECRET) == []
    assert rows_holding(TITLE) == []
    assert history.status_code == 200
    assert [
        (r["version"], r["operation"], r["actor"], r["title"], r["content"], r["category"], r["tags"])
        for r in history.json()["results"]
    ] == [
        (1, "remember", f"owner:{workflow.owner_id}", None, None, None, []),
        (2, "update", f"owner:{workflow.owner_id}", None, None, None, []),
        (3, "forget", f"owner:{workflow.owner_id}", None, None, None, []),
    ]
    assert all(r["created_at"] for r in history.json()["results"])


def test_clear_memory_leaves_no_content_in_any_row(api_client, workflow):
    first = _remember_and_update(api_client, workflow)
    api_client.post(f"{_memory_base(workflow)}/items", {"content": f"Another {SECRET}"}, format="json")

    cleared = api_client.post(f"{_memory_base(workflow)}/clear", {"confirm": True}, format="json")

    assert cleared.json()["cleared"] == 2
    assert rows_holding(SECRET) == []
    assert MemoryRevision.objects.filter(content__isnull=False).exists() is False
    assert list(MemoryRevision.objects.filter(memory_id=first["id"]).values_list("version", "operation")) == [
        (1, "remember"),
        (2, "update"),
        (3, "clear"),
    ]


def test_expiry_purge_erases_the_content_of_revisions(workflow, owner):
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    memory_services.memory_remember(
        scope=scope, content=SECRET, actor="owner:1", expires_at=timezone.now() + timedelta(seconds=5)
    )

    removed = memory_services.memory_purge_expired(now=timezone.now() + timedelta(seconds=10))

    assert removed == 1
    assert rows_holding(SECRET) == []


def test_the_revisions_of_a_live_item_keep_their_content(api_client, workflow):
    item = _remember_and_update(api_client, workflow)

    history = api_client.get(f"{_memory_base(workflow)}/items/{item['id']}/revisions").json()["results"]

    assert [r["content"] for r in history] == [f"The code is {SECRET}.", f"The code is still {SECRET}."]


def _fill(workflow: Any) -> None:
    """Memory (with receipts, history and an embedding), a conversation with an archive and a branch
    snapshot, and a chat message: everything a workflow accumulates, each holding SECRET."""
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    remembered = memory_services.memory_remember(
        scope=scope, content=f"Remember {SECRET}", actor="owner:1", operation_id="op-1"
    )
    item = MemoryItem.objects.get(memory_id=remembered.memory["id"])
    MemoryEmbedding.objects.create(
        item=item, namespace=item.namespace, model_name="m", dims=1, vector=b"\0\0\0\0", content_hash="h"
    )
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    said = [make_user(f"Say {SECRET}"), make_assistant([make_text(SECRET)])]
    conversation_append(key=key, messages=said, expected_length=0)
    branch_snapshot_keep(key=key, thread_key=f"chat:{workflow.pk}:1", leaf_uid="m_leaf")
    conversation_clear(key=key)
    conversation_append(key=key, messages=said, expected_length=0)
    call_scope = CallScope(
        workflow_id=workflow.pk, generation=1, agent_node_id=key.agent_node_id, run_id="r1", key=key
    )
    provider_call_record(scope=call_scope, counts=_counts())
    compaction_attempt_record(key=key, run_id="r1", outcome="refused", reason="not_smaller", sizes={})
    admission = chat_services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=SECRET)
    chat_services.chat_stop(workflow=workflow, run_id=admission.run.run_id)


def _counts() -> CallCounts:
    return CallCounts(
        status="ok",
        kind="step",
        provider="offline",
        model="offline-demo",
        input_tokens=10,
        cached_tokens=0,
        cache_write_tokens=0,
        output_tokens=2,
        usage_reported=True,
        settings={},
        system_digest="",
        notes_digest="",
        tools_digest="",
        message_count=2,
        conversation_digest="",
        pressure=10,
        pressure_estimated=False,
        output_headroom=10,
        context_window=1000,
    )


def _kept_for(workflow_id: str) -> dict[str, int]:
    return {
        "items": MemoryItem.objects.filter(workflow_id=workflow_id).count(),
        "revisions": MemoryRevision.objects.filter(workflow_id=workflow_id).count(),
        "receipts": MemoryReceipt.objects.filter(workflow_id=workflow_id).count(),
        "namespaces": MemoryNamespace.objects.filter(workflow_id=workflow_id).count(),
        "embeddings": MemoryEmbedding.objects.filter(item__workflow_id=workflow_id).count(),
        "conversations": AgentConversation.objects.filter(workflow_id=workflow_id).count(),
        "messages": ConversationMessage.objects.filter(conversation__workflow_id=workflow_id).count(),
        "archives": ConversationArchive.objects.filter(workflow_id=workflow_id).count(),
        "snapshots": BranchSnapshot.objects.filter(workflow_id=workflow_id).count(),
        "provider_calls": ProviderCall.objects.filter(workflow_id=workflow_id).count(),
        "compaction_attempts": CompactionAttempt.objects.filter(workflow_id=workflow_id).count(),
        "threads": ChatThread.objects.filter(workflow_id=workflow_id).count(),
        "chat_messages": ChatMessage.objects.filter(thread__workflow_id=workflow_id).count(),
        "runs": ChatRun.objects.filter(workflow_id=workflow_id).count(),
        "deployments": Deployment.objects.filter(workflow_id=workflow_id).count(),
        "outbox": ContextArchiveOutbox.objects.filter(workflow_id=workflow_id).count(),
    }


NOTHING = dict.fromkeys(
    [
        "items",
        "revisions",
        "receipts",
        "namespaces",
        "embeddings",
        "conversations",
        "messages",
        "archives",
        "snapshots",
        "provider_calls",
        "compaction_attempts",
        "threads",
        "chat_messages",
        "runs",
        "deployments",
        "outbox",
    ],
    0,
)


def test_deleting_a_workflow_leaves_no_item_revision_conversation_archive_or_chat(
    api_client, workflow, other_workflow
):
    _fill(workflow)
    _fill(other_workflow)
    kept_by_other = _kept_for(other_workflow.pk)

    response = api_client.delete(f"/api/v1/workflows/{workflow.pk}")

    assert response.status_code == 204
    assert Workflow.objects.filter(pk=workflow.pk).exists() is False
    assert _kept_for(workflow.pk) == NOTHING
    assert _kept_for(other_workflow.pk) == kept_by_other
    assert (kept_by_other["items"], kept_by_other["archives"], kept_by_other["provider_calls"]) == (1, 1, 1)


def test_erase_all_my_data_needs_confirm_and_then_erases_every_workflow_of_the_owner_only(
    api_client, owner, workflow, other_workflow
):
    second = make_workflow(owner, name="Second")
    for w in (workflow, second, other_workflow):
        _fill(w)
    kept_by_other = _kept_for(other_workflow.pk)

    unconfirmed = api_client.post("/api/v1/account/erase", {"confirm": False}, format="json")
    assert (unconfirmed.status_code, unconfirmed.json()["code"]) == (400, "invalid_request")
    assert _kept_for(workflow.pk)["items"] == 1

    response = api_client.post("/api/v1/account/erase", {"confirm": True}, format="json")

    assert response.status_code == 200
    erased = response.json()["erased"]
    assert erased["workflows"] == 2
    assert erased["memory"] == {"items": 2, "revisions": 2, "receipts": 2, "namespaces": 2}
    assert erased["conversations"] == {
        "conversations": 2,
        "archives": 2,
        "snapshots": 2,
        "provider_calls": 2,
        "compaction_attempts": 2,
    }
    assert list(Workflow.objects.values_list("pk", flat=True)) == [other_workflow.pk]
    assert _kept_for(workflow.pk) == NOTHING
    assert _kept_for(second.pk) == NOTHING
    assert _kept_for(other_workflow.pk) == kept_by_other
    assert api_client.get("/api/v1/workflows").json()["results"] == []  # still signed in
