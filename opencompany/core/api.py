"""The DRF kernel: the exception handler (every refusal becomes an `ApplicationError`, rendered by
`render_error`), the gated JSON parser, and integer bounds taken from a database column."""

from __future__ import annotations

import logging
from typing import Any, TypedDict

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db.models import Field
from django.http import Http404
from drf_spectacular.utils import extend_schema_field
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.parsers import JSONParser
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle

from opencompany.core import errors, gate
from opencompany.core.errors import ApplicationError, render_error
from opencompany.core.logs import error_text
from opencompany.core.unavailable import transient_database_error, unavailable_error

logger = logging.getLogger(__name__)


def _flatten_detail(detail: Any) -> Any:
    if isinstance(detail, dict):
        return {str(k): _flatten_detail(v) for k, v in detail.items()}
    if isinstance(detail, list):
        return [_flatten_detail(v) for v in detail]
    return str(detail)


def _invalid_request(exc: drf_exceptions.ValidationError) -> ApplicationError:
    fields = _flatten_detail(exc.detail)
    if not isinstance(fields, dict):
        fields = {"non_field_errors": fields}
    first = next(iter(fields), "request")
    # The message says what is wrong with the first field too, so a client showing only it is understood.
    problems = fields.get(first)
    reason = problems[0] if isinstance(problems, list) and problems and isinstance(problems[0], str) else ""
    message = (
        f"Invalid request: check '{first}'. {reason}" if reason else f"Invalid request: check '{first}'."
    )
    return ApplicationError(errors.INVALID_REQUEST, message, {"fields": fields}, status=400)


def _wait(exc: Exception) -> float | None:
    """The seconds a throttled client should wait (DRF's `Throttled.wait`), else None."""
    return getattr(exc, "wait", None) if isinstance(exc, drf_exceptions.Throttled) else None


def application_error_for(exc: Exception) -> ApplicationError | None:
    """The `ApplicationError` a DRF or Django exception stands for; None for an unexpected one."""
    if isinstance(exc, ApplicationError):
        return exc
    if isinstance(exc, RequestDataTooBig):
        return ApplicationError(errors.TOO_LARGE, "The request body is too large.", status=413)
    if isinstance(exc, Http404 | drf_exceptions.NotFound):
        return ApplicationError(errors.NOT_FOUND, "Not found.", status=404)
    if isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    if isinstance(exc, drf_exceptions.ValidationError):
        return _invalid_request(exc)
    if isinstance(exc, drf_exceptions.ParseError):
        return ApplicationError(errors.INVALID_REQUEST, f"Malformed request body: {exc.detail}", status=400)
    if isinstance(exc, drf_exceptions.UnsupportedMediaType):
        return ApplicationError(errors.INVALID_REQUEST, str(exc.detail), status=415)
    if isinstance(exc, drf_exceptions.Throttled):
        return ApplicationError(
            errors.THROTTLED, "Too many requests; slow down.", {"retry_after_s": _wait(exc)}, status=429
        )
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        # `status_code` is the view's choice: 401 with a challenge to offer, else 403.
        return ApplicationError(errors.NOT_AUTHENTICATED, str(exc.detail), status=exc.status_code)
    if isinstance(exc, drf_exceptions.PermissionDenied):
        return ApplicationError(errors.PERMISSION_DENIED, str(exc.detail), status=403)
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return ApplicationError(errors.METHOD_NOT_ALLOWED, str(exc.detail), status=405)
    if isinstance(exc, drf_exceptions.APIException):
        return ApplicationError(exc.default_code or "error", str(exc.detail), status=exc.status_code)
    if transient_database_error(exc):
        logger.warning("database unavailable: %s", error_text(exc))
        return unavailable_error()
    return None


def retry_after_header(error: ApplicationError, wait: float | None = None) -> str | None:
    """The `Retry-After` value a refusal carries: a throttle's wait, or a 503's `retry_after_s`; None for
    every other refusal."""
    if wait is not None:
        return str(int(wait) + 1)
    if error.status == 503 and "retry_after_s" in error.extra:
        return str(error.extra["retry_after_s"])
    return None


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Render every error as `{"code", "message", "extra"}` with a fitting HTTP status. Unexpected
    exceptions are logged and left to Django's 500 handler (which renders `internal_error`)."""
    error = application_error_for(exc)
    if error is None:
        logger.exception("unhandled error in API view %s", type(exc).__name__)
        return None
    response = Response(render_error(error), status=error.status)
    retry_after = retry_after_header(error, _wait(exc))
    if retry_after is not None:
        response["Retry-After"] = retry_after
    auth_header = getattr(exc, "auth_header", None)
    if auth_header:
        response["WWW-Authenticate"] = auth_header
    return response


