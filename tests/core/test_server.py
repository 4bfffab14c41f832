"""The production server (`python -m opencompany.server`, daphne) as a real process: request bodies over
the limit are refused while they arrive, chunked bodies reach the application whole, and the access log
carries no query strings."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from opencompany.core.tokens import token_issue
from tests.conftest import make_workflow
from tests.live import asgi_server

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024
LIMIT = 2 * MB
PIECE = 64 * 1024
ROOT = Path(__file__).resolve().parents[2]


def _response(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def _upload(base_url: str, path: str, *, total: int, chunked: bool) -> tuple[bytes, int]:
    """POST `total` bytes to `path`, reading while sending; stops sending as soon as an answer arrives.
    Returns the raw answer and how many body bytes were sent by then."""
    address = urlsplit(base_url)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
        f"{framing}\r\n\r\n".encode()
    )
    sock.setblocking(False)
    answer, sent, pending = b"", 0, b""
    piece = b"x" * PIECE
    deadline = time.monotonic() + 30
    try:
        while (sent < total or pending) and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock], [], 1)
            if readable:
                data = sock.recv(PIECE)
                answer += data
                if not data or b"\r\n\r\n" in answer:
                    break
                continue
            if writable:
                if not pending:
                    pending = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
                    sent += len(piece)
                pending = pending[sock.send(pending) :]
        sock.setblocking(True)
        sock.settimeout(5)
        while True:
            data = sock.recv(PIECE)
            if not data:
                break
            answer += data
    except (BrokenPipeError, ConnectionResetError, TimeoutError, BlockingIOError):
        pass
    finally:
        sock.close()
    return answer, sent


@pytest.mark.parametrize("chunked", [False, True], ids=["sized", "chunked"])
def test_a_64_mb_body_is_refused_before_authentication_while_most_of_it_is_unsent(chunked):
    total = 64 * MB

    with asgi_server(OPENCOMPANY_MAX_BODY_BYTES=LIMIT) as url:
        answer, sent = _upload(url, "/api/v1/workflows", total=total, chunked=chunked)

    status, body = _response(answer)
    assert status == 413  # not 401: the body limit comes before authentication
    assert body == {
        "code": "too_large",
        "message": f"The request body is larger than {LIMIT} bytes.",
        "extra": {"limit": LIMIT} if chunked else {"limit": LIMIT, "length": total},
    }
    assert sent < total // 8


def test_a_chunked_graph_reaches_validate_whole(owner):
    workflow = make_workflow(owner)
    token, _ = token_issue(user=owner)
    graph = {"nodes": [{"id": "x", "type": "noSuchType", "data": {}}], "edges": []}
    body = json.dumps({"graph": graph}).encode()

    with asgi_server() as url:
        address = urlsplit(url)
        with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
            sock.sendall(
                f"POST /api/v1/workflows/{workflow.pk}/validate HTTP/1.1\r\nHost: {address.netloc}\r\n"
                f"Authorization: Token {token}\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
                + b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:]))
                + b"0\r\n\r\n"
            )
            answer = b""
            while data := sock.recv(PIECE):
                answer += data

    status, report = _response(answer)
    assert status == 200
    assert [e["code"] for e in report["errors"]] == ["unknown_node_type"]


def test_the_access_log_has_paths_without_query_strings(owner, tmp_path):
    workflow = make_workflow(owner)
    token, _ = token_issue(user=owner)
    log = tmp_path / "access.log"
    path = f"/api/v1/workflows/{workflow.pk}/memory/{workflow.pk}:simpleMemory:1/items"

    with asgi_server(access_log=log) as url:
        address = urlsplit(url)
        with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
            sock.sendall(
                f"GET {path}?query=my+bank+pin+is+4321 HTTP/1.1\r\nHost: {address.netloc}\r\n"
                f"Authorization: Token {token}\r\nConnection: close\r\n\r\n".encode()
            )
            answer = b""
            while data := sock.recv(PIECE):
                answer += data
        assert answer.startswith(b"HTTP/1.1 200")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and path not in log.read_text():
            time.sleep(0.05)

    lines = log.read_text().splitlines()
    requests = [(line.split('"')[1], line.split('"')[2].split()[0]) for line in lines]
    # The first is the server's readiness probe.
    assert requests == [("GET /accounts/login/", "200"), (f"GET {path}", "200")]
    assert "4321" not in log.read_text()
    assert "query" not in log.read_text()


def test_loading_the_asgi_application_leaves_what_it_loaded_out_of_the_collectors_full_passes() -> None:
    # A full pass walks every tracked object while every thread waits; the server's own modules and
    # settings would make each such pause tens of milliseconds of stalled streams.
    probe = "import gc, opencompany.asgi; print(gc.get_freeze_count())"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )

    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) > 10_000


def test_shutdown_lets_requests_being_answered_finish_then_cancels_the_rest(monkeypatch, settings) -> None:
    """The server's "before shutdown" step on its own connection table: a connection still reading its
    request (no application yet) is passed over, a request answered within the grace period completes,
    one still running at its end and an open socket are cancelled. The drain's app steps are replaced by
    a no-op here: they have their own tests, and running them would leave this process draining."""
    from daphne.http_protocol import WebRequest

    from opencompany import server as server_module
    from opencompany.core import lifecycle

    async def no_app_steps() -> None:
        return None

    monkeypatch.setattr(lifecycle, "shut_down", no_app_steps)
    settings.OPENCOMPANY_SHUTDOWN_GRACE_S = 1

    async def scenario() -> dict[str, asyncio.Future[None]]:
        loop = asyncio.get_running_loop()
        futures = {name: loop.create_future() for name in ("answered", "stuck", "socket")}
        requests = [WebRequest.__new__(WebRequest) for _ in range(2)]
        server = server_module.Server(application=None, endpoints=["tcp:port=0:interface=127.0.0.1"])
        server.connections = {
            object(): {"connected": 0.0},  # its request head is still arriving
            requests[0]: {"connected": 0.0, "application_instance": futures["answered"]},
            requests[1]: {"connected": 0.0, "application_instance": futures["stuck"]},
            object(): {"connected": 0.0, "application_instance": futures["socket"]},
        }
        loop.call_later(0.2, futures["answered"].set_result, None)
        await server.kill_all_applications().asFuture(loop)
        return futures

    futures = asyncio.run(scenario())
    assert futures["answered"].result() is None  # completed, not cancelled
    assert futures["stuck"].cancelled()
    assert futures["socket"].cancelled()
