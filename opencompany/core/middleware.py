"""Request body size limit: refuse early with `too_large` (413) instead of reading the body."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from opencompany.core.errors import TOO_LARGE, ApplicationError
from opencompany.core.views import error_response


class BodySizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = int(settings.OPENCOMPANY_MAX_BODY_BYTES)
        # One limit for every path, the admin's forms included.
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw)
        except ValueError:
            length = 0
        if length > limit:
            return error_response(
                ApplicationError(
                    TOO_LARGE,
                    f"The request body is larger than {limit} bytes.",
                    {"limit": limit, "length": length},
                    status=413,
                )
            )
        return self.get_response(request)
