"""The connection pool (PostgreSQL): a server holds at most its pool's size whatever its threads, hands
every connection back after each request, and answers 503 with `Retry-After` (never 500) when no
connection comes free in time."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from opencompany.core.tokens import token_issue
from tests import live

pytestmark = [pytest.mark.postgres]

APP_NAME = "oc-pool-test"


def _connections_named(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name])
        return int(cursor.fetchone()[0])


def _get(url: str, token: str | None = None) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url)  # noqa: S310 - loopback only
    if token:
        request.add_header("Authorization", f"Token {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            response.read()
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


@pytest.mark.django_db(transaction=True)
def test_a_server_holds_at_most_its_pool_under_48_concurrent_clients_and_gives_every_connection_back(
    owner,
):
    token, _ = token_issue(user=owner)
    env = {"DATABASE_URL": f"{live.test_database_url()}?application_name={APP_NAME}", "DB_POOL_MAX_SIZE": 4}
    with live.asgi_server(**env) as url:
        peak = 0
        sampling = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not sampling.is_set():
                peak = max(peak, _connections_named(APP_NAME))
                time.sleep(0.02)
            connection.close()

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            with ThreadPoolExecutor(48) as clients:
                # Anonymous health checks and authenticated API reads, each on its own thread.
                statuses = Counter(
                    status
                    for status, _ in clients.map(
                        lambda n: _get(f"{url}/healthz") if n % 2 else _get(f"{url}/api/v1/workflows", token),
                        range(480),
                    )
                )
        finally:
            sampling.set()
            sampler.join()
        with urllib.request.urlopen(f"{url}/healthz") as response:  # noqa: S310
            pool = json.loads(response.read())["checks"]["database"]["pool"]

    assert statuses == Counter({200: 480})
    assert peak <= 4
    assert peak >= 2  # the load did reach the database through the pool
    # Every connection is back in the pool once the requests are answered.
    assert (pool["max"], pool["in_use"], pool["waiting"], pool["timeouts"]) == (4, 0, 0, 0)
    assert 2 <= pool["size"] <= 4


@pytest.fixture
def one_connection_pool() -> Iterator[dict[str, Any]]:
    """This process's pool shrunk to one connection that callers wait 0.3 s for."""
    options = connection.settings_dict["OPTIONS"]
    saved = options["pool"]
    options["pool"] = {**saved, "min_size": 1, "max_size": 1, "timeout": 0.3}
    connection.close()
    connection.close_pool()  # type: ignore[attr-defined]
    try:
        yield options["pool"]
    finally:
        connection.close()
        connection.close_pool()  # type: ignore[attr-defined]
        options["pool"] = saved


def _in_another_thread(fn: Any) -> Any:
    with ThreadPoolExecutor(1) as executor:
        return executor.submit(fn).result()


@pytest.mark.django_db(transaction=True)
def test_a_request_that_finds_no_free_connection_is_503_with_retry_after(owner, one_connection_pool):
    token, _ = token_issue(user=owner)
    connection.ensure_connection()  # this thread holds the pool's one connection

    def requests() -> tuple[Any, Any, Any]:
        api = Client(HTTP_AUTHORIZATION=f"Token {token}").get("/api/v1/workflows")
        health = Client().get("/healthz")
        page = Client(raise_request_exception=False)
        page.cookies["sessionid"] = "x" * 32  # the session is read from the database
        html = page.get("/")
        connection.close()
        return api, health, html

    api, health, html = _in_another_thread(requests)

    assert (api.status_code, api["Retry-After"]) == (503, "2")
    assert api.json() == {
        "code": "service_unavailable",
        "message": "The service is busy or briefly cannot reach its database; try again shortly.",
        "extra": {"retry_after_s": 2},
    }
    assert health.status_code == 503
    assert health.json()["checks"]["database"]["status"] == "down"
    assert health.json()["checks"]["database"]["pool"]["max"] == 1
    assert (html.status_code, html["Retry-After"]) == (503, "2")
    assert html.content == b"The service is busy or briefly cannot reach its database; try again shortly.\n"
