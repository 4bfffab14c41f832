"""Benchmark: what a second (and fourth) server process buys. N = 1, 2, 4 production server processes
(`python -m opencompany.server`, daphne) on loopback share one PostgreSQL and one Redis (pub/sub layer);
a small round-robin client gives chat i to server i mod N. Each chat is an owner with its own deployed
workflow (Context and Memory wired) that sends a message, follows the streamed answer to its end, thinks
(1-3 s, mean 2 s) and sends the next; the offline model streams at 30 ms per delta.

Per N the number of concurrent chats ramps (doubling, then halving the gap twice) until a level misses
the latency target (delta p95 > 50 ms, or send→started p95 > 1,000 ms: a queue of runs waiting for a
free executor shows there first, or answer p95 > twice a lone chat's answer to the same message: a
starved process streams on time but slowly) or has an error. Every level starts fresh conversations. Reported at
the highest level that held: chats, runs/s, send→started p50/p95, delta p95 (receive time minus the
server's emit time), CPU per run (ms of user+system CPU of every server and worker process, from
/proc), PostgreSQL CPU per run (the whole server, ended backends included), statements per run
(every statement the processes sent, counted at psycopg's cursor), channel-layer messages published per run, how busy the whole machine was,
and the ratio of chats to N = 1. The second mode runs the same with `OPENCOMPANY_RUN_EXECUTOR=tasks`:
runs execute on `manage.py db_worker` processes (each runs one run at a time) instead of in the
server that admitted them.

Every stream is checked against the stored reply: deltas applied in seq order must give exactly the
reply's text, with no seq skipped or repeated; any difference fails the level.

Run: .venv/bin/python bench/scale_out.py [--quick] [--modes inprocess,tasks] [--ns 1,2,4]
     .venv/bin/python bench/scale_out.py --profile 40       (cProfile of one server at 40 chats)
     .venv/bin/python bench/scale_out.py --compare REF --chats 40   (per-run costs of REF's code vs
                                                                     the working tree, same run)
Needs PostgreSQL on 127.0.0.1:5432 and Redis on 6379; BENCH_DATABASE_URL names the database (two are
made: it and `<it>_tpl`), BENCH_REDIS_PREFIX the channel-layer prefix. Traffic goes to 127.0.0.1 only,
and every level, mode and the whole run are bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import livechat
from livechat import ChatStats, pct

DB_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/bench_oc_scale")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
REDIS_PREFIX = os.environ.get("BENCH_REDIS_PREFIX", f"bench-scale-{os.getpid()}")
PACING_MS = 30
DELTA_P95_MS = 50.0
STARTED_P95_MS = 1000.0
# A run may take at most this many times a lone chat's answer to the same message (send→finished): a
# starved process streams every delta on time but slowly, which only the answer time shows.
ANSWER_FACTOR = 2.0
TARGET_RATIO = 1.6  # chats two processes should hold relative to one
QUESTIONS = [
    "Good morning! I would like to plan a small garden with tomatoes, basil and a few rows of lettuce.",
    "Which of those should go in first, given that the last frost here is usually in the middle of April?",
    "And how often would you water them during a dry and fairly hot week in the early summer months?",
    "Thanks. Could you sum up what we said so far in a couple of sentences, so I can note it down?",
]

livechat.bench_environment(DB_URL, REDIS_URL, REDIS_PREFIX)
TEMPLATE = DB_URL.rsplit("/", 1)[1] + "_tpl"
COUNTED = [sys.executable, str(Path(__file__).resolve().parent / "counted_process.py")]


@dataclass
class Config:
    window_s: float = 12.0
    ramp_s: float = 2.0
    settle_s: float = 2.0
    think_s: float = 2.0
    start: int = 10
    max_chats: int = 480
    mode_budget_s: float = 220.0  # room for N = 1's doublings from `start` and its bisections
    workers: int = 4
    pool: int = 600


@dataclass
class Level:
    chats: int
    runs: int = 0  # finished inside the measured window
    total_runs: int = 0  # finished in the whole level
    runs_per_s: float = 0.0
    started: list[float] = field(default_factory=list)
    delta: list[float] = field(default_factory=list)
    answer: list[float] = field(default_factory=list)  # send→finished ms of runs sent in the window
    slowdown: list[float] = field(default_factory=list)  # each of those over a lone chat's answer
    errors: int = 0
    exceptions: list[str] = field(default_factory=list)
    check: dict[str, int] = field(default_factory=dict)
    cpu_ms: float = 0.0  # per run, servers and workers
    pg_ms: float = 0.0
    client_ms: float = 0.0
    statements: float = 0.0
    published: float = 0.0
    delivered: float = 0.0
    redis_ms: float = 0.0
    busy: float = 0.0  # share of the machine's CPU in use
    outside: float = 0.0  # share of it used by processes outside the bench (not servers, workers, PostgreSQL, Redis, client)
    own: float = 0.0  # share of the machine's CPU the bench's processes used (servers, workers, PostgreSQL, Redis, client)
    connections: int = 0  # PostgreSQL backends of the bench database at the window's end
    stalled: int = 0  # chats that finished no run in the whole level

    @property
    def broken(self) -> int:
        c = self.check
        return c.get("lost", 0) + c.get("doubled", 0) + c.get("mismatched", 0) + c.get("missing", 0)

    @property
    def held(self) -> bool:
        return (
            self.errors == 0
            and self.broken == 0
            and self.stalled == 0
            and self.runs > 0
            and pct(self.delta, 95) <= DELTA_P95_MS
            and pct(self.started, 95) <= STARTED_P95_MS
            and pct(self.slowdown, 95) <= ANSWER_FACTOR
        )


# --- processes -------------------------------------------------------------------------------------


class Deployment:
    """N servers (and W task workers) on loopback with counters; read and profile them."""

    def __init__(
        self, n: int, executor: str, workers: int, counters: Path, code_root: Path | None = None, **extra: Any
    ) -> None:
        self.counters = counters
        env: dict[str, Any] = {
            **extra,
            "OPENCOMPANY_RUN_EXECUTOR": executor,
            "OPENCOMPANY_OFFLINE_PACING_MS": PACING_MS,
            "BENCH_COUNTERS_DIR": counters,
            "BENCH_PROFILE_DIR": counters,
        }
        root = code_root or livechat.ROOT
        if code_root is not None:
            env["PYTHONPATH"] = str(code_root)
            env["BENCH_CODE_ROOT"] = str(code_root)
        base = 19000 + (os.getpid() % 400) * 10
        self.urls: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            for i in range(n):
                port = base + i
                self.procs.append(livechat.start_server(port, argv=[*COUNTED, "server"], cwd=root, **env))
                self.urls.append(f"http://127.0.0.1:{port}")
            for _ in range(workers if executor == "tasks" else 0):
                self.procs.append(livechat.start_worker(argv=[*COUNTED, "worker"], cwd=root, **env))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for proc in self.procs:
            livechat.stop_process(proc)

    async def counts(self) -> dict[str, float]:
        """Counters summed over the processes, fresh (each process answers SIGUSR1)."""
        before = {p.pid: self._read(p.pid).get("seq", 0) for p in self.procs}
        for p in self.procs:
            p.send_signal(10)  # SIGUSR1
        total: dict[str, float] = {"statements": 0, "published": 0, "delivered": 0}
        for p in self.procs:
            deadline = time.monotonic() + 5
            data = self._read(p.pid)
            while data.get("seq", 0) <= before[p.pid] and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
                data = self._read(p.pid)
            for k in total:
                total[k] += data.get(k, 0)
        return total

    def _read(self, pid: int) -> dict[str, Any]:
        try:
            return dict(json.loads((self.counters / f"{pid}.json").read_text()))
        except (OSError, ValueError):
            return {}

    def cpu_s(self) -> float:
        return sum(livechat.process_cpu_s(p.pid) for p in self.procs)

    def profile_toggle(self, index: int = 0) -> None:
        self.procs[index].send_signal(12)  # SIGUSR2


@functools.cache
def _postmaster_pid() -> str:
    """The PostgreSQL server's main process: the parent of a backend, read while that backend lives."""
    import psycopg

    with psycopg.connect(DB_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        fields = livechat.proc_stat(row[0]) if row else None
    if fields is None:
        raise RuntimeError("PostgreSQL must run on this machine: the bench reads its CPU from /proc")
    return fields[1]


def postgres_cpu() -> tuple[float, int]:
    """(CPU seconds so far of the whole PostgreSQL server, backends connected to the bench database).

    The CPU is the postmaster's own, what its ended children used (the kernel adds a reaped child's CPU
    to its parent's) and what its live children have used so far: every backend, also one that ended
    during a window, and the background processes (WAL writer, checkpointer, autovacuum)."""
    import psycopg

    name = DB_URL.rsplit("/", 1)[1]
    with psycopg.connect(DB_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name]).fetchone()
    backends = int(row[0]) if row else 0
    postmaster = _postmaster_pid()
    fields = livechat.proc_stat(postmaster)
    if fields is None:
        raise RuntimeError("the PostgreSQL server stopped during the bench")
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            child = livechat.proc_stat(entry)
            if child is not None and child[1] == postmaster:
                ticks += int(child[11]) + int(child[12])
    return ticks * livechat.CLOCK_TICK_S, backends


