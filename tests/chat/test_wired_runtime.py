"""Every wire the validator accepts acts at run time: each Memory node on an agent is its own tool on its
own namespace, a team lead's teammates answer as tools of the lead on their own Context, and a port with
no behaviour is refused at save."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run, prepare_run
from chat.models import ChatMessage, ChatRun
from conversations.models import ProviderCall
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from graphs import services as graph_services
from graphs.models import Workflow
from memory.models import MemoryItem
from memory.scope import memory_scope
from memory.tools import MEMORY_TOOL_DESCRIPTION
from opencompany.llm.wire import text_of, tool_calls_of
from tests.conftest import demo_graph, make_workflow, node_id

pytestmark = pytest.mark.django_db(transaction=True)


def two_memory_graph() -> dict[str, Any]:
    graph = demo_graph()
    graph["nodes"][3]["data"]["label"] = "Home facts"
    graph["nodes"].append(
        {
            "id": "mem-work",
            "type": "simpleMemory",
            "position": {"x": 500, "y": 200},
            "data": {"label": "Work facts", "parameters": {}},
        }
    )
    graph["edges"].append(
        {
            "id": "e4",
            "source": "mem-work",
            "sourceHandle": "output-tool",
            "target": "agent",
            "targetHandle": "input-tools",
        }
    )
    return graph


def team_graph() -> dict[str, Any]:
    """trigger → lead (teamLead, with a Context); teammate "Researcher" (aiAgent, its own Context)."""
    graph = demo_graph(with_memory=False)
    graph["nodes"][1]["type"] = "teamLead"
    graph["nodes"].extend(
        [
            {
                "id": "mate",
                "type": "aiAgent",
                "position": {"x": 300, "y": 300},
                "data": {"label": "Researcher", "parameters": {"provider": "offline"}},
            },
            {"id": "mate-ctx", "type": "context", "position": {"x": 0, "y": 300}, "data": {}},
        ]
    )
    graph["edges"].extend(
        [
            {
                "id": "e-mate-ctx",
                "source": "mate-ctx",
                "sourceHandle": "output-context",
                "target": "mate",
                "targetHandle": "input-context",
            },
            {
                "id": "e-team",
                "source": "mate",
                "sourceHandle": "output-main",
                "target": "agent",
                "targetHandle": "input-teammates",
            },
        ]
    )
    return graph


def send_and_run(workflow: Workflow, text: str) -> ChatRun:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    assert async_to_sync(execute_run)(admission.run.run_id) == "finished"
    return ChatRun.objects.get(run_id=admission.run.run_id)


def reply_of(run: ChatRun) -> str:
    return ChatMessage.objects.get(uid=run.reply_message_uid).text


def test_two_memory_nodes_are_two_tools_each_naming_its_node(owner: Any) -> None:
    workflow = make_workflow(owner, two_memory_graph())
    admission = services.chat_send(owner_id=owner.pk, workflow_id=workflow.pk, text="hello")
    claimant = services.new_claimant()
    run = services.run_claim(run_id=admission.run.run_id, claimant=claimant)
    assert run is not None

    prepared = prepare_run(run, claimant=claimant)

    home, work = node_id(workflow, "simpleMemory", 1), node_id(workflow, "simpleMemory", 2)
    assert prepared.tool_names == ["memory", "memory_2", "notes"]
    memory, memory_2 = prepared.tools[0], prepared.tools[1]
    assert memory.description.startswith(f"This is 'Home facts' node ({home}), one of 2 separate 'memory'")
    assert memory_2.description.startswith(f"This is 'Work facts' node ({work}), one of 2 separate 'memory'")
    assert memory.description.endswith(MEMORY_TOOL_DESCRIPTION)
    assert memory.input_schema == memory_2.input_schema


def test_two_memory_nodes_write_to_two_namespaces(owner: Any) -> None:
    workflow = make_workflow(owner, two_memory_graph())
    home = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory", 1))
    work = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory", 2))

    first = send_and_run(workflow, "remember that the spare key is under the mat")
    second = send_and_run(workflow, "with memory_2, remember that the standup is at nine")
    recalled = send_and_run(workflow, "with memory_2, what do you remember about standup?")

    assert reply_of(first) == "Got it. I'll remember that the spare key is under the mat"
    assert reply_of(second) == "Got it. I'll remember that the standup is at nine"
    assert list(MemoryItem.objects.filter(namespace=home.namespace).values_list("content", flat=True)) == [
        "the spare key is under the mat"
    ]
    assert list(MemoryItem.objects.filter(namespace=work.namespace).values_list("content", flat=True)) == [
        "the standup is at nine"
    ]
    assert home.namespace != work.namespace
    assert reply_of(recalled) == "Here is what I remember about “standup”:\n- the standup is at nine"


def test_a_teammate_answers_when_the_lead_calls_it_on_its_own_context(owner: Any) -> None:
    workflow = make_workflow(owner, team_graph())
    lead, mate = node_id(workflow, "teamLead"), node_id(workflow, "aiAgent")

    run = send_and_run(workflow, "ask researcher to find the tallest lighthouse")

    mate_key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=mate)
    mate_conversation = conversation_load(key=mate_key)
    assert [m["role"] for m in mate_conversation] == ["user", "assistant"]
    assert text_of(mate_conversation[0]) == "find the tallest lighthouse"
    answer = text_of(mate_conversation[1])
    assert answer == (
        "(Offline demo model) You said “find the tallest lighthouse”. This is the start of our conversation."
    )
    lead_conversation = conversation_load(
        key=ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=lead)
    )
    assert [m["role"] for m in lead_conversation] == ["user", "assistant", "tool", "assistant"]
    assert [c["name"] for c in tool_calls_of(lead_conversation[1])] == ["ask_researcher"]
    assert reply_of(run) == f"Researcher answered: {answer}"
    assert set(run.context_cursors) == {lead, mate}
    # Lifetime usage counts the teammate's call under the teammate, beside the lead's two.
    calls = ProviderCall.objects.order_by("id").values_list("agent_node_id", "kind", "status")
    assert list(calls) == [(lead, "step", "ok"), (mate, "step", "ok"), (lead, "step", "ok")]
    assert ProviderCall.objects.filter(agent_node_id=mate).get().run_id.startswith(f"{run.run_id}:")


def test_a_teammate_continues_its_own_conversation_across_delegations(owner: Any) -> None:
    workflow = make_workflow(owner, team_graph())
    mate = node_id(workflow, "aiAgent")

    send_and_run(workflow, "ask researcher to look at the harbour")
    second = send_and_run(workflow, "ask researcher: what did I say first?")

    mate_key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=mate)
    assert len(conversation_load(key=mate_key)) == 4
    assert reply_of(second) == "Researcher answered: The first thing you said was “look at the harbour”."


def test_asking_a_teammate_the_lead_does_not_have_calls_nothing(owner: Any) -> None:
    workflow = make_workflow(owner, team_graph())

    run = send_and_run(workflow, "ask accountant to file the taxes")

    assert reply_of(run) == "I have no teammate called “accountant” here."
    mate_key = ConversationKey(
        workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent")
    )
    assert conversation_load(key=mate_key) == []


@pytest.mark.parametrize("handle", ["input-skill", "input-task"])
def test_a_wire_into_a_port_without_behaviour_is_refused_at_save(
    api_client: Any, workflow: Any, handle: str
) -> None:
    graph = demo_graph()
    graph["edges"].append(
        {
            "id": "e-x",
            "source": "mem",
            "sourceHandle": "output-tool",
            "target": "agent",
            "targetHandle": handle,
        }
    )

    response = api_client.put(
        f"/api/v1/workflows/{workflow.pk}",
        {"graph": graph, "expected_revision": workflow.revision},
        format="json",
    )

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "unsupported_connection"
    assert [(e["code"], e["edge_id"], e["handle"]) for e in body["extra"]["errors"]] == [
        ("unsupported_connection", "e-x", handle)
    ]
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.revision, stored.graph) == (workflow.revision, workflow.graph)


def test_a_subagent_added_by_the_agent_builder_answers_as_a_tool_of_its_lead(owner: Any) -> None:
    workflow = make_workflow(owner, team_graph(), deploy=False)
    added = graph_services.workflow_add_subagent(
        workflow=workflow, agent_node_id=node_id(workflow, "teamLead"), label="Scout"
    )
    graph_services.workflow_deploy(workflow=Workflow.objects.get(pk=workflow.pk))

    run = send_and_run(workflow, "ask scout to check the weather")

    scout_key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=added["node_id"])
    assert [text_of(m) for m in conversation_load(key=scout_key)] == [
        "check the weather",
        "(Offline demo model) You said “check the weather”. This is the start of our conversation.",
    ]
    assert reply_of(run).startswith("Scout answered: (Offline demo model) You said “check the weather”.")
