"""Codex CLI (`codex exec --json`) as a runtime.

Observable-only and non-resumable: every firing is an ephemeral run (``--ephemeral``) that gets the
portable transcript in its prompt, and the stored turns are the items the JSON stream showed (agent
messages, MCP tool calls, command executions, file changes). Codex talks to the OpenAI Responses API
through its own model provider entry pointing at ``OPENAI_BASE_URL``, with update checks, analytics
and web search off, and only the project's MCP server configured (its tools approved up front).
"""

from __future__ import annotations

import json
from typing import Any

from ..fidelity import OBSERVABLE, Fidelity
from ..providers.base import PROVIDER_ERROR, PROVIDER_NOT_CONFIGURED, ProviderError, Usage
from ..wire import make_tool_call
from .base import (
    MCP_SERVER_NAME,
    Call,
    Delta,
    Done,
    Launch,
    Result,
    RuntimeConfig,
    RuntimeEvent,
    Session,
    Text,
    TurnRequest,
    base_env,
    require_program,
)

NAME = "codex_cli"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_ENV = "OPENCOMPANY_CODEX_API_KEY"
OFF_FEATURES = (
    "apps",
    "plugins",
    "remote_plugin",
    "plugin_sharing",
    "api_key_model_discovery",
    "tool_suggest",
    "skill_mcp_dependency_install",
    "in_app_updates",
    "image_generation",
)
_TOOL_ITEMS = frozenset({"mcp_tool_call", "command_execution", "file_change", "web_search"})


