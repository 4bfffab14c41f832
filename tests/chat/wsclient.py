"""Helpers for websocket tests: a session cookie for a user, and a communicator on the real ASGI app."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore


def session_cookie(user: Any) -> str:
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.save()
    return f"{settings.SESSION_COOKIE_NAME}={store.session_key}"


async def connect(workflow_id: str, user: Any | None) -> tuple[WebsocketCommunicator, bool, Any]:
    from opencompany.asgi import application

    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    if user is not None:
        cookie = await sync_to_async(session_cookie)(user)
        headers.append((b"cookie", cookie.encode()))
    communicator = WebsocketCommunicator(application, f"/ws/chat/{workflow_id}/", headers=headers)
    connected, subprotocol = await communicator.connect()
    return communicator, connected, subprotocol


async def next_frame(communicator: WebsocketCommunicator, timeout: float = 5) -> dict[str, Any]:
    return json.loads(await communicator.receive_from(timeout=timeout))


async def frames_until(
    communicator: WebsocketCommunicator, predicate: Any, timeout: float = 10
) -> list[dict[str, Any]]:
    """Read frames until one satisfies `predicate` (inclusive)."""
    out: list[dict[str, Any]] = []
    while True:
        frame = await next_frame(communicator, timeout)
        out.append(frame)
        if predicate(frame):
            return out
