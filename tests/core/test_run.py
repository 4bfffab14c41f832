"""`bin/run` and the quickstart it runs: `--port`, a busy port refused with status 1, and the sign-in
details printed last, once the server listens."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    """The embedded default on a throwaway SQLite file, whatever database the suite runs on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_", "REDIS_"))}
    env.update({"DATABASE_URL": f"sqlite:///{tmp_path / 'run.sqlite3'}", "LOG_LEVEL": "WARNING"})
    return env


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something already listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        yield int(listener.getsockname()[1])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bin_run_on_a_busy_port_exits_1_with_a_clear_message(tmp_path: Path, busy_port: int) -> None:
    # bin/run takes the .venv bin/test made as it is (no install); make sure this test cannot cause one.
    digest = hashlib.sha256((REPO / "requirements" / "dev.lock").read_bytes()).hexdigest()[:16]
    if not (REPO / ".venv" / f".installed-{digest}").exists():
        pytest.fail("bin/run would install: create .venv with bin/test first")

    done = subprocess.run(
        ["bash", str(REPO / "bin" / "run"), "--port", str(busy_port)],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"CommandError: Port {busy_port} on 127.0.0.1 is already in use (is another server running there?). "
        f"Stop it, or choose another port: bin/run --port {busy_port + 1}"
    )
    assert "ready" not in done.stdout


def _started_as_from_a_terminal(args: list[str], **kwargs: Any) -> subprocess.Popen[str]:
    """Start `args` with Ctrl-C's default action, as a terminal starts it. A test runner started in the
    background by a non-interactive shell ignores SIGINT, and a child inherits an ignored signal (a
    handled one is reset to the default)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(args, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_quickstart_serves_and_prints_the_details_last_once_listening(tmp_path: Path) -> None:
    port = _free_port()
    server = _started_as_from_a_terminal(
        [sys.executable, "manage.py", "quickstart", "--port", str(port)],
        cwd=REPO,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 90
        while not any(line.startswith("  password:") for line in lines):
            assert time.monotonic() < deadline, lines
            line = server.stdout.readline()
            assert line, f"quickstart ended early: {server.stderr.read() if server.stderr else ''}"
            lines.append(line.rstrip("\n"))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=10) as page:
            assert page.status == 200
        server.send_signal(signal.SIGINT)
        rest, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)

    base = f"http://127.0.0.1:{port}"
    assert lines[-7:-1] == [
        "OpenCompany Context & Memory is ready.",
        f"  open:       {base}/",
        f"  admin:      {base}/admin/",
        f"  API docs:   {base}/api/docs/",
        lines[-3],
        "  demo owner: demo",
    ]
    assert lines[-3].startswith("  workflow:   wf_")
    assert lines[-1].startswith("  password:   ")
    assert rest == ""  # nothing after the details


@pytest.mark.django_db(transaction=True)
def test_quickstart_port_option_sets_the_printed_addresses() -> None:
    out = io.StringIO()

    call_command("quickstart", "--no-serve", "--port", "8123", stdout=out)

    assert "  open:       http://127.0.0.1:8123/" in out.getvalue()
    assert "  API docs:   http://127.0.0.1:8123/api/docs/" in out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"), [(["--port", "0"], "A port is a number from 1 to 65535, not 0.")]
)
def test_quickstart_refuses_a_port_out_of_range(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("quickstart", *args)

    assert str(caught.value) == message
