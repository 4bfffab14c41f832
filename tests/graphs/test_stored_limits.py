"""Limits shown, not cut: a value longer than its column is refused with a message by the API and by the
service every other caller uses, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest

from graphs import services
from graphs.constants import NODE_ID_MAX, WORKFLOW_NAME_MAX
from graphs.models import Workflow
from memory import fields as memory_fields
from memory.models import MemoryItem
from opencompany.core.errors import ApplicationError
from tests.conftest import node_id

pytestmark = pytest.mark.django_db


def test_model_columns_have_the_lengths_the_callers_validate() -> None:
    assert Workflow._meta.get_field("name").max_length == WORKFLOW_NAME_MAX == 200
    assert MemoryItem._meta.get_field("title").max_length == memory_fields.TITLE_MAX == 500
    assert MemoryItem._meta.get_field("category").max_length == memory_fields.CATEGORY_MAX == 100


def test_an_over_long_workflow_name_is_refused_by_the_api_and_nothing_is_written(api_client: Any) -> None:
    response = api_client.post("/api/v1/workflows", {"name": "n" * 201}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert response.json()["extra"]["fields"]["name"] == [
        "Ensure this field has no more than 200 characters."
    ]
    assert Workflow.objects.exists() is False


def test_an_over_long_workflow_name_is_refused_by_the_service(owner: Any) -> None:
    with pytest.raises(ApplicationError) as refused:
        services.workflow_create(owner=owner, name="n" * 201)

    assert refused.value.code == "invalid_request"
    assert refused.value.extra == {"fields": {"name": ["At most 200 characters (this one has 201)."]}}
    assert Workflow.objects.exists() is False


def test_a_blank_workflow_name_is_refused_by_the_service(owner: Any) -> None:
    with pytest.raises(ApplicationError) as refused:
        services.workflow_create(owner=owner, name="   ")

    assert refused.value.extra == {"fields": {"name": ["May not be blank."]}}


def test_a_node_id_longer_than_its_column_is_refused_not_cut(owner: Any, workflow: Workflow) -> None:
    agent = node_id(workflow, "aiAgent")
    long_id = f"{workflow.pk}:aiAgent:{'9' * (NODE_ID_MAX)}"
    graph = {
        **workflow.graph,
        "nodes": [*workflow.graph["nodes"], {"id": long_id, "type": "aiAgent", "data": {}}],
    }

    with pytest.raises(ApplicationError) as refused:
        services.workflow_save(workflow=workflow, graph=graph, expected_revision=workflow.revision)

    assert refused.value.code == "invalid_graph"
    assert refused.value.extra == {"max_chars": NODE_ID_MAX, "chars": len(long_id)}
    assert Workflow.objects.get(pk=workflow.pk).revision == workflow.revision
    assert agent in {n["id"] for n in Workflow.objects.get(pk=workflow.pk).graph["nodes"]}


def test_an_over_long_memory_title_is_refused_by_the_api(api_client: Any, workflow: Workflow) -> None:
    url = f"/api/v1/workflows/{workflow.pk}/memory/{node_id(workflow, 'simpleMemory')}/items"

    response = api_client.post(url, {"content": "x", "title": "t" * 501}, format="json")

    assert response.status_code == 400
    assert response.json()["extra"]["fields"]["title"] == [
        "Ensure this field has no more than 500 characters."
    ]
    assert MemoryItem.objects.exists() is False
