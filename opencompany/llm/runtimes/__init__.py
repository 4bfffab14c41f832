"""Agent runtimes that are programs: Claude Code and Codex CLI, beside the HTTP providers.

An agent node whose ``provider`` names a runtime runs each firing as a child process of the run
(:func:`run_runtime_turn`); the project's tools reach the program over MCP (:class:`McpToolServer`).
Which names are programs, and how each is built, is the registry's business
(``opencompany.llm.registry.get_program``): building one checks what it can without starting anything
— the program is installed, a key is configured — and raises
``ProviderError("provider_not_configured", ...)`` otherwise.
"""

from __future__ import annotations

from .base import MCP_SERVER_NAME, McpEndpoint, Runtime, RuntimeConfig, TurnRequest
from .mcp import McpToolServer
from .transcript import firing_prompt
from .turn import TurnOutcome, end_process_group, run_runtime_turn

__all__ = [
    "MCP_SERVER_NAME",
    "McpEndpoint",
    "McpToolServer",
    "Runtime",
    "RuntimeConfig",
    "TurnOutcome",
    "TurnRequest",
    "end_process_group",
    "firing_prompt",
    "run_runtime_turn",
]
