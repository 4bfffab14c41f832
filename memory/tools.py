"""The `memory` tool the model sees (one tool, six operations) and the Reset hook.

Scope never comes from the model: the executor binds the tool to each Memory node wired to the
agent's `input-tools` (`ToolContext.node_id`; `extras["memory_node_id"]` for a caller without a
binding), and the namespace is derived from (workflow owner, workflow, node) by
`memory.scope.memory_scope`. An agent with several Memory nodes gets one tool per node (`memory`,
`memory_2`, …), each acting on its own namespace, its description naming the node. The schema has no scope fields
and `additionalProperties: false`, so arguments that try to name one are refused before anything runs.

Writes carry the operation id `<run_id>:<tool_call_id>` (tool call id from `ToolContext.tool_call_id`,
else `extras["tool_call_id"]`), so a re-executed tool call replays instead of writing twice.
"""

from __future__ import annotations

import logging
from typing import Any

from graphs.hooks import ResetContext
from graphs.models import Workflow
from graphs.selectors import nodes_of_type
from memory import fields as f
from memory import selectors, services
from memory.scope import MEMORY_NODE_TYPE, MemoryScope, memory_scope
from opencompany.core.errors import INTERNAL_ERROR, INVALID_REQUEST, NOT_FOUND, ApplicationError
from opencompany.llm.tools import ToolContext, ToolSpec, tool_error, validate_arguments

logger = logging.getLogger(__name__)

TOOL_NAME = "memory"
OPERATIONS = ("remember", "recall", "list", "get", "update", "forget")

_TAGS = {
    "type": "array",
    "items": {"type": "string", "minLength": 1, "maxLength": f.TAG_MAX},
    "maxItems": f.TAGS_MAX_ITEMS,
}

MEMORY_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["operation"],
    "properties": {
        "operation": {"type": "string", "enum": list(OPERATIONS)},
        "content": {"type": "string", "minLength": 1, "maxLength": f.CONTENT_MAX},
        "title": {"type": "string", "maxLength": f.TITLE_MAX},
        "category": {"type": "string", "maxLength": f.CATEGORY_MAX},
        "tags": _TAGS,
        "expires_at": {"type": "string", "format": "date-time"},
        "query": {"type": "string", "minLength": 1, "maxLength": f.QUERY_MAX},
        "categories": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": f.CATEGORY_MAX},
            "maxItems": f.CATEGORIES_MAX_ITEMS,
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": f.LIMIT_MAX, "default": f.LIMIT_DEFAULT},
        "cursor": {"type": "string", "maxLength": f.CURSOR_MAX},
        "memory_id": {"type": "string", "minLength": 1, "maxLength": f.MEMORY_ID_MAX},
        "expected_version": {"type": "integer", "minimum": 1},
        "patch": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "properties": {
                "content": {"type": "string", "minLength": 1, "maxLength": f.CONTENT_MAX},
                "title": {"type": ["string", "null"], "maxLength": f.TITLE_MAX},
                "category": {"type": ["string", "null"], "maxLength": f.CATEGORY_MAX},
                "tags": {**_TAGS, "items": {"type": "string", "minLength": 1, "maxLength": f.PATCH_TAG_MAX}},
                "expires_at": {"type": ["string", "null"], "format": "date-time"},
            },
        },
    },
}

MEMORY_TOOL_DESCRIPTION = (
    "Long-term memory that persists across conversations and may already hold facts about the user, "
    "their preferences and earlier decisions. Before answering anything about the user or the past, "
    "check it (operation 'recall' with a query, or 'list'); never say you do not know or do not remember "
    "without checking first. Use 'remember' to store a new stable fact (content, optional title, "
    "category, tags, expires_at). Use 'get' to read one item, and 'update' (with a patch) or 'forget' "
    "with the item's current 'expected_version'; on version_conflict, get the item again and retry. "
    "Recall ranks like a search engine: pass the words that matter (any may match; items matching all of "
    "them come first; word forms, typos and the start of a word are tolerated). A question without content "
    "words (e.g. 'what do you remember about me?') returns the most recently updated items. Each result "
    "says why it matched: 'match' is all, some, fuzzy or recent, 'matched' lists the query words it "
    "matched. Optional syntax: \"quoted phrase\" must appear, -word excludes, 'or' separates alternatives."
)

_REQUIRED = {
    "remember": ("content",),
    "recall": ("query",),
    "list": (),
    "get": ("memory_id",),
    "update": ("memory_id", "expected_version", "patch"),
    "forget": ("memory_id", "expected_version"),
}


