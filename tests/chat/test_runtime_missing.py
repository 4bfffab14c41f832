"""An agent whose runtime program is not installed: the owner is told so, and how it gets installed, but
never where the server looked for it."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run, runtime_problem
from chat.models import ChatMessage, ChatRun
from tests.conftest import demo_graph, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = "Claude Code is not installed on this server; the operator installs it with bin/install-runtimes."


def test_the_owner_is_told_a_runtime_is_missing_without_the_servers_install_path(owner, settings, tmp_path):
    bin_dir = tmp_path / "runtimes" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "claude").write_text("#!/bin/sh\n")
    settings.OPENCOMPANY_RUNTIMES_BIN = str(bin_dir)
    settings.ANTHROPIC_API_KEY = "k"
    parameters = {"provider": "claude_code", "model": "claude-test"}
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update(parameters)
    workflow = make_workflow(owner, graph)  # deployed while the program was there
    (bin_dir / "claude").unlink()
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")

    async_to_sync(execute_run)(admission.run.run_id)

    run = ChatRun.objects.get(run_id=admission.run.run_id)
    reply = ChatMessage.objects.get(run_id=run.run_id, role="assistant")
    assert (run.error_code, run.error_message) == ("provider_not_configured", EXPECTED)
    assert (reply.error_code, reply.error_message) == ("provider_not_configured", EXPECTED)
    # The chat page's "Cannot answer" reason and a refused deploy carry the same words.
    assert runtime_problem(parameters) == EXPECTED
