"""Whether a graph can answer the owner's chat, which is what a deploy promises.

A graph can answer when a Chat Trigger feeds an agent (`graphs.wiring.chat_agent`) whose runtime can
run on this server: every registered runtime check (`graphs.hooks`) accepts the agent's parameters.
Pure over the graph JSON apart from those checks. Issues have the validator's shape
`{code, node_id, message, ...}`, so deploy reports them beside the validator's errors and the editor
highlights the node they name.
"""

from __future__ import annotations

from typing import Any

from graphs.constants import CHAT_TRIGGER_NODE_TYPE
from graphs.hooks import runtime_checks
from graphs.wiring import chat_agent, node_parameters

NO_CHAT_TRIGGER = "no_chat_trigger"
NO_AGENT = "no_agent"
RUNTIME_UNAVAILABLE = "runtime_unavailable"
READINESS_CODES = (NO_CHAT_TRIGGER, NO_AGENT, RUNTIME_UNAVAILABLE)

Issue = dict[str, Any]


def _triggers(graph: dict[str, Any]) -> list[str]:
    return sorted(
        str(node.get("id"))
        for node in graph.get("nodes", [])
        if isinstance(node, dict) and node.get("type") == CHAT_TRIGGER_NODE_TYPE
    )


def chat_readiness(graph: dict[str, Any]) -> list[Issue]:
    """What keeps this graph from answering a chat message; empty when it can answer.

    `no_chat_trigger`: no Chat Trigger, so no message reaches an agent. `no_agent`: no trigger feeds an
    agent's main input. `runtime_unavailable`: the answering agent's provider or agent program is not
    configured on this server (no key, no program installed, an unknown model); the message says which.
    """
    triggers = _triggers(graph)
    if not triggers:
        return [
            {
                "code": NO_CHAT_TRIGGER,
                "node_id": None,
                "message": "The graph has no Chat Trigger, so no chat message reaches an agent.",
            }
        ]
    agent = chat_agent(graph)
    if agent is None:
        return [
            {
                "code": NO_AGENT,
                "node_id": triggers[0],
                "message": "The chat trigger is not connected to an agent.",
            }
        ]
    parameters = node_parameters(graph, node_id=agent)
    issues: list[Issue] = []
    for _name, check in sorted(runtime_checks().items()):
        problem = check(parameters)
        if problem is not None:
            issues.append(
                {
                    "code": RUNTIME_UNAVAILABLE,
                    "node_id": agent,
                    "message": f"The agent cannot answer on this server: {problem}",
                }
            )
    return issues
