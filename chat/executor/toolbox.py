"""The tools a run offers an agent, read from its wiring, so every wire the validator accepts acts:

- one tool per wired tool node, bound to that node (`memory`, `memory_2`, … each on its own namespace;
  with several nodes of one tool, each description names its node);
- the `notes` tool when the agent keeps a stored conversation;
- one delegation tool per teammate of a team lead (`ask_<label>`): calling it runs the teammate's own
  agent loop on its own Context (its conversation, notes, Memory and teammates) with the task as its
  user turn, and answers with the teammate's final text. The teammate's turn begins through
  `run_delegate_begin`, so its cursor is recorded on the run like the lead's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from chat import services as chat_services
from chat.executor.sink import ConversationSink
from conversations.services.context import CallScope
from conversations.tools import NOTES_TOOL_NAME
from conversations.types import ConversationKey
from graphs.wiring import Teammate, WiredTool, has_context, node_parameters, teammates, wired_tools
from opencompany.core.asyncdb import db_call
from opencompany.llm.context import CompactionPolicy
from opencompany.llm.loop import LoopPolicies, run_agent_loop
from opencompany.llm.providers import ModelSettings, ProviderConfig, ProviderError
from opencompany.llm.providers.base import Request
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext, ToolResult, ToolSpec, bind_tool, get_tool, tool_error
from opencompany.llm.wire import Message, make_user, text_of

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
# Lead → teammate → its teammates: deeper chains are not offered (the validator refuses cycles).
MAX_DELEGATION_DEPTH = 3
TASK_MAX_CHARS = 20_000

DELEGATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["task"],
    "properties": {
        "task": {
            "type": "string",
            "minLength": 1,
            "maxLength": TASK_MAX_CHARS,
            "description": "The whole task for the teammate, with everything it needs to know.",
        }
    },
}


@dataclass(frozen=True)
class RunScope:
    """What the tools of one run share: the run and its claimant, the deployed graph, the stop event,
    and how an agent node's parameters become a model."""

    run_id: str
    claimant: str
    workflow_id: str
    generation: int
    owner_id: int
    graph: dict[str, Any]
    stop: asyncio.Event | None
    provider_config: ProviderConfig
    model_for: Callable[[dict[str, Any]], ModelSettings]


def system_prompt_of(params: dict[str, Any]) -> str:
    return str(params.get("system_prompt") or DEFAULT_SYSTEM_PROMPT)


def policies_of(params: dict[str, Any]) -> LoopPolicies:
    ratio = params.get("compaction_ratio")
    # A compaction's findings become one working-notes entry: no longer than the notes allow one.
    findings = CompactionPolicy(findings_max_chars=int(settings.OPENCOMPANY_NOTES_ENTRY_MAX_CHARS))
    return LoopPolicies(compaction_ratio=float(ratio) if ratio else 0.8, compaction=findings)


def _returning_connection(spec: ToolSpec) -> ToolSpec:
    """`spec` with its connection given back: a plain tool runs on one of the run loop's threads, and
    the connection it took goes back to the pool when it returns, as after every other database call
    of a run (the thread would otherwise keep it until its next call)."""
    execute = spec.execute
    if inspect.iscoroutinefunction(execute):
        return spec

    def run(context: ToolContext, arguments: dict[str, Any]) -> ToolResult:
        try:
            return execute(context, arguments)  # type: ignore[return-value]
        finally:
            close_old_connections()

    return dataclasses.replace(spec, execute=run)


def _node_tool(wired: WiredTool, siblings: int) -> ToolSpec | None:
    spec = get_tool(wired.tool_name)
    if spec is None:
        return None
    description = spec.description
    if siblings > 1:
        shown = f"'{wired.label}'" if wired.label else "an unlabelled"
        description = (
            f"This is {shown} node ({wired.node_id}), one of {siblings} separate '{wired.tool_name}' "
            f"tools of this agent; '{wired.name}' acts on this node's data only. {spec.description}"
        )
    return bind_tool(spec, name=wired.name, node_id=wired.node_id, description=description)


