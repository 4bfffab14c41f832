"""The input gate for what the URL carries: a path id or a query parameter holding a NUL or a lone
surrogate is refused with `invalid_request` naming it, before any view or the admin queries with it."""

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from opencompany.core import gate
from opencompany.core.errors import ApplicationError, invalid
from opencompany.core.views import error_response


def _refused(name: str, message: str) -> ApplicationError:
    field = name if gate.bad_char_message(name) is None else "query"
    return invalid(f"Invalid request: check '{field}'.", {field: [message]})


class InputGateMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for name, values in request.GET.lists():
            for value in (name, *values):
                message = gate.bad_char_message(value)
                if message is not None:
                    return error_response(_refused(name, message))
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view_func: Any, view_args: Any, view_kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        for name, value in view_kwargs.items():
            message = gate.bad_char_message(value) if isinstance(value, str) else None
            if message is not None:
                return error_response(_refused(name, message))
        return None
