"""The watchdog loop every server and worker runs: one sweep at a time cluster-wide, a heartbeat per
process, started by the ASGI application and by the task worker command."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.core.management import get_commands
from django.utils import timezone

from chat import services, watchdog
from chat.models import ChatProcess, ChatRun
from chat.stores import WATCHDOG_LOCK_KEY
from tests import live

pytestmark = pytest.mark.django_db(transaction=True)


def _dead_run(workflow) -> ChatRun:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    services.run_claim(run_id=admission.run.run_id, claimant="gone:1:x")
    ChatRun.objects.filter(run_id=admission.run.run_id).update(
        heartbeat_at=timezone.now() - timedelta(seconds=120)
    )
    return ChatRun.objects.get(run_id=admission.run.run_id)


@pytest.mark.postgres
def test_a_sweep_waits_its_turn_while_another_process_holds_the_lock(workflow):
    run = _dead_run(workflow)
    with psycopg.connect(live.test_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [WATCHDOG_LOCK_KEY])

        assert services.watchdog_sweep() is None
        assert ChatRun.objects.get(run_id=run.run_id).state == "running"

        other.execute("SELECT pg_advisory_unlock(%s)", [WATCHDOG_LOCK_KEY])

    assert services.watchdog_sweep() == {"not_delivered": 0, "stopped": 0, "timed_out": 0, "interrupted": 1}
    assert ChatRun.objects.get(run_id=run.run_id).error_code == "interrupted"


def test_the_loop_sweeps_at_once_and_records_the_process_heartbeat(workflow):
    run = _dead_run(workflow)

    watchdog.run_watchdog_forever(0, stop=_once(), role="worker")

    assert ChatRun.objects.get(run_id=run.run_id).error_code == "interrupted"
    process = ChatProcess.objects.get()
    assert (process.name, process.role) == (watchdog.process_name(), "worker")


def _once() -> threading.Event:
    """A stop event that is set after the loop's first wait begins."""

    class Once(threading.Event):
        def wait(self, timeout=None):
            self.set()
            return True

    return Once()


def test_heartbeats_older_than_a_day_are_forgotten_by_a_sweep(db):
    now = timezone.now()
    services.process_beat(name="old:1", role="server", started_at=now - timedelta(days=3))
    ChatProcess.objects.filter(name="old:1").update(beat_at=now - timedelta(days=2))
    services.process_beat(name="new:2", role="worker", started_at=now)

    services.watchdog_sweep()

    assert list(ChatProcess.objects.values_list("name", flat=True)) == ["new:2"]


def test_the_sweep_interval_stays_within_half_the_heartbeat_timeout(settings):
    settings.OPENCOMPANY_WATCHDOG_INTERVAL_S = 10
    settings.OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S = 30
    assert watchdog.sweep_interval_s() == 10
    settings.OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S = 4
    assert watchdog.sweep_interval_s() == 2


def test_the_task_worker_command_is_the_one_that_runs_the_watchdog():
    from chat.management.commands.db_worker import Command

    assert get_commands()["db_worker"] == "chat"
    assert Command.handle.__module__ == "chat.management.commands.db_worker"


def test_the_asgi_lifespan_startup_starts_the_watchdog_and_completes(monkeypatch):
    from opencompany import asgi

    started: list[str] = []
    monkeypatch.setattr(asgi, "start_in_process_watchdog", lambda role: started.append(role))
    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict] = []

    async def receive():
        return inbox.pop(0)

    async def send(message):
        sent.append(message)

    async_to_sync(asgi.application)({"type": "lifespan"}, receive, send)

    assert started == ["server"]
    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]


def test_the_test_process_runs_no_watchdog_of_its_own(settings):
    assert settings.OPENCOMPANY_WATCHDOG_IN_PROCESS is False
    assert watchdog.start_in_process_watchdog() is False
