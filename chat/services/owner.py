"""Owner change: a workflow with a live run keeps its owner until the run ends."""

from __future__ import annotations

from typing import Any

from chat import errors
from chat.models import LIVE_STATES, ChatRun, ChatThread
from chat.services._common import _err
from graphs.hooks import OwnerChange


def chat_owner_change_hook(change: OwnerChange) -> dict[str, Any]:
    """Owner-change hook (`graphs.hooks`): refused with `run_in_progress` while a run of the workflow is
    live (its tools act under the owner it began with). The thread row is locked first, as every chat
    write does, so no run is admitted between the check and the change's commit."""
    ChatThread.objects.select_for_update().filter(workflow_id=change.workflow_id).first()
    live = (
        ChatRun.objects.filter(workflow_id=change.workflow_id, state__in=LIVE_STATES)
        .values_list("run_id", flat=True)
        .first()
    )
    if live is not None:
        raise _err(
            errors.RUN_IN_PROGRESS,
            "The agent is answering in this workflow's chat; stop the run or wait for it, then change the owner.",
            {"run_id": live},
        )
    return {"live_runs": 0}
