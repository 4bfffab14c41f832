"""Benchmark: a server's PostgreSQL connections under 64 concurrent HTTP clients, and a second server on the
same database answering meanwhile.

Two production servers (`python -m opencompany.server`, daphne) run with the documented settings
(`DB_POOL_MAX_SIZE=8`, `DB_POOL_TIMEOUT_S=5`, throttles raised so the load reaches the database). Server
A gets CLIENTS concurrent clients for SECONDS seconds, each looping over anonymous `GET /healthz`,
authenticated `GET /api/v1/workflows` (token auth: a session-less read) and authenticated
`POST …/memory/{node}/items` (a write), one request after another on its own keep-alive connection.
Server B meanwhile gets one probe every 100 ms (`GET /healthz`, then `GET /api/v1/workflows`), as it did
for PROBE_S seconds before the load (the comparison: its own idle latency in the same run).

Every 50 ms the bench counts the PostgreSQL backends of each server (`pg_stat_activity` by the
`application_name` each server's `DATABASE_URL` sets) on its own connection (the "+ 1" of the total).
Reported: A's statuses (500s must be 0; 503 with `Retry-After` is the pool's answer past its size), A's
requests/s, the most connections A and B held at once and what they hold after the load, B's statuses
and its latency under A's load over its idle latency.

Run: .venv/bin/python bench/db_pool.py   (PostgreSQL on 127.0.0.1:5432; BENCH_DATABASE_URL names the
database, made afresh; BENCH_CLIENTS=64, BENCH_SECONDS=20). Not a test: it prints a table and a VERDICT
line. Traffic goes to 127.0.0.1 only and every phase is bounded in time.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import livechat
from livechat import pct

DB_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/bench_oc_pool")
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "64"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "20"))
PROBE_S = 5.0
POOL_MAX = 8
PORT_A, PORT_B = 18431, 18432
livechat.bench_environment(DB_URL, "", "bench-pool")
os.environ.pop("REDIS_URL", None)  # the HTTP load needs no channel layer
SERVER_ENV: dict[str, Any] = {
    "DB_POOL_MAX_SIZE": POOL_MAX,
    "DB_POOL_TIMEOUT_S": 5,
    "OPENCOMPANY_WATCHDOG_IN_PROCESS": 1,
    "OPENCOMPANY_THROTTLE_MEMORY_WRITE": "1000000/min",
    "OPENCOMPANY_THROTTLE_CHAT_SEND": "1000000/min",
}


def setup() -> tuple[str, str, str]:
    """A fresh, migrated database with one owner, a deployed workflow and an API token."""
    livechat.recreate_database(DB_URL)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    from graphs import services as graph_services
    from opencompany.core.tokens import token_issue
    from tests.conftest import demo_graph

    user = get_user_model().objects.create_user(username="bench", password=None)
    workflow = graph_services.workflow_create(owner=user, name="bench", graph=demo_graph())
    graph_services.workflow_deploy(workflow=workflow)
    token, _ = token_issue(user=user)
    connections.close_all()
    return token, workflow.pk, f"{workflow.pk}:simpleMemory:1"


class Backends:
    """Samples the PostgreSQL backends of each application name every 50 ms, on one connection."""

    def __init__(self, names: list[str]) -> None:
        import psycopg

        self.conn = psycopg.connect(DB_URL.split("?")[0], autocommit=True, application_name="bench-sampler")
        self.names = names
        self.peak = dict.fromkeys(names, 0)
        self.last = dict.fromkeys(names, 0)
        self.total_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def count(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "GROUP BY application_name"
        ).fetchall()
        return dict(rows)

    def _run(self) -> None:
        while not self._stop.is_set():
            counts = self.count()
            for name in self.names:
                self.peak[name] = max(self.peak[name], counts.get(name, 0))
                self.last[name] = counts.get(name, 0)
            self.total_peak = max(self.total_peak, sum(counts.values()))
            self._stop.wait(0.05)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


async def load(token: str, workflow_id: str, memory_node: str, until: float) -> tuple[Counter[int], int, int]:
    """CLIENTS concurrent clients against A until `until`: statuses, requests, 503s lacking Retry-After."""
    import httpx

    statuses: Counter[int] = Counter()
    missing_retry_after = 0
    base = f"http://127.0.0.1:{PORT_A}"
    auth = {"Authorization": f"Token {token}"}

    async def client(n: int) -> None:
        nonlocal missing_retry_after
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            i = n
            while time.monotonic() < until:
                kind = i % 3
                i += 1
                try:
                    if kind == 0:
                        response = await http.get("/healthz")
                    elif kind == 1:
                        response = await http.get("/api/v1/workflows", headers=auth)
                    else:
                        response = await http.post(
                            f"/api/v1/workflows/{workflow_id}/memory/{memory_node}/items",
                            json={"content": f"client {n} fact {i}: the lighthouse is painted green"},
                            headers=auth,
                        )
                except httpx.HTTPError:
                    statuses[0] += 1  # no answer at all
                    continue
                statuses[response.status_code] += 1
                if response.status_code == 503 and "retry-after" not in response.headers:
                    missing_retry_after += 1

    await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    return statuses, sum(statuses.values()), missing_retry_after


async def probe(token: str, until: float) -> tuple[Counter[int], list[float]]:
    """One request every 100 ms against B until `until`: statuses and latencies (ms)."""
    import httpx

    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    auth = {"Authorization": f"Token {token}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{PORT_B}", timeout=30) as http:
        n = 0
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                if n % 2:
                    response = await http.get("/api/v1/workflows", headers=auth)
                else:
                    response = await http.get("/healthz")
                statuses[response.status_code] += 1
            except httpx.HTTPError:
                statuses[0] += 1
            latencies.append((time.perf_counter() - started) * 1000)
            n += 1
            await asyncio.sleep(max(0.0, 0.1 - (time.perf_counter() - started)))
    return statuses, latencies


async def run(token: str, workflow_id: str, memory_node: str) -> dict[str, Any]:
    idle_statuses, idle = await probe(token, time.monotonic() + PROBE_S)
    started = time.monotonic()
    until = started + SECONDS
    (statuses, requests, missing), (busy_statuses, busy) = await asyncio.gather(
        load(token, workflow_id, memory_node, until), probe(token, until)
    )
    return {
        "statuses": statuses,
        "requests": requests,
        "elapsed": time.monotonic() - started,
        "missing_retry_after": missing,
        "idle_statuses": idle_statuses,
        "idle": idle,
        "busy_statuses": busy_statuses,
        "busy": busy,
    }


def fmt(counter: Counter[int]) -> str:
    return ", ".join(f"{code or 'no answer'}: {n}" for code, n in sorted(counter.items())) or "-"


def main() -> None:
    token, workflow_id, memory_node = setup()
    base = DB_URL.split("?")[0]
    a = livechat.start_server(PORT_A, **SERVER_ENV, DATABASE_URL=f"{base}?application_name=bench-server-a")
    b = livechat.start_server(PORT_B, **SERVER_ENV, DATABASE_URL=f"{base}?application_name=bench-server-b")
    backends = Backends(["bench-server-a", "bench-server-b"])
    backends.start()
    try:
        result = asyncio.run(run(token, workflow_id, memory_node))
        time.sleep(1.0)  # what the servers still hold once the load is over
        after = backends.count()
    finally:
        backends.stop()
        livechat.stop_process(a)
        livechat.stop_process(b)
    statuses, busy_statuses = result["statuses"], result["busy_statuses"]
    idle, busy = result["idle"], result["busy"]
    peak_a, peak_b = backends.peak["bench-server-a"], backends.peak["bench-server-b"]
    ratio = pct(busy, 50) / pct(idle, 50)
    b_errors = sum(n for code, n in busy_statuses.items() if code != 200)
    rows = [
        ("Server A: clients x seconds", f"{CLIENTS} x {SECONDS:.0f} s"),
        (
            "Server A: requests, per second",
            f"{result['requests']}, {result['requests'] / result['elapsed']:.0f}/s",
        ),
        ("Server A: statuses", fmt(statuses)),
        ("Server A: 503 without Retry-After", str(result["missing_retry_after"])),
        ("Server A: PostgreSQL connections, most at once (pool max)", f"{peak_a} ({POOL_MAX})"),
        ("Server A: connections held 1 s after the load", str(after.get("bench-server-a", 0))),
        ("Server B: statuses while A is loaded", fmt(busy_statuses)),
        ("Server B: PostgreSQL connections, most at once (pool max)", f"{peak_b} ({POOL_MAX})"),
        ("Server B: latency p50 / p95, idle", f"{pct(idle, 50):.1f} / {pct(idle, 95):.1f} ms"),
        ("Server B: latency p50 / p95, A loaded", f"{pct(busy, 50):.1f} / {pct(busy, 95):.1f} ms"),
        ("Server B: p50 loaded / idle", f"{ratio:.1f}x"),
        ("All backends of the database, most at once (+1: the sampler)", str(backends.total_peak)),
    ]
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    held = (
        peak_a <= POOL_MAX
        and peak_b <= POOL_MAX
        and statuses.get(500, 0) == 0
        and statuses.get(0, 0) == 0
        and result["missing_retry_after"] == 0
        and b_errors == 0
        and result["idle_statuses"].get(500, 0) == 0
    )
    print(
        f"VERDICT: {'PASS' if held else 'FAIL'}: A held at most {peak_a} connections (pool {POOL_MAX}) under "
        f"{CLIENTS} clients with {statuses.get(500, 0)} answers 500 and {statuses.get(503, 0)} 503; B answered "
        f"{sum(busy_statuses.values()) - b_errors}/{sum(busy_statuses.values())} normally at {ratio:.1f}x its idle p50"
    )
    livechat.drop_database(DB_URL)


if __name__ == "__main__":
    main()
