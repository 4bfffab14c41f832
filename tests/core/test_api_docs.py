"""The API docs page: Swagger UI from the sidecar's static files, admitted by the site's policy."""

from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_api_docs_run_their_one_inline_script_by_nonce_and_loosen_nothing_else(client: Client) -> None:
    response = client.get("/api/docs/")

    assert response.status_code == 200
    csp = response.headers["Content-Security-Policy"]
    nonce = re.search(r"script-src 'self' 'nonce-([A-Za-z0-9_\-+/=]+)';", csp)
    assert nonce is not None
    assert "unsafe-inline" not in csp
    assert "unsafe-eval" not in csp
    assert "style-src 'self';" in csp
    html = response.content.decode()
    assert re.findall(r"<script[^>]*>", html) == [
        '<script src="/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js">',
        '<script src="/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-standalone-preset.js">',
        f'<script nonce="{nonce.group(1)}">',
    ]
    assert "<style" not in html
    assert " style=" not in html
    assert 'href="/static/core/api-docs.css"' in html
    assert 'url: "/api/schema/"' in html


def test_every_docs_response_gets_a_fresh_nonce_and_other_pages_none(client: Client) -> None:
    first = client.get("/api/docs/").headers["Content-Security-Policy"]
    second = client.get("/api/docs/").headers["Content-Security-Policy"]
    login = client.get("/accounts/login/").headers["Content-Security-Policy"]

    assert first != second
    assert "nonce-" not in login
    assert "script-src 'self';" in login
