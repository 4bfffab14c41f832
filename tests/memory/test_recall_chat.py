"""Recall through the owner's chat: the offline model asks the real memory tool."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from chat import services as chat_services
from chat.executor import execute_run
from chat.models import ChatMessage
from memory import services
from memory.scope import memory_scope
from tests.conftest import node_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _manual_runs_and_no_pacing(settings):
    """The test drives `execute_run` itself and the offline model streams without pacing."""
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    settings.OPENCOMPANY_OFFLINE_PACING_MS = 0


def test_what_do_you_remember_about_me_answers_with_the_remembered_items(workflow):
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    services.memory_remember(scope=scope, content="I take my coffee black", actor="owner:1")
    services.memory_remember(scope=scope, content="My dog is called Biscuit", actor="owner:1")
    admission = chat_services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="what do you remember about me?"
    )

    outcome = async_to_sync(execute_run)(admission.run.run_id)

    assert outcome == "finished"
    reply = ChatMessage.objects.get(role="assistant")
    assert reply.text == "Here is what I remember:\n- My dog is called Biscuit\n- I take my coffee black"


def test_a_question_about_one_thing_answers_with_the_matching_item(workflow):
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    services.memory_remember(scope=scope, content="I take my coffee black", actor="owner:1")
    services.memory_remember(scope=scope, content="My dog is called Biscuit", actor="owner:1")
    admission = chat_services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="what do you remember about my dog's name?"
    )

    async_to_sync(execute_run)(admission.run.run_id)

    reply = ChatMessage.objects.get(role="assistant")
    assert reply.text == "Here is what I remember about “my dog's name”:\n- My dog is called Biscuit"
