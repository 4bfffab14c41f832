"""Real processes for tests: ASGI servers (daphne) and task workers on loopback, sharing the test
database (the test must use `django_db(transaction=True)` so what it writes is committed)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_database_url() -> str:
    """The URL of the database this test process is using (the pytest test database)."""
    s = connection.settings_dict
    if connection.vendor == "postgresql":
        user, host, port = s.get("USER") or "postgres", s.get("HOST") or "127.0.0.1", s.get("PORT") or 5432
        password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
        return f"postgres://{user}{password}@{host}:{port}/{s['NAME']}"
    return f"sqlite:///{s['NAME']}"


def process_env(**extra: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        {
            "DATABASE_URL": test_database_url(),
            "DEBUG": "0",
            "SECURE_COOKIES": "0",  # served over plain HTTP on loopback
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONUNBUFFERED": "1",
        }
    )
    # The test process overrides settings in memory; live processes need them as environment.
    from django.conf import settings

    # Same key as this process: sessions (and their auth hashes) made here must be valid there.
    env["SECRET_KEY"] = settings.SECRET_KEY
    env.setdefault("OPENCOMPANY_OFFLINE_PACING_MS", str(settings.OPENCOMPANY_OFFLINE_PACING_MS))
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
        layer: dict[str, Any] = settings.CHANNEL_LAYERS["default"]
        env["REDIS_PREFIX"] = str(layer.get("CONFIG", {}).get("prefix", "oc"))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
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
            time.sleep(0.1)
    raise TimeoutError(f"server at {url} did not answer")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def asgi_server(*, access_log: Path | None = None, **env: Any) -> Iterator[str]:
    """The production server (`python -m opencompany.server`, daphne) on 127.0.0.1:<free port>; yields
    its base URL (http://127.0.0.1:port). With `access_log`, its access log is written there."""
    with asgi_server_process(access_log=access_log, **env) as (url, _):
        yield url


@contextmanager
def asgi_server_process(
    *, port: int | None = None, log: Path | None = None, access_log: Path | None = None, **env: Any
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The production server on 127.0.0.1:`port` (a free one by default); yields its base URL and the
    process, for a test that kills it. `log`: a file that receives the server's log; `access_log`: a file
    for its access log."""
    port = port or free_port()
    argv = [sys.executable, "-m", "opencompany.server", "-b", "127.0.0.1", "-p", str(port)]
    if access_log is not None:
        argv += ["--access-log", str(access_log)]
    output = log.open("wb") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        [*argv, "opencompany.asgi:application"],
        cwd=ROOT,
        env=process_env(**env),
        stdout=output,
        stderr=output,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/accounts/login/", proc)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        _stop(proc)
        if log is not None:
            output.close()  # type: ignore[union-attr]


@contextmanager
def task_worker(*, script: str | None = None, **env: Any) -> Iterator[subprocess.Popen[bytes]]:
    """A `manage.py db_worker` process (or a test script that ends in one)."""
    argv = [sys.executable, script] if script else [sys.executable, "manage.py", "db_worker"]
    argv += ["--interval", "0.1", "--no-startup-delay"]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=process_env(**env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(0.5)
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited early with {proc.returncode}")
        yield proc
    finally:
        _stop(proc)
