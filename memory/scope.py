"""The one derivation of a Memory namespace.

Every caller (the `memory` tool, the API, the admin, Reset) turns `(workflow, memory_node_id)` into a
`MemoryScope` here. The owner always comes from the workflow row, never from the caller, so one
node can never split into two namespaces; callers authorize separately (the API through
`workflow_for_owner`, the tool through its server-built context).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from graphs.constants import MEMORY_NODE_TYPE
from graphs.models import Workflow
from graphs.selectors import latest_deployment, node_in_graph
from opencompany.core.errors import NOT_FOUND, ApplicationError


@dataclass(frozen=True)
class MemoryScope:
    owner_id: int
    workflow_id: str
    memory_node_id: str
    namespace: str


def namespace_for(*, owner_id: int, workflow_id: str, memory_node_id: str) -> str:
    """`mns_` + 48 hex chars of sha256(owner NUL workflow NUL node): no field can fake a boundary."""
    raw = "\x00".join((str(owner_id), workflow_id, memory_node_id)).encode("utf-8")
    return "mns_" + hashlib.sha256(raw).hexdigest()[:48]


def _is_memory_node(graph: Any, memory_node_id: str) -> bool:
    if not isinstance(graph, dict):
        return False
    node = node_in_graph(graph=graph, node_id=memory_node_id)
    return node is not None and node.get("type") == MEMORY_NODE_TYPE


def memory_scope(
    *, workflow: Workflow, memory_node_id: str, graph: dict[str, Any] | None = None
) -> MemoryScope:
    """The scope of `memory_node_id` in `workflow`, or `not_found` when that id is not a
    `simpleMemory` node of the workflow's saved graph or of its latest deployment (a node the owner
    just removed keeps its items reachable until the next deploy). `graph`, when given (Reset passes
    the generation's snapshot), is the only graph consulted."""
    node_id = str(memory_node_id or "")
    if graph is not None:
        found = _is_memory_node(graph, node_id)
    else:
        found = _is_memory_node(workflow.graph, node_id)
        if not found:
            deployment = latest_deployment(workflow=workflow)
            found = deployment is not None and _is_memory_node(deployment.graph, node_id)
    if not found or len(node_id) > 255:
        raise ApplicationError(NOT_FOUND, "No such Memory node in this workflow.", status=404)
    return MemoryScope(
        owner_id=workflow.owner_id,
        workflow_id=workflow.pk,
        memory_node_id=node_id,
        namespace=namespace_for(owner_id=workflow.owner_id, workflow_id=workflow.pk, memory_node_id=node_id),
    )
