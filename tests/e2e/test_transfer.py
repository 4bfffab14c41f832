"""Staff transfer a workflow in the admin, in Chromium against a live daphne server: the transfer page
counts what moves and refuses a wrong username; once confirmed, the old owner's open chat tab says the
workflow was transferred and the new owner finds the chat and its Memory. On the way the owner's emptied
Memory edit shows the API's refusal. A live chat whose agent cannot answer says so in its header instead
of "Connected"."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from graphs.models import Workflow, WorkflowTransfer
from tests.conftest import demo_graph, make_workflow
from tests.e2e.conftest import PASSWORD, Console, db_read, sign_in
from tests.e2e.test_admin_pages import admin_sign_in
from tests.e2e.test_chat_page import open_chat, send, wait_answers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FACT = "the boat is moored at pier 7"
REMEMBERED = f"{FACT}."  # what the offline demo model stores


@pytest.fixture
def e2e_staff(transactional_db: Any) -> Any:
    return get_user_model().objects.create_user(
        username="e2e-staff", password=PASSWORD, is_staff=True, is_superuser=True
    )


@pytest.fixture
def e2e_heir(transactional_db: Any) -> Any:
    return get_user_model().objects.create_user(username="e2e-heir", password=PASSWORD)


# About 8 s: a real run of the offline model, then three browsers (owner, staff, new owner) in one story.
def test_staff_transfer_a_workflow_and_the_old_tab_says_so_while_the_new_owner_finds_everything(
    e2e_staff: Any,
    e2e_heir: Any,
    e2e_owner: Any,
    e2e_workflow: Any,
    live_server_url: str,
    new_page: Any,
    console: Console,
) -> None:
    workflow = e2e_workflow
    old = open_chat(new_page, live_server_url, e2e_owner)
    send(old, f"Remember that {FACT}.")
    wait_answers(old, 1)
    expect(old.locator(".memory-content")).to_have_text([REMEMBERED])
    # An emptied Memory edit goes to the API, whose refusal the page shows; nothing changes.
    old.get_by_role("button", name=re.compile("^Edit memory")).click()
    old.get_by_label("Memory content").fill("")
    old.locator("#memory-list").get_by_role("button", name="Save").click()
    expect(old.locator("#banner")).to_have_text("Invalid request: check 'content'. May not be blank.")
    old.locator("#memory-list").get_by_role("button", name="Cancel").click()
    expect(old.locator(".memory-content")).to_have_text([REMEMBERED])

    staff = new_page()
    admin_sign_in(staff, live_server_url, e2e_staff.username)
    staff.goto(f"{live_server_url}/admin/graphs/workflow/{workflow.pk}/change/")
    staff.get_by_role("link", name="Transfer to another owner…").click()
    moves = staff.locator("#transfer-moves")
    expect(moves.locator('[data-key="chat.chats"]')).to_have_text("Chats (current and archived): 1")
    expect(moves.locator('[data-key="chat.messages"]')).to_have_text("Chat messages: 2")
    expect(moves.locator('[data-key="memory.items"]')).to_have_text("Memory items: 1")
    expect(moves.locator('[data-key="conversations.conversations"]')).to_have_text(
        "Contexts (agent conversations): 1"
    )
    expect(staff.locator('#transfer-stops [data-key="tokens"]')).to_contain_text("API tokens of e2e-owner: 0")
    staff.get_by_role("combobox", name="New owner").select_option(label="e2e-heir")
    staff.get_by_label("Type the new owner's username to confirm").fill("e2e-owner")
    staff.get_by_role("button", name="Transfer to the new owner").click()
    expect(staff.locator(".errornote")).to_contain_text("Type the new owner's username (e2e-heir) exactly")
    assert db_read(lambda: Workflow.objects.get(pk=workflow.pk).owner_id) == e2e_owner.pk

    staff.get_by_role("combobox", name="New owner").select_option(label="e2e-heir")
    staff.get_by_label("Type the new owner's username to confirm").fill("e2e-heir")
    staff.get_by_role("button", name="Transfer to the new owner").click()
    expect(staff.locator(".messagelist .success")).to_contain_text(
        "Transferred “Demo” from e2e-owner to e2e-heir"
    )

    expect(old.locator("#conn")).to_have_text("Transferred")
    expect(old.locator("#banner")).to_have_text(
        "This workflow was transferred to another owner. Its chats, Memory and Context went with it."
    )
    expect(old.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    record = db_read(
        lambda: WorkflowTransfer.objects.values_list("from_username", "to_username", "actor_username").get()
    )
    assert record == ("e2e-owner", "e2e-heir", "e2e-staff")

    heir = new_page()
    sign_in(heir, live_server_url, e2e_heir.username)
    expect(heir).to_have_url(f"{live_server_url}/chat/{workflow.pk}/")
    expect(heir.locator("#conn")).to_have_text("Connected")
    expect(heir.locator("li.msg-user")).to_have_text([re.compile(f"Remember that {FACT}")])
    expect(heir.locator("li.msg-assistant[data-id]")).to_have_count(1)
    expect(heir.locator(".memory-content")).to_have_text([REMEMBERED])

    old.reload()
    expect(old.locator("#unavailable-reason")).to_contain_text("was transferred to another owner on")
    # Chromium logs the refused empty edit (400) and the reloaded page's 404 (no longer theirs).
    console.allow(r"status of 400 \(Bad Request\)")
    console.allow(r"status of 404")
    console.assert_clean()


@pytest.fixture
def server_without_anthropic_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live server starts without an Anthropic key, whatever this machine's environment holds."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


@pytest.fixture
def keyless_workflow(server_without_anthropic_key: None, e2e_owner: Any, settings: Any) -> Any:
    """A live workflow whose agent uses Anthropic: deployed where a key is configured, served by a
    server that has none (made before the browser starts, as every service call here is)."""
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": "anthropic", "model": "claude-test"})
    settings.ANTHROPIC_API_KEY = "sk-ant-test"
    return make_workflow(e2e_owner, graph, name="Keyless")


def test_a_live_chat_whose_agent_cannot_answer_says_so_in_the_header(
    keyless_workflow: Any, e2e_owner: Any, live_server_url: str, new_page: Any, console: Console
) -> None:
    page = new_page()
    sign_in(page, live_server_url, e2e_owner.username)

    page.goto(f"{live_server_url}/chat/{keyless_workflow.pk}/")

    expect(page.locator("#conn")).to_have_text("Cannot answer")
    expect(page.locator("#banner")).to_have_text(
        "The agent cannot answer on this server: No API key is configured for the Anthropic provider."
    )
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    console.assert_clean()
