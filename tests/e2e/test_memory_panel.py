"""The Memory panel's search in Chromium: forgiving matches, why each result matched, marked words."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from memory import services
from memory.scope import memory_scope
from tests.conftest import node_id
from tests.e2e.conftest import Console, db_read
from tests.e2e.test_chat_page import open_chat

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _remember(workflow: Any, *contents: str) -> None:
    def write() -> None:
        scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
        for content in contents:
            services.memory_remember(scope=scope, content=content, actor="owner:1")

    db_read(write)


def search(page: Any, text: str) -> None:
    page.get_by_label("Search memory").fill(text)
    page.get_by_role("button", name="Search").click()


def test_typing_the_start_of_a_word_finds_the_item_and_marks_the_word(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    _remember(e2e_workflow, "I take my coffee black", "My dog is called Biscuit")
    page = open_chat(new_page, live_server_url, e2e_owner)
    expect(page.locator(".memory-content")).to_have_count(2)

    search(page, "coff")

    expect(page.locator("#memory-status")).to_have_text("1 match for “coff”.")
    expect(page.locator(".memory-content")).to_have_text(["I take my coffee black"])
    expect(page.locator(".memory-content mark")).to_have_text(["coffee"])
    expect(page.locator(".chip-match")).to_have_text(["all words"])
    expect(page.locator(".chip-match")).to_have_attribute("title", "Matched: coff")
    console.assert_clean()


def test_a_misspelled_search_shows_a_close_match_and_a_question_shows_the_latest_items(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    _remember(e2e_workflow, "I take my coffee black", "My dog is called Biscuit")
    page = open_chat(new_page, live_server_url, e2e_owner)

    search(page, "bisquit")

    expect(page.locator(".memory-content")).to_have_text(["My dog is called Biscuit"])
    expect(page.locator(".memory-content mark")).to_have_text(["Biscuit"])
    expect(page.locator(".chip-match")).to_have_text(["close match"])

    search(page, "me")

    expect(page.locator("#memory-status")).to_have_text(
        "“me” has no words to search for: the 2 most recent items."
    )
    expect(page.locator(".memory-content")).to_have_text(
        ["My dog is called Biscuit", "I take my coffee black"]
    )
    expect(page.locator(".chip-match")).to_have_text(["recent", "recent"])
    expect(page.locator(".memory-content mark")).to_have_count(0)
    console.assert_clean()
