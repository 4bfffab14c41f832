"""A deploy promises that the agent can answer: the API, the admin and the owner's page refuse a graph
with no Chat Trigger, no agent wired to it, or an agent whose runtime is not configured here, with the
validator's codes and nothing written; the admin refuses to save such a graph; a live chat that cannot
answer says so in its header."""

from __future__ import annotations

import copy
import json
from io import StringIO
from typing import Any

import pytest
import yaml
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from graphs import services
from graphs.models import Deployment, Workflow
from graphs.readiness import chat_readiness
from tests.conftest import demo_graph, make_workflow, node_id

pytestmark = pytest.mark.django_db

TRIGGER_ONLY = {
    "graphVersion": 2,
    "nodes": [{"id": "t", "type": "chatTrigger", "position": {"x": 0, "y": 0}, "data": {"label": "Chat"}}],
    "edges": [],
}


def _with_provider(provider: str, model: str) -> dict[str, Any]:
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": provider, "model": model})
    return graph


def _deploy(api_client: Any, workflow_id: str) -> Any:
    return api_client.post(f"/api/v1/workflows/{workflow_id}/deploy")


def test_deploying_a_workflow_created_with_only_a_name_is_refused_and_writes_no_deployment(api_client):
    created = api_client.post("/api/v1/workflows", {"name": "x"}, format="json")
    assert created.status_code == 201

    response = _deploy(api_client, created.json()["id"])

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "validation_failed"
    assert body["message"] == (
        "Not deployable: The graph has no Chat Trigger, so no chat message reaches an agent."
    )
    assert body["extra"]["errors"] == [
        {
            "code": "no_chat_trigger",
            "node_id": None,
            "message": "The graph has no Chat Trigger, so no chat message reaches an agent.",
        }
    ]
    assert Deployment.objects.exists() is False


def test_deploying_a_trigger_wired_to_no_agent_is_refused_with_no_agent_on_the_trigger(api_client):
    created = api_client.post("/api/v1/workflows", {"name": "x", "graph": TRIGGER_ONLY}, format="json")
    workflow_id = created.json()["id"]

    response = _deploy(api_client, workflow_id)

    assert response.status_code == 400
    assert [(i["code"], i["node_id"]) for i in response.json()["extra"]["errors"]] == [
        ("no_agent", f"{workflow_id}:chatTrigger:1")
    ]
    assert Deployment.objects.exists() is False


def test_deploying_an_agent_whose_provider_has_no_key_is_refused_naming_the_agent(
    api_client, owner, settings
):
    settings.OPENAI_API_KEY = ""
    workflow = make_workflow(owner, _with_provider("openai", "gpt-test"), deploy=False)

    response = _deploy(api_client, workflow.pk)

    assert response.status_code == 400
    (issue,) = response.json()["extra"]["errors"]
    assert (issue["code"], issue["node_id"]) == ("runtime_unavailable", node_id(workflow, "aiAgent"))
    assert issue["message"].startswith("The agent cannot answer on this server: ")
    assert "OpenAI" in issue["message"]
    assert Deployment.objects.exists() is False


def test_deploying_an_agent_program_that_is_not_installed_is_refused(api_client, owner, settings, tmp_path):
    settings.ANTHROPIC_API_KEY = "sk-ant-test"
    settings.OPENCOMPANY_RUNTIMES_BIN = str(tmp_path)
    workflow = make_workflow(owner, _with_provider("claude_code", "claude-test"), deploy=False)

    response = _deploy(api_client, workflow.pk)

    assert response.status_code == 400
    (issue,) = response.json()["extra"]["errors"]
    assert issue["code"] == "runtime_unavailable"
    assert "bin/install-runtimes" in issue["message"]
    assert Deployment.objects.exists() is False


def test_redeploying_a_live_workflow_whose_graph_lost_its_agent_keeps_the_live_snapshot(api_client, workflow):
    live = Deployment.objects.get()
    services.workflow_save(workflow=workflow, graph=TRIGGER_ONLY, expected_revision=workflow.revision)

    response = _deploy(api_client, workflow.pk)

    assert response.status_code == 400
    assert [i["code"] for i in response.json()["extra"]["errors"]] == ["no_agent"]
    assert list(Deployment.objects.values_list("pk", "generation", "state")) == [(live.pk, 1, "live")]
    assert Deployment.objects.get().graph == live.graph


def test_a_validator_error_and_a_missing_agent_are_reported_together():
    graph = copy.deepcopy(TRIGGER_ONLY)
    graph["edges"].append({"id": "e", "source": "t", "target": "nowhere", "targetHandle": "input-main"})

    with pytest.raises(Exception) as refused:
        services.workflow_deploy(workflow=services.workflow_create(owner=_user(), name="w", graph=graph))

    assert [i["code"] for i in refused.value.extra["errors"]] == ["dangling_edge", "no_agent"]
    assert refused.value.message == (
        "Not deployable: Edge target 'nowhere' does not match any node (and 1 more issue)."
    )


