"""The websocket handshake's origin check compares scheme, host and port with the page's own origin."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from opencompany.core.origins import origin_allowed
from tests.chat.wsclient import session_cookie


def _scope(origin: str | None, host: str = "app.example.com", scheme: str = "ws", **headers: str) -> dict:
    pairs = [(b"host", host.encode())]
    if origin is not None:
        pairs.append((b"origin", origin.encode()))
    pairs += [(name.encode(), value.encode()) for name, value in headers.items()]
    return {"type": "websocket", "scheme": scheme, "headers": pairs}


@pytest.fixture(autouse=True)
def _hosts(settings):
    settings.ALLOWED_HOSTS = ["app.example.com", "127.0.0.1"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://canvas.example.com"]
    settings.SECURE_PROXY_SSL_HEADER = None


@pytest.mark.parametrize(
    ("scope", "allowed"),
    [
        (_scope("http://app.example.com"), True),
        (_scope("http://app.example.com:80"), True),
        (_scope("http://app.example.com:8000", host="app.example.com:8000"), True),
        (_scope("http://app.example.com:8001", host="app.example.com:8000"), False),
        (_scope("http://app.example.com:8000"), False),
        (_scope("https://app.example.com"), False),
        (_scope("https://app.example.com", scheme="wss"), True),
        (_scope("http://evil.example.com"), False),
        (_scope("http://evil.example.com", host="evil.example.com"), False),  # not an allowed host
        (_scope("https://canvas.example.com"), True),
        (_scope("https://canvas.example.com:8443"), False),
        (_scope(None), False),
        (_scope("null"), False),
    ],
)
def test_only_the_pages_own_origin_or_a_trusted_one_may_open_a_socket(scope, allowed):
    assert origin_allowed(scope) is allowed


def test_behind_a_tls_proxy_the_forwarded_scheme_counts_when_configured(settings):
    scope = _scope("https://app.example.com", **{"x-forwarded-proto": "https"})

    assert origin_allowed(scope) is False
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert origin_allowed(scope) is True


@pytest.mark.django_db(transaction=True)
async def test_a_socket_from_another_port_of_the_same_host_is_refused(workflow, owner):
    from opencompany.asgi import application

    cookie = await sync_to_async(session_cookie)(owner)
    communicator = WebsocketCommunicator(
        application,
        f"/ws/chat/{workflow.pk}/",
        headers=[
            (b"origin", b"http://127.0.0.1:9999"),
            (b"host", b"127.0.0.1:8000"),
            (b"cookie", cookie.encode()),
        ],
    )

    connected, _ = await communicator.connect()

    assert connected is False
