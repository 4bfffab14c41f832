"""End-to-end fixtures: a real ASGI server (daphne) on loopback against the pytest database, and
Debian's Chromium driven by Playwright.

Tests here are marked `e2e` and `django_db(transaction=True)`: data made in the test process is
committed, so the server process sees it. They run in the PostgreSQL pass only (tests/conftest.py).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections

from tests.conftest import make_workflow

CHROMIUM = os.environ.get("OPENCOMPANY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]
PACING_MS = "60"
PASSWORD = "e2e-pass-123!"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _database_url() -> str:
    db = connection.settings_dict
    if not db["ENGINE"].endswith("postgresql"):
        pytest.fail("e2e tests need PostgreSQL (the live server shares the pytest database)")
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


class LiveServer:
    """`daphne -b 127.0.0.1 -p PORT opencompany.asgi:application` as a subprocess on the test database."""

    def __init__(self, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "OPENCOMPANY_", "PYTEST_")) and key != "DATABASE_URL"
        }
        self.env.update(
            {
                "DATABASE_URL": _database_url(),
                "OPENCOMPANY_RUN_EXECUTOR": "inprocess",
                "OPENCOMPANY_OFFLINE_PACING_MS": PACING_MS,
                "DEBUG": "0",
                "SECURE_COOKIES": "0",  # served over plain HTTP on loopback
                "SECRET_KEY": "e2e-secret-key-not-for-production-0123456789",
                "ALLOWED_HOSTS": "127.0.0.1",
                "DJANGO_SETTINGS_MODULE": "tests.settings",
                "LOG_LEVEL": "WARNING",
            }
        )
        if os.environ.get("REDIS_URL"):
            self.env["REDIS_URL"] = os.environ["REDIS_URL"]
            self.env["REDIS_PREFIX"] = f"e2e{self.port}"

    def start(self) -> None:
        daphne = str(Path(sys.executable).with_name("daphne"))
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [daphne, "-b", "127.0.0.1", "-p", str(self.port), "opencompany.asgi:application"],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"daphne exited early:\n{self.log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"daphne did not answer within 30 s:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self.process = None


@pytest.fixture
def asgi_server(transactional_db: Any, tmp_path: Path) -> Iterator[LiveServer]:
    """A real ASGI server for this test on a free loopback port, stopped at teardown."""
    server = LiveServer(tmp_path / "daphne.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def live_server_url(asgi_server: LiveServer) -> str:
    return asgi_server.url


@pytest.fixture
def e2e_owner(transactional_db: Any) -> Any:
    return get_user_model().objects.create_user(username="e2e-owner", password=PASSWORD)


@pytest.fixture
def e2e_workflow(e2e_owner: Any) -> Any:
    """The owner's one deployed demo workflow (tests.conftest.make_workflow), committed."""
    return make_workflow(e2e_owner)


@pytest.fixture
def browser(e2e_workflow: Any, live_server_url: str) -> Iterator[Any]:
    """Chromium for one test. Started after the test's data is committed (the sync API keeps an event
    loop running in this thread, and services that publish events must not run beside it) and
    closed before the database is flushed."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM} (apt-get install chromium)")
    # `launch` gives Chromium a fresh, empty profile directory of its own each time (Playwright
    # refuses an explicit --user-data-dir here), which is what the machine notes ask for.
    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@dataclass
class Console:
    """Everything the page printed as an error, plus uncaught exceptions and dialogs, and the
    Content-Security-Policy each page (document) was served with."""

    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)
    documents: list[tuple[str, str]] = field(default_factory=list)

    def watch(self, page: Any) -> None:
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("response", self._document)

        def on_dialog(dialog: Any) -> None:
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)

    def _document(self, response: Any) -> None:
        if response.request.resource_type == "document":
            self.documents.append((response.url, response.headers.get("content-security-policy", "")))

    def pages_without_policy(self) -> list[str]:
        """Pages served without the enforced policy (scripts from the site only, no inline script)."""
        return [
            url
            for url, csp in self.documents
            if not re.search(r"(^|;)\s*script-src 'self'( 'nonce-[^']+')?\s*(;|$)", csp)
            or "default-src 'self'" not in csp
        ]

    def allow(self, pattern: str) -> None:
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]

    def assert_clean(self) -> None:
        assert self.unexpected() == []
        assert self.dialogs == []
        assert self.documents != []
        assert self.pages_without_policy() == []


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def new_page(browser: Any, console: Console) -> Iterator[Any]:
    """Opens pages in fresh contexts (separate cookies = separate tabs/sessions); asserts a clean console."""
    contexts: list[Any] = []

    def open_page(width: int = 1280, height: int = 800, color_scheme: str = "light") -> Any:
        context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=color_scheme)
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        console.watch(page)
        return page

    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture
def artifacts_dir() -> Path:
    path = Path(os.environ.get("OPENCOMPANY_E2E_ARTIFACTS") or REPO / "e2e-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def db_read[T](read: Callable[[], T]) -> T:
    """Run an ORM read while the browser is open: in a plain thread (Playwright's sync API keeps an
    event loop running in this one), closing that thread's connection afterwards."""

    def run() -> T:
        try:
            return read()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


def sign_in(page: Any, base_url: str, username: str, password: str = PASSWORD) -> None:
    """Through the real login form."""
    page.goto(f"{base_url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state("domcontentloaded")
