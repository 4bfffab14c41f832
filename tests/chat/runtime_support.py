"""Support for the runtime-program tests: the installed programs (required under CI), loopback replies
in the Anthropic Messages and OpenAI Responses streaming formats, a proxy trap that records any attempt
to reach beyond loopback, and a look at the processes a run started."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CI
from tests.llm.loopback import Received, Reply, anthropic_sse, responses_sse

PROGRAMS = ("claude", "codex")


def require_programs(bin_dir: str) -> None:
    """The agent programs must be installed (bin/install-runtimes); under CI a missing one fails."""
    missing = [name for name in PROGRAMS if not (Path(bin_dir) / name).is_file()]
    if missing:
        message = f"{', '.join(missing)} not installed in {bin_dir}: run bin/install-runtimes"
        if CI:
            pytest.fail(message)
        pytest.skip(message)


# --- Anthropic Messages stream ----------------------------------------------------------------------------


def anthropic_reply(*blocks: tuple[Any, ...], hold_after: int | None = None) -> Reply:
    """An assistant message: ``("text", str)`` and ``("tool", id, name, input)`` blocks in order.
    ``hold_after``: pause after that many SSE frames (mid-text when it falls inside a text block)."""
    message: dict[str, Any] = {
        "id": "msg_loop",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    stop_reason = "end_turn"
    for index, block in enumerate(blocks):
        if block[0] == "text":
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            events.extend(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                }
                for piece in block[1:]
            )
        else:
            _, call_id, name, arguments = block
            stop_reason = "tool_use"
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(arguments)},
                }
            )
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 7},
        }
    )
    events.append({"type": "message_stop"})
    return Reply(sse=anthropic_sse(*events), hold_after=hold_after)


def anthropic_texts(received: Received) -> list[tuple[str, str]]:
    """(role, text) of each message Claude Code sent, tool blocks shown by kind."""
    out: list[tuple[str, str]] = []
    for message in received.body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append((message["role"], content))
            continue
        parts = []
        for block in content:
            if block["type"] == "text":
                parts.append(block["text"])
            else:
                parts.append(f"[{block['type']}]")
        out.append((message["role"], "".join(parts)))
    return out


def claude_tools(received: Received, prefix: str = "mcp__opencompany__") -> list[str]:
    return sorted(
        t["name"][len(prefix) :] for t in received.body.get("tools", []) if t["name"].startswith(prefix)
    )


# --- OpenAI Responses stream -----------------------------------------------------------------------------


def _response(
    status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "resp_loop",
        "object": "response",
        "created_at": 1,
        "status": status,
        "model": "gpt-test",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
        "error": None,
        "incomplete_details": None,
    }


def responses_reply(text: str, call: tuple[str, str, dict[str, Any]] | None = None) -> Reply:
    """An answer with ``text`` and, optionally, one function call ``(namespace, name, arguments)``."""
    message: dict[str, Any] = {
        "type": "message",
        "id": "msg_loop",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response("in_progress", [])},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**message, "status": "in_progress", "content": []},
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_loop",
            "output_index": 0,
            "content_index": 0,
            "delta": text,
            "logprobs": [],
        },
        {"type": "response.output_item.done", "output_index": 0, "item": message},
    ]
    output: list[dict[str, Any]] = [message]
    if call is not None:
        namespace, name, arguments = call
        item = {
            "type": "function_call",
            "id": "fc_loop",
            "call_id": "call_loop",
            "namespace": namespace,
            "name": name,
            "arguments": json.dumps(arguments),
            "status": "completed",
        }
        events.append(
            {"type": "response.output_item.added", "output_index": 1, "item": {**item, "arguments": ""}}
        )
        events.append({"type": "response.output_item.done", "output_index": 1, "item": item})
        output.append(item)
    usage = {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 20},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 129,
    }
    events.append({"type": "response.completed", "response": _response("completed", output, usage)})
    return Reply(sse=responses_sse(*events))


def responses_user_texts(received: Received) -> list[str]:
    """The text of every user input item Codex sent (its own context messages included)."""
    return [
        "".join(part.get("text", "") for part in item["content"])
        for item in received.body["input"]
        if item.get("type") == "message" and item.get("role") == "user"
    ]


def responses_namespace_tools(received: Received, namespace: str = "mcp__opencompany") -> list[str]:
    for tool in received.body.get("tools", []):
        if tool.get("type") == "namespace" and tool.get("name") == namespace:
            return sorted(t["name"] for t in tool["tools"])
    return []


# --- the proxy trap --------------------------------------------------------------------------------------


@dataclass
class ProxyTrap:
    """An HTTP proxy that refuses everything and records what was attempted (``HTTPS_PROXY`` points at
    it, ``NO_PROXY`` covers loopback): anything a program tries to reach beyond loopback shows here."""

    attempts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        trap = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _refuse(self) -> None:
                trap.attempts.append(f"{self.command} {self.path}")
                self.send_response(403)
                self.send_header("content-length", "0")
                self.end_headers()

            do_CONNECT = do_GET = do_POST = do_HEAD = do_PUT = _refuse

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def proxy_trap(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProxyTrap]:
    trap = ProxyTrap()
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, trap.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    try:
        yield trap
    finally:
        trap.close()


# --- processes -------------------------------------------------------------------------------------------


def processes_of_run(run_id: str) -> dict[int, int]:
    """``{pid: process group}`` of the live processes started for a run (their environment names it);
    zombies count as gone."""
    marker = f"OPENCOMPANY_RUN_ID={run_id}".encode()
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if marker not in environ.split(b"\0"):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            found[int(entry)] = int(fields[2])
    return found


def alive(pids: set[int]) -> set[int]:
    """The pids of ``pids`` that are still running (not gone, not zombies)."""
    out = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            out.add(pid)
    return out
