"""The project's tools served to a runtime program over MCP, from inside the run.

A run that launches a program opens an :class:`McpToolServer`: a Unix socket in a private directory,
answering MCP (JSON-RPC 2.0, one message per line) to whoever presents the run's one-time token. The
program launches :mod:`.mcp_bridge` as its stdio MCP server, which pipes to this socket. Tool calls
run exactly as the agent loop runs them (the same :class:`ToolSpec`, the same validation and the
run's server-built :class:`ToolContext`), so the Memory tool has the same scope rules here as
anywhere: the namespace comes from the run, never from the program or the model. The program's own
id for the call (Claude Code's tool-use id, Codex's call id) becomes ``ToolContext.tool_call_id``,
so a repeated call replays instead of writing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import shutil
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..loop import _run_tool as run_tool
from ..policies import DEFAULT_TOOL_RESULT_MAX_CHARS
from ..tools import ToolContext, ToolSpec
from ..wire import make_tool_call, tool_result_of
from .base import McpEndpoint

logger = logging.getLogger(__name__)

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
BRIDGE = Path(__file__).with_name("mcp_bridge.py")
_LINE_LIMIT = 32 * 1024 * 1024
_AUTH_TIMEOUT_S = 10.0
# JSON-RPC error codes
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _call_id(params: dict[str, Any]) -> str:
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        meta = {}
    for key in ("claudecode/toolUseId", "callId"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            return value[:200]
    return f"mcp_{uuid.uuid4().hex[:16]}"


class McpToolServer:
    """Serves ``tools`` in the scope of ``context`` for the length of one run.

    Use as ``async with McpToolServer(...) as server:``; ``server.endpoint`` is what the program is
    told to launch. Leaving the block closes the socket, which ends every bridge still attached.
    """

    def __init__(
        self,
        tools: Sequence[ToolSpec],
        context: ToolContext,
        *,
        tool_result_max_chars: int = DEFAULT_TOOL_RESULT_MAX_CHARS,
        python: str | None = None,
    ) -> None:
        self.tools = {tool.name: tool for tool in tools}
        self.context = context
        self.max_chars = tool_result_max_chars
        self.python = python or sys.executable
        self.token = secrets.token_urlsafe(32)
        self.calls = 0
        self._dir: str | None = None
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    @property
    def endpoint(self) -> McpEndpoint:
        if self._dir is None:
            raise RuntimeError("the MCP tool server is not open")
        return McpEndpoint(
            command=self.python,
            args=("-I", str(BRIDGE)),
            env={
                "OPENCOMPANY_MCP_SOCKET": str(Path(self._dir) / "mcp.sock"),
                "OPENCOMPANY_MCP_TOKEN": self.token,
                # Names the run on the bridge, whatever environment the program gives its servers.
                "OPENCOMPANY_RUN_ID": str(self.context.run_id or ""),
            },
            tool_names=tuple(self.tools),
        )

    async def __aenter__(self) -> McpToolServer:
        # A short private path: Unix socket paths are limited to about a hundred bytes.
        self._dir = tempfile.mkdtemp(prefix="oc-mcp-")
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(Path(self._dir) / "mcp.sock"), limit=_LINE_LIMIT
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            presented = await asyncio.wait_for(reader.readline(), _AUTH_TIMEOUT_S)
            if not hmac.compare_digest(presented.strip(), self.token.encode("ascii")):
                logger.warning("mcp connection refused run=%s: wrong token", self.context.run_id)
                return
            while line := await reader.readline():
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    response: dict[str, Any] | None = _error(None, PARSE_ERROR, "Parse error")
                else:
                    response = await self.handle(message)
                if response is not None:
                    writer.write(json.dumps(response, ensure_ascii=False).encode("utf-8") + b"\n")
                    await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._connections.discard(writer)
            writer.close()

    async def handle(self, message: Any) -> dict[str, Any] | None:
        """The answer to one JSON-RPC message (None for a notification)."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(None, INVALID_REQUEST, "Invalid request")
        method = message.get("method")
        if "id" not in message:
            return None  # notifications (initialized, cancelled, …) need no answer
        request_id = message["id"]
        params = message.get("params")
        if not isinstance(params, dict):
            params = {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
            result: dict[str, Any] = {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "opencompany", "version": "1"},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {
                "tools": [
                    {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                    for t in self.tools.values()
                ]
            }
        elif method == "tools/call":
            name = params.get("name")
            if not isinstance(name, str) or name not in self.tools:
                return _error(request_id, INVALID_PARAMS, f"Unknown tool: {name!r}")
            result = await self._call(name, params)
        else:
            return _error(request_id, METHOD_NOT_FOUND, "Method not found")
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    async def _call(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        arguments = params.get("arguments")
        call_id = _call_id(params)
        if arguments is None:
            arguments = {}
        if isinstance(arguments, dict):
            call = make_tool_call(call_id, name, arguments)
        else:
            call = {
                "type": "tool_call",
                "id": call_id,
                "name": name,
                "raw_arguments": json.dumps(arguments),
                "parse_error": "arguments must be a JSON object",
            }
        self.calls += 1
        message = await run_tool(call, self.tools, self.context, self.max_chars)
        block = tool_result_of(message) or {}
        return {
            "content": [{"type": "text", "text": str(block.get("content", ""))}],
            "isError": block.get("status") != "ok",
        }
