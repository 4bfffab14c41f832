"""The runtime protocol: an agent program that runs a whole turn as a child process.

A provider answers one request and the agent loop runs the tools; a runtime is a program (Claude Code,
Codex CLI) that runs its own loop with its own tools. What it reports on its output stream is all the
app sees: a :class:`Runtime` turns a :class:`TurnRequest` into a :class:`Launch` (argv, environment,
stdin, files to write) and parses each JSON line the program prints into :data:`RuntimeEvent` s. The
turn runner (:mod:`.turn`) starts the process, commits what it observes through the loop's sink and
ends the process group on Stop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..fidelity import Fidelity
from ..providers.base import PROVIDER_NOT_CONFIGURED, ProviderError, Usage

logger = logging.getLogger(__name__)

# The name the project's MCP server goes by in the programs' configuration: its tools are offered to
# the model as `mcp__opencompany__<tool>` (Claude Code) or in the `mcp__opencompany` namespace (Codex).
MCP_SERVER_NAME = "opencompany"


@dataclass(frozen=True)
class RuntimeConfig:
    """Where the programs are installed and the credentials they are given, built from settings.

    ``bin_dir`` holds the installed programs (``claude``, ``codex``). ``options``: the configuration the
    programs' registry entries declare — the Anthropic key and base URL reach Claude Code, the OpenAI
    ones Codex (``openai_base_url`` as its model provider's base URL). ``proxy_env``
    is passed through unchanged (the operator's ``HTTPS_PROXY``/``NO_PROXY``). ``stop_grace_s``: how
    long a stopped program gets after SIGTERM before its process group is killed.
    """

    bin_dir: str
    options: Mapping[str, Any] = field(default_factory=dict)
    proxy_env: dict[str, str] = field(default_factory=dict)
    path: str = "/usr/local/bin:/usr/bin:/bin"
    stop_grace_s: float = 0.5
    timeout_s: float = 3600.0

    def option(self, name: str) -> str | None:
        """A configuration option as text, None when it is not set (or empty)."""
        value = self.options.get(name)
        return str(value) if value else None


@dataclass(frozen=True)
class McpEndpoint:
    """How a program reaches the project's MCP server: a stdio command it launches, and the tools it
    serves (their names as the model sees them are the program's business)."""

    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    tool_names: tuple[str, ...]


@dataclass(frozen=True)
class TurnRequest:
    """One firing. ``prompt`` is the input of this turn (the owner's message, or the portable transcript
    and the message when the program does not continue a session of its own); ``instructions`` is the
    agent's system prompt with its working notes. ``home`` is the program's own state directory (its
    configuration and sessions), ``workdir`` its working directory; both persist per agent.

    ``session_id``: the conversation's bound session (``resume``) or the id a new session takes; None
    for a program without sessions, or an agent without a Context.
    """

    prompt: str
    instructions: str
    model: str | None
    home: Path
    workdir: Path
    session_id: str | None = None
    resume: bool = False
    mcp: McpEndpoint | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    stdin: bytes
    cwd: Path
    files: dict[Path, str] = field(default_factory=dict)  # written (mode 0600) before the start


# --- what a program reports ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delta:
    """Answer text as it streams (shown live; the stored text comes from :class:`Text`)."""

    text: str


@dataclass(frozen=True, slots=True)
class Text:
    """A complete text block of an assistant message."""

    text: str


@dataclass(frozen=True, slots=True)
class Call:
    """A complete tool call the program made (a wire ``tool_call`` block)."""

    block: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Result:
    """A tool result as the program reported it."""

    call_id: str
    content: str
    status: str = "ok"


@dataclass(frozen=True, slots=True)
class Session:
    """The program's session id for this turn."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Done:
    """The program finished its turn: successfully (``error`` None) or with an error it reported."""

    error: ProviderError | None = None


RuntimeEvent = Delta | Text | Call | Result | Usage | Session | Done


class StreamParser(Protocol):
    def feed(self, event: dict[str, Any]) -> list[RuntimeEvent]:
        """The events one JSON line of the program's output means (often none)."""


class Runtime(Protocol):
    """An agent program. ``resumable``: it continues a bound session on the next firing; otherwise
    every firing gets the portable transcript. ``fidelity`` labels the turns it writes."""

    name: str
    display_name: str
    fidelity: Fidelity
    resumable: bool

    def launch(self, request: TurnRequest) -> Launch: ...

    def parser(self) -> StreamParser: ...


def require_program(config: RuntimeConfig, program: str, display_name: str) -> str:
    """The path of an installed program, or ``provider_not_configured`` naming the install command. The
    message reaches the owner: where the server looked is logged for the operator, not told to them."""
    path = Path(config.bin_dir) / program
    if not path.is_file():
        logger.warning("agent runtime %s is not installed: expected %s", program, path)
        raise ProviderError(
            PROVIDER_NOT_CONFIGURED,
            f"{display_name} is not installed on this server; the operator installs it with "
            "bin/install-runtimes.",
        )
    return str(path)


def base_env(config: RuntimeConfig, request: TurnRequest) -> dict[str, str]:
    """The environment every program starts with: nothing of this process's own environment (its
    database URL and secret key stay here) except the operator's proxy settings."""
    return {
        "PATH": config.path,
        "HOME": str(request.home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        **config.proxy_env,
        **request.env,
    }
