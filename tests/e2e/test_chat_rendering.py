"""The chat page draws only what changed: a streaming answer, its end and the refetched thread leave
the earlier messages' elements and their rendered Markdown untouched (counted with a MutationObserver)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import Console
from tests.e2e.test_chat_page import LONG, STREAMING, open_chat, send, wait_answers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Tags the messages on screen, then records every mutation under #messages by the message it falls in:
# `inside` counts changes within a message's bubble (its rendered body), `removed` lists messages taken
# out of the list, `draft` counts changes within the streaming answer.
OBSERVE = """() => {
  const list = document.getElementById("messages");
  const earlier = [...list.querySelectorAll(":scope > li[data-id]")];
  for (const node of earlier) node.dataset.earlier = "1";
  window.rendering = { inside: {}, removed: [], draft: 0, earlier: earlier.map((n) => n.dataset.id) };
  window.earlierNodes = earlier;
  const record = window.rendering;
  new MutationObserver((mutations) => {
    for (const m of mutations) {
      const element = m.target.nodeType === 1 ? m.target : m.target.parentElement;
      if (m.target === list) {
        for (const node of m.removedNodes) if (node.dataset && node.dataset.earlier) record.removed.push(node.dataset.id);
        continue;
      }
      const item = element && element.closest("#messages > li");
      if (!item) continue;
      if (item.dataset.run) record.draft += 1;
      if (item.dataset.earlier && element.closest(".bubble")) {
        record.inside[item.dataset.id] = (record.inside[item.dataset.id] || 0) + 1;
      }
    }
  }).observe(list, { childList: true, subtree: true, characterData: true, attributes: true });
}"""


def test_streaming_a_new_answer_leaves_earlier_messages_untouched(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, "A first question with **bold**, `code` and a list:\n- one\n- two")
    first = wait_answers(page, 1)
    expect(first.get_by_role("button", name="Retry")).to_be_visible()

    page.evaluate(OBSERVE)
    assert page.evaluate("window.rendering.earlier") != []
    send(page, LONG)
    expect(page.locator(STREAMING)).to_have_count(1)
    wait_answers(page, 2)

    rendering = page.evaluate("window.rendering")
    # the stream was seen: the new answer's element changed delta after delta
    assert rendering["draft"] > 3
    # the earlier messages stayed in the list as the same elements, their bodies not drawn again
    assert rendering["removed"] == []
    assert rendering["inside"] == {}
    same = page.evaluate(
        "() => window.earlierNodes.map((node) => node.isConnected && "
        "node === document.querySelector(`#messages > li[data-id='${node.dataset.id}']`))"
    )
    assert same == [True, True]
    # what did change around them is shown: Retry moved from the first answer to the new one
    expect(page.locator("li.msg-assistant[data-id]").first.get_by_role("button", name="Retry")).to_have_count(
        0
    )
    expect(
        page.locator("li.msg-assistant[data-id]").nth(1).get_by_role("button", name="Retry")
    ).to_be_visible()
    console.assert_clean()


# The page's own render module (the same instance: one module per URL), for its count of parsed texts.
PARSED = "async () => (await import('/static/chat/js/render.js')).renderStats.parsed"


def test_switching_back_to_a_version_draws_its_messages_from_the_markdown_cache(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    send(page, "My favourite colour is **blue**.")
    wait_answers(page, 1)
    first = page.locator("li.msg-user").first
    first.get_by_role("button", name="Edit this message").click()
    page.get_by_label("Edit your message").fill("My favourite colour is **green**.")
    page.get_by_role("button", name="Save").click()
    expect(first.locator(".versions-label")).to_have_text("2/2")
    wait_answers(page, 1)
    before = page.evaluate(PARSED)
    assert before > 0

    first.get_by_role("button", name="Previous version").click()

    expect(first.locator(".versions-label")).to_have_text("1/2")
    expect(first.locator(".msg-text strong")).to_have_text("blue")
    expect(page.locator("li.msg-assistant[data-id]").first).to_contain_text(
        "You said “My favourite colour is"
    )
    # the question and the answer of the first version were drawn again, their Markdown not parsed again
    assert page.evaluate(PARSED) == before
    console.assert_clean()