def _toml(value: Any) -> str:
    """A TOML value: JSON's strings (ASCII-escaped), numbers and booleans are TOML's too."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=True)


def _table(name: str, values: dict[str, Any]) -> str:
    lines = [f"[{name}]"] + [f"{key} = {_toml(value)}" for key, value in values.items()]
    return "\n".join(lines)


def _usage(usage: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=int(usage.get("cached_input_tokens") or 0),
        cache_write_tokens=int(usage.get("cache_write_input_tokens") or 0),
    )


class CodexStreamParser:
    """``codex exec --json`` lines → runtime events.

    Item ids (``item_3``) repeat in every run, so a tool call's id is prefixed with the run's thread id.
    Items of type ``error`` are warnings (an unknown model's metadata, …); a failed turn or a top-level
    ``error`` event fails the turn.
    """

    def __init__(self) -> None:
        self.thread = "codex"
        self._started: set[str] = set()
        self._error: str | None = None

    def _call_id(self, item: dict[str, Any]) -> str:
        return f"{self.thread}_{item.get('id', '')}"

    def feed(self, event: dict[str, Any]) -> list[RuntimeEvent]:
        kind = event.get("type")
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            self.thread = event["thread_id"]
            return [Session(event["thread_id"])]
        if kind in ("item.started", "item.completed") and isinstance(event.get("item"), dict):
            return self._item(event["item"], completed=kind == "item.completed")
        if kind == "turn.completed":
            usage = event.get("usage")
            return [*([_usage(usage)] if isinstance(usage, dict) else []), Done()]
        if kind == "turn.failed":
            error = event.get("error") or {}
            message = error.get("message") if isinstance(error, dict) else None
            return [Done(ProviderError(PROVIDER_ERROR, _failure(message or self._error)))]
        if kind == "error":
            self._error = str(event.get("message") or "")
        return []

    def _item(self, item: dict[str, Any], *, completed: bool) -> list[RuntimeEvent]:
        kind = item.get("type")
        if kind == "agent_message":
            text = str(item.get("text") or "")
            return [Delta(text), Text(text)] if completed and text else []
        if kind not in _TOOL_ITEMS:
            return []
        out: list[RuntimeEvent] = []
        call_id = self._call_id(item)
        if call_id not in self._started:
            self._started.add(call_id)
            out.append(Call(_call_block(call_id, item)))
        if completed:
            out.append(Result(call_id, *_outcome(item)))
        return out


def _failure(message: str | None) -> str:
    # The program's message may quote the server's answer: keep it short.
    detail = f": {message[:200]}" if message else ""
    return f"Codex CLI ended the turn with an error{detail}"


def _call_block(call_id: str, item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type")
    if kind == "mcp_tool_call":
        server, tool = str(item.get("server") or ""), str(item.get("tool") or "")
        name = tool if server == MCP_SERVER_NAME else f"mcp__{server}__{tool}"
        arguments = item.get("arguments")
        if not isinstance(arguments, dict):
            arguments = {}
        return make_tool_call(call_id, name or "mcp_tool_call", arguments)
    if kind == "command_execution":
        return make_tool_call(call_id, "command_execution", {"command": str(item.get("command") or "")})
    if kind == "file_change":
        return make_tool_call(call_id, "file_change", {"changes": item.get("changes") or []})
    return make_tool_call(call_id, str(kind), {"query": str(item.get("query") or "")})


def _outcome(item: dict[str, Any]) -> tuple[str, str]:
    kind = item.get("type")
    failed = item.get("status") in ("failed", "declined")
    if kind == "mcp_tool_call":
        error = item.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"]), "error"
        result = item.get("result")
        if not isinstance(result, dict):
            result = {}
        parts = [
            str(block.get("text", "")) if block.get("type") == "text" else f"[{block.get('type')}]"
            for block in result.get("content") or ()
            if isinstance(block, dict)
        ]
        return "\n".join(parts), "error" if failed else "ok"
    if kind == "command_execution":
        code = item.get("exit_code")
        ok = not failed and (code in (0, None))
        return str(item.get("aggregated_output") or ""), "ok" if ok else "error"
    if kind == "file_change":
        return str(item.get("status") or ""), "error" if failed else "ok"
    return "", "error" if failed else "ok"


class CodexCli:
    name = NAME
    display_name = "Codex CLI"
    fidelity: Fidelity = OBSERVABLE
    resumable = False

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.program = require_program(config, "codex", self.display_name)
        if not config.option("openai_api_key"):
            raise ProviderError(
                PROVIDER_NOT_CONFIGURED, "No API key is configured for Codex CLI (OPENAI_API_KEY)."
            )

    def parser(self) -> CodexStreamParser:
        return CodexStreamParser()

    def config_toml(self, request: TurnRequest) -> str:
        """Codex's whole configuration for one firing (its home holds nothing else it reads)."""
        root: dict[str, Any] = {
            "model_provider": MCP_SERVER_NAME,
            "approval_policy": "never",
            "sandbox_mode": "read-only",
            "check_for_update_on_startup": False,
            "web_search": "disabled",
            "developer_instructions": request.instructions,
        }
        if request.model:
            root["model"] = request.model
        sections = [
            "\n".join(f"{key} = {_toml(value)}" for key, value in root.items()),
            _table("analytics", {"enabled": False}),
            # Features that reach beyond the configured model provider (plugin and skill catalogues
            # on GitHub, ChatGPT apps and connectors, model discovery, updates): off.
            _table("features", dict.fromkeys(OFF_FEATURES, False)),
            _table(
                f"model_providers.{MCP_SERVER_NAME}",
                {
                    "name": "OpenCompany",
                    "base_url": self.config.option("openai_base_url") or DEFAULT_BASE_URL,
                    "env_key": KEY_ENV,
                    "wire_api": "responses",
                    # The app decides about retries, as with the providers.
                    "request_max_retries": 0,
                    "stream_max_retries": 0,
                },
            ),
        ]
        if request.mcp is not None:
            sections.append(
                _table(
                    f"mcp_servers.{MCP_SERVER_NAME}",
                    {
                        "command": request.mcp.command,
                        "args": list(request.mcp.args),
                        "env": request.mcp.env,
                        "enabled_tools": list(request.mcp.tool_names),
                        # The tools act only in this agent's scope: no approval is needed (nor possible).
                        "default_tools_approval_mode": "approve",
                        "startup_timeout_sec": 30,
                    },
                )
            )
        return "\n\n".join(sections) + "\n"

    def launch(self, request: TurnRequest) -> Launch:
        codex_home = request.home / ".codex"
        argv = [
            self.program,
            "exec",
            "--json",
            "--ephemeral",
            "--skip-git-repo-check",
            "--color=never",
            f"--cd={request.workdir}",
        ]
        argv.append("-")  # the prompt comes on stdin
        env = {
            **base_env(self.config, request),
            "CODEX_HOME": str(codex_home),
            KEY_ENV: str(self.config.option("openai_api_key")),
        }
        return Launch(
            argv=argv,
            env=env,
            stdin=request.prompt.encode("utf-8"),
            cwd=request.workdir,
            files={codex_home / "config.toml": self.config_toml(request)},
        )
