"""One error body everywhere: DRF refusals, Django's 404/500 handlers and the body size limit all
render `{"code", "message", "extra"}` through `render_error`."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from knox.models import AuthToken
from rest_framework import exceptions as drf_exceptions

from opencompany.core.api import application_error_for
from opencompany.core.errors import ApplicationError, internal_error, render_error
from opencompany.core.views import not_found, server_error

pytestmark = pytest.mark.django_db


def test_render_error_is_code_message_and_extra():
    error = ApplicationError("version_conflict", "stale", {"current_version": 3}, status=409)

    assert render_error(error) == {
        "code": "version_conflict",
        "message": "stale",
        "extra": {"current_version": 3},
    }
    assert render_error(internal_error()) == {
        "code": "internal_error",
        "message": "Something went wrong on our side.",
        "extra": {},
    }
    assert internal_error().status == 500


def test_an_unknown_api_path_answers_the_not_found_body(client):
    response = client.get("/api/v1/no-such-thing")

    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "message": "Not found.", "extra": {}}


def test_the_django_handlers_render_the_error_body_under_api_and_plain_text_elsewhere():
    factory = RequestFactory()

    api_404 = not_found(factory.get("/api/v1/x"))
    api_500 = server_error(factory.get("/api/v1/x"))
    page_404 = not_found(factory.get("/somewhere/"))
    page_500 = server_error(factory.get("/somewhere/"))

    assert (api_404.status_code, api_404.content) == (
        404,
        b'{"code": "not_found", "message": "Not found.", "extra": {}}',
    )
    assert api_500.status_code == 500
    assert (
        api_500.content
        == b'{"code": "internal_error", "message": "Something went wrong on our side.", "extra": {}}'
    )
    assert (page_404.status_code, page_404["Content-Type"], page_404.content) == (
        404,
        "text/plain",
        b"Not found.",
    )
    assert (page_500.status_code, page_500["Content-Type"], page_500.content) == (
        500,
        "text/plain",
        b"Server error.",
    )


def test_an_oversized_body_is_refused_with_the_error_body_and_nothing_written(client, owner, settings):
    settings.OPENCOMPANY_MAX_BODY_BYTES = 10
    body = '{"username": "owner", "password": "owner-pass-123"}'

    response = client.post("/api/v1/auth/token", body, content_type="application/json")

    assert response.status_code == 413
    assert response.json() == {
        "code": "too_large",
        "message": "The request body is larger than 10 bytes.",
        "extra": {"limit": 10, "length": len(body)},
    }
    assert AuthToken.objects.exists() is False


def test_a_validation_error_is_invalid_request_with_its_fields(client):
    response = client.post("/api/v1/auth/token", {"username": "owner"}, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "code": "invalid_request",
        "message": "Invalid request: check 'password'. This field is required.",
        "extra": {"fields": {"password": ["This field is required."]}},
    }


def test_an_application_error_from_a_view_keeps_its_code_and_status(client, owner):
    response = client.post(
        "/api/v1/auth/token", {"username": "owner", "password": "wrong"}, content_type="application/json"
    )

    assert response.status_code == 401
    assert response.json() == {
        "code": "invalid_credentials",
        "message": "Wrong username or password.",
        "extra": {},
    }
    assert AuthToken.objects.exists() is False


def test_malformed_json_and_a_wrong_media_type_are_invalid_request(client):
    malformed = client.post("/api/v1/auth/token", "{nope", content_type="application/json")
    form = client.post("/api/v1/auth/token", {"username": "owner", "password": "x"})

    assert (malformed.status_code, malformed.json()["code"], malformed.json()["extra"]) == (
        400,
        "invalid_request",
        {},
    )
    assert malformed.json()["message"].startswith("Malformed request body: ")
    assert (form.status_code, form.json()["code"], form.json()["extra"]) == (415, "invalid_request", {})


def test_an_anonymous_api_call_is_not_authenticated_with_a_token_challenge(anon_client):
    response = anon_client.get("/api/v1/workflows")

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response.json()["extra"] == {}
    assert response["WWW-Authenticate"] == "Token"


def test_drf_and_django_exceptions_map_to_application_errors():
    throttled = application_error_for(drf_exceptions.Throttled(wait=2.5))
    denied = application_error_for(drf_exceptions.PermissionDenied())
    allowed = application_error_for(drf_exceptions.MethodNotAllowed("PATCH"))

    assert throttled is not None
    assert (throttled.code, throttled.status, throttled.extra) == (
        "throttled",
        429,
        {"retry_after_s": 3},
    )  # DRF rounds the wait up
    assert denied is not None
    assert (denied.code, denied.status) == ("permission_denied", 403)
    assert allowed is not None
    assert (allowed.code, allowed.status, allowed.message) == (
        "method_not_allowed",
        405,
        'Method "PATCH" not allowed.',
    )
    assert application_error_for(RuntimeError("boom")) is None
