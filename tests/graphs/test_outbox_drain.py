"""The archive outbox drains without a page view: a failed row backs off and the periodic drain (the task
worker's chain, the in-process drainer, `manage.py drain_outbox`) retries it, deleted workflows too.

Deleting a workflow now erases its conversations in the same transaction; the rows of deleted workflows
these tests drain are the ones earlier releases left pending (`_delete_leaving_an_archive_row`)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from django.tasks import TaskResultStatus
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from conversations.models import AgentConversation, ConversationArchive
from conversations.services import conversation_append
from conversations.types import ConversationKey
from graphs import services
from graphs.drainer import run_outbox_drain_forever
from graphs.hooks import _archivers, register_context_archiver
from graphs.models import ContextArchiveOutbox, Workflow
from graphs.services import outbox
from graphs.tasks import drain_outbox_task, outbox_drain_schedule
from opencompany.llm.wire import make_assistant, make_text, make_user
from tests.conftest import make_workflow, node_id

pytestmark = pytest.mark.django_db


@pytest.fixture
def failing_once() -> Any:
    """An archiver that fails its first call (an archive store that is briefly down)."""
    saved = dict(_archivers)
    calls = {"n": 0}

    def flaky(**kwargs: Any) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("archive store unavailable")
        return {"ok": True}

    register_context_archiver("zz-flaky", flaky)
    yield calls
    _archivers.clear()
    _archivers.update(saved)


def _delete_leaving_an_archive_row(workflow: Workflow) -> None:
    """Delete the workflow row and leave its Contexts to the archive outbox, as releases before deletion
    erased a workflow's data did; the rows they left pending must still drain."""
    with transaction.atomic():
        outbox.outbox_enqueue(
            workflow_id=workflow.pk,
            owner_id=workflow.owner_id,
            context_ids={node_id(workflow, "context")},
            reason=ContextArchiveOutbox.Reason.WORKFLOW_DELETED,
        )
        Workflow.objects.filter(pk=workflow.pk).delete()
        outbox.outbox_drain_on_commit(workflow_id=workflow.pk)


class _Clock:
    """Stands in for `django.utils.timezone` inside the outbox service: the test cannot wait out a
    real backoff, so it moves the service's clock forward instead."""

    def __init__(self, at: Any) -> None:
        self.at = at

    def now(self) -> Any:
        return self.at


def test_backoff_doubles_from_thirty_seconds_up_to_an_hour() -> None:
    assert [outbox.retry_delay(n).total_seconds() for n in (1, 2, 3, 4, 7, 8, 20)] == [
        30,
        60,
        120,
        240,
        1920,
        3600,
        3600,
    ]


def test_an_archive_whose_workflow_was_deleted_drains_on_the_next_periodic_run(
    owner: Any, failing_once: Any, django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    workflow = make_workflow(owner)
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    conversation_append(
        key=key, messages=[make_user("hi"), make_assistant([make_text("hello")])], expected_length=0
    )
    deleted_at = timezone.now()

    with django_capture_on_commit_callbacks(execute=True):
        _delete_leaving_an_archive_row(workflow)

    row = ContextArchiveOutbox.objects.get(workflow_id=workflow.pk)
    assert (row.state, row.attempts, row.reason) == ("pending", 1, "workflow_deleted")
    assert row.last_error == "RuntimeError: archive store unavailable"
    due = row.next_attempt_at
    assert due is not None
    assert deleted_at + timedelta(seconds=30) <= due <= timezone.now() + timedelta(seconds=30)
    assert ConversationArchive.objects.filter(workflow_id=workflow.pk).exists() is False

    # Before the backoff has passed the periodic drain leaves the row alone.
    assert services.outbox_drain_due(now=due - timedelta(seconds=1)) == {
        "completed": 0,
        "pending": 0,
    }
    assert ContextArchiveOutbox.objects.get(pk=row.pk).attempts == 1

    monkeypatch.setattr(outbox, "timezone", _Clock(due + timedelta(seconds=1)))
    assert drain_outbox_task.call() == {"completed": 1, "pending": 0}

    row.refresh_from_db()
    assert (row.state, row.attempts, row.last_error, row.next_attempt_at) == ("done", 2, "", None)
    archive = ConversationArchive.objects.get(workflow_id=workflow.pk)
    assert (archive.length, archive.owner_id) == (2, owner.pk)
    assert AgentConversation.objects.filter(workflow_id=workflow.pk).exists() is False
    assert failing_once["n"] == 2


def test_the_periodic_task_keeps_one_chain_on_the_worker(settings: Any) -> None:
    settings.OPENCOMPANY_OUTBOX_DRAIN_INTERVAL_S = 45
    before = timezone.now()

    assert outbox_drain_schedule() is True
    assert outbox_drain_schedule() is False
    assert drain_outbox_task.call() == {"completed": 0, "pending": 0}

    waiting = DBTaskResult.objects.get(task_path=drain_outbox_task.module_path)
    assert waiting.status == TaskResultStatus.READY
    assert before + timedelta(seconds=45) <= waiting.run_after <= timezone.now() + timedelta(seconds=45)


def test_drain_outbox_command_retries_due_rows_of_deleted_workflows(owner: Any, failing_once: Any) -> None:
    workflow = make_workflow(owner, deploy=False)
    _delete_leaving_an_archive_row(workflow)  # no commit hooks run here: the row stays pending
    out = StringIO()

    call_command("drain_outbox", stdout=out)

    assert out.getvalue().strip() == "completed=0 pending=1"
    ContextArchiveOutbox.objects.filter(workflow_id=workflow.pk).update(next_attempt_at=timezone.now())
    out = StringIO()
    call_command("drain_outbox", stdout=out)
    assert out.getvalue().strip() == "completed=1 pending=0"
    assert ContextArchiveOutbox.objects.get(workflow_id=workflow.pk).state == "done"


@pytest.mark.django_db(transaction=True)
def test_the_in_process_drainer_retries_a_due_row_without_a_page_view(owner: Any, failing_once: Any) -> None:
    workflow = make_workflow(owner, deploy=False)
    _delete_leaving_an_archive_row(workflow)  # the drain after commit fails once: the row backs off
    row = ContextArchiveOutbox.objects.get(workflow_id=workflow.pk)
    assert (row.state, row.attempts) == ("pending", 1)
    ContextArchiveOutbox.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now())
    stop = threading.Event()
    worker = threading.Thread(target=run_outbox_drain_forever, args=(0.05, stop), daemon=True)

    worker.start()
    deadline = time.monotonic() + 10
    while ContextArchiveOutbox.objects.get(pk=row.pk).state != "done" and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    worker.join(timeout=5)

    row.refresh_from_db()
    assert (row.state, row.attempts) == ("done", 2)
    assert worker.is_alive() is False
