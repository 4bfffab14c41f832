from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run
from chat.models import ChatMessage, ChatRun
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from tests.conftest import node_id

pytestmark = pytest.mark.django_db(transaction=True)


def test_send_then_execute_answers_and_stores_the_turn(workflow):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hello there")

    outcome = async_to_sync(execute_run)(admission.run.run_id)

    assert outcome == "finished"
    run = ChatRun.objects.get()
    assert run.state == "finished"
    reply = ChatMessage.objects.get(role="assistant")
    assert reply.parent_uid == admission.message.uid
    assert reply.text == run.draft_text
    assert reply.text
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert run.context_cursors[node_id(workflow, "aiAgent")]["length"] == 0
