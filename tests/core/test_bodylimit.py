"""The ASGI body limit in front of Django, whatever server runs the application."""

from __future__ import annotations

import json

import pytest
from asgiref.testing import ApplicationCommunicator

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 1000


def _scope(headers: list[tuple[bytes, bytes]]) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/workflows",
        "raw_path": b"/api/v1/workflows",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }


async def _answer(headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[int, dict]:
    from opencompany.asgi import application

    communicator = ApplicationCommunicator(application, _scope(headers))
    for n, chunk in enumerate(chunks):
        await communicator.send_input(
            {"type": "http.request", "body": chunk, "more_body": n < len(chunks) - 1}
        )
    start = await communicator.receive_output(timeout=10)
    body = await communicator.receive_output(timeout=10)
    await communicator.wait(timeout=10)
    return start["status"], json.loads(body["body"])


@pytest.fixture(autouse=True)
def _limit(settings):
    settings.OPENCOMPANY_MAX_BODY_BYTES = LIMIT


async def test_a_body_without_a_length_is_refused_once_it_passes_the_limit():
    status, body = await _answer([(b"transfer-encoding", b"chunked")], [b"x" * 600, b"x" * 600, b"x"])

    assert (status, body["code"], body["extra"]) == (413, "too_large", {"limit": LIMIT})


async def test_a_body_longer_than_it_said_is_refused_once_it_passes_the_limit():
    status, body = await _answer([(b"content-length", b"10")], [b"x" * 600, b"x" * 600])

    assert (status, body["code"], body["extra"]) == (413, "too_large", {"limit": LIMIT})


async def test_a_body_announced_over_the_limit_is_refused_before_the_application_runs():
    status, body = await _answer([(b"content-length", b"5000")], [b""])

    assert (status, body) == (
        413,
        {
            "code": "too_large",
            "message": f"The request body is larger than {LIMIT} bytes.",
            "extra": {"limit": LIMIT, "length": 5000},
        },
    )
