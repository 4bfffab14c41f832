"""Shared machinery of the chat benches (not a bench itself): a bench database of owners with deployed
workflows, the production server and task workers as subprocesses on loopback, process CPU read from
/proc, and a websocket chat client that checks every stream against the stored reply.

Import it after setting `DATABASE_URL` and the other environment a bench's processes share (the bench
process itself runs Django against the same database to set it up and to read the stored replies).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"
CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def bench_environment(db_url: str, redis_url: str, redis_prefix: str) -> None:
    """The environment this process and the servers it starts share."""
    os.environ.update(
        {
            "DATABASE_URL": db_url,
            "DJANGO_SETTINGS_MODULE": "opencompany.settings",
            "SECRET_KEY": SECRET,
            "LOG_LEVEL": "WARNING",
            "REDIS_URL": redis_url,
            "REDIS_PREFIX": redis_prefix,
        }
    )
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def _admin_url(db_url: str) -> tuple[str, str]:
    return db_url.rsplit("/", 1)[1], db_url.rsplit("/", 1)[0] + "/postgres"


def recreate_database(db_url: str, *, template: str | None = None) -> None:
    """Drop and create the database of `db_url` (empty, or a copy of `template`)."""
    import psycopg

    name, admin = _admin_url(db_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if template is None:
            conn.execute(f'CREATE DATABASE "{name}"')
        else:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')


def drop_database(db_url: str) -> None:
    import psycopg

    name, admin = _admin_url(db_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def setup_database(n: int) -> list[tuple[str, str]]:
    """Create/migrate the database of `DATABASE_URL` and return n (workflow_id, session cookie) pairs,
    one owner with one deployed workflow each."""
    recreate_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import transaction

    call_command("migrate", verbosity=0)
    from graphs import services as graph_services
    from tests.chat.wsclient import session_cookie
    from tests.conftest import demo_graph

    User = get_user_model()
    out = []
    for start in range(0, n, 100):
        with transaction.atomic():  # one commit per hundred owners: setup waits on fsync otherwise
            for i in range(start, min(n, start + 100)):
                user = User(username=f"bench{i}")
                user.set_unusable_password()  # sessions are minted directly; hashing takes minutes
                user.save()
                workflow = graph_services.workflow_create(owner=user, name=f"bench {i}", graph=demo_graph())
                graph_services.workflow_deploy(workflow=workflow)
                out.append((workflow.pk, session_cookie(user)))
    from django.db import connections

    connections.close_all()
    return out


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):  # noqa: S310 - loopback only
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server at {url} did not answer")


def server_env(**extra: Any) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"DEBUG": "0", "SECURE_COOKIES": "0", "ALLOWED_HOSTS": "127.0.0.1", "DB_CONN_MAX_AGE": "60"})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start_server(
    port: int, *, argv: list[str] | None = None, cwd: Path = ROOT, **env: Any
) -> subprocess.Popen[bytes]:
    """The production server (`python -m opencompany.server`, daphne with the body limit) on
    127.0.0.1:`port`, once it answers. `argv`: the command that runs it (a wrapper that instruments it)."""
    command = argv or [sys.executable, "-m", "opencompany.server"]
    proc = subprocess.Popen(
        [*command, "-b", "127.0.0.1", "-p", str(port), "opencompany.asgi:application"],
        cwd=cwd,
        env=server_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_http(f"http://127.0.0.1:{port}/accounts/login/", proc)
    return proc


def start_worker(*, argv: list[str] | None = None, cwd: Path = ROOT, **env: Any) -> subprocess.Popen[bytes]:
    """A `manage.py db_worker` task worker polling every 0.1 s."""
    command = argv or [sys.executable, "manage.py", "db_worker"]
    proc = subprocess.Popen(
        [*command, "--interval", "0.1", "--no-startup-delay"],
        cwd=cwd,
        env=server_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    if proc.poll() is not None:
        raise RuntimeError(f"worker exited early with {proc.returncode}")
    return proc


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of `/proc/<pid>/stat` after the command name (state first, then the parent's pid);
    None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads) so far; 0 when it is gone."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) * CLOCK_TICK_S if fields else 0.0


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return (total - idle) * CLOCK_TICK_S, total * CLOCK_TICK_S


# --- the websocket client ------------------------------------------------------------------------


@dataclass
class RunRecord:
    """One run as a client saw it: the stream's text in seq order, and what broke it."""

    run_id: str = ""
    chat: str = ""  # the workflow the run answered in
    question: int = 0  # which of the bench's messages it answered
    text: str = ""
    last_seq: int = 0
    lost: int = 0  # seq numbers skipped
    doubled: int = 0  # seq numbers seen twice (or going backwards)
    state: str = ""
    final_text: str | None = None
    sent_at: float = 0.0
    ended_at: float = 0.0
    started_ms: float | None = None
    delta_ms: list[float] = field(default_factory=list)

    def apply(self, frame: dict[str, Any], now_wall: float) -> None:
        seq = int(frame.get("seq") or 0)
        if seq <= self.last_seq:
            self.doubled += 1
            return
        if self.last_seq and seq != self.last_seq + 1:
            self.lost += seq - self.last_seq - 1
        self.last_seq = seq
        kind = frame["type"]
        if kind == "run.delta":
            self.text += frame["delta"]
            self.delta_ms.append((now_wall - frame["ts"]) * 1000)
        elif kind in ("run.finished", "run.stopped", "run.error"):
            self.state = kind.split(".", 1)[1]
            self.final_text = frame.get("text")


