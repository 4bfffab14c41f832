"""Reset closes the generation's live runs, so the next generation's chat starts with a free lane."""

from __future__ import annotations

import pytest

from chat import services
from chat.models import ChatRun
from graphs import services as graph_services

pytestmark = pytest.mark.django_db(transaction=True)


def test_reset_ends_live_runs_and_the_next_generation_can_send(workflow):
    live = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="still thinking?")

    outcome = graph_services.workflow_reset(workflow=workflow)
    graph_services.workflow_deploy(workflow=workflow)
    after = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="fresh start")

    run = ChatRun.objects.get(pk=live.run.pk)
    assert (run.state, run.error_code) == ("error", "reset")
    assert outcome["hooks"]["chat"] == {"runs_ended": 1}
    assert (after.run.generation, after.run.state) == (2, "queued")
