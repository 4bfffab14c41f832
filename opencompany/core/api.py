"""API kernel: the one exception handler, cursor pagination helpers, the owner-workflow lookup."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework import status as http
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_default_handler

from opencompany.core import errors
from opencompany.core.errors import ApplicationError

logger = logging.getLogger(__name__)


def error_body(code: str, message: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "extra": extra or {}}


def _flatten_detail(detail: Any) -> Any:
    if isinstance(detail, dict):
        return {str(k): _flatten_detail(v) for k, v in detail.items()}
    if isinstance(detail, list):
        flat = [_flatten_detail(v) for v in detail]
        if all(isinstance(v, str) for v in flat):
            return flat
        return flat
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Render every error as `{"code", "message", "extra"}` with a fitting HTTP status."""
    if isinstance(exc, ApplicationError):
        return Response(exc.as_dict(), status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body(errors.TOO_LARGE, "The request body is too large."),
            status=http.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, Http404 | drf_exceptions.NotFound):
        return Response(error_body(errors.NOT_FOUND, "Not found."), status=http.HTTP_404_NOT_FOUND)
    if isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    if isinstance(exc, drf_exceptions.ValidationError):
        fields = _flatten_detail(exc.detail)
        if not isinstance(fields, dict):
            fields = {"non_field_errors": fields}
        first = next(iter(fields), "request")
        return Response(
            error_body(errors.INVALID_REQUEST, f"Invalid request: check '{first}'.", {"fields": fields}),
            status=http.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, drf_exceptions.ParseError):
        return Response(
            error_body(errors.INVALID_REQUEST, f"Malformed request body: {exc.detail}"),
            status=http.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, drf_exceptions.UnsupportedMediaType):
        return Response(
            error_body(errors.INVALID_REQUEST, str(exc.detail)), status=http.HTTP_415_UNSUPPORTED_MEDIA_TYPE
        )
    if isinstance(exc, drf_exceptions.Throttled):
        wait = getattr(exc, "wait", None)
        response = Response(
            error_body(errors.THROTTLED, "Too many requests; slow down.", {"retry_after_s": wait}),
            status=http.HTTP_429_TOO_MANY_REQUESTS,
        )
        if wait is not None:
            response["Retry-After"] = str(int(wait) + 1)
        return response
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        default = drf_default_handler(exc, context)
        status = default.status_code if default is not None else 401
        out = Response(error_body(errors.NOT_AUTHENTICATED, str(exc.detail)), status=status)
        if default is not None and "WWW-Authenticate" in default:
            out["WWW-Authenticate"] = default["WWW-Authenticate"]
        return out
    if isinstance(exc, drf_exceptions.PermissionDenied):
        return Response(error_body(errors.PERMISSION_DENIED, str(exc.detail)), status=http.HTTP_403_FORBIDDEN)
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return Response(
            error_body(errors.METHOD_NOT_ALLOWED, str(exc.detail)), status=http.HTTP_405_METHOD_NOT_ALLOWED
        )
    if isinstance(exc, drf_exceptions.APIException):
        return Response(error_body(exc.default_code or "error", str(exc.detail)), status=exc.status_code)
    logger.exception("unhandled error in API view %s", type(exc).__name__)
    return None


def api_error_response(code: str, message: str, status: int, extra: dict[str, Any] | None = None) -> Response:
    return Response(error_body(code, message, extra), status=status)
