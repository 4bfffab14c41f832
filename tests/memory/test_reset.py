"""Reset applies each Memory node's reset_policy; Clear Memory never touches Context."""

from __future__ import annotations

from graphs import services as graph_services
from graphs.models import Deployment
from memory import services
from memory.models import MemoryItem
from memory.scope import memory_scope


def _scopes(workflow):
    keep = memory_scope(workflow=workflow, memory_node_id=f"{workflow.pk}:simpleMemory:1")
    clear = memory_scope(workflow=workflow, memory_node_id=f"{workflow.pk}:simpleMemory:2")
    return keep, clear


def test_reset_clears_a_clear_node_and_keeps_a_preserve_node(
    two_memory_workflow, other_workflow, other_scope
):
    keep, clear = _scopes(two_memory_workflow)
    services.memory_remember(scope=keep, content="kept", actor="owner:1")
    services.memory_remember(scope=clear, content="wiped", actor="owner:1")
    services.memory_remember(scope=other_scope, content="elsewhere", actor="owner:2")

    graph_services.workflow_reset(workflow=two_memory_workflow)

    assert sorted(MemoryItem.objects.values_list("content", flat=True)) == ["elsewhere", "kept"]
    report = Deployment.objects.get(workflow=two_memory_workflow, generation=1).reset_report["hooks"][
        "memory"
    ]
    assert report[keep.memory_node_id] == {"reset_policy": "preserve", "reset": False}
    assert report[clear.memory_node_id] == {
        "reset_policy": "clear",
        "reset": True,
        "cleared": 1,
        "receipt": {
            "operation_id": f"reset:{two_memory_workflow.pk}:1:{clear.memory_node_id}",
            "applied": True,
        },
    }


def test_clear_memory_leaves_every_conversation_untouched(workflow, scope, api_client):
    from conversations import selectors as conversation_selectors
    from conversations import services as conversation_services
    from conversations.types import ConversationKey

    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=f"{workflow.pk}:aiAgent:1")
    message = {"role": "user", "content": [{"type": "text", "text": "hello"}], "metadata": {}}
    conversation_services.conversation_append(key=key, messages=[message], expected_length=0)
    before = conversation_selectors.conversation_load(key=key)
    services.memory_remember(scope=scope, content="fact", actor="owner:1")

    response = api_client.post(
        f"/api/v1/workflows/{workflow.pk}/memory/{scope.memory_node_id}/clear",
        {"confirm": True},
        format="json",
    )

    assert response.json()["cleared"] == 1
    assert conversation_selectors.conversation_load(key=key) == before
    assert len(before) == 1
    assert MemoryItem.objects.exists() is False