def _scope_for(context: ToolContext) -> MemoryScope:
    """The tool's scope from the server-built context only."""
    node_id = context.node_id or context.extras.get("memory_node_id")
    workflow = Workflow.objects.filter(pk=str(context.workflow_id or "")).first()
    if workflow is None or not node_id:
        raise ApplicationError(NOT_FOUND, "This agent has no Memory node.", status=404)
    if context.owner_id is not None and str(workflow.owner_id) != str(context.owner_id):
        raise ApplicationError(NOT_FOUND, "This agent has no Memory node.", status=404)
    return memory_scope(workflow=workflow, memory_node_id=str(node_id))


def _operation_id(context: ToolContext) -> str | None:
    call_id = context.tool_call_id or context.extras.get("tool_call_id")
    if not context.run_id or not call_id:
        return None
    return f"{context.run_id}:{call_id}"[: f.OPERATION_ID_MAX]


def _run(context: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    operation = args["operation"]
    scope = _scope_for(context)
    actor = f"agent:{context.run_id or 'unknown'}"[: f.ACTOR_MAX]
    op_id = _operation_id(context)
    if operation == "remember":
        return services.memory_remember(
            scope=scope,
            content=args["content"],
            title=args.get("title"),
            category=args.get("category"),
            tags=args.get("tags"),
            expires_at=args.get("expires_at"),
            actor=actor,
            operation_id=op_id,
        ).as_dict()
    if operation == "recall":
        return selectors.memory_recall(
            scope=scope,
            query=args["query"],
            categories=args.get("categories"),
            tags=args.get("tags"),
            limit=args.get("limit"),
            cursor=args.get("cursor"),
        ).as_dict()
    if operation == "list":
        return selectors.memory_list(
            scope=scope,
            categories=args.get("categories"),
            tags=args.get("tags"),
            limit=args.get("limit"),
            cursor=args.get("cursor"),
        ).as_dict()
    if operation == "get":
        return {"operation": "get", "memory": selectors.memory_get(scope=scope, memory_id=args["memory_id"])}
    if operation == "update":
        return services.memory_update(
            scope=scope,
            memory_id=args["memory_id"],
            expected_version=args["expected_version"],
            patch=args["patch"],
            actor=actor,
            operation_id=op_id,
        ).as_dict()
    return services.memory_forget(
        scope=scope,
        memory_id=args["memory_id"],
        expected_version=args["expected_version"],
        actor=actor,
        operation_id=op_id,
    ).as_dict()


def execute_memory_tool(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Validate the model's arguments, then run one operation. Never raises: refusals come back
    as `{"error": {"code", "message"}}` (plus `current_version` on a version conflict)."""
    problems = validate_arguments(MEMORY_TOOL, arguments)
    if problems:
        return tool_error(INVALID_REQUEST, "; ".join(problems[:5]))
    missing = [name for name in _REQUIRED[arguments["operation"]] if name not in arguments]
    if missing:
        return tool_error(INVALID_REQUEST, f"'{arguments['operation']}' requires: {', '.join(missing)}.")
    try:
        return _run(context, arguments)
    except ApplicationError as exc:
        result = tool_error(exc.code, exc.message)
        if "current_version" in exc.extra:
            result["error"]["current_version"] = exc.extra["current_version"]
        return result
    except Exception:
        logger.exception("memory tool failed run=%s operation=%s", context.run_id, arguments.get("operation"))
        return tool_error(INTERNAL_ERROR, "Memory is unavailable right now; try again later.")


MEMORY_TOOL = ToolSpec(
    name=TOOL_NAME,
    description=MEMORY_TOOL_DESCRIPTION,
    input_schema=MEMORY_TOOL_SCHEMA,
    execute=execute_memory_tool,
)


def memory_reset_hook(context: ResetContext) -> dict[str, Any]:
    """Apply each Memory node's `reset_policy` in the closing generation: `clear` empties the
    namespace (receipt `reset:<workflow>:<generation>:<node>`), `preserve` keeps it."""
    workflow = Workflow.objects.get(pk=context.workflow_id)
    outcome: dict[str, Any] = {}
    for node in nodes_of_type(graph=context.graph, node_type=MEMORY_NODE_TYPE):
        node_id = str(node.get("id"))
        parameters = (node.get("data") or {}).get("parameters") or {}
        policy = parameters.get("reset_policy") or "preserve"
        if policy != "clear":
            outcome[node_id] = {"reset_policy": "preserve", "reset": False}
            continue
        scope = memory_scope(workflow=workflow, memory_node_id=node_id, graph=context.graph)
        result = services.memory_clear(
            scope=scope,
            actor=f"owner:{context.owner_id}",
            operation_id=f"reset:{context.workflow_id}:{context.generation}:{node_id}",
        )
        outcome[node_id] = {
            "reset_policy": "clear",
            "reset": True,
            "cleared": result.cleared,
            "receipt": result.receipt.as_dict(),
        }
    return outcome