class GatedJSONParser(JSONParser):
    """DRF's JSON parser behind the input gate: nesting bounded before parsing, NUL and lone
    surrogates refused in every string, each refusal `invalid_request` naming the field."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise drf_exceptions.ParseError("The body is not valid UTF-8.") from exc
        gate.check_raw_depth(text)
        try:
            value = gate.parse(text)
        except ValueError as exc:
            raise drf_exceptions.ParseError(f"JSON parse error - {exc}") from exc
        gate.check_strings(value)
        return value


class IntegerBounds(TypedDict):
    min_value: int
    max_value: int


def column_bounds(column: Field[Any, Any] | str, *, min_value: int | None = None) -> IntegerBounds:
    """`min_value`/`max_value` for a DRF IntegerField compared with or written to `column`."""
    low, high = gate.column_range(column)
    return {"min_value": low if min_value is None else max(low, min_value), "max_value": high}


class ScopedSettingsThrottle(ScopedRateThrottle):
    """DRF's scoped throttle with the rate read from settings on every request, so a settings override
    applies at once (DRF binds the rates when the class is imported). `safe_methods_free` leaves reads
    unthrottled for views whose scope only counts writes."""

    safe_methods_free = False

    def get_rate(self) -> str | None:
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope or "")
        return None if rate is None else str(rate)

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.safe_methods_free and request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return super().allow_request(request, view)


# The JSON type each DRF field takes in a request body: DRF would turn `0` into False, `3` into "3" and
# "3" into 3, which a client generated from the schema never sends and should not rely on.
_JSON_TYPES: list[tuple[type[serializers.Field], tuple[type, ...], str]] = [
    (serializers.BooleanField, (bool,), "a boolean"),
    (serializers.IntegerField, (int,), "an integer"),
    (serializers.FloatField, (int, float), "a number"),
    (serializers.ListField, (list,), "a list"),
    (serializers.DictField, (dict,), "an object"),
    (serializers.Serializer, (dict,), "an object"),
    (serializers.CharField, (str,), "a string"),
    (serializers.DateTimeField, (str,), "a string"),
]


def _json_type_error(field: serializers.Field, value: Any) -> str | None:
    for kind, types, name in _JSON_TYPES:
        if isinstance(field, kind):
            wrong_bool = isinstance(value, bool) and bool not in types
            return None if isinstance(value, types) and not wrong_bool else f"Must be {name}."
    return None


# A request body read as JSON: every declared field takes its JSON type and nothing it would have to
# coerce, and a field the serializer does not declare is refused (the schema says `additionalProperties:
# false`), so a typo never passes silently. Comments, not a docstring: the schema would show it on every body.
class JSONInput(serializers.Serializer):
    refuse_unknown_fields = True

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return super().to_internal_value(data)
        problems: dict[str, Any] = {}
        if self.refuse_unknown_fields:
            problems.update({name: ["Unknown field."] for name in sorted(set(data) - set(self.fields))})
        for name, field in self.fields.items():
            value = data.get(name)
            if name in data and value is not None and not field.read_only:
                problem = _json_type_error(field, value)
                if problem:
                    problems[name] = [problem]
        if not problems:
            return super().to_internal_value(data)
        try:
            super().to_internal_value({k: v for k, v in data.items() if k not in problems})
        except serializers.ValidationError as exc:
            if isinstance(exc.detail, dict):
                # Field errors are keyed by field name; the mapping's key type admits ints for list fields.
                problems = {**{str(name): detail for name, detail in exc.detail.items()}, **problems}
        raise serializers.ValidationError(problems)


class QueryInput(serializers.Serializer):
    """Query parameters read as the schema describes them: an empty value is a value (refused where the
    field allows no blank), not DRF's HTML-form reading of an empty input as an absent one."""

    def to_internal_value(self, data: Any) -> Any:
        if hasattr(data, "getlist"):
            data = {
                name: data.getlist(name)
                if isinstance(self.fields.get(name), serializers.ListField)
                else data[name]
                for name in data
                if name in self.fields
            }
        return super().to_internal_value(data)


@extend_schema_field({"type": "boolean", "enum": [True], "description": "Must be true."})
class ConfirmField(serializers.BooleanField):
    """`confirm: true`, the explicit yes of a destructive request; anything else is refused."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        self.refusal = message
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> bool:
        if data is not True:
            raise serializers.ValidationError(self.refusal)
        return True