def redis_cpu_s() -> float:
    """User + system CPU seconds of the Redis server so far."""
    import redis

    info = redis.Redis.from_url(REDIS_URL).info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def snapshot(deployment: Deployment) -> dict[str, Any]:
    counts = await deployment.counts()
    busy, total = livechat.machine_cpu()
    pg, pg_backends = await asyncio.to_thread(postgres_cpu)
    return {
        "at": time.perf_counter(),
        "cpu": deployment.cpu_s(),
        "pg": pg,
        "pg_backends": pg_backends,
        "client": sum(os.times()[:2]),
        "redis": await asyncio.to_thread(redis_cpu_s),
        "busy": busy,
        "total": total,
        **counts,
    }


# --- one level -------------------------------------------------------------------------------------


async def warm_up(deployment: Deployment, chats: list[tuple[str, str]]) -> None:
    """One turn per chat on every server: imports, connections and prepared statements are made."""

    async def one(i: int, wf: str, cookie: str) -> None:
        ws = await livechat.open_chat(deployment.urls[i % len(deployment.urls)], wf, cookie)
        try:
            await livechat.chat_turn(ws, 0, QUESTIONS[0], ChatStats())
        finally:
            await ws.close()

    await asyncio.gather(*(one(i, wf, cookie) for i, (wf, cookie) in enumerate(chats)))