def _user() -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username="u1", password="pw-123456789")


def test_the_answering_graph_is_ready_and_every_readiness_code_has_its_case(settings):
    settings.OPENAI_API_KEY = ""

    assert chat_readiness(demo_graph()) == []
    assert [i["code"] for i in chat_readiness({"nodes": [], "edges": []})] == ["no_chat_trigger"]
    assert [i["code"] for i in chat_readiness(TRIGGER_ONLY)] == ["no_agent"]
    assert [i["code"] for i in chat_readiness(_with_provider("openai", "gpt-test"))] == [
        "runtime_unavailable"
    ]


def test_the_schema_documents_the_deploy_refusal_and_the_issue_codes():
    out = StringIO()
    call_command("spectacular", stdout=out)
    schema = yaml.safe_load(out.getvalue())

    refused = schema["paths"]["/api/v1/workflows/{workflow_id}/deploy"]["post"]["responses"]["400"]
    body = refused["content"]["application/json"]["schema"]["allOf"][1]["properties"]
    assert "validation_failed" in body["code"]["enum"]
    issue = body["extra"]["properties"]["errors"]["items"]
    assert {"no_chat_trigger", "no_agent", "runtime_unavailable", "dangling_edge", "cycle"} <= set(
        issue["properties"]["code"]["enum"]
    )
    assert issue["required"] == ["code", "node_id", "message"]


# --- the admin ----------------------------------------------------------------------------------------


def _change_form(workflow: Workflow, **changes: Any) -> dict[str, Any]:
    form = {
        "name": workflow.name,
        "graph": json.dumps(workflow.graph),
        "expected_revision": str(workflow.revision),
        "deployments-TOTAL_FORMS": "0",
        "deployments-INITIAL_FORMS": "0",
        "deployments-MIN_NUM_FORMS": "0",
        "deployments-MAX_NUM_FORMS": "1000",
    }
    form.update(changes)
    return form


@pytest.fixture
def staff_client(staff: Any) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def test_saving_an_empty_graph_in_the_admin_is_refused_on_the_graph_field(staff_client, workflow):
    url = reverse("admin:graphs_workflow_change", args=[quote(workflow.pk)])

    response = staff_client.post(url, _change_form(workflow, graph="{}"))

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["graph"] == [
        "Not deployable: The graph has no Chat Trigger, so no chat message reaches an agent. (validation_failed)",
        "no_chat_trigger: The graph has no Chat Trigger, so no chat message reaches an agent.",
    ]
    assert "was changed successfully" not in response.content.decode()
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.revision, stored.graph) == (workflow.revision, workflow.graph)


def test_adding_a_workflow_without_an_agent_in_the_admin_is_refused(staff_client, owner):
    response = staff_client.post(
        reverse("admin:graphs_workflow_add"),
        {"name": "Empty", "owner": str(owner.pk), "graph": json.dumps(TRIGGER_ONLY)},
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["graph"]
    assert errors[1].startswith("no_agent at ")
    assert Workflow.objects.exists() is False


def test_the_admin_deploy_action_reports_every_issue_and_deploys_nothing(staff_client, owner):
    workflow = services.workflow_create(owner=owner, name="Bare", graph=TRIGGER_ONLY)

    response = staff_client.post(
        reverse("admin:graphs_workflow_changelist"),
        {"action": "deploy", "_selected_action": [workflow.pk]},
        follow=True,
    )

    shown = [str(m) for m in response.context["messages"]]
    assert shown == [
        f"{workflow}: not deployed: Not deployable: The chat trigger is not connected to an agent. "
        f"(validation_failed) · no_agent at {workflow.pk}:chatTrigger:1: The chat trigger is not connected "
        "to an agent.",
        "Deployed 0 workflow(s).",
    ]
    assert Deployment.objects.exists() is False


# --- the owner's chat page -------------------------------------------------------------------------------


def test_a_live_chat_whose_agent_lost_its_key_says_it_cannot_answer(owner, settings):
    settings.OPENAI_API_KEY = "sk-test"
    workflow = make_workflow(owner, _with_provider("openai", "gpt-test"))
    settings.OPENAI_API_KEY = ""
    client = Client()
    client.force_login(owner)

    response = client.get(f"/chat/{workflow.pk}/")

    assert response.status_code == 200
    assert response.context["cannot_answer"] == (
        "The agent cannot answer on this server: No API key is configured for the OpenAI provider."
    )
    assert 'data-cannot-answer="The agent cannot answer on this server: ' in response.content.decode()


def test_a_chat_that_can_answer_has_nothing_to_say_in_its_header(owner, workflow):
    client = Client()
    client.force_login(owner)

    response = client.get(f"/chat/{workflow.pk}/")

    assert response.context["cannot_answer"] == ""
    assert 'data-cannot-answer=""' in response.content.decode()
