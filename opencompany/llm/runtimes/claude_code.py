"""Claude Code (`claude -p --output-format stream-json`) as a runtime.

Resumable: the first firing of a conversation names its session (``--session-id``), later firings
continue it (``--resume``), so Claude Code keeps its own full state (its system prompt, thinking,
compactions) and the app keeps the binding. The stored turns are what the stream showed: text, tool
calls and their results (``observable``). Runs with ``--bare`` (no hooks, plugins, CLAUDE.md discovery,
keychain or background traffic; the key is strictly ``ANTHROPIC_API_KEY``), with telemetry, error
reporting and auto-update off, and only the project's MCP server (``--strict-mcp-config``).
"""

from __future__ import annotations

import json
import uuid
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

NAME = "claude_code"
_MCP_PREFIX = f"mcp__{MCP_SERVER_NAME}__"
QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    # The app decides about retries, as with the providers.
    "CLAUDE_CODE_MAX_RETRIES": "0",
}


def tool_name(reported: str) -> str:
    """The project's own tools go by their plain names (``memory``), as in every other turn."""
    return reported.removeprefix(_MCP_PREFIX)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or ():
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict):
            parts.append(f"[{block.get('type', 'content')}]")
    return "\n".join(parts)


def _usage(usage: dict[str, Any]) -> Usage:
    cache_read = int(usage.get("cache_read_input_tokens") or 0)
    cache_write = int(usage.get("cache_creation_input_tokens") or 0)
    return Usage(
        input_tokens=int(usage.get("input_tokens") or 0) + cache_read + cache_write,
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


class ClaudeStreamParser:
    """stream-json lines → runtime events. Lines of subagents (``parent_tool_use_id`` set) are the
    program's internals and are skipped: the subagent's call and result are in the main stream."""

    def __init__(self) -> None:
        self._streamed = False  # text deltas arrived for the block being completed

    def feed(self, event: dict[str, Any]) -> list[RuntimeEvent]:
        kind = event.get("type")
        if event.get("parent_tool_use_id"):
            return []
        if kind == "system":
            session = event.get("session_id")
            if event.get("subtype") == "init" and isinstance(session, str) and session:
                return [Session(session)]
            return []
        if kind == "stream_event":
            inner = event.get("event") or {}
            delta = inner.get("delta") or {}
            if inner.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
                self._streamed = True
                return [Delta(str(delta.get("text", "")))]
            return []
        if kind == "assistant":
            if event.get("is_api_error_message") or event.get("error"):
                return []  # the program's own wording of an API error, not the model's: see `result`
            return self._assistant(event.get("message") or {})
        if kind == "user":
            return self._results(event.get("message") or {})
        if kind == "result":
            return self._result(event)
        return []

    def _assistant(self, message: dict[str, Any]) -> list[RuntimeEvent]:
        out: list[RuntimeEvent] = []
        for block in message.get("content") or ():
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                if not self._streamed:
                    out.append(Delta(block["text"]))
                out.append(Text(block["text"]))
                self._streamed = False
            elif kind == "tool_use" and block.get("id") and block.get("name"):
                arguments = block.get("input") if isinstance(block.get("input"), dict) else {}
                call = make_tool_call(str(block["id"]), tool_name(str(block["name"])), arguments)
                out.append(Call(call))
            # Thinking stays in Claude Code's own session: it is not part of the observable turn.
        return out

    def _results(self, message: dict[str, Any]) -> list[RuntimeEvent]:
        content = message.get("content")
        if not isinstance(content, list):
            return []
        return [
            Result(
                str(block["tool_use_id"]),
                _result_text(block.get("content")),
                "error" if block.get("is_error") else "ok",
            )
            for block in content
            if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("tool_use_id")
        ]

    def _result(self, event: dict[str, Any]) -> list[RuntimeEvent]:
        out: list[RuntimeEvent] = []
        if isinstance(event.get("usage"), dict):
            out.append(_usage(event["usage"]))
        if event.get("is_error") or event.get("subtype") != "success":
            status = event.get("api_error_status")
            status = status if isinstance(status, int) else None
            detail = f", status {status}" if status is not None else ""
            out.append(
                Done(
                    ProviderError(
                        PROVIDER_ERROR,
                        f"Claude Code ended the turn with an error ({event.get('subtype')}{detail}).",
                        status=status,
                    )
                )
            )
        else:
            out.append(Done())
        return out


class ClaudeCode:
    name = NAME
    display_name = "Claude Code"
    fidelity: Fidelity = OBSERVABLE
    resumable = True

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.program = require_program(config, "claude", self.display_name)
        if not config.option("anthropic_api_key"):
            raise ProviderError(
                PROVIDER_NOT_CONFIGURED, "No API key is configured for Claude Code (ANTHROPIC_API_KEY)."
            )

    def parser(self) -> ClaudeStreamParser:
        return ClaudeStreamParser()

    def launch(self, request: TurnRequest) -> Launch:
        tag = uuid.uuid4().hex
        instructions = request.home / f"opencompany-instructions-{tag}.md"
        files = {instructions: request.instructions}
        argv = [
            self.program,
            "-p",
            "--output-format=stream-json",
            "--verbose",
            "--include-partial-messages",
            "--bare",
            "--strict-mcp-config",
            "--permission-prompts=none",
            # Notes change between firings: a resumed session must not keep the first firing's prompt.
            "--system-prompt-snapshot=off",
            f"--append-system-prompt-file={instructions}",
        ]
        if request.model:
            argv.append(f"--model={request.model}")
        if request.session_id and request.resume:
            argv.append(f"--resume={request.session_id}")
        elif request.session_id:
            argv.append(f"--session-id={request.session_id}")
        else:
            argv.append("--no-session-persistence")
        if request.mcp is not None:
            config_path = request.home / f"opencompany-mcp-{tag}.json"
            server = {
                "type": "stdio",
                "command": request.mcp.command,
                "args": list(request.mcp.args),
                "env": request.mcp.env,
            }
            files[config_path] = json.dumps({"mcpServers": {MCP_SERVER_NAME: server}})
            allowed = ",".join(_MCP_PREFIX + name for name in request.mcp.tool_names)
            argv += [f"--mcp-config={config_path}", f"--allowedTools={allowed}"]
        env = {
            **base_env(self.config, request),
            **QUIET_ENV,
            "CLAUDE_CONFIG_DIR": str(request.home / ".claude"),
            "ANTHROPIC_API_KEY": str(self.config.option("anthropic_api_key")),
        }
        if base_url := self.config.option("anthropic_base_url"):
            env["ANTHROPIC_BASE_URL"] = base_url
        return Launch(
            argv=argv, env=env, stdin=request.prompt.encode("utf-8"), cwd=request.workdir, files=files
        )