async def lone_answers_ms(deployment: Deployment, chat: tuple[str, str]) -> list[float]:
    """The answer time (send→finished) of one chat alone on the first server, per message (the
    replies differ in length), the median of two turns each."""
    stats = ChatStats()
    for _ in range(2):
        ws = await livechat.open_chat(deployment.urls[0], *chat)
        try:
            for turn, text in enumerate(QUESTIONS):
                await livechat.chat_turn(ws, turn, text, stats)
        finally:
            await ws.close()
    if any(r.state != "finished" for r in stats.runs):
        raise RuntimeError("a lone chat's turn did not finish")
    n = len(QUESTIONS)
    return [statistics.median((r.ended_at - r.sent_at) * 1000 for r in stats.runs[q::n]) for q in range(n)]


async def chat_loop(
    url: str, workflow_id: str, cookie: str, start_at: float, end_at: float, stats: ChatStats, seed: int
) -> None:
    rng = random.Random(seed)
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    try:
        ws = await livechat.open_chat(url, workflow_id, cookie)
    except Exception as exc:
        stats.errors += 1
        stats.exceptions.append(f"connect:{type(exc).__name__}")
        return
    try:
        await asyncio.sleep(rng.uniform(0, CONFIG.think_s))  # chats do not all start in step
        turn = 0
        while time.perf_counter() < end_at:
            record = await livechat.chat_turn(ws, turn, QUESTIONS[turn % len(QUESTIONS)], stats)
            record.chat, record.question = workflow_id, turn % len(QUESTIONS)
            if record.state != "finished":
                return
            turn += 1
            await asyncio.sleep(CONFIG.think_s * rng.uniform(0.5, 1.5))
    except Exception as exc:
        stats.errors += 1
        stats.exceptions.append(type(exc).__name__)
    finally:
        await ws.close()