@dataclass
class ChatStats:
    runs: list[RunRecord] = field(default_factory=list)
    errors: int = 0
    exceptions: list[str] = field(default_factory=list)


TERMINAL = ("run.finished", "run.stopped", "run.error")


async def open_chat(base_url: str, workflow_id: str, cookie: str) -> Any:
    from websockets.asyncio.client import connect

    ws = await connect(
        base_url.replace("http://", "ws://") + f"/ws/chat/{workflow_id}/",
        origin=base_url,  # type: ignore[arg-type]
        additional_headers={"Cookie": cookie},
        open_timeout=60,
        max_queue=None,
    )
    await asyncio.wait_for(ws.recv(), 60)  # the thread
    return ws


async def chat_turn(ws: Any, request_id: int, text: str, stats: ChatStats, timeout: float = 60) -> RunRecord:
    """Send one message and follow its run to the end. Frames of the run that arrive before the ack
    (which names the run) are held and applied once it does."""
    record = RunRecord(sent_at=time.perf_counter())
    stats.runs.append(record)
    await ws.send(json.dumps({"type": "send", "request_id": request_id, "text": text}))
    held: list[tuple[dict[str, Any], float, float]] = []
    deadline = time.monotonic() + timeout
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic())))
        now_wall, now = time.time(), time.perf_counter()
        kind = frame.get("type")
        if kind == "error":
            stats.errors += 1
            record.state, record.ended_at = "refused", time.perf_counter()
            return record
        if kind == "ack" and frame.get("request_id") == request_id:
            record.run_id = frame["run_id"]
            for early, wall, at in held:
                _apply(record, early, wall, at)
            held = []
        elif isinstance(kind, str) and kind.startswith("run."):
            if not record.run_id:
                held.append((frame, now_wall, now))
                continue
            if frame.get("run_id") == record.run_id:
                _apply(record, frame, now_wall, now)
        if record.state:
            record.ended_at = time.perf_counter()
            if record.state != "finished":
                stats.errors += 1
            return record


def _apply(record: RunRecord, frame: dict[str, Any], now_wall: float, now: float) -> None:
    if frame.get("run_id") != record.run_id:
        return
    if frame["type"] == "run.started" and record.started_ms is None:
        record.started_ms = (now - record.sent_at) * 1000
    record.apply(frame, now_wall)


def check_streams(runs: list[RunRecord]) -> dict[str, int]:
    """Compare every finished run's streamed text with its stored reply. Returns counts of runs whose
    stream lost or doubled frames, or whose text differs from the stored reply (or from the final frame)."""
    from chat.models import ChatMessage

    ids = [r.run_id for r in runs if r.run_id]
    stored: dict[str, str] = {}
    for start in range(0, len(ids), 500):
        rows = ChatMessage.objects.filter(run_id__in=ids[start : start + 500], role="assistant")
        stored.update(dict(rows.values_list("run_id", "text")))
    out = {"checked": 0, "lost": 0, "doubled": 0, "mismatched": 0, "missing": 0}
    for r in runs:
        if r.state != "finished":
            continue
        out["checked"] += 1
        out["lost"] += r.lost
        out["doubled"] += r.doubled
        if r.run_id not in stored:
            out["missing"] += 1
        elif stored[r.run_id] != r.text or (r.final_text is not None and r.final_text != r.text):
            out["mismatched"] += 1
    from django.db import connections

    connections.close_all()
    return out
