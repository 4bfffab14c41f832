"""Agent runtimes that are programs: Claude Code and Codex CLI, beside the HTTP providers.

An agent node whose ``provider`` names a runtime runs each firing as a child process of the run
(:func:`run_runtime_turn`); the project's tools reach the program over MCP (:class:`McpToolServer`).
``get_runtime`` checks what it can without starting anything — the program is installed, a key is
configured — and raises ``ProviderError("provider_not_configured", ...)`` otherwise.
"""

from __future__ import annotations

from .base import MCP_SERVER_NAME, McpEndpoint, Runtime, RuntimeConfig, TurnRequest
from .claude_code import ClaudeCode
from .codex_cli import CodexCli
from .mcp import McpToolServer
from .transcript import firing_prompt
from .turn import TurnOutcome, end_process_group, run_runtime_turn

RUNTIMES = ("claude_code", "codex_cli")


def is_runtime(name: str) -> bool:
    return name in RUNTIMES


def get_runtime(name: str, *, config: RuntimeConfig) -> Runtime:
    """The runtime named ``name`` (one of :data:`RUNTIMES`)."""
    if name == "claude_code":
        return ClaudeCode(config)
    if name == "codex_cli":
        return CodexCli(config)
    raise ValueError(f"unknown runtime {name!r}")


__all__ = [
    "MCP_SERVER_NAME",
    "RUNTIMES",
    "McpEndpoint",
    "McpToolServer",
    "Runtime",
    "RuntimeConfig",
    "TurnOutcome",
    "TurnRequest",
    "end_process_group",
    "firing_prompt",
    "get_runtime",
    "is_runtime",
    "run_runtime_turn",
]
