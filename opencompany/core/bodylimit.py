"""ASGI middleware: the request body limit, before Django (and so before authentication) sees a request.

A body announced larger than `OPENCOMPANY_MAX_BODY_BYTES` is refused with 413 `too_large` before the
application is called; a body that grows past the limit while it arrives (chunked, or longer than it
said) is refused as soon as it does. A body sent without `Content-Length` (chunked) is read up to the
limit and handed on with its length, so the application reads what was sent instead of an empty body.

The server in front decides how much is buffered before this runs: `opencompany.server` (daphne) stops
reading at the same limit.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from opencompany.core.errors import TOO_LARGE, ApplicationError, render_error

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _declared_length(scope: Scope) -> int | None:
    """`Content-Length` as a number; None when absent or not a number (then the body is counted)."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, limit: int, length: int | None) -> None:
    extra: dict[str, Any] = {"limit": limit}
    if length is not None:
        extra["length"] = length
    body = json.dumps(
        render_error(
            ApplicationError(TOO_LARGE, f"The request body is larger than {limit} bytes.", extra, status=413)
        )
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.application(scope, receive, send)
            return
        limit = int(settings.OPENCOMPANY_MAX_BODY_BYTES)
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, limit, declared)
            return
        if declared is None:
            await self._buffered(scope, receive, send, limit)
            return
        await self._counted(scope, receive, send, limit)

    async def _buffered(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """No length announced: read the body up to the limit, then hand it on with its length."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before the body was complete
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _refuse(send, limit, None)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        headers = [(n, v) for n, v in scope.get("headers", []) if n != b"transfer-encoding"]
        if body:
            headers.append((b"content-length", str(len(body)).encode()))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.application({**scope, "headers": headers}, replay, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """A length was announced: pass the body through, counting; past the limit, refuse and tell the
        application the client left (it has not answered: Django reads the whole body first)."""
        size = 0
        started = False
        refused = False

        async def counting_receive() -> Message:
            nonlocal size, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > limit:
                    refused = True
                    if not started:
                        await _refuse(send, limit, None)
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.application(scope, counting_receive, tracking_send)
