"""The Context panel in Chromium: its numbers are the API's after each turn, a version switch and a
Clear; each turn shows its runtime and fidelity and what the agent saw; the chat marks the Clear."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import Console
from tests.e2e.test_chat_page import composer, open_chat, send, wait_answers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def api_state(page: Any, workflow: Any) -> dict[str, Any]:
    """The conversation row and the agent's lifetime usage, read through the API by the signed-in page."""
    return page.evaluate(
        """async ([base, agent]) => {
            const rows = (await (await fetch(`${base}/conversations?agent_node_id=${encodeURIComponent(agent)}`)).json()).results;
            const usage = await (await fetch(`${base}/usage?agent_node_id=${encodeURIComponent(agent)}`)).json();
            const row = rows.find((r) => r.agent_node_id === agent) || null;
            return {row, usage};
        }""",
        [f"/api/v1/workflows/{workflow.pk}", f"{workflow.pk}:aiAgent:1"],
    )


def expect_panel_matches_api(page: Any, workflow: Any) -> dict[str, Any]:
    """Wait until the panel shows the API's numbers (the panel refreshes on events) and return them."""
    state = api_state(page, workflow)
    row, usage = state["row"], state["usage"]
    tokens = row["last_input_tokens"] if row else 0
    pressure = row["pressure_tokens"] if row else 0
    window = (row and row["context_window"]) or 128_000
    expect(page.locator("#ctx-tokens")).to_have_text(f"{tokens:,}")
    expect(page.locator("#ctx-headroom")).to_have_text(f"{row['pressure_headroom_tokens'] if row else 0:,}")
    expect(page.locator("#ctx-messages")).to_have_text(str(row["length"] if row else 0))
    expect(page.locator("#ctx-life-calls")).to_have_text(f"{usage['calls']:,}")
    expect(page.locator("#ctx-life-input")).to_have_text(f"{usage['input_tokens']:,}")
    expect(page.locator("#ctx-life-output")).to_have_text(f"{usage['output_tokens']:,}")
    percent = pressure / window * 100
    shown = "<1" if 0 < percent < 1 else str(round(percent))
    expect(page.locator("#ctx-pressure-text")).to_have_text(f"{shown}% of {window:,} tokens")
    assert page.evaluate("document.getElementById('ctx-pressure').value") == min(pressure, window)
    return state


def test_the_context_panel_shows_the_apis_pressure_usage_and_turn_fidelity_through_turns_a_switch_and_a_clear(
    live_server_url: str, e2e_owner: Any, e2e_workflow: Any, new_page: Any, console: Console
) -> None:
    page = open_chat(new_page, live_server_url, e2e_owner)
    expect_panel_matches_api(page, e2e_workflow)

    send(page, "First turn")
    wait_answers(page, 1)
    expect(page.locator("#ctx-messages")).to_have_text("2")
    one = expect_panel_matches_api(page, e2e_workflow)
    assert one["row"]["last_input_tokens"] > 0
    assert one["usage"]["calls"] == 1
    turns = page.locator("#ctx-turns li.ctx-turn")
    expect(turns).to_have_count(1)
    expect(turns.first.locator(".ctx-turn-label")).to_have_text("offline · portable")

    send(page, "Second turn, somewhat longer than the first one")
    wait_answers(page, 2)
    expect(page.locator("#ctx-messages")).to_have_text("4")
    two = expect_panel_matches_api(page, e2e_workflow)
    assert two["row"]["last_input_tokens"] > one["row"]["last_input_tokens"]
    expect(turns).to_have_count(2)

    second = page.locator("li.msg-user").nth(1)
    second.get_by_role("button", name="Edit this message").click()
    page.get_by_label("Edit your message").fill("Edited")
    page.get_by_role("button", name="Save").click()
    expect(second.locator(".versions-label")).to_have_text("2/2")
    wait_answers(page, 2)
    edited = expect_panel_matches_api(page, e2e_workflow)
    assert edited["usage"]["calls"] == 3
    assert edited["row"]["last_input_tokens"] != two["row"]["last_input_tokens"]

    second.get_by_role("button", name="Previous version").click()
    expect(second.locator(".versions-label")).to_have_text("1/2")
    expect(page.locator("#ctx-tokens")).to_have_text(f"{two['row']['last_input_tokens']:,}")
    switched = expect_panel_matches_api(page, e2e_workflow)
    assert switched["row"]["last_input_tokens"] == two["row"]["last_input_tokens"]

    # Newest first: the edited branch's request, whose messages left the stored Context with the switch.
    latest = turns.first
    latest.get_by_text("What the agent saw").click()
    expect(latest.locator(".ctx-saw")).to_contain_text("no longer stored")
    first = turns.last
    first.get_by_text("What the agent saw").click()
    expect(first.locator(".ctx-saw-messages li")).to_have_text(["user: First turn"])

    page.get_by_role("button", name="Clear Context…").click()
    page.get_by_role("dialog").get_by_role("button", name="Clear Context").click()
    expect(page.locator("#ctx-messages")).to_have_text("0")
    cleared = expect_panel_matches_api(page, e2e_workflow)
    assert (cleared["row"]["last_input_tokens"], cleared["usage"]["calls"]) == (0, 3)
    expect(page.locator("li.msg-mark")).to_have_text("Context cleared")
    expect(composer(page)).to_be_enabled()
    console.assert_clean()
