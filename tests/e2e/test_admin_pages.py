"""Staff in the Django admin, in Chromium against a live daphne server: a memory item edited through the
service, and a graph whose refusal shows the validator's message on the page."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from graphs.models import Workflow
from memory import services as memory_services
from memory.models import MemoryItem
from memory.scope import memory_scope
from tests.conftest import node_id
from tests.e2e.conftest import PASSWORD, Console, db_read

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def e2e_staff(transactional_db: Any) -> Any:
    return get_user_model().objects.create_user(
        username="e2e-staff", password=PASSWORD, is_staff=True, is_superuser=True
    )


@pytest.fixture
def gate_item(e2e_workflow: Any) -> MemoryItem:
    scope = memory_scope(workflow=e2e_workflow, memory_node_id=node_id(e2e_workflow, "simpleMemory"))
    memory_services.memory_remember(
        scope=scope, content="The gate code is 4321", title="Gate", actor="owner:1"
    )
    return MemoryItem.objects.get()


def admin_sign_in(page: Any, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/admin/login/?next=/admin/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{base_url}/admin/")


def test_staff_edit_a_memory_item_and_see_the_validators_refusal_of_a_bad_graph(
    e2e_staff: Any,
    gate_item: MemoryItem,
    live_server_url: str,
    e2e_workflow: Any,
    new_page: Any,
    console: Console,
    artifacts_dir: Path,
) -> None:
    workflow = e2e_workflow
    page = new_page()
    admin_sign_in(page, live_server_url, e2e_staff.username)

    page.goto(f"{live_server_url}/admin/memory/memoryitem/")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list tbody tr td.field-content_preview")).to_have_text(
        "The gate code is 4321"
    )
    page.get_by_role("link", name=gate_item.memory_id).click()
    page.get_by_label("Content").fill("The gate code is 9876")
    page.get_by_role("button", name="Save", exact=True).click()

    expect(page.locator(".messagelist .success")).to_contain_text("was changed successfully")
    expect(page.locator("#result_list tbody tr td.field-content_preview")).to_have_text(
        "The gate code is 9876"
    )
    stored = db_read(lambda: MemoryItem.objects.values_list("content", "version", "updated_by").get())
    assert stored == ("The gate code is 9876", 2, f"staff:{e2e_staff.pk}")

    bad = copy.deepcopy(workflow.graph)
    agent = node_id(workflow, "aiAgent")
    bad["nodes"].append({"id": "second-context", "type": "context", "position": {"x": 0, "y": 0}, "data": {}})
    bad["edges"].append(
        {
            "id": "e-second",
            "source": "second-context",
            "sourceHandle": "output-context",
            "target": agent,
            "targetHandle": "input-context",
        }
    )
    page.goto(f"{live_server_url}/admin/graphs/workflow/{quote(workflow.pk)}/change/")
    page.get_by_label("Graph").fill(json.dumps(bad, indent=2))
    page.get_by_role("button", name="Save", exact=True).click()

    errors = page.locator(".field-graph .errorlist li")
    expect(errors.nth(0)).to_have_text(re.compile(r"\(invalid_context_topology\)$"))
    expect(errors.nth(1)).to_have_text(
        f"multiple_contexts at {agent}: An agent cannot be connected to multiple Context nodes"
    )
    expect(page.locator(".messagelist .success")).to_have_count(0)
    expect(page.get_by_label("Graph")).to_have_value(re.compile("second-context"))
    page.screenshot(path=str(artifacts_dir / "admin-graph-refused.png"), full_page=True)
    kept = db_read(lambda: Workflow.objects.values_list("revision", "graph").get(pk=workflow.pk))
    assert kept == (workflow.revision, workflow.graph)
    console.assert_clean()
