"""Workflow lists cost a fixed number of queries whatever the number of rows: the API list, the admin
changelists of Workflow and Deployment, and the owner's workflows page."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from chat import services as chat_services
from graphs import services
from graphs.models import Deployment, Workflow
from tests.conftest import demo_graph

pytestmark = pytest.mark.django_db

# Each list, whatever its length: authentication, then one query for the rows (the admin adds its
# counts and the owners its owner filter offers; the workflows page its session).
API_LIST_QUERIES = 2
WORKFLOW_CHANGELIST_QUERIES = 6
DEPLOYMENT_CHANGELIST_QUERIES = 6
WORKFLOWS_PAGE_QUERIES = 3


def _workflows(owner: Any, count: int) -> dict[str, tuple[int, str]]:
    """`count` workflows cycling through draft, live (generation 1), reset (generation 1) and live again
    (generation 2); returns `{workflow id: (generation, state)}` as each list should show it."""
    expected: dict[str, tuple[int, str]] = {}
    for index in range(count):
        workflow = services.workflow_create(owner=owner, name=f"w{index}", graph=demo_graph())
        kind = index % 4
        if kind >= 1:
            services.workflow_deploy(workflow=workflow)
        if kind >= 2:
            services.workflow_reset(workflow=workflow)
        if kind == 3:
            services.workflow_deploy(workflow=workflow)
        expected[workflow.pk] = [(0, "draft"), (1, "live"), (1, "reset"), (2, "live")][kind]
    return expected


@pytest.fixture
def owner_browser(owner: Any) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def staff_browser(staff: Any) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.mark.parametrize("rows", [1, 6])
def test_api_list_runs_a_fixed_number_of_queries(owner, api_client, django_assert_num_queries, rows):
    expected = _workflows(owner, rows)

    with django_assert_num_queries(API_LIST_QUERIES):
        response = api_client.get("/api/v1/workflows")

    assert response.status_code == 200
    results = response.json()["results"]
    assert {w["id"]: (w["generation"], w["state"]) for w in results} == expected
    assert len(results) == rows


@pytest.mark.parametrize("rows", [1, 6])
def test_workflow_changelist_runs_a_fixed_number_of_queries(
    owner, staff_browser, django_assert_num_queries, rows
):
    expected = _workflows(owner, rows)

    with django_assert_num_queries(WORKFLOW_CHANGELIST_QUERIES):
        response = staff_browser.get("/admin/graphs/workflow/")

    assert response.status_code == 200
    shown = response.context["cl"].result_list
    assert {w.pk: (w.current_generation, w.current_state) for w in shown} == expected
    html = response.content.decode()
    assert html.count('<td class="field-state">live</td>') == sum(
        1 for _, s in expected.values() if s == "live"
    )
    assert html.count('<td class="field-state">draft</td>') == sum(
        1 for _, s in expected.values() if s == "draft"
    )


@pytest.mark.parametrize("rows", [1, 6])
def test_deployment_changelist_runs_a_fixed_number_of_queries(
    owner, staff_browser, django_assert_num_queries, rows
):
    for index in range(rows):
        services.workflow_deploy(
            workflow=services.workflow_create(owner=owner, name=f"w{index}", graph=demo_graph())
        )

    with django_assert_num_queries(DEPLOYMENT_CHANGELIST_QUERIES):
        response = staff_browser.get("/admin/graphs/deployment/")

    assert response.status_code == 200
    shown = response.context["cl"].result_list
    assert sorted(d.pk for d in shown) == sorted(Deployment.objects.values_list("pk", flat=True))
    assert len(shown) == rows


@pytest.mark.parametrize("rows", [1, 6])
def test_workflows_page_runs_a_fixed_number_of_queries(
    owner, owner_browser, django_assert_num_queries, settings, rows
):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    expected = _workflows(owner, rows)
    # Messages join into the page's last-activity column; the states must survive that join.
    for workflow in Workflow.objects.filter(pk__in=[pk for pk, (_, s) in expected.items() if s == "live"]):
        chat_services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello")

    with django_assert_num_queries(WORKFLOWS_PAGE_QUERIES):
        response = owner_browser.get("/?all=1")

    assert response.status_code == 200
    shown = {row["workflow"].pk: (row["generation"], row["state"]) for row in response.context["rows"]}
    assert shown == expected
    html = response.content.decode()
    assert html.count('class="pill pill-live">live<') == sum(1 for _, s in expected.values() if s == "live")
    assert html.count('class="pill pill-reset">reset<') == sum(
        1 for _, s in expected.values() if s == "reset"
    )
