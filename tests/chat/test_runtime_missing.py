"""An agent whose runtime program is not installed: the owner is told so, and how it gets installed, but
never where the server looked for it."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run
from chat.models import ChatMessage, ChatRun
from tests.conftest import demo_graph, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_owner_is_told_a_runtime_is_missing_without_the_servers_install_path(owner, settings, tmp_path):
    settings.OPENCOMPANY_RUNTIMES_BIN = str(tmp_path / "nowhere" / "bin")
    settings.ANTHROPIC_API_KEY = "k"
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": "claude_code", "model": "claude-test"})
    workflow = make_workflow(owner, graph)
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")

    async_to_sync(execute_run)(admission.run.run_id)

    run = ChatRun.objects.get(run_id=admission.run.run_id)
    reply = ChatMessage.objects.get(run_id=run.run_id, role="assistant")
    expected = (
        "Claude Code is not installed on this server; the operator installs it with bin/install-runtimes."
    )
    assert (run.error_code, run.error_message) == ("provider_not_configured", expected)
    assert (reply.error_code, reply.error_message) == ("provider_not_configured", expected)
    assert str(tmp_path) not in reply.error_message
