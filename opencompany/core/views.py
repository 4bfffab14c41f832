"""Views of the kernel: the API token endpoints and Django's 404/500 handlers."""

from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.contrib.auth import authenticate
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.csp import CSP
from django.views.decorators.csp import csp_override
from drf_spectacular.utils import extend_schema, inline_serializer
from drf_spectacular.views import SpectacularSwaggerView
from knox.models import AuthToken
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from opencompany.core import logins, tokens
from opencompany.core.api import JSONInput, ScopedSettingsThrottle
from opencompany.core.errors import NOT_FOUND, ApplicationError, internal_error, invalid, render_error
from opencompany.core.openapi import api_errors
from opencompany.core.unavailable import transient_database_error, unavailable_error

INVALID_CREDENTIALS = "invalid_credentials"


class AuthTokenInput(JSONInput):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class AuthTokenThrottle(ScopedSettingsThrottle):
    """`auth_token`, keyed on the client address (`NUM_PROXIES`)."""


class AuthTokenView(APIView):
    """`POST /api/v1/auth/token {username, password}` → `{token, expires_at}` for the frontend.

    Behind the sign-in throttle (per client address and per username, counted before the password is
    checked, with lockout backoff), a bounded number of password checks at once per process
    (`service_unavailable` past `OPENCOMPANY_LOGIN_HASH_WAIT_S`) and the `auth_token` rate. Each call issues a new token; older ones stay valid until they expire or are
    revoked."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes = [AuthTokenThrottle]
    throttle_scope = "auth_token"

    @extend_schema(
        request=AuthTokenInput,
        operation_id="auth_token_create",
        responses=inline_serializer(
            "AuthTokenOutput", {"token": serializers.CharField(), "expires_at": serializers.DateTimeField()}
        ),
    )
    @api_errors({401: [INVALID_CREDENTIALS]})
    def post(self, request: Request) -> Response:
        data = AuthTokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        username = data.validated_data["username"]
        retry_after = logins.login_attempt_admit(request=request, username=username)
        if retry_after is not None:
            raise drf_exceptions.Throttled(wait=retry_after)
        try:
            with logins.password_check_slot():
                user = authenticate(
                    request._request, username=username, password=data.validated_data["password"]
                )
        except ApplicationError:
            logins.login_attempt_withdraw(request=request, username=username)
            raise
        if user is None or not user.is_active:
            # The attempt was counted before the password was checked.
            raise ApplicationError(INVALID_CREDENTIALS, "Wrong username or password.", status=401)
        logins.login_succeeded(request=request, username=username)
        token, expires_at = tokens.token_issue(user=user)
        return Response({"token": token, "expires_at": expires_at})


class RevokeTokenInput(JSONInput):
    all = serializers.BooleanField(default=False)


class RevokeTokenView(APIView):
    """`POST /api/v1/auth/token/revoke {all?}` → `{revoked}`: revoke the token this request presents, or
    with `all: true` every token of the owner (and close their websockets)."""

    @extend_schema(
        request=RevokeTokenInput,
        operation_id="auth_token_revoke",
        responses=inline_serializer("RevokeTokenOutput", {"revoked": serializers.IntegerField()}),
    )
    def post(self, request: Request) -> Response:
        data = RevokeTokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        if data.validated_data["all"]:
            return Response({"revoked": tokens.credentials_revoke(user=request.user)})
        if not isinstance(request.auth, AuthToken):
            raise invalid("No token was presented; send `all: true` to revoke every token.")
        return Response({"revoked": tokens.token_revoke(token=request.auth)})


class ApiDocsView(SpectacularSwaggerView):
    """Swagger UI from drf-spectacular-sidecar's static files, on a page the site's Content-Security-Policy
    allows: no inline style, and the start-up script admitted by a per-response nonce (`api_docs`)."""

    template_name = "core/api_docs.html"


def api_docs_policy() -> dict[str, Any]:
    """The site's policy with the docs page's nonce added to `script-src` (nothing else loosened)."""
    policy: dict[str, Any] = dict(settings.SECURE_CSP)
    policy["script-src"] = [*policy.get("script-src", [CSP.SELF]), CSP.NONCE]
    return policy


_api_docs_view = ApiDocsView.as_view(url_name="schema")


def api_docs(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """`/api/docs/`: Swagger UI under the nonce policy (read per request, like every setting)."""
    return csp_override(api_docs_policy())(_api_docs_view)(request, *args, **kwargs)


def error_response(error: ApplicationError) -> JsonResponse:
    """An `ApplicationError` as a plain Django JSON response (outside DRF's views)."""
    response = JsonResponse(render_error(error), status=error.status)
    if "retry_after_s" in error.extra:
        response["Retry-After"] = str(error.extra["retry_after_s"])
    return response


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 404 handler: the API's error body under /api/, plain text elsewhere."""
    if request.path.startswith("/api/"):
        return error_response(ApplicationError(NOT_FOUND, "Not found.", status=404))
    return HttpResponse("Not found.", status=404, content_type="text/plain")


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/healthz"))


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500 handler: `internal_error` under /api/, plain text elsewhere. A database that cannot
    serve now (unreachable, or no pooled connection free in time) is 503 `service_unavailable` with
    `Retry-After` instead, wherever it surfaced (a view, a middleware, the session)."""
    failure = sys.exc_info()[1]
    if failure is not None and transient_database_error(failure):
        error = unavailable_error()
        if _wants_json(request):
            return error_response(error)
        response = HttpResponse(f"{error.message}\n", status=503, content_type="text/plain")
        response["Retry-After"] = str(error.extra["retry_after_s"])
        return response
    if _wants_json(request):
        return error_response(internal_error())
    return HttpResponse("Server error.", status=500, content_type="text/plain")
