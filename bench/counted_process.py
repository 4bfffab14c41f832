"""A production server or task worker with the bench's counters: the same program, counted from outside
its code, so the product carries no bench hooks.

Run: `python bench/counted_process.py server <daphne args…>` (what `python -m opencompany.server` runs)
or `python bench/counted_process.py worker <db_worker args…>` (what `manage.py db_worker` runs).

Counted, cumulative from the start:
  statements  every statement sent to PostgreSQL (`psycopg.Cursor.execute`/`executemany`, the one method
              every cursor of Django's backend and of the hand-written hot statements goes through)
  published   channel-layer messages this process published (single sends and batch items)
  delivered   channel-layer messages Redis delivered to this process

On SIGUSR1 the process writes them to `$BENCH_COUNTERS_DIR/<pid>.json` (with a sequence number, so the
reader knows the answer is fresh). SIGUSR2 starts cProfile (every thread) and, the second time, stops it
and writes the stats to `$BENCH_PROFILE_DIR/<pid>.pstats`.
"""

from __future__ import annotations

import cProfile
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

# BENCH_CODE_ROOT: another checkout of the code to run (the bench's comparison of two versions).
ROOT = Path(os.environ.get("BENCH_CODE_ROOT") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(ROOT))

_lock = threading.Lock()
counts = {"statements": 0, "published": 0, "delivered": 0, "seq": 0}
# BENCH_STATEMENT_SITES=1: also count statements per calling line of the project's code (slower).
by_site: dict[str, int] = {}


def _add(name: str, n: int = 1) -> None:
    with _lock:
        counts[name] += n


def install_counters() -> None:
    import psycopg

    from opencompany.core import layers

    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    sites = os.environ.get("BENCH_STATEMENT_SITES") == "1"

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        _add("statements")
        if sites:
            _count_site(str(args[0])[:60] if args else "")
        return execute(self, *args, **kwargs)

    def counted_executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        params_seq = list(params_seq)
        _add("statements", len(params_seq))
        return executemany(self, query, params_seq, **kwargs)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]

    publish = layers.ResilientLoopLayer._publish

    async def counted_publish(self: Any, name: str, data: bytes) -> bool:
        _add("published")
        return await publish(self, name, data)

    layers.ResilientLoopLayer._publish = counted_publish  # type: ignore[method-assign]

    many = layers.BatchPubSubChannelLayer.group_send_many

    async def counted_many(self: Any, messages: Any) -> None:
        _add("published", len(messages))
        await many(self, messages)

    layers.BatchPubSubChannelLayer.group_send_many = counted_many  # type: ignore[method-assign]

    blocking = layers.BatchPubSubChannelLayer.blocking_group_send_many

    def counted_blocking(self: Any, messages: Any) -> None:
        _add("published", len(messages))
        blocking(self, messages)

    layers.BatchPubSubChannelLayer.blocking_group_send_many = counted_blocking  # type: ignore[method-assign]

    receive = layers._Shard._receive_message

    def counted_receive(self: Any, message: Any) -> None:
        if message is not None:
            _add("delivered")
        receive(self, message)

    layers._Shard._receive_message = counted_receive  # type: ignore[method-assign]


def _count_site(sql: str) -> None:
    frame = sys._getframe(2)
    where = []
    while frame is not None and len(where) < 3:
        name = frame.f_code.co_filename
        if name.startswith(str(ROOT)) and "/bench/" not in name and "/.venv/" not in name:
            where.append(f"{Path(name).relative_to(ROOT)}:{frame.f_lineno}:{frame.f_code.co_name}")
        frame = frame.f_back  # type: ignore[assignment]
    key = " < ".join(where) + " | " + " ".join(sql.split())
    with _lock:
        by_site[key] = by_site.get(key, 0) + 1


def install_signals() -> None:
    out = Path(os.environ["BENCH_COUNTERS_DIR"])
    profile_dir = os.environ.get("BENCH_PROFILE_DIR")
    profiler: list[cProfile.Profile] = []

    def dump(signum: int, frame: Any) -> None:
        with _lock:
            counts["seq"] += 1
            snapshot: dict[str, Any] = dict(counts)
            if by_site:
                snapshot["sites"] = dict(by_site)
        tmp = out / f"{os.getpid()}.tmp"
        tmp.write_text(json.dumps(snapshot))
        tmp.replace(out / f"{os.getpid()}.json")

    def toggle_profile(signum: int, frame: Any) -> None:
        if not profile_dir:
            return
        if not profiler:
            profiler.append(cProfile.Profile())
            profiler[0].enable()
            return
        profiler[0].disable()
        profiler.pop().dump_stats(str(Path(profile_dir) / f"{os.getpid()}.pstats"))

    signal.signal(signal.SIGUSR1, dump)
    signal.signal(signal.SIGUSR2, toggle_profile)


def main() -> None:
    role, args = sys.argv[1], sys.argv[2:]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opencompany.settings")
    install_counters()
    install_signals()
    import opencompany

    if not str(Path(opencompany.__file__).resolve()).startswith(str(ROOT.resolve())):
        raise SystemExit(f"opencompany imported from {opencompany.__file__}, not {ROOT}")
    if role == "server":
        from opencompany.server import main as serve

        sys.argv = ["opencompany.server", *args]
        serve()
    elif role == "worker":
        from django.core.management import execute_from_command_line

        execute_from_command_line(["manage.py", "db_worker", *args])
    else:
        raise SystemExit(f"unknown role {role!r}: server or worker")


if __name__ == "__main__":
    main()
