"""Admin helpers shared by the apps: readable JSON and read-only admins."""

import json
from typing import Any

from django.http import HttpRequest
from django.utils.html import format_html


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
