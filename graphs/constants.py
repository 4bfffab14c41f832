"""The names a workflow graph is made of: node types, port (handle) names, port directions and roles.

Pure constants, importable without Django. The node-spec registry, the normalizer, the validator and the
services spell these names through this module, so a rename happens in one place.
"""

from __future__ import annotations

from typing import Final, Literal

GRAPH_VERSION: Final = 2

# --- node types -----------------------------------------------------------------------------------------

CHAT_TRIGGER_NODE_TYPE: Final = "chatTrigger"
AGENT_NODE_TYPE: Final = "aiAgent"
TEAM_LEAD_NODE_TYPE: Final = "teamLead"
CONTEXT_NODE_TYPE: Final = "context"
MEMORY_NODE_TYPE: Final = "simpleMemory"

# --- port directions ------------------------------------------------------------------------------------

PortDirection = Literal["input", "output"]

INPUT: Final = "input"
OUTPUT: Final = "output"
PORT_DIRECTIONS: Final = (INPUT, OUTPUT)

# --- port roles (the kind of connection a port takes) ---------------------------------------------------

MAIN_ROLE: Final = "main"
TOOLS_ROLE: Final = "tools"
CONTEXT_ROLE: Final = "context"
SKILL_ROLE: Final = "skill"
TASK_ROLE: Final = "task"
TEAMMATES_ROLE: Final = "teammates"

# --- port (handle) names --------------------------------------------------------------------------------

MAIN_INPUT_HANDLE: Final = "input-main"
TOOLS_INPUT_HANDLE: Final = "input-tools"
CONTEXT_INPUT_HANDLE: Final = "input-context"
SKILL_INPUT_HANDLE: Final = "input-skill"
TASK_INPUT_HANDLE: Final = "input-task"
TEAMMATES_INPUT_HANDLE: Final = "input-teammates"
MAIN_OUTPUT_HANDLE: Final = "output-main"
TOP_OUTPUT_HANDLE: Final = "output-top"
CONTEXT_OUTPUT_HANDLE: Final = "output-context"
TOOL_OUTPUT_HANDLE: Final = "output-tool"

# Continuity edges of old graphs (Simple Memory wired as the agent's memory); rewritten by the normalizer.
LEGACY_MEMORY_INPUT_HANDLE: Final = "input-memory"

# Any target handle with this prefix is judged by the teammate rule, so misspellings get its message.
TEAM_HANDLE_PREFIX: Final = "input-team"

# --- limits of stored names (the model columns and every caller's validation use the same numbers) ----

WORKFLOW_NAME_MAX: Final = 200
# A node id is stored as the key of the node's conversation, Memory namespace and artifacts.
NODE_ID_MAX: Final = 255

# --- artifact kinds -------------------------------------------------------------------------------------

LEGACY_PARTIAL_ARTIFACT: Final = "legacy_partial"
