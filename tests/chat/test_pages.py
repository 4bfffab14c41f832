"""The owner's pages: sign-in, workflow list, chat page; CSP; static files served by WhiteNoise."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.conftest import make_workflow, node_id

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser_client(owner: Any) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def test_login_page_renders_the_form_with_the_csp_header(client: Client) -> None:
    response = client.get("/accounts/login/")

    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert b'name="password"' in response.content
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp
    assert "style-src 'self'" in csp


def test_signing_in_through_the_form_lands_a_one_workflow_owner_on_the_chat(
    client: Client, owner: Any
) -> None:
    workflow = make_workflow(owner)

    response = client.post(
        "/accounts/login/", {"username": "owner", "password": "owner-pass-123"}, follow=True
    )

    assert response.redirect_chain == [("/", 302), (f"/chat/{workflow.pk}/", 302)]
    assert response.status_code == 200


def test_pages_need_a_signed_in_owner(client: Client, workflow: Any) -> None:
    assert client.get("/").headers["Location"] == "/accounts/login/?next=/"
    response = client.get(f"/chat/{workflow.pk}/")
    assert response.status_code == 302
    assert response.headers["Location"] == f"/accounts/login/?next=/chat/{workflow.pk}/"


def test_workflow_list_shows_each_workflow_with_generation_and_state(
    browser_client: Client, owner: Any
) -> None:
    live = make_workflow(owner, name="Live one")
    make_workflow(owner, name="Draft one", deploy=False)

    response = browser_client.get("/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "Live one" in html
    assert "Draft one" in html
    assert f'href="/chat/{live.pk}/"' in html
    assert 'class="pill pill-live">live<' in html
    assert 'class="pill pill-draft">draft<' in html
    assert html.count('data-action="deploy"') == 2
    assert "Content-Security-Policy" in response.headers


def test_chat_page_carries_the_wiring_and_no_inline_script_or_style(
    browser_client: Client, workflow: Any
) -> None:
    response = browser_client.get(f"/chat/{workflow.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert f'data-workflow="{workflow.pk}"' in html
    assert f'data-agent="{node_id(workflow, "aiAgent")}"' in html
    assert f'data-memory="{node_id(workflow, "simpleMemory")}"' in html
    assert 'data-window="128000"' in html
    assert 'data-generation="1"' in html
    assert '<script type="module" src="/static/chat/chat.js"></script>' in html
    assert "<style" not in html
    assert " style=" not in html
    assert html.count("<script") == 1
    assert "csrftoken" in response.cookies
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp
    assert "script-src 'self'" in csp
    assert "'unsafe-inline'" not in csp


def test_another_owners_chat_page_is_not_found(browser_client: Client, other_workflow: Any) -> None:
    response = browser_client.get(f"/chat/{other_workflow.pk}/")

    assert response.status_code == 404


def test_static_assets_are_served_with_debug_off(client: Client, settings: Any) -> None:
    settings.DEBUG = False

    script = client.get("/static/chat/chat.js")
    renderer = client.get("/static/chat/js/render.js")
    style = client.get("/static/chat/chat.css")

    assert script.status_code == 200
    assert script.headers["Content-Type"].startswith("text/javascript")
    assert b'from "./js/page.js"' in b"".join(script.streaming_content)  # type: ignore[attr-defined]
    assert renderer.status_code == 200
    assert b"export function renderText" in b"".join(renderer.streaming_content)  # type: ignore[attr-defined]
    assert style.status_code == 200
    assert style.headers["Content-Type"].startswith("text/css")


def test_vendored_libraries_are_served_as_javascript_with_debug_off(client: Client, settings: Any) -> None:
    settings.DEBUG = False

    served = {
        path: client.get(f"/static/vendor/{path}")
        for path in ("marked/marked.esm.js", "dompurify/purify.es.mjs", "highlight.js/highlight.min.js")
    }

    assert {path: r.status_code for path, r in served.items()} == dict.fromkeys(served, 200)
    assert {path: r.headers["Content-Type"].split(";")[0] for path, r in served.items()} == dict.fromkeys(
        served, "text/javascript"
    )


def test_chat_page_offers_the_highlighting_themes_for_light_and_dark(
    browser_client: Client, workflow: Any
) -> None:
    html = browser_client.get(f"/chat/{workflow.pk}/").content.decode()

    assert (
        '<link rel="stylesheet" href="/static/vendor/highlight.js/styles/github.min.css" '
        'media="(prefers-color-scheme: light)">'
    ) in html
    assert (
        '<link rel="stylesheet" href="/static/vendor/highlight.js/styles/github-dark.min.css" '
        'media="(prefers-color-scheme: dark)">'
    ) in html
    assert 'data-provider="offline"' in html
    assert "Say hello to the offline demo model" in html
