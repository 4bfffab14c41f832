"""Add-subagent places the new nodes from the lead's position, whatever the stored graph holds there."""

from __future__ import annotations

import pytest

from graphs import services
from tests.conftest import node_id

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("x", [10**4000, -(10**400), 1e308, "12", None])
def test_a_lead_at_a_position_no_canvas_has_gets_its_subagent_placed_from_zero(api_client, owner, x):
    lead = {"id": "lead", "type": "teamLead", "position": {"x": x, "y": 40}, "data": {}}
    workflow = services.workflow_create(owner=owner, name="t", graph={"nodes": [lead], "edges": []})
    lead_id = node_id(workflow, "teamLead")

    response = api_client.post(
        f"/api/v1/workflows/{workflow.pk}/agents/{lead_id}/subagents", {"label": "R"}, format="json"
    )

    assert response.status_code == 201
    placed = {n["id"]: n["position"] for n in response.json()["graph"]["nodes"]}
    assert placed[response.json()["node_id"]] == {"x": 0, "y": 300}
    assert placed[response.json()["context_node_id"]] == {"x": -360, "y": 300}
