"""Shared fixtures and the CI rules for required suites.

Markers: `postgres` (deselected on SQLite), `redis` (deselected without REDIS_URL unless CI=true),
`e2e` (Chromium; run in the PostgreSQL pass). With CI=true nothing may be skipped: a skipped test fails
the session, so a missing service or browser cannot pass silently.

`OPENCOMPANY_TEST_PASS=database` keeps only the tests that touch a database (a `django_db` marker, a
database fixture, or a Django test case with databases): CI's second pass runs those, since a test that
touches no database would only repeat what the first pass proved.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.test import APIClient

from opencompany.core.tokens import token_issue

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _is_postgres() -> bool:
    return settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


_DATABASE_FREE = pytest.StashKey[int]()


def needs_database(item: pytest.Item) -> bool:
    """Whether the test may touch a database; pytest-django refuses database access to every other test,
    so a test this answers False for cannot depend on which database the pass runs on."""
    if item.get_closest_marker("django_db") is not None:
        return True
    if "_django_db_helper" in getattr(item, "fixturenames", ()):
        return True
    cls = getattr(item, "cls", None)
    return bool(cls is not None and getattr(cls, "databases", None))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    database_free: list[pytest.Item] = []
    database_pass = os.environ.get("OPENCOMPANY_TEST_PASS", "all") == "database"
    on_pg = _is_postgres()
    has_redis = bool(os.environ.get("REDIS_URL"))
    e2e_pass = os.environ.get("OPENCOMPANY_E2E", "1" if on_pg else "0") == "1"
    for item in items:
        needs_pg = item.get_closest_marker("postgres") is not None
        # Without REDIS_URL, redis tests are dropped, except in CI's PostgreSQL pass where they must run
        # (and fail if Redis is unreachable); the SQLite pass uses the in-memory layer by design.
        needs_redis = item.get_closest_marker("redis") is not None and not has_redis and not (CI and on_pg)
        needs_e2e = item.get_closest_marker("e2e") is not None and not e2e_pass
        if (needs_pg and not on_pg) or needs_redis or needs_e2e:
            dropped.append(item)
        elif database_pass and not needs_database(item):
            database_free.append(item)
        else:
            keep.append(item)
    if database_free:
        config.stash[_DATABASE_FREE] = len(database_free)
    if dropped or database_free:
        config.hook.pytest_deselected(items=dropped + database_free)
        items[:] = keep


def _database_free_line(count: int) -> str:
    return f"{count} database-free test(s) deselected: they run in the pass that runs every test"


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    count = config.stash.get(_DATABASE_FREE, 0)
    return _database_free_line(count) if count else None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's controller: each worker collected (and deselected) the same tests; keep its count
    for the summary, since a worker's collection report is not shown."""
    count = getattr(node, "workeroutput", {}).get("database_free", 0)
    if count:
        node.config.stash[_DATABASE_FREE] = count


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    count = config.stash.get(_DATABASE_FREE, 0)
    if count and config.pluginmanager.has_plugin("dsession"):
        terminalreporter.write_line(_database_free_line(count))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its controller reports
        workeroutput["database_free"] = session.config.stash.get(_DATABASE_FREE, 0)
    if not CI:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped:
        if reporter:
            reporter.write_line(f"CI: {skipped} test(s) skipped; required suites may not skip under CI=true.")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def _test_database_dropped(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Ends the sessions other threads still hold on the PostgreSQL test database before it is dropped:
    threads the live tests started can keep theirs open to the end of the run, and PostgreSQL refuses to
    drop a database in use."""
    yield
    if not _is_postgres():
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


User = get_user_model()


@pytest.fixture
def owner(db: Any) -> Any:
    return User.objects.create_user(username="owner", password="owner-pass-123")


@pytest.fixture
def other_owner(db: Any) -> Any:
    return User.objects.create_user(username="mallory", password="mallory-pass-123")


@pytest.fixture
def staff(db: Any) -> Any:
    return User.objects.create_user(
        username="staff", password="staff-pass-123", is_staff=True, is_superuser=True
    )


def _client_for(user: Any) -> APIClient:
    client = APIClient()
    token, _ = token_issue(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


@pytest.fixture
def api_client(owner: Any) -> APIClient:
    return _client_for(owner)


@pytest.fixture
def other_client(other_owner: Any) -> APIClient:
    return _client_for(other_owner)


@pytest.fixture
def anon_client() -> APIClient:
    return APIClient()


def demo_graph(with_memory: bool = True, with_context: bool = True) -> dict[str, Any]:
    """chatTrigger → aiAgent, with a Context and a Memory tool (ids are pre-canonical)."""
    nodes: list[dict[str, Any]] = [
        {"id": "trigger", "type": "chatTrigger", "position": {"x": 0, "y": 0}, "data": {"label": "Chat"}},
        {
            "id": "agent",
            "type": "aiAgent",
            "position": {"x": 300, "y": 0},
            "data": {
                "label": "Agent",
                "parameters": {"system_prompt": "You are helpful.", "provider": "offline"},
            },
        },
    ]
    edges: list[dict[str, Any]] = [
        {
            "id": "e1",
            "source": "trigger",
            "sourceHandle": "output-main",
            "target": "agent",
            "targetHandle": "input-main",
        }
    ]
    if with_context:
        nodes.append(
            {"id": "ctx", "type": "context", "position": {"x": -60, "y": 0}, "data": {"label": "Context"}}
        )
        edges.append(
            {
                "id": "e2",
                "source": "ctx",
                "sourceHandle": "output-context",
                "target": "agent",
                "targetHandle": "input-context",
            }
        )
    if with_memory:
        nodes.append(
            {
                "id": "mem",
                "type": "simpleMemory",
                "position": {"x": 300, "y": 200},
                "data": {"label": "Memory", "parameters": {"reset_policy": "preserve"}},
            }
        )
        edges.append(
            {
                "id": "e3",
                "source": "mem",
                "sourceHandle": "output-tool",
                "target": "agent",
                "targetHandle": "input-tools",
            }
        )
    return {"graphVersion": 2, "nodes": nodes, "edges": edges}


@pytest.fixture
def graph() -> dict[str, Any]:
    return demo_graph()


class EventRecorder:
    """Reads events from an in-memory channel layer subscribed to groups (STYLE: capture events)."""

    def __init__(self) -> None:
        from channels.layers import InMemoryChannelLayer

        self.layer = InMemoryChannelLayer()
        self.channel = async_to_sync(self.layer.new_channel)()
        self.groups: list[str] = []

    def subscribe(self, group: str) -> None:
        async_to_sync(self.layer.group_add)(group, self.channel)
        self.groups.append(group)

    def drain(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []

        async def _read() -> None:
            import asyncio

            while True:
                try:
                    msg = await asyncio.wait_for(self.layer.receive(self.channel), timeout=0.01)
                except TimeoutError:
                    return
                out.append({"type": msg["event"], "data": msg["data"]})

        async_to_sync(_read)()
        return out


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> EventRecorder:
    """Route `opencompany.core.events` through a fresh in-memory layer and record what is published."""
    recorder = EventRecorder()
    monkeypatch.setattr("opencompany.core.events.get_channel_layer", lambda *a, **k: recorder.layer)
    return recorder


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture
def run_on_commit(django_capture_on_commit_callbacks: Callable[..., Any]) -> Callable[..., Any]:
    return django_capture_on_commit_callbacks


def make_workflow(
    owner: Any, graph: dict[str, Any] | None = None, *, deploy: bool = True, name: str = "Demo"
) -> Any:
    """Create (and by default deploy, generation 1) a workflow through the graphs services.

    The demo graph's nodes get canonical ids: `<wf>:chatTrigger:1`, `<wf>:aiAgent:1`, `<wf>:context:1`,
    `<wf>:simpleMemory:1`.
    """
    from graphs import services as graph_services

    workflow = graph_services.workflow_create(
        owner=owner, name=name, graph=graph if graph is not None else demo_graph()
    )
    if deploy:
        graph_services.workflow_deploy(workflow=workflow, actor=owner)
    workflow.refresh_from_db()
    return workflow


@pytest.fixture
def workflow(owner: Any) -> Any:
    return make_workflow(owner)


@pytest.fixture
def other_workflow(other_owner: Any) -> Any:
    return make_workflow(other_owner, name="Mallory's")


def node_id(workflow: Any, node_type: str, n: int = 1) -> str:
    return f"{workflow.pk}:{node_type}:{n}"


# The test process never sweeps on its own: tests drive `watchdog_pass` with the times they choose.
# Servers and workers a test starts run their own watchdog, as in production.
settings.OPENCOMPANY_WATCHDOG_IN_PROCESS = False


@pytest.fixture(autouse=True)
def _empty_throttle_counters() -> None:
    """Every test starts with no request counted: DRF's throttles count in the process's cache."""
    from django.core.cache import cache

    cache.clear()
