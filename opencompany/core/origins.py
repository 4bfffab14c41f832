"""The websocket handshake's origin check: the page's own origin, port included, or a trusted one.

A browser sends `Origin` on every websocket handshake. It is accepted when it is exactly the origin the
request was made to (scheme, host and port of the `Host` header, which must itself be one of
`ALLOWED_HOSTS`) or one of `CSRF_TRUSTED_ORIGINS`: the same rule Django's CSRF check applies to forms.
The scheme is `https` for `wss` and, behind a TLS-terminating proxy, when `SECURE_PROXY_SSL_HEADER`
says so.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            try:
                return bytes(value).decode("latin1")
            except UnicodeDecodeError:
                return None
    return None


def normalized_origin(origin: str) -> str | None:
    """`scheme://host:port` in lower case with the scheme's default port spelled out, or None when
    `origin` is not an http(s) origin."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    return f"{parts.scheme}://{parts.hostname}:{port or _DEFAULT_PORTS[parts.scheme]}"


def _scheme(scope: dict[str, Any]) -> str:
    if scope.get("scheme") in ("wss", "https"):
        return "https"
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        meta_name, expected = proxy_header
        name = meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin1")
        value = _header(scope, name)
        if value is not None and value.split(",")[0].strip() == expected:
            return "https"
    return "http"


def origin_allowed(scope: dict[str, Any]) -> bool:
    """True when the handshake's `Origin` is its own origin or a trusted one."""
    origin = _header(scope, b"origin")
    if origin is None:
        return False
    wanted = normalized_origin(origin)
    if wanted is None:
        return False
    trusted = {normalized_origin(o) for o in settings.CSRF_TRUSTED_ORIGINS}
    if wanted in trusted:
        return True
    host = _header(scope, b"host")
    if not host:
        return False
    domain, _port = split_domain_port(host)
    allowed_hosts = settings.ALLOWED_HOSTS or (["localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])
    if not domain or not validate_host(domain, allowed_hosts):
        return False
    return wanted == normalized_origin(f"{_scheme(scope)}://{host}")


class SameOriginValidator:
    """ASGI middleware for websockets: refuse the handshake unless `origin_allowed`."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
