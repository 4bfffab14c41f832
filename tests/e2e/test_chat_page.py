"""The owner's chat page in Chromium against a live daphne server: what the page shows."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from chat.models import ChatMessage
from tests.e2e.conftest import Console, db_read, sign_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ANSWER = "li.msg-assistant[data-id]"
STREAMING = "li.msg-assistant.is-streaming"
LONG = (
    "Please keep this whole sentence in mind because it is deliberately long, so that the streamed answer "
    "quoting it takes a while to arrive"
)


def _squash(text: str) -> str:
    return " ".join(text.split())


def open_chat(new_page: Any, url: str, owner: Any, **viewport: int) -> Any:
    page = new_page(**viewport)
    sign_in(page, url, owner.username)
    expect(page).to_have_url(re.compile(r"/chat/[^/]+/$"))
    expect(page.locator("#conn")).to_have_text("Connected")
    return page


def composer(page: Any) -> Any:
    return page.get_by_label("Message", exact=True)


def send(page: Any, text: str) -> None:
    box = composer(page)
    box.fill(text)
    box.press("Enter")


def wait_answers(page: Any, count: int) -> Any:
    """The `count`-th stored answer is on screen and no run is live."""
    expect(page.locator(ANSWER)).to_have_count(count, timeout=20_000)
    expect(page.locator(STREAMING)).to_have_count(0, timeout=20_000)
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()
    return page.locator(ANSWER).nth(count - 1)


def stored_replies() -> list[str]:
    return db_read(
        lambda: list(
            ChatMessage.objects.filter(role="assistant").order_by("pk").values_list("text", flat=True)
        )
    )


def test_sign_in_and_send_streams_the_answer_to_completion(
    live_server_url: str,
    e2e_owner: Any,
    e2e_workflow: Any,
    new_page: Any,
    console: Console,
    artifacts_dir: Path,
) -> None:
    workflow = e2e_workflow
    page = open_chat(new_page, live_server_url, e2e_owner)
    expect(page).to_have_url(f"{live_server_url}/chat/{workflow.pk}/")

    send(page, "Hello there, agent")

    expect(page.locator("li.msg-user").first).to_contain_text("Hello there, agent")
    expect(page.locator(STREAMING)).to_have_count(1)
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    answer = wait_answers(page, 1)
    expect(answer).to_contain_text("(Offline demo model) You said “Hello there, agent”.")
    assert _squash(answer.locator(".msg-text").inner_text()) == _squash(stored_replies()[0])
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    expect(composer(page)).to_be_focused()

    send(page, "Here is some `code` and a list:\n- one\n- two")
    wait_answers(page, 2)
    expect(page.locator("li.msg-user").nth(1).locator("ul li")).to_have_count(2)
    expect(page.locator("li.msg-user").nth(1).locator("code")).to_have_text("code")
    send(page, "remember that I take my coffee black")
    wait_answers(page, 3)
    send(page, "note: buy coffee beans on Friday")
    wait_answers(page, 4)
    expect(page.locator(".memory-content")).to_have_text(["I take my coffee black"])
    expect(page.locator("#notes-list li")).to_have_text(["buy coffee beans on Friday"])

    page.screenshot(path=str(artifacts_dir / "chat-desktop-1280.png"))
    page.set_viewport_size({"width": 360, "height": 740})
    expect(page.get_by_role("button", name="Agent panels")).to_be_visible()
    expect(page.locator("#panels")).to_be_hidden()
    page.screenshot(path=str(artifacts_dir / "chat-mobile-360.png"))
    console.assert_clean()


def test_chat_page_is_served_with_the_content_security_policy(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    workflow = e2e_workflow
    page = new_page()
    sign_in(page, live_server_url, e2e_owner.username)

    response = page.goto(f"{live_server_url}/chat/{workflow.pk}/")

    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "style-src 'self'" in csp
    assert "default-src 'self'" in csp
    expect(page.locator("#conn")).to_have_text("Connected")
    script = page.request.get(f"{live_server_url}/static/chat/chat.js")
    assert script.status == 200
    assert "javascript" in script.headers["content-type"]
    console.assert_clean()


def test_stop_mid_answer_shows_a_stopped_answer_and_frees_send(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, LONG)
    expect(page.locator(f"{STREAMING} .msg-text p")).to_have_count(1)
    send_button = page.get_by_role("button", name="Send", exact=True)
    expect(send_button).to_be_hidden()
    expect(page.locator("#composer-reason")).to_have_text("The agent is answering. Wait, or press Stop.")

    page.get_by_role("button", name="Stop").click()

    stopped = page.locator('li.msg-assistant[data-status="stopped"]')
    expect(stopped).to_have_count(1)
    expect(stopped.locator(".status-note")).to_have_text("Stopped")
    expect(send_button).to_be_enabled()
    expect(page.locator("#composer-reason")).to_have_text("")
    shown = _squash(stopped.locator(".msg-text").inner_text())
    reply = db_read(lambda: ChatMessage.objects.get(role="assistant"))
    assert reply.status == "stopped"
    assert shown == _squash(reply.text)
    assert len(shown) < len("(Offline demo model) You said “") + len(LONG)
    console.assert_clean()


def test_edit_then_switch_back_and_the_agent_remembers_the_original_branch(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, "My favourite colour is blue.")
    wait_answers(page, 1)

    first = page.locator("li.msg-user").first
    first.get_by_role("button", name="Edit this message").click()
    editor = page.get_by_label("Edit your message")
    expect(editor).to_be_focused()
    editor.fill("My favourite colour is green.")
    page.get_by_role("button", name="Save").click()

    expect(first.locator(".versions-label")).to_have_text("2/2")
    expect(first.locator(".msg-text")).to_have_text("My favourite colour is green.")
    answer = wait_answers(page, 1)
    expect(answer).to_contain_text("(Offline demo model) You said")
    expect(answer).not_to_contain_text("My favourite colour is blue.")
    expect(composer(page)).to_be_focused()

    first.get_by_role("button", name="Previous version").click()

    expect(first.locator(".versions-label")).to_have_text("1/2")
    expect(first.locator(".msg-text")).to_have_text("My favourite colour is blue.")
    expect(page.locator(ANSWER).first).to_contain_text("You said “My favourite colour is blue.”")

    send(page, "what did I say first?")
    answer = wait_answers(page, 2)
    expect(answer.locator(".msg-text")).to_have_text(
        "The first thing you said was “My favourite colour is blue.”."
    )
    console.assert_clean()


def test_remember_shows_the_item_in_the_memory_panel_without_a_reload(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    memory = page.locator("#memory-list")
    expect(page.locator("#memory-status")).to_have_text("Nothing remembered yet. Ask “remember that …”.")

    send(page, "remember that my dentist is Dr. Rivera")

    expect(wait_answers(page, 1).locator(".msg-text")).to_have_text(
        "Got it. I'll remember that my dentist is Dr. Rivera"
    )
    expect(memory.locator(".memory-content")).to_have_text(["my dentist is Dr. Rivera"])
    expect(memory.locator(".memory-meta")).to_contain_text("no expiry")
    expect(page.locator("#memory-count")).to_have_text("1")

    page.get_by_label("Search memory").fill("dentist")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#memory-status")).to_contain_text("1 match for “dentist”")
    console.assert_clean()


def test_editing_a_memory_item_changed_in_another_tab_shows_the_conflict(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    first = open_chat(new_page, live_server_url, e2e_owner)
    send(first, "remember that the spare key is under the mat")
    wait_answers(first, 1)
    second = open_chat(new_page, live_server_url, e2e_owner)
    for page in (first, second):
        expect(page.locator(".memory-content")).to_have_text(["the spare key is under the mat"])
    # the refused PATCH is the server's expected 409 answer; Chromium logs every non-2xx load
    console.allow(r"status of 409 \(Conflict\)")

    first.get_by_role("button", name=re.compile("^Edit memory")).click()
    first.get_by_label("Memory content").fill("the spare key is with the neighbour")
    second.get_by_role("button", name=re.compile("^Edit memory")).click()
    second.get_by_label("Memory content").fill("the spare key is in the blue pot")
    second.get_by_role("button", name="Save").click()
    expect(second.locator(".memory-content")).to_have_text(["the spare key is in the blue pot"])
    first.get_by_role("button", name="Save").click()

    expect(first.get_by_role("alert")).to_contain_text("Changed elsewhere — reload")
    first.get_by_role("button", name="Reload").click()
    expect(first.get_by_label("Memory content")).to_have_value("the spare key is in the blue pot")
    first.get_by_label("Memory content").fill("the spare key is with the neighbour")
    first.get_by_role("button", name="Save").click()
    expect(first.locator(".memory-content")).to_have_text(["the spare key is with the neighbour"])
    expect(second.locator(".memory-content")).to_have_text(["the spare key is with the neighbour"])
    assert [e for e in console.errors if "409" in e] != []
    console.assert_clean()


def test_note_shows_in_the_notes_panel(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    expect(page.locator("#notes-empty")).to_be_visible()

    send(page, "note: call the bank on Monday")

    expect(wait_answers(page, 1).locator(".msg-text")).to_have_text("Noted: call the bank on Monday")
    expect(page.locator("#notes-list li")).to_have_text(["call the bank on Monday"])
    expect(page.locator("#notes-empty")).to_be_hidden()
    console.assert_clean()


def test_context_counts_change_each_turn_and_clear_empties_them(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    messages, size, tokens = (
        page.locator("#ctx-messages"),
        page.locator("#ctx-bytes"),
        page.locator("#ctx-tokens"),
    )
    expect(messages).to_have_text("0")
    expect(size).to_have_text("0 B")

    send(page, "First turn")
    wait_answers(page, 1)
    expect(messages).to_have_text("2")
    size_after_one = size.inner_text()
    assert size_after_one != "0 B"
    expect(tokens).not_to_have_text("0")
    pressure_one = page.evaluate("document.getElementById('ctx-pressure').value")

    send(page, "Second turn")
    wait_answers(page, 2)
    expect(messages).to_have_text("4")
    expect(size).not_to_have_text(size_after_one)
    assert page.evaluate("document.getElementById('ctx-pressure').value") > pressure_one

    page.get_by_role("button", name="Clear Context…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("The agent forgets this conversation")
    dialog.get_by_role("button", name="Clear Context").click()

    expect(messages).to_have_text("0")
    expect(size).to_have_text("0 B")
    expect(tokens).to_have_text("0")
    expect(page.locator("#ctx-pressure-text")).to_have_text("0% of 128,000 tokens")
    console.assert_clean()


def test_reload_mid_stream_resumes_the_same_answer_without_doubling(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, LONG)
    wait_answers(page, 1)
    send(page, LONG + " again")
    expect(page.locator(f"{STREAMING} .msg-text p")).to_have_count(1)

    page.reload()

    seen: list[str] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = page.evaluate(
            "(() => { const n = document.querySelector('li.is-streaming .msg-text p');"
            " return n ? n.textContent : null; })()"
        )
        if text:
            seen.append(text)
        if page.locator(ANSWER).count() == 2 and page.locator(STREAMING).count() == 0:
            break
        time.sleep(0.02)
    answer = wait_answers(page, 2)
    final = _squash(answer.locator(".msg-text").inner_text())
    stored = _squash(stored_replies()[1])
    assert final == stored
    assert seen != []  # the answer was still streaming after the reload: it resumed
    assert all(stored.startswith(_squash(text).rstrip("▍")) for text in seen)
    console.assert_clean()


def test_html_in_a_message_is_shown_as_text(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    payload = (
        '<script>window.__owned = 1</script> <img src=x onerror="window.__owned = 2; alert(1)"> <b>bold</b>'
    )

    send(page, payload)

    wait_answers(page, 1)
    expect(page.locator("li.msg-user .msg-text")).to_have_text(payload)
    expect(page.locator(ANSWER).first).to_contain_text("<img src=x onerror=")
    assert page.locator("#messages script, #messages img, #messages b").count() == 0
    assert page.evaluate("window.__owned === undefined")
    page.reload()
    expect(page.locator("li.msg-user .msg-text")).to_have_text(payload)
    assert page.locator("#messages script, #messages img, #messages b").count() == 0
    assert page.evaluate("window.__owned === undefined")
    console.assert_clean()
