"""The `notes` tool: the agent's only way to write its working notes.

Scope (workflow, generation, agent) comes from the server's `ToolContext`, never from the arguments.
"""

from __future__ import annotations

from typing import Any

from conversations.services import notes_add, notes_read, notes_remove, notes_replace
from conversations.types import ConversationKey
from opencompany.core.errors import ApplicationError
from opencompany.llm.tools import ToolContext, ToolResult, ToolSpec, register_tool, tool_error

NOTES_TOOL_NAME = "notes"

NOTES_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {
            "type": "string",
            "enum": ["add", "replace", "remove", "read"],
            "description": "add a new entry, replace an entry's text, remove an entry, or read all entries.",
        },
        "text": {"type": "string", "minLength": 1, "description": "The entry text (add, replace)."},
        "id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 64,
            "description": "Entry id (replace, remove).",
        },
        "expected_revision": {
            "type": "integer",
            "minimum": 0,
            "description": "Optional: the notes_revision you last read; a stale one is refused.",
        },
    },
    "required": ["operation"],
    "additionalProperties": False,
    "allOf": [
        {"if": {"properties": {"operation": {"const": "add"}}}, "then": {"required": ["text"]}},
        {"if": {"properties": {"operation": {"const": "replace"}}}, "then": {"required": ["id", "text"]}},
        {"if": {"properties": {"operation": {"const": "remove"}}}, "then": {"required": ["id"]}},
    ],
}

NOTES_DESCRIPTION = (
    "Your working notes for this conversation: short findings, decisions and facts you want to keep in "
    "view on every later turn (for example 'we decided X', 'the bug is in Y'). They are shown to you after "
    "the system prompt from your next run on. Keep them few and short; when they are full, condense "
    "entries with `replace` or `remove` ones you no longer need. Not for long-term facts: use Memory."
)


def _key(context: ToolContext) -> ConversationKey | None:
    if not context.workflow_id or not context.agent_node_id or not context.generation:
        return None
    return ConversationKey(
        workflow_id=str(context.workflow_id),
        generation=int(context.generation),
        agent_node_id=str(context.agent_node_id),
    )


def execute_notes(context: ToolContext, arguments: dict[str, Any]) -> ToolResult:
    """Run one `notes` operation in the conversation the server context names."""
    key = _key(context)
    if key is None:
        return tool_error(
            "notes_unavailable", "Working notes need a Context: this agent keeps no conversation here."
        )
    operation = arguments.get("operation")
    expected = arguments.get("expected_revision")
    try:
        if operation == "read":
            return notes_read(key=key).as_dict()
        if operation == "add":
            return notes_add(key=key, text=arguments["text"], expected_notes_revision=expected).as_dict()
        if operation == "replace":
            return notes_replace(
                key=key, entry_id=arguments["id"], text=arguments["text"], expected_notes_revision=expected
            ).as_dict()
        if operation == "remove":
            return notes_remove(key=key, entry_id=arguments["id"], expected_notes_revision=expected).as_dict()
    except ApplicationError as exc:
        return tool_error(exc.code, exc.message)
    return tool_error("invalid_arguments", f"Unknown operation {operation!r}.")


NOTES_TOOL = ToolSpec(
    name=NOTES_TOOL_NAME,
    description=NOTES_DESCRIPTION,
    input_schema=NOTES_INPUT_SCHEMA,
    execute=execute_notes,
)


def register_notes_tool() -> None:
    register_tool(NOTES_TOOL)
