"""In-memory stand-ins for the loop's collaborators: a sink, a scripted provider, memory/notes tools."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

from opencompany.llm.providers.base import Completed, ProviderEvent, Request, TextDelta, ToolCallEvent, Usage
from opencompany.llm.tools import ToolContext, ToolSpec, tool_error
from opencompany.llm.wire import make_assistant, make_text, make_tool_call


class SinkRefused(Exception):
    """A write the store refused with an error code (as the conversation services raise them)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class FakeSink:
    """Records every commit in order; ``fail_at`` makes the n-th commit (1-based) raise, refused with
    ``fail_code`` when one is given."""

    def __init__(
        self,
        messages: list[dict[str, Any]] | None = None,
        fail_at: int | None = None,
        notes_block: str = "Notes: none",
        fail_code: str | None = None,
    ) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.transcript: list[dict[str, Any]] = list(messages or [])
        self.fail_at = fail_at
        self.fail_code = fail_code
        self.usage: Usage | None = None
        self.notes_block = notes_block
        self.records: list[Any] = []
        self.attempts: list[Any] = []

    def _record(self, kind: str, payload: Any) -> None:
        if self.fail_at is not None and len(self.calls) + 1 == self.fail_at:
            self.calls.append((kind + ":failed", payload))
            if self.fail_code is not None:
                raise SinkRefused(self.fail_code)
            raise RuntimeError("database is down")
        self.calls.append((kind, copy.deepcopy(payload)))

    async def assistant(self, message: dict[str, Any]) -> None:
        self._record("assistant", message)
        self.transcript.append(message)

    async def tool_result(self, message: dict[str, Any]) -> None:
        self._record("tool_result", message)
        self.transcript.append(message)

    async def final(self, message: dict[str, Any], usage: Usage) -> None:
        self._record("final", message)
        self.transcript.append(message)
        self.usage = usage

    async def replace_all(self, messages: list[dict[str, Any]]) -> None:
        self._record("replace_all", messages)
        self.transcript = list(messages)

    async def compact(self, candidate: Any) -> str:
        """Activates like the store: the tail stays, the findings join the notes block."""
        self._record("compact", candidate)
        self.transcript = list(candidate.messages)
        self.notes_block = f"{self.notes_block}\nFindings: {candidate.findings}"
        return self.notes_block

    async def record_call(self, call: Any) -> None:
        self.records.append(call)

    async def compaction_attempt(self, attempt: Any) -> None:
        self.attempts.append(attempt)

    @property
    def kinds(self) -> list[str]:
        return [k for k, _ in self.calls]


Script = list[ProviderEvent] | Callable[[Request], list[ProviderEvent]]


class ScriptedProvider:
    """Answers each request with the next script; records a deep copy of every request it got.

    ``gate``: when set, the stream waits on it before each event listed in ``pause_before`` (by index),
    so a test can set Stop while the provider is mid-stream.
    """

    name = "scripted"
    fidelity = "portable"

    def __init__(self, scripts: list[Script], *, hang_after: int | None = None) -> None:
        self.scripts = list(scripts)
        self.requests: list[Request] = []
        self.hang_after = hang_after
        self.started = asyncio.Event()

    async def stream(self, request: Request):
        self.requests.append(
            dataclasses.replace(
                request,
                system_blocks=list(request.system_blocks),
                messages=copy.deepcopy(request.messages),
                tools=list(request.tools),
            )
        )
        script = self.scripts.pop(0)
        events = script(request) if callable(script) else script
        for i, event in enumerate(events):
            if self.hang_after is not None and i == self.hang_after:
                self.started.set()
                await asyncio.Event().wait()  # blocks until the loop cancels us
            yield event


def answer(text: str, usage: Usage | None = None) -> list[ProviderEvent]:
    words = text.split(" ")
    deltas: list[ProviderEvent] = [
        TextDelta(w + (" " if i < len(words) - 1 else "")) for i, w in enumerate(words)
    ]
    return [*deltas, usage or Usage(10, 5), Completed(make_assistant([make_text(text)]))]


def calls(*blocks: dict[str, Any], text: str = "", usage: Usage | None = None) -> list[ProviderEvent]:
    content = ([make_text(text)] if text else []) + list(blocks)
    events: list[ProviderEvent] = [TextDelta(text)] if text else []
    events += [ToolCallEvent(b) for b in blocks]
    return [*events, usage or Usage(10, 5), Completed(make_assistant(content))]


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return make_tool_call(call_id, name, arguments)


MEMORY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {"enum": ["remember", "recall", "list", "forget"]},
        "content": {"type": "string", "minLength": 1},
        "query": {"type": "string"},
        "memory_id": {"type": "string"},
        "expected_version": {"type": "integer"},
    },
    "required": ["operation"],
    "additionalProperties": False,
}

NOTES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"operation": {"enum": ["add", "read"]}, "text": {"type": "string"}},
    "required": ["operation"],
    "additionalProperties": False,
}


class FakeMemory:
    """A dict-backed ``memory`` tool (sync, like the real DB-backed one)."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.ids = itertools.count(1)
        self.contexts: list[ToolContext] = []

    def execute(self, context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
        self.contexts.append(context)
        op = arguments["operation"]
        if op == "remember":
            memory_id = f"mem_{next(self.ids)}"
            item = {"memory_id": memory_id, "content": arguments["content"], "version": 1}
            self.items[memory_id] = item
            return {"memory": item}
        if op in {"recall", "list"}:
            words = arguments.get("query", "").lower().split()
            found = [i for i in self.items.values() if all(w in i["content"].lower() for w in words)]
            return {"results": found, "next_cursor": None}
        if op == "forget":
            found_item = self.items.get(arguments.get("memory_id", ""))
            if found_item is None:
                return tool_error("not_found", "No such memory.")
            if found_item["version"] != arguments.get("expected_version"):
                return tool_error("version_conflict", "The memory changed.")
            del self.items[found_item["memory_id"]]
            return {"forgotten": found_item["memory_id"]}
        return tool_error("invalid_operation", op)

    def spec(self) -> ToolSpec:
        return ToolSpec("memory", "Remember and recall durable facts.", MEMORY_SCHEMA, self.execute)


class FakeNotes:
    def __init__(self) -> None:
        self.entries: list[str] = []

    async def execute(self, context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
        if arguments["operation"] == "add":
            self.entries.append(arguments.get("text", ""))
        return {"notes": list(self.entries)}

    def spec(self) -> ToolSpec:
        return ToolSpec("notes", "Working notes.", NOTES_SCHEMA, self.execute)
