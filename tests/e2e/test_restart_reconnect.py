"""The chat page through a server restart (the production server, SIGTERM): it says the server is restarting,
and keeps saying so through its attempts while nothing answers, reconnects by itself once a server answers
on the address again, and sends."""

from __future__ import annotations

import re
import signal

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import sign_in
from tests.live import asgi_server_process, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_page_says_the_server_is_restarting_and_reconnects_to_the_restarted_server(
    new_page, e2e_owner, e2e_workflow, console
):
    console.allow(r"WebSocket connection to .* failed")  # its attempts while no server listens
    console.allow(r"Failed to load resource")
    port = free_port()
    page = new_page()
    with asgi_server_process(port=port) as (url, server):
        sign_in(page, url, e2e_owner.username)
        expect(page).to_have_url(re.compile(r"/chat/[^/]+/$"))
        expect(page.locator("#conn")).to_have_text("Connected")

        server.send_signal(signal.SIGTERM)

        expect(page.locator("#conn")).to_have_text("Server restarting…")
        expect(page.get_by_text("The server is restarting; reconnecting…")).to_be_visible()
        server.wait(timeout=30)
        # While nothing answers, the page keeps saying why and keeps trying.
        expect(
            page.get_by_text(re.compile(r"The server is restarting; reconnecting… \(attempt \d+\)"))
        ).to_be_visible(timeout=10_000)
        expect(page.locator("#conn")).to_have_text("Server restarting…")

    with asgi_server_process(port=port):
        expect(page.locator("#conn")).to_have_text("Connected", timeout=20_000)
        box = page.get_by_label("Message", exact=True)
        box.fill("Are you back?")
        box.press("Enter")
        expect(page.locator("li.msg-assistant[data-id]")).to_have_count(1, timeout=20_000)
    console.assert_clean()
