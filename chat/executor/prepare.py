"""Preparation (sync, database): the agent, model and tools a run uses, and its request from the stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from chat import errors
from chat import services as chat_services
from chat.models import ChatMessage, ChatRun
from conversations import services as conversations
from conversations.notes import render_notes_block
from conversations.selectors import conversation_cursor, conversation_load, notes_read
from conversations.types import ConversationKey
from graphs.models import Deployment
from graphs.specs import get_node_spec
from opencompany.core.errors import ApplicationError
from opencompany.llm.loop import LoopPolicies
from opencompany.llm.policies import close_unanswered_tool_calls
from opencompany.llm.providers import ModelSettings, ProviderConfig
from opencompany.llm.wire import Message, make_user

DEFAULT_MODELS = {"offline": "offline-demo"}


# --- preparation (sync, database) ---------------------------------------------------------------------


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
    tool_names: list[str] = field(default_factory=list)
    digest: str = ""


def _agent_for_trigger(graph: dict[str, Any]) -> str | None:
    nodes = {n.get("id"): n for n in graph.get("nodes", []) if isinstance(n, dict)}
    triggers = sorted(str(nid) for nid, n in nodes.items() if n.get("type") == "chatTrigger")
    for trigger in triggers:
        for edge in graph.get("edges", []):
            if edge.get("source") != trigger:
                continue
            target = nodes.get(edge.get("target"))
            spec = get_node_spec(str(target.get("type"))) if target else None
            if spec is not None and spec.requires_context and edge.get("targetHandle") == "input-main":
                return str(edge["target"])
    return None


def _wired(graph: dict[str, Any], agent: str, node_type: str, target_handle: str) -> list[str]:
    nodes = {n.get("id"): n for n in graph.get("nodes", []) if isinstance(n, dict)}
    return sorted(
        str(e["source"])
        for e in graph.get("edges", [])
        if e.get("target") == agent
        and e.get("targetHandle") == target_handle
        and nodes.get(e.get("source"), {}).get("type") == node_type
    )


def _model_settings(params: dict[str, Any]) -> ModelSettings:
    provider = str(params.get("provider") or settings.OPENCOMPANY_DEFAULT_PROVIDER)
    model = str(params.get("model") or DEFAULT_MODELS.get(provider, ""))
    return ModelSettings(
        provider=provider,
        model=model,
        temperature=params.get("temperature"),
        max_output_tokens=int(params.get("max_output_tokens") or 4096),
        context_window=int(params.get("context_window") or 128_000),
    )


def provider_config() -> ProviderConfig:
    return ProviderConfig(
        openai_api_key=settings.OPENAI_API_KEY or None,
        openai_base_url=settings.OPENAI_BASE_URL or None,
        anthropic_api_key=settings.ANTHROPIC_API_KEY or None,
        anthropic_base_url=settings.ANTHROPIC_BASE_URL or None,
        offline_delay_ms=float(settings.OPENCOMPANY_OFFLINE_PACING_MS),
    )


def prepare_run(run: ChatRun) -> Prepared:
    """Resolve the deployed graph's answering agent and build its request; append the owner's turn
    (with untold chat notes as bracketed lines ahead of the text) to the stored conversation."""
    deployment = (
        Deployment.objects.select_related("workflow")
        .filter(workflow_id=run.workflow_id, generation=run.generation, state=Deployment.State.LIVE)
        .first()
    )
    if deployment is None:
        raise ApplicationError(errors.NOT_RUNNING, "This generation is no longer live.")
    graph = deployment.graph or {}
    agent = _agent_for_trigger(graph)
    if agent is None:
        raise ApplicationError("no_agent", "The chat trigger is not connected to an agent.")
    node = next(n for n in graph["nodes"] if n.get("id") == agent)
    params = dict((node.get("data") or {}).get("parameters") or {})
    has_context = bool(_wired(graph, agent, "context", "input-context"))
    memories = _wired(graph, agent, "simpleMemory", "input-tools")
    key = (
        ConversationKey(workflow_id=run.workflow_id, generation=run.generation, agent_node_id=agent)
        if has_context
        else None
    )

    question = ChatMessage.objects.get(thread_id=run.thread_id, uid=run.user_message_uid)
    notes = chat_services.notes_claim(thread_id=run.thread_id, run_id=run.run_id)
    text = "\n".join(notes) + "\n\n" + question.text if notes else question.text
    user = make_user(text)

    stored: list[Message] = []
    notes_block = ""
    digest = ""
    if key is not None:
        loaded = conversation_load(key=key)
        stored = close_unanswered_tool_calls(loaded)
        if stored != loaded:
            conversations.conversation_save(key=key, messages=stored)
        cursor = conversation_cursor(key=key)
        chat_services.run_record_cursors(run_id=run.run_id, cursors={agent: cursor.as_dict()})
        notes_block = render_notes_block(notes_read(key=key))
        digest = conversations.conversation_append(
            key=key, messages=[user], expected_length=cursor.length, expected_digest=cursor.digest
        ).digest
    system_prompt = str(params.get("system_prompt") or "You are a helpful assistant.")
    ratio = params.get("compaction_ratio")
    return Prepared(
        run=run,
        owner_id=deployment.workflow.owner_id,
        agent_node_id=agent,
        key=key,
        memory_node_id=memories[0] if memories else None,
        messages=[*stored, user],
        system_blocks=[system_prompt, notes_block] if notes_block else [system_prompt],
        model=_model_settings(params),
        policies=LoopPolicies(compaction_ratio=float(ratio) if ratio else 0.8),
        tool_result_max_chars=int(params.get("tool_result_max_chars", 100_000)),
        tool_names=(["memory"] if memories else []) + (["notes"] if key is not None else []),
        digest=digest,
    )
