"""A provider added as one module plus its line in OPENCOMPANY_PROVIDERS is usable end to end: the graph
offers and accepts it, deploy checks its configuration, a chat run answers through it."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run
from chat.models import ChatRun
from conversations.models import ProviderCall
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from graphs import services as graph_services
from graphs.specs import get_node_spec, node_specs_payload
from opencompany.core.errors import ApplicationError
from opencompany.llm.registry import context_adapter, provider_names
from opencompany.llm.wire import text_of
from tests.chat.toy_provider import PATH, ToyContext
from tests.conftest import demo_graph, make_workflow, node_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def toy(settings: Any) -> None:
    settings.OPENCOMPANY_PROVIDERS = [*settings.OPENCOMPANY_PROVIDERS, PATH]
    settings.TOY_GREETING = "Hello from the toy."


def _graph(provider: str) -> dict[str, Any]:
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": provider})
    return graph


def _issues(exc: pytest.ExceptionInfo[ApplicationError]) -> list[tuple[str, str | None]]:
    return [(issue["code"], issue["node_id"]) for issue in exc.value.extra["errors"]]


def test_a_registered_toy_provider_is_offered_validated_and_answers_a_chat_run(owner, toy):
    workflow = make_workflow(owner, _graph("toy"))  # deployed: validation and readiness accepted it
    admission = services.chat_send(owner_id=owner.pk, workflow_id=workflow.pk, text="Is anyone there?")

    outcome = async_to_sync(execute_run)(admission.run.run_id)

    assert outcome == "finished"
    run = ChatRun.objects.get(run_id=admission.run.run_id)
    assert run.draft_text.strip() == "Hello from the toy. You said: Is anyone there?"
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert text_of(stored[1]).strip() == "Hello from the toy. You said: Is anyone there?"
    assert stored[1]["metadata"]["runtime"] == "toy"
    call = ProviderCall.objects.get(run_id=run.run_id)
    assert (call.provider, call.model, call.status) == ("toy", "toy-1", "ok")
    assert provider_names()[-1] == "toy"
    assert isinstance(context_adapter("toy"), ToyContext)
    agent = next(s for s in node_specs_payload()["specs"] if s["type"] == "aiAgent")
    assert agent["inputs"]["properties"]["provider"]["enum"][-1] == "toy"


def test_a_toy_provider_without_its_setting_line_is_refused_by_graph_validation(owner):
    workflow = make_workflow(owner, _graph("toy"), deploy=False)

    with pytest.raises(ApplicationError) as refused:
        graph_services.workflow_deploy(workflow=workflow, actor=owner)

    assert refused.value.code == "validation_failed"
    agent = node_id(workflow, "aiAgent")
    assert _issues(refused) == [("invalid_param", agent), ("runtime_unavailable", agent)]
    assert "toy" not in get_node_spec("aiAgent").parameters_schema["properties"]["provider"]["enum"]


def test_a_toy_provider_without_its_configuration_cannot_be_deployed(owner, toy, settings):
    settings.TOY_GREETING = ""
    workflow = make_workflow(owner, _graph("toy"), deploy=False)

    with pytest.raises(ApplicationError) as refused:
        graph_services.workflow_deploy(workflow=workflow, actor=owner)

    assert _issues(refused) == [("runtime_unavailable", node_id(workflow, "aiAgent"))]
    assert "No greeting is configured for the toy provider." in refused.value.extra["errors"][0]["message"]