def _delegation_tool(scope: RunScope, mate: Teammate, depth: int) -> ToolSpec:
    shown = f"'{mate.label}'" if mate.label else "(unlabelled)"

    async def delegate(context: ToolContext, arguments: dict[str, Any]) -> ToolResult:
        return await run_teammate(
            scope,
            mate,
            str(arguments["task"]),
            firing=f"{context.run_id}:{context.tool_call_id}",
            depth=depth,
        )

    return ToolSpec(
        name=mate.name,
        description=(
            f"Delegate a task to your teammate {shown} ({mate.node_id}): an agent with its own "
            "conversation, instructions and tools. Send the whole task in 'task'; the result is the "
            "teammate's answer. It remembers earlier tasks you gave it when it keeps a Context."
        ),
        input_schema=DELEGATION_SCHEMA,
        execute=delegate,
    )


def agent_tools(scope: RunScope, *, agent: str, stored: bool, depth: int = 0) -> list[ToolSpec]:
    """The tools the agent node is offered: its wired tool nodes, `notes` when its conversation is
    `stored`, and a delegation tool per teammate (none past `MAX_DELEGATION_DEPTH`)."""
    wired = wired_tools(scope.graph, agent=agent)
    per_tool = Counter(w.tool_name for w in wired)
    tools = [t for t in (_node_tool(w, per_tool[w.tool_name]) for w in wired) if t is not None]
    if stored:
        notes = get_tool(NOTES_TOOL_NAME)
        if notes is not None:
            tools.append(notes)
    if depth < MAX_DELEGATION_DEPTH:
        tools.extend(_delegation_tool(scope, mate, depth + 1) for mate in teammates(scope.graph, lead=agent))
    return [_returning_connection(tool) for tool in tools]


async def run_teammate(scope: RunScope, mate: Teammate, task: str, *, firing: str, depth: int) -> ToolResult:
    """Run the teammate's agent loop on `task` to its final answer and return `{teammate, answer}`; a
    teammate that cannot run, fails or is stopped answers with an error result the lead can read.

    `firing` (the lead's run id and tool call id) is the teammate's run id for its tools, so its writes
    are idempotent per delegation and never collide with the lead's."""
    params = node_parameters(scope.graph, node_id=mate.node_id)
    model = scope.model_for(params)
    try:
        provider = get_provider(model, config=scope.provider_config)
    except ProviderError as exc:
        return tool_error(exc.code, f"The teammate cannot run: {exc.message}")
    key = (
        ConversationKey(
            workflow_id=scope.workflow_id, generation=scope.generation, agent_node_id=mate.node_id
        )
        if has_context(scope.graph, agent=mate.node_id)
        else None
    )
    messages: list[Message]
    if key is not None:
        begun = await db_call(chat_services.run_delegate_begin)(
            run_id=scope.run_id, claimant=scope.claimant, key=key, text=task, runtime=model.provider
        )
        messages, notes_block, digest = begun.messages, begun.notes_block, begun.digest
    else:
        messages, notes_block, digest = [make_user(task)], "", ""
    tools = agent_tools(scope, agent=mate.node_id, stored=key is not None, depth=depth)
    system_prompt = system_prompt_of(params)
    result = await run_agent_loop(
        Request(
            system_blocks=[system_prompt, notes_block] if notes_block else [system_prompt],
            messages=messages,
            tools=tools,
            settings=model,
        ),
        provider,
        tools,
        ConversationSink(
            key,
            len(messages),
            digest,
            scope=CallScope(
                workflow_id=scope.workflow_id,
                generation=scope.generation,
                agent_node_id=mate.node_id,
                run_id=firing,
                key=key,
            ),
        ),
        scope.stop or asyncio.Event(),
        tool_context=ToolContext(
            run_id=firing,
            workflow_id=scope.workflow_id,
            generation=scope.generation,
            agent_node_id=mate.node_id,
            owner_id=scope.owner_id,
            extras={"actor": f"agent:{firing}"},
        ),
        tool_result_max_chars=int(params.get("tool_result_max_chars", 100_000)),
        policies=policies_of(params),
    )
    if result.status == "finished" and result.final_message is not None:
        return {"teammate": mate.label or mate.node_id, "answer": text_of(result.final_message)}
    if result.status == "stopped":
        return tool_error("stopped", "The owner stopped the answer before the teammate finished.")
    return tool_error(
        result.error_code or result.status, result.error_message or "The teammate could not finish."
    )
