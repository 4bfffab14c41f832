"""Request body size limit: refuse early with `too_large` (413) instead of reading the body."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


class BodySizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = int(settings.OPENCOMPANY_MAX_BODY_BYTES)
        # The admin may post larger forms? No: the same limit applies everywhere.
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw)
        except ValueError:
            length = 0
        if length > limit:
            return JsonResponse(
                {
                    "code": "too_large",
                    "message": f"The request body is larger than {limit} bytes.",
                    "extra": {"limit": limit, "length": length},
                },
                status=413,
            )
        return self.get_response(request)
