"""Benchmark: N concurrent websocket clients chatting with the offline model (zero pacing) against one
ASGI process (daphne) with the Redis pub/sub channel layer and in-process runs, on PostgreSQL.

Each client owns a deployed workflow and sends TURNS messages one after another, waiting for each answer.
Measured per client, in one run for N = 50, 100, 200:
  send→started   time from sending `send` to receiving `run.started`
  delta latency  receive time minus the server's emit time (`ts`) of each `run.delta` (same machine clock)
  runs/s         finished runs / wall time of the round
  errors         error frames, failed runs, timeouts, dropped connections

Run: .venv/bin/python bench/chat_load.py   (needs PostgreSQL on 127.0.0.1:5432 and Redis on 6379;
BENCH_DATABASE_URL overrides the database, BENCH_NS="50,100,200", BENCH_TURNS=3). Not a test: it prints a
table and a VERDICT line; targets at N = 200: 0 errors, delta p95 ≤ 50 ms, send→started p50 ≤ 20 ms.
Traffic goes to 127.0.0.1 only and every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import livechat
from livechat import pct, setup_database

DB_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/opencompany_bench_chat")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
NS = [int(n) for n in os.environ.get("BENCH_NS", "50,100,200").split(",")]
TURNS = int(os.environ.get("BENCH_TURNS", "3"))
livechat.bench_environment(DB_URL, REDIS_URL, f"bench{os.getpid()}")
QUESTIONS = [
    "Hello! Could you tell me what we talked about so far?",
    "What did I say first, and how many turns have we had?",
    "Thanks. Please summarize the conversation in a sentence.",
]


def start_server(port: int) -> Any:
    return livechat.start_server(port, OPENCOMPANY_RUN_EXECUTOR="inprocess", OPENCOMPANY_OFFLINE_PACING_MS=0)


async def client(port: int, workflow_id: str, cookie: str, stats: dict[str, Any]) -> None:
    from websockets.asyncio.client import connect

    url = f"ws://127.0.0.1:{port}/ws/chat/{workflow_id}/"
    try:
        async with connect(
            url,
            origin=f"http://127.0.0.1:{port}",
            additional_headers={"Cookie": cookie},
            open_timeout=30,  # type: ignore[arg-type]
        ) as ws:
            await asyncio.wait_for(ws.recv(), 30)  # thread
            for turn in range(TURNS):
                sent = time.perf_counter()
                await ws.send(
                    json.dumps({"type": "send", "request_id": turn, "text": QUESTIONS[turn % len(QUESTIONS)]})
                )
                run_id = None
                while True:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
                    now_wall = time.time()
                    kind = frame.get("type")
                    if kind == "error":
                        stats["errors"] += 1
                        break
                    if kind == "ack":
                        run_id = frame["run_id"]
                    elif kind == "run.started" and frame.get("run_id") == run_id:
                        stats["started"].append((time.perf_counter() - sent) * 1000)
                    elif kind == "run.delta" and frame.get("run_id") == run_id:
                        stats["delta"].append((now_wall - frame["ts"]) * 1000)
                    elif (
                        kind in ("run.finished", "run.stopped", "run.error") and frame.get("run_id") == run_id
                    ):
                        if kind == "run.finished":
                            stats["runs"] += 1
                        else:
                            stats["errors"] += 1
                        break
    except Exception as exc:
        stats["errors"] += 1
        stats["exceptions"].append(type(exc).__name__)


async def round_for(port: int, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    stats: dict[str, Any] = {"started": [], "delta": [], "runs": 0, "errors": 0, "exceptions": []}
    began = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(client(port, wf, cookie, stats) for wf, cookie in pairs)), 600)
    stats["wall"] = time.perf_counter() - began
    return stats


def main() -> None:
    pairs = setup_database(max(NS))
    port = 18700 + os.getpid() % 500
    server = start_server(port)
    rows = []
    try:
        asyncio.run(round_for(port, pairs[:10]))  # warm-up
        for n in NS:
            stats = asyncio.run(round_for(port, pairs[:n]))
            rows.append((n, stats))
    finally:
        livechat.stop_process(server)
        from django.db import connections

        connections.close_all()
        livechat.drop_database(DB_URL)
    print(
        f"\nchat load: one daphne process, Redis pub/sub layer, PostgreSQL, offline model at zero pacing, {TURNS} turns per client\n"
    )
    print(
        "| clients | runs | runs/s | send→started p50 ms | p95 ms | delta latency p50 ms | p95 ms | errors |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, s in rows:
        print(
            f"| {n} | {s['runs']} | {s['runs'] / s['wall']:.1f} | {pct(s['started'], 50):.1f} | {pct(s['started'], 95):.1f} "
            f"| {pct(s['delta'], 50):.1f} | {pct(s['delta'], 95):.1f} | {s['errors']} |"
        )
    last_n, last = rows[-1]
    ok = last["errors"] == 0 and pct(last["delta"], 95) <= 50 and pct(last["started"], 50) <= 20
    print(
        f"\nVERDICT: {'PASS' if ok else 'FAIL'} at N = {last_n}: errors {last['errors']} (target 0), "
        f"delta p95 {pct(last['delta'], 95):.1f} ms (target ≤ 50), send→started p50 {pct(last['started'], 50):.1f} ms "
        f"(target ≤ 20); {statistics.fmean([s['runs'] / s['wall'] for _, s in rows]):.1f} runs/s on average"
    )
    if last["exceptions"]:
        print("exceptions:", sorted(set(last["exceptions"])))


if __name__ == "__main__":
    main()
