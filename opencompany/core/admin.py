"""Admin helpers shared by the apps: readable JSON, read-only admins, and a JSON form field behind the
input gate."""

import json
from typing import Any

from django import forms
from django.http import HttpRequest
from django.utils.html import format_html

from opencompany.core import gate
from opencompany.core.errors import ApplicationError


def pretty_json(value: Any) -> str:
    """JSON shown readably (escaped) in an admin field."""
    return format_html(
        "<pre style='white-space:pre-wrap;max-width:100ch'>{}</pre>",
        json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False),
    )


class ReadOnlyMixin:
    """For rows only services write (and staff may only look at)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class GatedJSONFormField(forms.JSONField):
    """A JSON form field whose text passes the input gate (nesting bounded before parsing, no NUL or
    lone surrogate in any string); a refusal is a form error, never a server error."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and value.strip():
            try:
                gate.check_raw_depth(value, field=str(self.label or "value"))
            except ApplicationError as exc:
                raise forms.ValidationError(gate.reason(exc), code="invalid") from exc
        parsed = super().to_python(value)
        try:
            gate.check_strings(parsed)
        except ApplicationError as exc:
            raise forms.ValidationError(gate.reason(exc), code="invalid") from exc
        return parsed
