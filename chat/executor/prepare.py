"""Preparation (sync, database): the agent, model and tools a run uses, and its request from the stores."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from chat import errors
from chat import services as chat_services
from chat.executor.toolbox import RunScope, agent_tools, policies_of, system_prompt_of
from chat.models import ChatRun
from conversations.types import ConversationKey
from graphs.models import Deployment
from graphs.wiring import chat_agent, has_context, node_parameters, wired_tools
from memory.tools import TOOL_NAME as MEMORY_TOOL_NAME
from opencompany.core.errors import ApplicationError
from opencompany.llm.loop import LoopPolicies
from opencompany.llm.providers import CompatCapabilities, ModelSettings, ProviderConfig, ProviderError
from opencompany.llm.registry import (
    configured_options,
    get_program,
    get_provider,
    is_program,
    load_providers,
)
from opencompany.llm.runtimes import RuntimeConfig
from opencompany.llm.tools import ToolSpec
from opencompany.llm.wire import Message

_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")


@dataclass
class Prepared:
    run: ChatRun
    owner_id: int
    agent_node_id: str
    key: ConversationKey | None
    memory_node_id: str | None
    messages: list[Message]
    system_blocks: list[str]
    model: ModelSettings
    policies: LoopPolicies
    tool_result_max_chars: int
    tools: list[ToolSpec] = field(default_factory=list)
    digest: str = ""
    epoch: int = 1

    @property
    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.tools]


def _model_settings(params: dict[str, Any]) -> ModelSettings:
    provider = str(params.get("provider") or settings.OPENCOMPANY_DEFAULT_PROVIDER)
    entry = load_providers().get(provider)
    model = str(params.get("model") or (entry.default_model if entry is not None else ""))
    return ModelSettings(
        provider=provider,
        model=model,
        temperature=params.get("temperature"),
        max_output_tokens=int(params.get("max_output_tokens") or 4096),
        context_window=int(params.get("context_window") or 128_000),
        thinking_budget=int(params["thinking_budget"]) if params.get("thinking_budget") else None,
        reasoning_effort=str(params["reasoning_effort"]) if params.get("reasoning_effort") else None,
    )


def _options() -> dict[str, Any]:
    """Every registered runtime's configuration, read from the settings its entry declares."""
    return configured_options(lambda name: getattr(settings, name, None))


def provider_config(*, capabilities: CompatCapabilities | None = None) -> ProviderConfig:
    """The providers' credentials and endpoints, read from the settings each registered provider
    declares; `capabilities`: the probe's verdict for the OpenAI-compatible server and model in use."""
    return ProviderConfig(
        options=_options(),
        openai_compatible_capabilities=capabilities,
        offline_delay_ms=float(settings.OPENCOMPANY_OFFLINE_PACING_MS),
    )


def runtime_config() -> RuntimeConfig:
    """The programs' location and credentials from settings; the operator's proxy variables pass
    through to them, nothing else of this process's environment does."""
    proxies = {
        name: value
        for variable in _PROXY_VARIABLES
        for name in (variable, variable.lower())
        if (value := os.environ.get(name))
    }
    return RuntimeConfig(
        bin_dir=str(settings.OPENCOMPANY_RUNTIMES_BIN),
        options=_options(),
        proxy_env=proxies,
        path=os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
        timeout_s=float(settings.OPENCOMPANY_RUNTIME_TIMEOUT_S),
    )


def _runtime_problem(model: ModelSettings) -> str | None:
    """Why the provider (or agent program) `model` names cannot be built here, or None when it can."""
    try:
        if is_program(model.provider):
            get_program(model.provider, config=runtime_config())
        else:
            get_provider(model, config=provider_config())
    except ProviderError as exc:
        return exc.message
    return None


def runtime_problem(parameters: dict[str, Any]) -> str | None:
    """Runtime check (`graphs.hooks`): why an agent with these node parameters cannot answer on this
    server (no key, no program installed, an unknown model), or None when its runtime can be built.
    No network access: a key that the provider would refuse passes."""
    return _runtime_problem(_model_settings(parameters))


def _runtime(model: ModelSettings) -> str | None:
    """The runtime the run will talk to, or None when its provider (or program) is not configured: the
    run then fails building it, and the stored conversation is not handed off for it."""
    return None if _runtime_problem(model) is not None else model.provider


def prepare_run(run: ChatRun, *, claimant: str, stop: asyncio.Event | None = None) -> Prepared:
    """Resolve the deployed graph's answering agent, its model and tools, and begin the run's turn
    (`run_begin`: the owner's turn, with untold chat notes as bracketed lines ahead of the text, is
    appended to the agent's stored conversation). `stop` reaches the loops of teammates the agent
    delegates to."""
    deployment = (
        Deployment.objects.select_related("workflow")
        .filter(workflow_id=run.workflow_id, generation=run.generation, state=Deployment.State.LIVE)
        .first()
    )
    if deployment is None:
        raise ApplicationError(errors.NOT_RUNNING, "This generation is no longer live.")
    graph = deployment.graph or {}
    agent = chat_agent(graph)
    if agent is None:
        raise ApplicationError("no_agent", "The chat trigger is not connected to an agent.")
    params = node_parameters(graph, node_id=agent)
    key = (
        ConversationKey(workflow_id=run.workflow_id, generation=run.generation, agent_node_id=agent)
        if has_context(graph, agent=agent)
        else None
    )
    scope = RunScope(
        run_id=run.run_id,
        claimant=claimant,
        workflow_id=run.workflow_id,
        generation=run.generation,
        owner_id=deployment.workflow.owner_id,
        graph=graph,
        stop=stop,
        provider_config=provider_config(),
        model_for=_model_settings,
    )
    # The agent's working notes live with its stored conversation: `notes` is offered with a key.
    tools = agent_tools(scope, agent=agent, stored=key is not None)
    model = _model_settings(params)
    begun = chat_services.run_begin(run_id=run.run_id, claimant=claimant, key=key, runtime=_runtime(model))
    system_prompt = system_prompt_of(params)
    memory = next((t for t in wired_tools(graph, agent=agent) if t.tool_name == MEMORY_TOOL_NAME), None)
    return Prepared(
        run=run,
        owner_id=deployment.workflow.owner_id,
        agent_node_id=agent,
        key=key,
        memory_node_id=memory.node_id if memory is not None else None,
        messages=begun.messages,
        system_blocks=[system_prompt, begun.notes_block] if begun.notes_block else [system_prompt],
        model=model,
        policies=policies_of(params),
        tool_result_max_chars=int(params.get("tool_result_max_chars", 100_000)),
        tools=tools,
        digest=begun.digest,
        epoch=begun.epoch,
    )
