"""The watchdog: no run holds the lane forever (unclaimed, stuck stopping, too long, dead worker)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from chat import services
from chat.models import ChatMessage, ChatNote, ChatRun

pytestmark = pytest.mark.django_db(transaction=True)

NOTHING = {"not_delivered": 0, "stopped": 0, "timed_out": 0, "interrupted": 0}


def running(workflow: Any, *, draft: str = "") -> ChatRun:
    """A run claimed by a worker, optionally with a durable draft."""
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    run = services.run_claim(run_id=admission.run.run_id, claimant="worker-1")
    assert run is not None
    if draft:
        services.run_save_draft(run_id=run.run_id, claimant="worker-1", text=draft, steps=[], seq=2)
    return ChatRun.objects.get(run_id=run.run_id)


def heartbeat_at(run: ChatRun, when: Any) -> None:
    ChatRun.objects.filter(pk=run.pk).update(heartbeat_at=when)


def lane_is_free(workflow: Any) -> bool:
    return services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="next").created


def test_a_queued_run_nobody_claimed_within_120_s_ends_not_delivered(workflow):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    created = ChatRun.objects.get().created_at

    assert services.watchdog_pass(now=created + timedelta(seconds=119)) == NOTHING
    counts = services.watchdog_pass(now=created + timedelta(seconds=121))

    assert counts == {**NOTHING, "not_delivered": 1}
    run = ChatRun.objects.get(run_id=admission.run.run_id)
    assert (run.state, run.error_code) == ("error", "not_delivered")
    assert run.finished_at is not None
    assert lane_is_free(workflow)


def test_a_run_stopping_longer_than_45_s_ends_stopped_with_its_draft(workflow):
    run = running(workflow, draft="Partial")
    stopping = services.chat_stop(workflow=workflow, run_id=run.run_id)
    asked = stopping.stop_requested_at
    heartbeat_at(run, asked + timedelta(seconds=44))  # the worker is alive, it just ignores Stop

    assert services.watchdog_pass(now=asked + timedelta(seconds=44)) == NOTHING
    counts = services.watchdog_pass(now=asked + timedelta(seconds=46))

    assert counts == {**NOTHING, "stopped": 1}
    ended = ChatRun.objects.get(run_id=run.run_id)
    assert (ended.state, ended.error_code) == ("stopped", "")
    reply = ChatMessage.objects.get(role="assistant")
    assert (reply.uid, reply.text, reply.status) == (run.reply_message_uid, "Partial", "stopped")
    assert lane_is_free(workflow)


def test_a_run_past_the_run_timeout_ends_timed_out(workflow, settings):
    settings.OPENCOMPANY_RUN_TIMEOUT_S = 600
    run = running(workflow, draft="Still thinking")
    started = run.started_at
    heartbeat_at(run, started + timedelta(seconds=600))

    assert services.watchdog_pass(now=started + timedelta(seconds=599)) == NOTHING
    counts = services.watchdog_pass(now=started + timedelta(seconds=601))

    assert counts == {**NOTHING, "timed_out": 1}
    ended = ChatRun.objects.get(run_id=run.run_id)
    assert (ended.state, ended.error_code) == ("error", "timed_out")
    reply = ChatMessage.objects.get(role="assistant")
    assert (reply.text, reply.status, reply.error_code) == ("Still thinking", "error", "timed_out")
    assert lane_is_free(workflow)


def test_a_run_whose_worker_stopped_heartbeating_ends_interrupted_keeping_its_draft(workflow, settings):
    settings.OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S = 30
    run = running(workflow, draft="Half of the answer")
    beat = ChatRun.objects.get(run_id=run.run_id).heartbeat_at

    assert services.watchdog_pass(now=beat + timedelta(seconds=29)) == NOTHING
    counts = services.watchdog_pass(now=beat + timedelta(seconds=31))

    assert counts == {**NOTHING, "interrupted": 1}
    ended = ChatRun.objects.get(run_id=run.run_id)
    assert (ended.state, ended.error_code) == ("error", "interrupted")
    reply = ChatMessage.objects.get(role="assistant")
    assert (reply.uid, reply.text, reply.status) == (run.reply_message_uid, "Half of the answer", "stopped")
    assert reply.error_code == "interrupted"
    assert lane_is_free(workflow)


def test_an_interrupted_run_without_a_draft_posts_no_reply(workflow):
    run = running(workflow)
    beat = ChatRun.objects.get(run_id=run.run_id).heartbeat_at

    services.watchdog_pass(now=beat + timedelta(seconds=31))

    assert ChatRun.objects.get(run_id=run.run_id).error_code == "interrupted"
    assert ChatMessage.objects.filter(role="assistant").exists() is False
    assert lane_is_free(workflow)


def test_an_interrupted_run_leaves_its_claimed_notes_untold(workflow):
    first = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    services.run_claim(run_id=first.run.run_id, claimant="w")
    services.run_finish(run_id=first.run.run_id, claimant="w", outcome="finished", text="Hello!", seq=2)
    services.chat_feedback(workflow=workflow, message_uid=first.run.reply_message_uid, value="up")
    run = running(workflow, draft="Partial")
    services.notes_claim(thread_id=run.thread_id, run_id=run.run_id)

    services.watchdog_pass(now=ChatRun.objects.get(run_id=run.run_id).heartbeat_at + timedelta(seconds=31))

    note = ChatNote.objects.get()
    assert note.claimed_run_id == run.run_id
    assert note.delivered_at is None


def test_a_healthy_running_run_is_left_alone(workflow):
    run = running(workflow, draft="Going")
    beat = ChatRun.objects.get(run_id=run.run_id).heartbeat_at

    assert services.watchdog_pass(now=beat + timedelta(seconds=5)) == NOTHING
    assert ChatRun.objects.get(run_id=run.run_id).state == "running"


def test_ended_runs_are_never_touched(workflow):
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    services.chat_stop(workflow=workflow, run_id=admission.run.run_id)
    before = ChatRun.objects.values().get()

    assert services.watchdog_pass(now=before["created_at"] + timedelta(days=3)) == NOTHING
    assert ChatRun.objects.values().get() == before


def test_one_sweep_ends_runs_of_several_workflows_each_by_its_rule(workflow, owner, settings):
    from tests.conftest import make_workflow

    settings.OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S = 30
    second = make_workflow(owner, name="Second")
    queued = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    dead = running(second)
    later = max(ChatRun.objects.get(run_id=queued.run.run_id).created_at, dead.heartbeat_at) + timedelta(
        seconds=121
    )

    counts = services.watchdog_pass(now=later)

    assert counts == {**NOTHING, "not_delivered": 1, "interrupted": 1}
    assert ChatRun.objects.filter(state__in=["queued", "running", "stopping"]).exists() is False
