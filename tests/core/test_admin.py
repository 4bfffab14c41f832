"""Every model of our apps has an admin page, and each renders for staff: its changelist, a search, and
the change page of a real row, made through the services."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat import services as chat_services
from chat.executor import execute_run
from chat.models import ChatMessage
from conversations.services import conversation_clear
from conversations.types import ConversationKey
from graphs import services as graph_services
from opencompany.llm.providers import CompatCapabilities
from tests.conftest import demo_graph, make_workflow, node_id

pytestmark = pytest.mark.django_db(transaction=True)

OUR_APPS = ("core", "graphs", "conversations", "memory", "chat")


def _run(workflow: Any, text: str) -> None:
    admission = chat_services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    assert async_to_sync(execute_run)(admission.run.run_id) == "finished"


@pytest.fixture
def every_row(owner: Any, settings: Any) -> None:
    """At least one row of every model, each written the way the product writes it."""
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    settings.OPENCOMPANY_OFFLINE_PACING_MS = 0
    settings.OPENCOMPANY_EMBEDDER = "tests.memory.embedders.synonyms"
    workflow = make_workflow(owner)
    for text in ("remember that the gate code is 4321", "note check the gate", "hello"):
        _run(workflow, text)
    answer = ChatMessage.objects.filter(role="assistant").order_by("pk").last()
    assert answer is not None
    chat_services.chat_feedback(workflow=workflow, message_uid=answer.uid, value="up")
    retry = chat_services.chat_retry(workflow=workflow, message_uid=answer.uid)
    assert async_to_sync(execute_run)(retry.run.run_id) == "finished"
    conversation_clear(
        key=ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    )
    _run(workflow, "what did I say first?")
    small = demo_graph()
    for node in small["nodes"]:
        if node["type"] == "aiAgent":  # a small window: the second message's run compacts (or tries to)
            node["data"]["parameters"].update({"context_window": 1024, "compaction_ratio": 0.05})
    compacting = make_workflow(owner, graph=small, name="compacting")
    for text in ("tell me about tea " * 40, "and coffee?"):
        _run(compacting, text)
    legacy = {
        "nodes": [
            {"id": "m", "type": "simpleMemory", "data": {"parameters": {"memory_content": "## gate\n4321"}}},
            {"id": "a", "type": "aiAgent", "data": {}},
        ],
        "edges": [{"id": "l", "source": "m", "target": "a", "targetHandle": "input-memory"}],
    }
    graph_services.workflow_create(owner=owner, name="legacy", graph=legacy)
    graph_services.workflow_delete(workflow=make_workflow(owner, name="gone", deploy=False))
    without = make_workflow(owner, name="without a context", deploy=False)
    contexts = {n["id"] for n in without.graph["nodes"] if n["type"] == "context"}
    graph_services.workflow_save(  # removing a Context writes an archive outbox row
        workflow=without,
        expected_revision=without.revision,
        graph={
            **without.graph,
            "nodes": [n for n in without.graph["nodes"] if n["id"] not in contexts],
            "edges": [e for e in without.graph["edges"] if e["source"] not in contexts],
        },
    )
    Client().post("/accounts/login/", {"username": owner.username, "password": "wrong"})
    chat_services.provider_probe_record(
        base_url="http://127.0.0.1:9/v1", model="local", capabilities=CompatCapabilities(tools=True)
    )
    chat_services.process_beat(name="host:1", role="server", started_at=timezone.now())
    heir = get_user_model().objects.create_user(username="heir", password="heir-pass-123")
    graph_services.workflow_transfer(
        workflow=make_workflow(owner, name="given away"), new_owner=heir, confirm_username="heir", actor=owner
    )


def test_every_model_of_our_apps_has_an_admin_page_and_each_renders_for_staff(
    client: Any, staff: Any, every_row: None
) -> None:
    client.force_login(staff)
    models = [model for label in OUR_APPS for model in apps.get_app_config(label).get_models()]

    unregistered = sorted(m._meta.label for m in models if m not in admin.site._registry)
    assert unregistered == []
    rendered = []
    for model in models:
        meta = model._meta
        model_admin = admin.site._registry[model]
        changelist = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        assert changelist.status_code == 200, meta.label
        if model_admin.search_fields:
            searched = client.get(
                reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"), {"q": "gate"}
            )
            assert searched.status_code == 200, meta.label
        row = model_admin.get_queryset(changelist.wsgi_request).first()
        assert row is not None, f"no {meta.label} row to open"
        change = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[quote(row.pk)]))
        assert change.status_code == 200, meta.label
        rendered.append(meta.label)
    assert rendered == [m._meta.label for m in models]


def test_staff_search_finds_message_text_inside_stored_conversations(
    client: Any, staff: Any, every_row: None
) -> None:
    client.force_login(staff)

    found = client.get(
        reverse("admin:conversations_conversationarchive_changelist"), {"q": "gate code is 4321"}
    )
    messages = client.get(reverse("admin:chat_chatmessage_changelist"), {"q": "4321", "role__exact": "user"})
    memory = client.get(reverse("admin:memory_memoryitem_changelist"), {"q": "4321"})

    assert found.context["cl"].result_count == 1
    assert [m.text for m in messages.context["cl"].result_list] == ["remember that the gate code is 4321"]
    assert [i.content for i in memory.context["cl"].result_list] == ["the gate code is 4321"]
    assert (
        client.get(reverse("admin:conversations_conversationmessage_changelist"), {"q": "no such words"})
        .context["cl"]
        .result_count
        == 0
    )
