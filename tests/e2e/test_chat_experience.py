"""The chat page as people expect it, in Chromium: past chats kept and reopened read-only, Markdown while it
streams, code copy, the API docs under the site's policy, drawers on a phone, dark mode, the small things
(timestamps, the character limit, readable errors, the empty state), and the screenshots in docs/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from chat.models import ChatThread
from tests.e2e.conftest import REPO, Console, db_read, sign_in
from tests.e2e.test_chat_page import ANSWER, composer, open_chat, send, wait_answers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DOCS = REPO / "docs"

MARKDOWN = """# Boiler service

Some **bold**, *italic* and ~~struck~~ text with a [manual](https://example.com/manual).

> Check the pressure first.

| Part | Cost |
|---|--:|
| Valve | 40 |

- [x] book the engineer
- [ ] clear the cupboard
  - move the paint

```python
def pressure(bar):
    return bar * 14.5
```

<script>window.pwned = 1</script> <img src=x onerror="window.pwned = 2">"""


def _user_bubble(page: Any, index: int = 0) -> Any:
    return page.locator("li.msg-user").nth(index).locator(".msg-text")


# --- past chats -----------------------------------------------------------------------------------


def test_new_chat_keeps_the_old_chat_which_reopens_read_only_with_its_rating_and_purge_removes_it(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, "Plan the boiler service\nfor next week")
    answer = wait_answers(page, 1)
    answer.get_by_role("button", name="Good answer").click()
    expect(answer.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "true")
    chats = page.locator("#chats-list li")
    expect(chats).to_have_count(1)
    expect(chats.first).to_contain_text("Plan the boiler service")
    expect(chats.first).to_contain_text("Current")

    page.get_by_role("button", name="New chat").click()
    page.get_by_role("dialog").get_by_role("button", name="Start a new chat").click()

    expect(page.locator("#messages > li")).to_have_count(0)
    expect(chats).to_have_count(1)
    old = chats.first
    expect(old).to_contain_text("Plan the boiler service")
    expect(old).to_contain_text("2 messages")
    expect(old).not_to_contain_text("Current")
    send(page, "A fresh start")
    wait_answers(page, 1)
    expect(chats).to_have_count(2)
    expect(chats.first).to_contain_text("A fresh start")
    expect(chats.nth(1)).to_contain_text("Plan the boiler service")

    chats.nth(1).get_by_role("link").click()

    expect(page).to_have_url(re.compile(r"\?chat=chat_[a-z0-9]{20}$"))
    expect(page.locator("#archived-bar")).to_contain_text("Archived chat · read-only")
    expect(page.locator("#archived-title")).to_have_text("Plan the boiler service")
    question = page.locator("li.msg-user .msg-text")
    expect(question.locator("p br")).to_have_count(1)
    assert question.inner_text().strip() == "Plan the boiler service\nfor next week"
    archived_answer = page.locator(ANSWER)
    expect(archived_answer).to_have_count(1)
    expect(archived_answer).to_contain_text("Rated good")
    expect(page.get_by_role("button", name="Good answer")).to_have_count(0)
    expect(page.get_by_role("button", name="Edit this message")).to_have_count(0)
    expect(page.get_by_role("button", name="Retry this answer")).to_have_count(0)
    expect(composer(page)).to_be_hidden()

    page.reload()
    expect(page.locator("#archived-title")).to_have_text("Plan the boiler service")
    page.get_by_role("button", name="Rename").click()
    page.get_by_label("Chat title").fill("Boiler, week 32")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#archived-title")).to_have_text("Boiler, week 32")
    expect(chats.nth(1)).to_contain_text("Boiler, week 32")

    page.get_by_role("button", name="Delete…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(
        "“Boiler, week 32” and all its messages, versions and ratings are deleted."
    )
    dialog.get_by_role("button", name="Delete for good").click()

    expect(chats).to_have_count(1)
    expect(chats.first).to_contain_text("A fresh start")
    expect(page.locator("#archived-bar")).to_be_hidden()
    expect(page).to_have_url(re.compile(r"/chat/[^/?]+/$"))
    expect(page.locator("li.msg-user .msg-text")).to_have_text(["A fresh start"])
    assert db_read(lambda: list(ChatThread.objects.values_list("title", flat=True))) == [""]
    console.assert_clean()


# --- Markdown ------------------------------------------------------------------------------------------


def test_markdown_renders_as_elements_and_raw_html_stays_text(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)

    send(page, MARKDOWN)
    wait_answers(page, 1)

    text = _user_bubble(page)
    expect(text.locator("h1")).to_have_text("Boiler service")
    expect(text.locator("strong")).to_have_text("bold")
    expect(text.locator("em")).to_have_text("italic")
    expect(text.locator("del")).to_have_text("struck")
    link = text.get_by_role("link", name="manual")
    expect(link).to_have_attribute("href", "https://example.com/manual")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(text.locator("blockquote")).to_have_text("Check the pressure first.")
    expect(text.locator("table th")).to_have_text(["Part", "Cost"])
    expect(text.locator("table td")).to_have_text(["Valve", "40"])
    boxes = text.locator("li > input[type=checkbox]")
    expect(boxes).to_have_count(2)
    expect(boxes.first).to_be_checked()
    expect(boxes.nth(1)).not_to_be_checked()
    expect(boxes.first).to_be_disabled()
    expect(text.locator("li li")).to_have_text(["move the paint"])
    block = text.locator(".code-block")
    expect(block.locator(".code-lang")).to_have_text("python")
    expect(block.locator("code")).to_have_text("def pressure(bar):\n    return bar * 14.5")
    expect(block.locator("code .hljs-keyword")).to_have_text(["def", "return"])
    expect(block.get_by_role("button", name="Copy code")).to_be_visible()
    expect(text).to_contain_text('<script>window.pwned = 1</script> <img src=x onerror="window.pwned = 2">')
    expect(page.locator("#messages script, #messages img, #messages [onerror]")).to_have_count(0)
    assert page.evaluate("window.pwned") is None
    console.assert_clean()


def test_an_answer_renders_markdown_while_it_streams(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    # Record what the streaming answer showed, frame by frame (the answer takes about a second).
    page.evaluate(
        """() => {
          window.seenWhileStreaming = [];
          new MutationObserver(() => {
            for (const node of document.querySelectorAll("li.msg-assistant.is-streaming strong, li.msg-assistant.is-streaming code")) {
              window.seenWhileStreaming.push(node.tagName + ":" + node.textContent);
            }
          }).observe(document.getElementById("messages"), { childList: true, subtree: true, characterData: true });
        }"""
    )

    send(page, "**Streaming bold** and `inline code` then many more words so the answer takes a while")

    answer = wait_answers(page, 1)
    expect(answer.locator("strong")).to_have_text("Streaming bold")
    expect(answer.locator("code")).to_have_text("inline code")
    seen = set(page.evaluate("window.seenWhileStreaming"))
    assert seen == {"STRONG:Streaming bold", "CODE:inline code"}
    console.assert_clean()


def test_a_code_blocks_copy_button_puts_its_text_on_the_clipboard(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server_url)
    send(page, "```sh\nbin/run --port 8001\n```")
    wait_answers(page, 1)
    button = _user_bubble(page).get_by_role("button", name="Copy code")

    button.click()

    expect(button).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "bin/run --port 8001"
    expect(button).to_have_text("Copy", timeout=5_000)
    console.assert_clean()


# --- API docs ------------------------------------------------------------------------------------------


def test_api_docs_show_the_operations_under_the_policy(
    live_server_url: str, e2e_owner: Any, new_page: Any, console: Console
) -> None:
    page = new_page()

    response = page.goto(f"{live_server_url}/api/docs/")

    assert re.search(r"script-src 'self' 'nonce-[^']+';", response.headers["content-security-policy"])
    operation = page.locator(".opblock").filter(
        has_text="/api/v1/workflows/{workflow_id}/chats/{chat_id}/purge"
    )
    expect(operation).to_be_visible()
    expect(page.locator(".opblock-summary-path")).not_to_have_count(0)
    operation.locator(".opblock-summary").click()
    expect(operation).to_contain_text("Delete an archived chat for good")
    console.assert_clean()


# --- layout and small things ------------------------------------------------------------------------


def test_at_360px_the_panels_drawer_opens_and_closes_by_button_and_by_escape_and_keeps_focus(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner, width=360, height=740)
    panels = page.locator("#panels")
    toggle = page.get_by_role("button", name="Agent panels", exact=True)
    expect(panels).to_be_hidden()

    toggle.click()

    expect(panels).to_be_visible()
    close = page.get_by_role("button", name="Close side panels")
    expect(close).to_be_focused()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    for _ in range(12):  # more stops than the drawer has: Tab wraps around inside it
        page.keyboard.press("Tab")
        assert page.evaluate("document.getElementById('panels').contains(document.activeElement)")
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.getElementById('panels').contains(document.activeElement)")
    close.click()
    expect(panels).to_be_hidden()
    expect(toggle).to_be_focused()
    expect(toggle).to_have_attribute("aria-expanded", "false")

    toggle.click()
    expect(panels).to_be_visible()
    page.keyboard.press("Escape")
    expect(panels).to_be_hidden()
    expect(toggle).to_be_focused()

    page.get_by_role("button", name="Chats", exact=True).click()
    expect(page.locator("#chats")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#chats")).to_be_hidden()
    console.assert_clean()


def test_a_version_switch_keeps_the_switched_message_in_view(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner, width=1280, height=640)
    send(page, "The first version")
    wait_answers(page, 1)
    first = page.locator("li.msg-user").first
    first.get_by_role("button", name="Edit this message").click()
    page.get_by_label("Edit your message").fill("The second version")
    page.get_by_role("button", name="Save").click()
    expect(first.locator(".versions-label")).to_have_text("2/2")
    expect(wait_answers(page, 1)).to_contain_text("You said “The second version”")
    long_line = "This line is long on purpose so that the conversation grows taller than the window. " * 4
    for n in range(4):
        send(page, f"{n}: {long_line}")
        wait_answers(page, n + 2)
    first.get_by_role("button", name="Previous version").click()
    expect(first.locator(".versions-label")).to_have_text("1/2")

    first.get_by_role("button", name="Next version").click()

    expect(first.locator(".versions-label")).to_have_text("2/2")
    expect(page.locator(ANSWER)).to_have_count(5)
    expect(first).to_be_in_viewport()
    expect(first.get_by_role("button", name="Next version")).to_be_disabled()
    expect(first.get_by_role("button", name="Previous version")).to_be_focused()
    console.assert_clean()


def test_the_counter_shows_near_the_limit_and_an_over_long_paste_is_kept_and_explained(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server_url)
    box = composer(page)
    counter = page.locator("#composer-count")
    expect(counter).to_be_hidden()

    box.fill("a" * 45_000)
    expect(counter).to_have_text("45,000 / 50,000")
    page.evaluate("navigator.clipboard.writeText('b'.repeat(5010))")
    box.focus()
    page.keyboard.press("End")
    page.keyboard.press("Control+V")

    assert box.input_value() == "a" * 45_000 + "b" * 5010
    expect(counter).to_have_text("50,010 / 50,000")
    expect(page.locator("#banner")).to_have_text(
        "The pasted text makes the message 50,010 characters long; a message may hold at most 50,000. "
        "Shorten it before sending."
    )
    expect(page.locator("#composer-reason")).to_have_text("Too long to send: shorten it by 10 characters.")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    page.keyboard.press("Backspace")
    expect(page.locator("#composer-reason")).to_have_text("Too long to send: shorten it by 9 characters.")
    console.assert_clean()


def test_messages_show_when_they_were_sent_and_the_exact_time_on_hover(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, "What time is it?")
    wait_answers(page, 1)

    when = page.locator("li.msg-user time.msg-time")

    expect(when).to_have_text("just now")
    stamp = when.get_attribute("datetime")
    assert stamp is not None
    exact = page.evaluate(
        "iso => new Date(iso).toLocaleString(undefined, {dateStyle: 'full', timeStyle: 'medium'})", stamp
    )
    expect(when).to_have_attribute("title", exact)
    console.assert_clean()


def test_the_empty_chat_says_what_the_offline_model_understands(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)

    empty = page.locator("#empty")

    expect(empty.get_by_role("heading")).to_have_text("Say hello to the offline demo model")
    expect(empty.locator("li strong")).to_have_text(
        ["remember that …", "what do you remember about …", "forget …", "note: …", "what did I say first?"]
    )
    console.assert_clean()


def test_a_failed_request_shows_a_readable_message(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    # the request is cut on purpose, as a dropped network would; Chromium logs the failed load
    console.allow(r"Failed to load resource: net::ERR_FAILED")
    page.route("**/chat/archive", lambda route: route.abort())

    page.get_by_role("button", name="New chat").click()
    page.get_by_role("dialog").get_by_role("button", name="Start a new chat").click()

    banner = page.locator("#banner")
    expect(banner).to_have_text("Could not reach the server. Check your connection and try again.")
    expect(banner).not_to_contain_text("Failed to fetch")
    console.assert_clean()


# --- screenshots for the docs -----------------------------------------------------------------------


def _shoot(page: Any, name: str) -> Path:
    path = DOCS / name
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    return path


def test_screenshots_desktop_phone_and_dark(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, "Plan the boiler service")
    wait_answers(page, 1)
    page.get_by_role("button", name="New chat").click()
    page.get_by_role("dialog").get_by_role("button", name="Start a new chat").click()
    expect(page.locator("#messages > li")).to_have_count(0)
    send(page, "remember that the boiler code is 4471")
    wait_answers(page, 1)
    send(page, "note: check the boiler pressure on Friday")
    wait_answers(page, 2)
    send(
        page,
        "Steps for **Friday**:\n\n1. Read the gauge\n2. Top up to 1.5 bar\n\n```python\nprint(1.5 * 14.5)\n```",
    )
    wait_answers(page, 3)
    expect(page.locator("#chats-list li")).to_have_count(2)
    expect(page.locator(".memory-content")).to_have_text(["the boiler code is 4471"])
    expect(page.locator("#notes-list li")).to_have_text(["check the boiler pressure on Friday"])
    _shoot(page, "chat.png")

    page.set_viewport_size({"width": 360, "height": 740})
    expect(page.get_by_role("button", name="Agent panels", exact=True)).to_be_visible()
    expect(page.locator("#panels")).to_be_hidden()
    expect(page.locator("#chats")).to_be_hidden()
    _shoot(page, "chat-mobile.png")
    page.get_by_role("button", name="Agent panels", exact=True).click()
    expect(page.get_by_role("button", name="Close side panels")).to_be_focused()
    expect(page.locator("#panels")).to_have_css("transform", "none")  # slid in all the way
    _shoot(page, "chat-mobile-panels.png")

    dark = new_page(color_scheme="dark")
    sign_in(dark, live_server_url, e2e_owner.username)
    expect(dark.locator("#conn")).to_have_text("Connected")
    expect(dark.locator(ANSWER)).to_have_count(3)
    assert dark.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(21, 23, 26)"
    assert dark.evaluate("matchMedia('(prefers-color-scheme: dark)').matches") is True
    _shoot(dark, "chat-dark.png")
    console.assert_clean()