async def run_level(
    deployment: Deployment, chats: list[tuple[str, str]], seed: int, lone_ms: list[float] | None = None
) -> Level:
    level = Level(chats=len(chats))
    stats = ChatStats()
    t0 = time.perf_counter()
    window_start = t0 + CONFIG.ramp_s + CONFIG.settle_s
    end_at = window_start + CONFIG.window_s
    tasks = [
        asyncio.ensure_future(
            chat_loop(
                deployment.urls[i % len(deployment.urls)],
                wf,
                cookie,
                t0 + CONFIG.ramp_s * i / len(chats),
                end_at,
                stats,
                seed + i,
            )
        )
        for i, (wf, cookie) in enumerate(chats)
    ]
    await asyncio.sleep(max(0.0, window_start - time.perf_counter()))
    first = await snapshot(deployment)
    await asyncio.sleep(max(0.0, end_at - time.perf_counter()))
    last = await snapshot(deployment)
    _done, pending = await asyncio.wait(tasks, timeout=90)
    for task in pending:
        task.cancel()
        level.errors += 1
        level.exceptions.append("level_timeout")
    ran = [r for r in stats.runs if first["at"] <= r.sent_at < last["at"]]
    ended = [r for r in stats.runs if first["at"] <= r.ended_at < last["at"]]
    level.runs = len([r for r in ended if r.state == "finished"])
    level.total_runs = len([r for r in stats.runs if r.state == "finished"])
    level.stalled = len(chats) - len({r.chat for r in stats.runs if r.state == "finished"})
    wall = last["at"] - first["at"]
    level.runs_per_s = level.runs / wall
    level.started = [r.started_ms for r in ran if r.started_ms is not None]
    level.delta = [d for r in ran for d in r.delta_ms]
    level.answer = [(r.ended_at - r.sent_at) * 1000 if r.ended_at else float("inf") for r in ran]
    if lone_ms is not None:
        level.slowdown = [a / lone_ms[r.question] for a, r in zip(level.answer, ran, strict=True)]
    level.errors += stats.errors
    level.exceptions += stats.exceptions
    level.check = await asyncio.to_thread(livechat.check_streams, stats.runs)
    per_run = max(1, level.runs)
    level.cpu_ms = (last["cpu"] - first["cpu"]) * 1000 / per_run
    level.pg_ms = (last["pg"] - first["pg"]) * 1000 / per_run
    level.client_ms = (last["client"] - first["client"]) * 1000 / per_run
    for k in ("statements", "published", "delivered"):
        setattr(level, k, (last[k] - first[k]) / per_run)
    level.redis_ms = (last["redis"] - first["redis"]) * 1000 / per_run
    span = max(1e-9, last["total"] - first["total"])
    level.busy = (last["busy"] - first["busy"]) / span
    own_s = (level.cpu_ms + level.pg_ms + level.client_ms + level.redis_ms) * per_run / 1000
    level.own = own_s / span
    level.outside = max(0.0, level.busy - level.own)
    level.connections = last["pg_backends"]
    return level


# --- the ramp --------------------------------------------------------------------------------------


