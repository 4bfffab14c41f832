"""The workflow admin as staff use it (Django test client): the graph saved through normalize + validate
with the validator's messages on the form, and generations, artifacts and outbox rows that the admin
cannot delete. Transfers, deploy refusals and delete pages: test_transfer.py, test_readiness.py,
test_admin_confirmations.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from chat import services as chat_services
from chat.models import ChatMessage
from conversations.models import AgentConversation
from graphs import services
from graphs.models import ContextArchiveOutbox, Deployment, LegacyArtifact, Workflow
from graphs.services.outbox import outbox_enqueue
from opencompany.core.errors import ApplicationError
from tests.conftest import demo_graph, make_workflow, node_id

pytestmark = pytest.mark.django_db

SUCCESS = "was changed successfully"


def change_form(workflow: Workflow, **changes: Any) -> dict[str, Any]:
    form = {
        "name": workflow.name,
        "owner": str(workflow.owner_id),
        "graph": json.dumps(workflow.graph),
        "expected_revision": str(workflow.revision),
        "deployments-TOTAL_FORMS": "0",
        "deployments-INITIAL_FORMS": "0",
        "deployments-MIN_NUM_FORMS": "0",
        "deployments-MAX_NUM_FORMS": "1000",
    }
    form.update(changes)
    return form


def change_url(workflow: Workflow) -> str:
    return reverse("admin:graphs_workflow_change", args=[quote(workflow.pk)])


def test_a_graph_that_breaks_a_context_rule_is_refused_with_the_validators_message(
    client: Any, staff: Any, workflow: Workflow
) -> None:
    graph = copy.deepcopy(workflow.graph)
    agent = node_id(workflow, "aiAgent")
    graph["nodes"].append({"id": "ctx-extra", "type": "context", "position": {"x": 0, "y": 0}, "data": {}})
    graph["edges"].append(
        {
            "id": "e-extra",
            "source": "ctx-extra",
            "sourceHandle": "output-context",
            "target": agent,
            "targetHandle": "input-context",
        }
    )
    client.force_login(staff)

    response = client.post(change_url(workflow), change_form(workflow, graph=json.dumps(graph)))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["graph"]
    assert errors[0].endswith("(invalid_context_topology)")
    assert (
        errors[1] == f"multiple_contexts at {agent}: An agent cannot be connected to multiple Context nodes"
    )
    assert SUCCESS not in response.content.decode()
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.revision, stored.graph) == (workflow.revision, workflow.graph)


def test_a_wire_into_a_port_without_behaviour_is_refused_in_the_admin(
    client: Any, staff: Any, workflow: Workflow
) -> None:
    graph = copy.deepcopy(workflow.graph)
    graph["edges"].append(
        {
            "id": "e-skill",
            "source": node_id(workflow, "simpleMemory"),
            "sourceHandle": "output-tool",
            "target": node_id(workflow, "aiAgent"),
            "targetHandle": "input-skill",
        }
    )
    client.force_login(staff)

    response = client.post(change_url(workflow), change_form(workflow, graph=json.dumps(graph)))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["graph"]
    assert errors[0].endswith("(unsupported_connection)")
    assert errors[1].startswith(f"unsupported_connection at {node_id(workflow, 'aiAgent')} (edge e-skill): ")
    assert Workflow.objects.get(pk=workflow.pk).revision == workflow.revision


def test_a_good_graph_is_saved_normalized_with_a_new_revision(
    client: Any, staff: Any, workflow: Workflow
) -> None:
    graph = copy.deepcopy(workflow.graph)
    graph["nodes"].append({"id": "spare", "type": "context", "position": {"x": 9, "y": 9}, "data": {}})
    client.force_login(staff)

    response = client.post(
        change_url(workflow), change_form(workflow, graph=json.dumps(graph), name="Renamed")
    )

    assert response.status_code == 302
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.name, stored.revision) == ("Renamed", workflow.revision + 1)
    assert sorted(n["id"] for n in stored.graph["nodes"] if n["type"] == "context") == [
        node_id(workflow, "context", 1),
        node_id(workflow, "context", 2),
    ]


def test_a_stale_revision_is_refused_on_the_form(client: Any, staff: Any, workflow: Workflow) -> None:
    form = change_form(workflow, name="Mine")
    services.workflow_save(
        workflow=workflow, graph=workflow.graph, expected_revision=workflow.revision, name="Theirs"
    )
    client.force_login(staff)

    response = client.post(change_url(workflow), form)

    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [
        "The workflow changed since you loaded it; reload and try again. (revision_conflict)"
    ]
    assert Workflow.objects.get(pk=workflow.pk).name == "Theirs"


def test_an_over_long_name_is_refused_by_the_form_and_by_the_service(
    client: Any, staff: Any, workflow: Workflow
) -> None:
    client.force_login(staff)

    response = client.post(change_url(workflow), change_form(workflow, name="n" * 201))

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["name"] == [
        "Ensure this value has at most 200 characters (it has 201)."
    ]
    with pytest.raises(ApplicationError) as refused:
        services.workflow_save(workflow=workflow, graph=workflow.graph, expected_revision=1, name="n" * 201)
    assert (refused.value.code, refused.value.extra["fields"]) == (
        "invalid_request",
        {"name": ["At most 200 characters (this one has 201)."]},
    )
    assert Workflow.objects.get(pk=workflow.pk).name == workflow.name


def test_deployments_cannot_be_deleted_or_changed(client: Any, staff: Any, workflow: Workflow) -> None:
    deployment = Deployment.objects.get()
    client.force_login(staff)

    assert client.get(reverse("admin:graphs_deployment_change", args=[deployment.pk])).status_code == 200
    assert (
        client.post(
            reverse("admin:graphs_deployment_delete", args=[deployment.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    bulk = client.post(
        reverse("admin:graphs_deployment_changelist"),
        {"action": "delete_selected", "_selected_action": [deployment.pk], "post": "yes"},
    )
    assert bulk.status_code == 200  # no such action: the changelist answers with its own message
    assert Deployment.objects.filter(pk=deployment.pk).exists() is True
    services.workflow_reset(workflow=workflow)
    assert services.workflow_deploy(workflow=workflow).generation == 2


def test_legacy_artifacts_cannot_be_deleted_or_changed(client: Any, staff: Any, owner: Any) -> None:
    graph = {
        "nodes": [
            {
                "id": "memory",
                "type": "simpleMemory",
                "data": {"parameters": {"memory_content": "## Human\nhello"}},
            },
            {"id": "agent", "type": "aiAgent", "data": {}},
        ],
        "edges": [{"id": "l", "source": "memory", "target": "agent", "targetHandle": "input-memory"}],
    }
    services.workflow_create(owner=owner, name="legacy", graph=graph)
    artifact = LegacyArtifact.objects.get()
    client.force_login(staff)

    assert client.get(reverse("admin:graphs_legacyartifact_change", args=[artifact.pk])).status_code == 200
    assert (
        client.post(
            reverse("admin:graphs_legacyartifact_delete", args=[artifact.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert (
        client.post(
            reverse("admin:graphs_legacyartifact_change", args=[artifact.pk]), {"markdown": "x"}
        ).status_code
        == 403
    )
    assert LegacyArtifact.objects.get().markdown == "## Human\nhello"


def test_outbox_rows_cannot_be_deleted_and_retry_archive_drains_a_pending_row(
    client: Any, staff: Any, owner: Any
) -> None:
    workflow = make_workflow(owner, deploy=False)
    # A row a Context removal left pending (no commit hooks run here, so it is not drained yet).
    outbox_enqueue(
        workflow_id=workflow.pk,
        owner_id=owner.pk,
        context_ids={f"{workflow.pk}:context:1"},
        reason=ContextArchiveOutbox.Reason.CONTEXT_REMOVED,
    )
    row = ContextArchiveOutbox.objects.get()
    client.force_login(staff)

    assert (
        client.post(
            reverse("admin:graphs_contextarchiveoutbox_delete", args=[quote(row.pk)]), {"post": "yes"}
        ).status_code
        == 403
    )
    response = client.post(
        reverse("admin:graphs_contextarchiveoutbox_changelist"),
        {"action": "retry_archive", "_selected_action": [row.pk]},
    )

    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.state, row.attempts) == ("done", 1)


def test_reset_action_closes_the_live_generation_through_the_service(
    client: Any, staff: Any, workflow: Workflow
) -> None:
    client.force_login(staff)

    response = client.post(
        reverse("admin:graphs_workflow_changelist"), {"action": "reset", "_selected_action": [workflow.pk]}
    )

    assert response.status_code == 302
    deployment = Deployment.objects.get()
    assert deployment.state == "reset"
    assert set(deployment.reset_report["hooks"]) == {"chat", "conversations", "memory"}


def test_a_workflow_added_in_the_admin_is_created_through_the_service(
    client: Any, staff: Any, owner: Any
) -> None:
    client.force_login(staff)

    response = client.post(
        reverse("admin:graphs_workflow_add"),
        {"name": "From the admin", "owner": str(owner.pk), "graph": json.dumps(demo_graph())},
    )

    assert response.status_code == 302
    created = Workflow.objects.get(name="From the admin")
    assert created.graph["nodes"][0]["id"] == f"{created.pk}:chatTrigger:1"


def test_deleting_a_deployed_workflow_in_the_admin_goes_through_the_service(
    client: Any, staff: Any, workflow: Workflow, settings: Any
) -> None:
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    chat_services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello")
    client.force_login(staff)
    url = reverse("admin:graphs_workflow_delete", args=[quote(workflow.pk)])

    confirm = client.get(url)
    response = client.post(url, {"post": "yes"})

    assert confirm.status_code == 200
    assert "Are you sure" in confirm.content.decode()
    assert response.status_code == 302
    assert Workflow.objects.filter(pk=workflow.pk).exists() is False
    assert Deployment.objects.exists() is False
    # The service erases the workflow's data in the same transaction: nothing is left to archive.
    assert ContextArchiveOutbox.objects.exists() is False
    assert ChatMessage.objects.exists() is False
    assert AgentConversation.objects.filter(workflow_id=workflow.pk).exists() is False
