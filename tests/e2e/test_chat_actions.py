"""More of the chat page in Chromium: New chat, feedback and Retry, reconnecting, history upward."""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from playwright.sync_api import expect

from chat import services
from chat.executor import execute_run
from chat.models import ChatFeedback
from tests.conftest import make_workflow
from tests.e2e.conftest import Console, LiveServer, db_read, sign_in
from tests.e2e.test_chat_page import ANSWER, composer, open_chat, send, wait_answers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_new_chat_clears_the_agents_mind_but_memory_stays(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, "remember that the boiler code is 4471")
    wait_answers(page, 1)
    send(page, "note: check the boiler pressure")
    wait_answers(page, 2)
    expect(page.locator("#ctx-messages")).not_to_have_text("0")
    expect(page.locator("#notes-list li")).to_have_count(1)

    page.get_by_role("button", name="New chat").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("This chat is kept under Chats, read-only, with its ratings.")
    expect(dialog).to_contain_text("Memory stays.")
    dialog.get_by_role("button", name="Start a new chat").click()

    expect(page.locator("#messages > li")).to_have_count(0)
    expect(page.locator("#empty")).to_be_visible()
    expect(page.locator("#ctx-messages")).to_have_text("0")
    expect(page.locator("#notes-list li")).to_have_count(0)
    expect(page.locator(".memory-content")).to_have_text(["the boiler code is 4471"])
    expect(composer(page)).to_be_focused()
    console.assert_clean()


def test_feedback_is_kept_and_retry_adds_a_second_version_of_the_answer(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, "Tell me something")
    answer = wait_answers(page, 1)

    answer.get_by_role("button", name="Good answer").click()

    expect(answer.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "true")
    expect(answer.get_by_role("button", name="Bad answer")).to_have_attribute("aria-pressed", "false")
    page.reload()
    answer = page.locator(ANSWER).first
    expect(answer.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "true")
    assert db_read(lambda: ChatFeedback.objects.get().value) == "up"

    answer.get_by_role("button", name="Retry this answer").click()

    answer = wait_answers(page, 1)
    expect(answer.locator(".versions-label")).to_have_text("2/2")
    expect(answer.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "false")
    answer.get_by_role("button", name="Previous version").click()
    expect(answer.locator(".versions-label")).to_have_text("1/2")
    expect(answer.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "true")
    console.assert_clean()


def test_a_dropped_connection_shows_reconnecting_and_comes_back_by_itself(
    asgi_server: LiveServer, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, asgi_server.url, e2e_owner)
    send(page, "Before the outage")
    wait_answers(page, 1)
    # while the server is down, Chromium logs each refused reconnect attempt, and the refused load of a
    # list the page refreshes after the answer (the chat list, reloaded once the connection is back)
    console.allow(r"WebSocket connection to 'ws://127\.0\.0\.1:\d+/ws/chat/[^']+' failed")
    console.allow(r"Failed to load resource: net::ERR_CONNECTION_REFUSED")

    asgi_server.stop()

    expect(page.locator("#banner")).to_contain_text("Reconnecting…")
    expect(page.locator("#conn")).to_have_text("Reconnecting…")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    expect(page.locator("#composer-reason")).to_have_text(
        "Reconnecting… you can send once the connection is back."
    )

    asgi_server.start()

    expect(page.locator("#conn")).to_have_text("Connected", timeout=15_000)
    expect(page.locator("#banner")).to_be_hidden()
    send(page, "After the outage")
    expect(wait_answers(page, 2)).to_contain_text("You said “After the outage”")
    console.assert_clean()


@pytest.fixture
def long_thread(e2e_workflow: Any, settings: Any) -> int:
    """30 answered turns (60 messages), run in this process before the browser opens."""
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    settings.OPENCOMPANY_OFFLINE_PACING_MS = 0
    turns = 30
    for n in range(1, turns + 1):
        admission = services.chat_send(
            owner_id=e2e_workflow.owner_id, workflow_id=e2e_workflow.pk, text=f"Message number {n}"
        )
        assert async_to_sync(execute_run)(admission.run.run_id) == "finished"
    return turns * 2


def test_history_loads_upward_on_scroll(
    long_thread: int, live_server_url: str, e2e_owner: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    messages = page.locator("#messages > li")
    expect(messages).to_have_count(50)
    expect(messages.last).to_contain_text("Message number 30")
    expect(page.get_by_role("button", name="Load earlier messages")).to_be_visible()

    page.locator("#scroller").evaluate("node => { node.scrollTop = 0; }")

    expect(messages).to_have_count(long_thread)
    expect(messages.first).to_have_text(
        re.compile(r"^You\s*Message number 1\s*Edit\s*(just now|\d+ minutes? ago)$")
    )
    expect(page.get_by_role("button", name="Load earlier messages")).to_be_hidden()
    console.assert_clean()


@pytest.fixture
def draft_workflow(e2e_workflow: Any, e2e_owner: Any) -> Any:
    return make_workflow(e2e_owner, name="Second draft", deploy=False)


def test_workflow_list_deploys_a_draft_and_opens_its_chat(
    draft_workflow: Any, live_server_url: str, e2e_owner: Any, new_page: Any, console: Console
) -> None:
    page = new_page()
    sign_in(page, live_server_url, e2e_owner.username)
    expect(page.get_by_role("heading", name="Your workflows")).to_be_visible()
    row = page.get_by_role("row").filter(has_text="Second draft")
    expect(row.locator(".pill")).to_have_text("draft")

    row.get_by_role("button", name="Deploy Second draft").click()

    expect(page.locator("#workflows-status")).to_have_text("Deployed: generation 1, live.")
    expect(page.get_by_role("row").filter(has_text="Second draft").locator(".pill")).to_have_text("live")
    page.get_by_role("link", name="Second draft").click()
    expect(page).to_have_url(f"{live_server_url}/chat/{draft_workflow.pk}/")
    expect(page.locator("#conn")).to_have_text("Connected")
    console.assert_clean()