class Pool:
    """Chats handed out without reuse (each level starts fresh conversations), wrapping if exhausted."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs, self.next = pairs, 0

    def take(self, n: int) -> list[tuple[str, str]]:
        out = [self.pairs[(self.next + i) % len(self.pairs)] for i in range(n)]
        self.next = (self.next + n) % len(self.pairs)
        return out


def _round(n: float) -> int:
    return max(2, int(round(n / 2) * 2)) if n < 20 else int(round(n / 5) * 5)


async def ramp(
    deployment: Deployment, pool: Pool, start: int, label: str, lone_ms: list[float]
) -> list[Level]:
    """Levels from `start`: x2 while holding (/2 while not), then bisections between the highest level
    that held and the lowest that did not, until they are one rounding step apart or the mode's time
    budget is spent."""
    levels: list[Level] = []
    began = time.monotonic()
    good, bad = 0, 0
    chats = start
    while time.monotonic() - began < CONFIG.mode_budget_s:
        level = await run_level(deployment, pool.take(chats), seed=len(levels) * 7919, lone_ms=lone_ms)
        levels.append(level)
        _print_level(label, level)
        if level.held:
            good = max(good, chats)
        else:
            bad = chats if not bad else min(bad, chats)
        if not bad:
            if chats >= CONFIG.max_chats:
                break
            chats = min(CONFIG.max_chats, chats * 2)
        elif not good:
            if chats <= 2:
                break
            chats = _round(chats / 2)
        else:
            nxt = _round((good * bad) ** 0.5)
            bisections = sum(1 for lv in levels if good < lv.chats < bad or lv.chats in (good, bad)) - 2
            if nxt in (good, bad) or bisections >= 2 or any(lv.chats == nxt for lv in levels):
                break
            chats = nxt
    return levels


def _print_level(label: str, lv: Level) -> None:
    print(
        f"  {label:>22} chats {lv.chats:>4}: {lv.runs:>4} runs {lv.runs_per_s:6.1f}/s  started p50/p95 "
        f"{pct(lv.started, 50):6.1f}/{pct(lv.started, 95):7.1f} ms  delta p95 {pct(lv.delta, 95):6.1f} ms  "
        f"answer p95 {pct(lv.answer, 95):6.0f} ms ({pct(lv.slowdown, 95):4.1f}x lone)  "
        f"cpu {lv.cpu_ms:5.1f} ms/run  pg {lv.pg_ms:5.1f}  stmts {lv.statements:5.1f}  frames "
        f"{lv.published:5.1f}  conns {lv.connections:3d}  client {lv.client_ms:5.1f}  redis {lv.redis_ms:4.1f}  busy {lv.busy:4.0%} (outside {lv.outside:.0%})  errors {lv.errors}  broken {lv.broken}  stalled {lv.stalled}"
        + ("  HELD" if lv.held else "  missed")
        + (f"  {sorted(set(lv.exceptions))[:4]}" if lv.exceptions else ""),
        flush=True,
    )


def best(levels: list[Level]) -> Level | None:
    held = [lv for lv in levels if lv.held]
    return max(held, key=lambda lv: lv.chats) if held else None


def bracket(levels: list[Level]) -> str:
    """The highest level that held and the lowest above it that did not, as "held H, missed M"."""
    top = best(levels)
    held = top.chats if top is not None else 0
    missed = [lv.chats for lv in levels if not lv.held and lv.chats > held]
    return f"held {held}, missed {min(missed)}" if missed else f"held {held}, none missed"


# --- setup -----------------------------------------------------------------------------------------


def prepare(pool_size: int) -> list[tuple[str, str]]:
    """The bench database with `pool_size` chats, kept as a template each deployment starts from."""
    began = time.monotonic()
    pairs = livechat.setup_database(pool_size)
    livechat.recreate_database(DB_URL.rsplit("/", 1)[0] + "/" + TEMPLATE, template=DB_URL.rsplit("/", 1)[1])
    print(
        f"set up {pool_size} owners with deployed workflows in {time.monotonic() - began:.0f} s", flush=True
    )
    return pairs


def fresh_database() -> None:
    from django.db import connections

    connections.close_all()
    livechat.recreate_database(DB_URL, template=TEMPLATE)


# --- modes -----------------------------------------------------------------------------------------


async def scale(
    pairs: list[tuple[str, str]], modes: list[str], ns: list[int]
) -> list[tuple[str, int, list[Level]]]:
    results: list[tuple[str, int, list[Level]]] = []
    counters = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        for mode in modes:
            held_one = 0
            # With the tasks executor the workers, not the servers, bound the chats: N <= 2 shows it.
            for n in [n for n in ns if mode != "tasks" or n <= 2]:
                fresh_database()
                pool = Pool(pairs)
                executor = "tasks" if mode == "tasks" else "inprocess"
                deployment = Deployment(n, executor, CONFIG.workers, counters)
                label = f"{mode} N={n}" + (f"+{CONFIG.workers}w" if mode == "tasks" else "")
                try:
                    await warm_up(deployment, pool.take(2 * n))
                    lone = await lone_answers_ms(deployment, pool.take(1)[0])
                    print(f"  {label:>22} a lone chat's answers: {[round(v) for v in lone]} ms", flush=True)
                    start = CONFIG.start if not held_one else _round(held_one * 0.9)
                    levels = await ramp(deployment, pool, start, label, lone)
                finally:
                    deployment.stop()
                results.append((mode, n, levels))
                top = best(levels)
                if n == ns[0] and top is not None:
                    held_one = top.chats
    finally:
        shutil.rmtree(counters, ignore_errors=True)
    return results


def report(results: list[tuple[str, int, list[Level]]]) -> None:
    print(
        f"\nscale-out: offline model at {PACING_MS} ms per delta, think time {CONFIG.think_s / 2:.0f}-"
        f"{CONFIG.think_s * 1.5:.0f} s, {CONFIG.window_s:.0f} s measured per level; target delta p95 ≤ "
        f"{DELTA_P95_MS:.0f} ms, send→started p95 ≤ {STARTED_P95_MS:.0f} ms, answer p95 ≤ "
        f"{ANSWER_FACTOR:.0f}x a lone chat's to the same message, 0 errors, 0 broken streams\n"
    )
    print(
        "| mode | processes | chats held | runs/s | send→started p50 ms | p95 ms | delta p95 ms | answer p95 ms | CPU ms/run "
        "| PostgreSQL CPU ms/run | client CPU ms/run | Redis CPU ms/run | statements/run | layer msgs/run "
        "| PostgreSQL connections | machine busy (outside the bench) | chats vs N = 1 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base: dict[str, int] = {}
    for mode, n, levels in results:
        top = best(levels)
        procs = f"{n}" + (f" + {CONFIG.workers} workers" if mode == "tasks" else "")
        if top is None:
            print(f"| {mode} | {procs} | 0 | | | | | | | | | | | | | | |")
            continue
        base.setdefault(mode, top.chats)
        print(
            f"| {mode} | {procs} | {top.chats} | {top.runs_per_s:.1f} | {pct(top.started, 50):.1f} | "
            f"{pct(top.started, 95):.1f} | {pct(top.delta, 95):.1f} | {pct(top.answer, 95):.0f} ({pct(top.slowdown, 95):.1f}x lone) | {top.cpu_ms:.1f} | {top.pg_ms:.1f} | "
            f"{top.client_ms:.1f} | {top.redis_ms:.1f} | {top.statements:.1f} | {top.published:.1f} | {top.connections} | "
            f"{top.busy:.0%} ({top.outside:.0%}) | "
            f"{top.chats / base[mode]:.2f}x |"
        )
    checked = sum(lv.check.get("checked", 0) for _, _, levels in results for lv in levels)
    broken = sum(lv.broken for _, _, levels in results for lv in levels)
    held_errors = sum(lv.errors for _, _, levels in results for lv in levels if lv.held)
    print(f"\nstreams checked against the stored reply: {checked}, lost/doubled/mismatched: {broken}")
    inproc = {n: best(levels) for mode, n, levels in results if mode == "inprocess"}
    brackets = "; ".join(f"N = {n} {bracket(levels)}" for mode, n, levels in results if mode == "inprocess")
    one, two, four = inproc.get(1), inproc.get(2), inproc.get(4)
    if one is None or two is None:
        print("\nVERDICT: FAIL — no level held for N = 1 or N = 2")
        return
    ratio = two.chats / one.chats
    cores = os.cpu_count() or 1
    # The bench's own CPU per run (servers, PostgreSQL, Redis, the client), so work outside it, even
    # niced, does not count; 1.6x the chats of one process means 1.6x its runs/s at N = 2's cost per run.
    per_run_one, per_run_two = own_per_run_ms(one), own_per_run_ms(two)
    needed = TARGET_RATIO * one.runs_per_s * per_run_two / 1000 / cores
    held_share = max(lv.own for _, _, levels in results for lv in levels if lv.held)
    # A cap is shown only where both ramps found a level they could not hold.
    bounded = all(
        any(not lv.held for lv in levels) for mode, n, levels in results if mode == "inprocess" and n <= 2
    )
    capped = bounded and needed > held_share
    tail = f", 4 hold {four.chats / one.chats:.2f}x" if four is not None else ""
    ok = broken == 0 and held_errors == 0 and (ratio >= TARGET_RATIO or capped)
    why = (
        f"≥ {TARGET_RATIO}x"
        if ratio >= TARGET_RATIO
        else f"{TARGET_RATIO}x would need {needed:.0%} of the machine's CPU, more than the bench used at any "
        f"level that met the target ({held_share:.0%}): the {cores} cores, not the design, cap it"
        if capped
        else "a ramp reached its most chats without missing, so the ratio shows no capacity"
        if not bounded
        else f"{TARGET_RATIO}x would need {needed:.0%} of the machine's CPU and a level held using {held_share:.0%}: "
        "CPU to spare"
    )
    print(
        f"\nCPU per run of the bench's processes (servers, PostgreSQL, Redis, client): {per_run_one:.1f} ms at "
        f"N = 1, {per_run_two:.1f} ms at N = 2{f', {own_per_run_ms(four):.1f} ms at N = 4' if four is not None else ''}"
    )
    print(
        f"\nVERDICT: {'PASS' if ok else 'FAIL'} — 2 processes hold {ratio:.2f}x the chats of one "
        f"({two.chats} vs {one.chats} at the latency target; {brackets}){tail}; {why}; CPU per run "
        f"{one.cpu_ms:.1f} ms (N = 1) / {two.cpu_ms:.1f} ms (N = 2), {one.statements:.1f} statements and "
        f"{one.published:.1f} layer messages per run; {broken} lost or doubled deltas in {checked} streams"
    )


def own_per_run_ms(level: Level) -> float:
    """Milliseconds of CPU per finished run of every process the bench runs, at `level`."""
    return level.cpu_ms + level.pg_ms + level.redis_ms + level.client_ms


async def profile(pairs: list[tuple[str, str]], chats: int) -> None:
    """cProfile of one server (every thread, wall time) over a level, and its statements per run by
    the project's calling lines."""
    import pstats

    counters = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    fresh_database()
    pool = Pool(pairs)
    deployment = Deployment(1, "inprocess", 0, counters, BENCH_STATEMENT_SITES=1)
    pid = deployment.procs[0].pid
    try:
        await warm_up(deployment, pool.take(2))
        await deployment.counts()
        before = deployment._read(pid).get("sites", {})
        deployment.profile_toggle()
        level = await run_level(deployment, pool.take(chats), seed=3)
        deployment.profile_toggle()
        await deployment.counts()
        after = deployment._read(pid).get("sites", {})
        _print_level("profiled N=1", level)
        out = counters / f"{pid}.pstats"
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    finally:
        deployment.stop()
    runs = max(1, level.total_runs)
    print(f"\nstatements per run by calling site (whole level, {level.total_runs} runs, connects included):")
    diffs = {k: v - before.get(k, 0) for k, v in after.items()}
    for key, count in sorted(diffs.items(), key=lambda kv: -kv[1])[:40]:
        if count:
            print(f"  {count / runs:6.2f}  {key}")
    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(80)
    shutil.rmtree(counters, ignore_errors=True)


