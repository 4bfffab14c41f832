"""A worker killed mid-run: the watchdog marks the run interrupted within its window, the lane frees,
the next send succeeds, and the agent's next load closes the unanswered tool call."""

from __future__ import annotations

import signal
import time

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run
from chat.models import ChatMessage, ChatRun
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from opencompany.llm.policies import INTERRUPTED_RESULT_TEXT
from tests.conftest import node_id
from tests.live import task_worker

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise TimeoutError("condition not met")


def test_killed_worker_is_interrupted_and_the_next_turn_closes_the_tool_call(workflow, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "tasks"
    settings.OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S = 2
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))

    def tool_call_committed() -> bool:
        stored = conversation_load(key=key)
        return bool(stored) and any(b.get("type") == "tool_call" for b in stored[-1]["content"])

    with task_worker(script="tests/chat/slow_tool_worker.py", OPENCOMPANY_RUN_HEARTBEAT_S=0.3) as worker:
        first = services.chat_send(
            owner_id=workflow.owner_id,
            workflow_id=workflow.pk,
            text="remember that the lighthouse is painted green",
        )
        _wait_for(tool_call_committed)
        _wait_for(lambda: ChatRun.objects.get(pk=first.run.pk).heartbeat_at is not None)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)

    assert ChatRun.objects.get(pk=first.run.pk).state == "running"
    assert services.watchdog_pass() == {"not_delivered": 0, "stopped": 0, "timed_out": 0, "interrupted": 0}
    time.sleep(2.5)  # the heartbeat window passes with no claimant alive
    assert services.watchdog_pass()["interrupted"] == 1
    run = ChatRun.objects.get(pk=first.run.pk)
    assert (run.state, run.error_code) == ("error", "interrupted")

    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    second = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="are you still there?"
    )
    assert async_to_sync(execute_run)(second.run.run_id) == "finished"

    stored = conversation_load(key=key)
    call = next(b for b in stored[1]["content"] if b.get("type") == "tool_call")
    result = stored[2]["content"][0]
    assert [m["role"] for m in stored[:4]] == ["user", "assistant", "tool", "user"]
    assert (result["tool_call_id"], result["status"], result["content"]) == (
        call["id"],
        "interrupted",
        INTERRUPTED_RESULT_TEXT,
    )
    assert ChatMessage.objects.filter(run_id=second.run.run_id, role="assistant").count() == 1
