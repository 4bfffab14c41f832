"""Slow clients against the production server (a real process): a request head or body trickled in a byte
at a time is cut at its deadline, an idle keep-alive connection too, while an ordinary request and an
open websocket are untouched."""

from __future__ import annotations

import asyncio
import socket
import time
from urllib.parse import urlsplit

import pytest

from tests.chat.liveclient import ChatClient
from tests.chat.wsclient import session_cookie
from tests.live import asgi_server

pytestmark = pytest.mark.django_db(transaction=True)

HEAD_S, BODY_S = 1, 2


OPENED: dict[int, float] = {}


def _open(base_url: str, first: bytes) -> socket.socket:
    address = urlsplit(base_url)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    OPENED[sock.fileno()] = time.monotonic()
    sock.sendall(first)
    sock.setblocking(False)
    return sock


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _trickle_until_closed(socks: list[socket.socket], limit_s: float) -> list[float]:
    """Send one more byte to each open socket every 0.2 s; how long each took to be closed, from when it
    was opened."""
    started, closed_at = time.monotonic(), dict[int, float]()
    while len(closed_at) < len(socks) and time.monotonic() - started < limit_s:
        for n, sock in enumerate(socks):
            if n in closed_at:
                continue
            if _closed(sock):
                closed_at[n] = time.monotonic() - OPENED[sock.fileno()]
                continue
            try:
                sock.send(b"a")
            except OSError:
                closed_at[n] = time.monotonic() - OPENED[sock.fileno()]
        time.sleep(0.2)
    return [closed_at.get(n, float("inf")) for n in range(len(socks))]


def test_trickled_heads_and_bodies_and_idle_connections_are_cut_at_their_deadlines(owner, workflow):
    cookie = session_cookie(owner)
    env = {"OPENCOMPANY_HTTP_HEAD_TIMEOUT_S": HEAD_S, "OPENCOMPANY_HTTP_BODY_TIMEOUT_S": BODY_S}
    with asgi_server(**env) as url:
        host = urlsplit(url).netloc

        async def with_a_socket_open() -> list[float]:
            chat = ChatClient(url, workflow.pk, cookie)
            first = await chat.open()
            heads = [
                _open(url, f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode()) for _ in range(40)
            ]
            bodies = [
                _open(
                    url,
                    f"POST /api/v1/auth/token HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000\r\n\r\n{{".encode(),
                )
                for _ in range(20)
            ]
            idle = [_open(url, b"") for _ in range(10)]
            cut = await asyncio.to_thread(_trickle_until_closed, heads + bodies, BODY_S + HEAD_S + 3)
            cut += [0.0 if _closed(sock) else float("inf") for sock in idle]  # idle past their deadline
            # The websocket outlived every deadline and still answers.
            pong = await chat.request({"type": "ping"})
            await chat.close()
            assert (first["type"], pong) == ("thread", {"type": "ack", "request_id": "q1", "pong": True})
            return cut

        cut = asyncio.run(with_a_socket_open())
        ordinary = _open(url, f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        ordinary.setblocking(True)
        answer = ordinary.recv(65536)

    heads, bodies, idle = cut[:40], cut[40:60], cut[60:]
    assert max(heads) < HEAD_S + 1  # the head deadline counts from the connection, whatever arrives
    assert min(bodies) >= BODY_S - 0.5  # the body deadline counts from the head
    assert max(bodies) < BODY_S + 1
    assert max(idle) == 0
    assert answer.startswith(b"HTTP/1.1 200 ")