async def compare(pairs: list[tuple[str, str]], ref: str, chats: int, rounds: int) -> None:
    """Per-run costs of `ref`'s code beside the working tree's, one server each, alternating."""
    tree = Path(tempfile.mkdtemp(prefix="bench-scale-ref-"))
    archive = subprocess.run(["git", "archive", ref], cwd=livechat.ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    counters = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    rows: dict[str, list[Level]] = {ref: [], "working tree": []}
    try:
        for r in range(rounds):
            for name, root in ((ref, tree), ("working tree", None)):
                fresh_database()
                pool = Pool(pairs)
                deployment = Deployment(1, "inprocess", 0, counters, code_root=root)
                try:
                    await warm_up(deployment, pool.take(2))
                    level = await run_level(deployment, pool.take(chats), seed=r * 31)
                finally:
                    deployment.stop()
                _print_level(name[:22], level)
                rows[name].append(level)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
        shutil.rmtree(counters, ignore_errors=True)
    print(f"\nper-run cost, one server, {chats} chats, {rounds} rounds alternating (median of rounds)\n")
    print(
        "| code | runs/s | delta p95 ms | CPU ms/run | PostgreSQL CPU ms/run | statements/run | layer msgs/run | broken |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, levels in rows.items():
        med = {
            k: statistics.median([getattr(lv, k) for lv in levels])
            for k in ("runs_per_s", "cpu_ms", "pg_ms", "statements", "published")
        }
        d95 = statistics.median([pct(lv.delta, 95) for lv in levels])
        print(
            f"| {name} | {med['runs_per_s']:.1f} | {d95:.1f} | {med['cpu_ms']:.1f} | {med['pg_ms']:.1f} | "
            f"{med['statements']:.1f} | {med['published']:.1f} | {sum(lv.broken + lv.errors for lv in levels)} |"
        )


CONFIG = Config()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: short levels, N = 1 and 2")
    parser.add_argument("--modes", default="inprocess,tasks")
    parser.add_argument("--ns", default="1,2,4")
    parser.add_argument("--profile", type=int, metavar="CHATS", help="profile one server at CHATS chats")
    parser.add_argument("--compare", metavar="REF", help="per-run costs of REF's code vs the working tree")
    parser.add_argument("--chats", type=int, default=40, help="chats of --compare")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of --compare")
    args = parser.parse_args()
    modes, ns = args.modes.split(","), [int(n) for n in args.ns.split(",")]
    if args.quick:
        CONFIG.window_s, CONFIG.ramp_s, CONFIG.settle_s = 5.0, 1.0, 1.0
        CONFIG.start, CONFIG.max_chats, CONFIG.mode_budget_s, CONFIG.workers, CONFIG.pool = 5, 20, 40, 2, 120
        ns = [n for n in ns if n <= 2]
    began = time.monotonic()
    pairs = prepare(CONFIG.pool)
    try:
        if args.profile:
            asyncio.run(profile(pairs, args.profile))
        elif args.compare:
            asyncio.run(compare(pairs, args.compare, args.chats, args.rounds))
        else:
            report(asyncio.run(scale(pairs, modes, ns)))
    finally:
        from django.db import connections

        connections.close_all()
        livechat.drop_database(DB_URL.rsplit("/", 1)[0] + "/" + TEMPLATE)
        livechat.drop_database(DB_URL)
    print(f"(bench took {time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    main()
