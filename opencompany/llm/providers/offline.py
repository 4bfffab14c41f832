"""The offline demo model: deterministic, keyless, good enough to show Context and Memory working.

It understands a handful of phrasings (``remember that …``, ``what do you remember about …``,
``recall …``, ``note …``, ``forget …``, ``who are you``, ``what did I say first/earlier``) and otherwise
answers from the conversation, so continuity across firings is visible. A Memory command may name which
memory tool to use (``with memory_2, remember that …``); ``ask <teammate> to <task>`` delegates to the
teammate tool ``ask_<teammate>``. Leading bracketed lines (``[note: …]``, the chat's notes to the
agent) are ignored when reading the command.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from ..fidelity import PORTABLE, stamp
from ..policies import SUMMARIZE_INSTRUCTION
from ..wire import Message, make_assistant, make_text, make_tool_call, text_of, tool_calls_of, tool_result_of
from .base import Completed, Fidelity, ProviderEvent, Request, StopReason, TextDelta, ToolCallEvent, Usage

OFFLINE_MODELS = frozenset({"offline-demo"})

_REMEMBER = re.compile(r"^(?:please\s+)?remember(?:\s+that)?[:,]?\s+(?P<fact>.+)$", re.I | re.S)
_RECALL = re.compile(
    r"^(?:what\s+do\s+you\s+(?:remember|know|recall)\s+about|recall|search\s+(?:your\s+)?memory\s+for)"
    r"\s+(?P<query>.+?)[?.!\s]*$",
    re.I | re.S,
)
_RECALL_ALL = re.compile(r"^what\s+do\s+you\s+remember[?.!\s]*$", re.I)
_NOTE = re.compile(
    r"^(?:please\s+)?(?:make\s+a\s+note|add\s+a\s+note|note)(?:\s+that)?[:,]?\s+(?P<text>.+)$", re.I | re.S
)
_FORGET = re.compile(
    r"^(?:please\s+)?forget(?:\s+about|\s+that)?[:,]?\s+(?P<query>.+?)[?.!\s]*$", re.I | re.S
)
_IDENTITY = re.compile(r"\b(?:what|who)\s+are\s+you\b", re.I)
_SAID = re.compile(
    r"\bwhat\s+did\s+i\s+(?:say|ask|write)\s+(?P<when>first|earlier|before|last|previously)\b", re.I
)
# Platform lines ahead of the owner's words: "[note: …]" or "[feedback]{…}[/feedback]".
_NOTE_LINE = re.compile(r"^\s*(?:\[[^\]\n]*\]|\[([A-Za-z][\w-]*)\].*\[/\1\])\s*$")
_WORDS = re.compile(r"\S+\s*")
_USING = re.compile(r"^(?:using|with|in)\s+(?P<tool>memory(?:_\d+)?)[:,]?\s+(?P<rest>.+)$", re.I | re.S)
_ASK = re.compile(r"^ask\s+(?P<who>[\w][\w -]*?)(?:\s+to|:|,)\s+(?P<task>.+)$", re.I | re.S)
_MEMORY_TOOL = re.compile(r"^memory(?:_\d+)?$")


def strip_note_lines(text: str) -> str:
    """Drop the bracketed note lines (and blank lines) the chat puts ahead of the owner's words."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and (not lines[i].strip() or _NOTE_LINE.match(lines[i])):
        i += 1
    return "\n".join(lines[i:]).strip()


def _quote(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return f"“{text if len(text) <= limit else text[: limit - 1] + '…'}”"


def _owner_messages(messages: list[Message]) -> list[str]:
    return [
        strip_note_lines(text_of(m))
        for m in messages
        if m.get("role") == "user" and not (m.get("metadata") or {}).get("summary")
    ]


def _load(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content


def _items_of(result: Any) -> list[dict[str, Any]]:
    if isinstance(result, dict):
        for key in ("results", "items", "memories"):
            if isinstance(result.get(key), list):
                return [i for i in result[key] if isinstance(i, dict)]
    return []


def _error_of(result: Any) -> str | None:
    if isinstance(result, dict) and isinstance(result.get("error"), dict):
        return str(result["error"].get("message") or result["error"].get("code") or "unknown error")
    return None


class OfflineProvider:
    name = "offline"
    fidelity: Fidelity = "portable"

    def __init__(self, *, delay_ms: float = 0.0, words_per_delta: int = 3) -> None:
        self.delay_ms = delay_ms
        self.words_per_delta = max(1, words_per_delta)

    async def stream(self, request: Request) -> AsyncIterator[ProviderEvent]:
        text, calls = self._respond(request)
        delay = self.delay_ms / 1000.0
        if text:
            words = _WORDS.findall(text)
            step = self.words_per_delta
            for i in range(0, len(words), step):
                if request.cancel is not None and request.cancel.is_set():
                    return
                if delay > 0:
                    await asyncio.sleep(delay)
                yield TextDelta("".join(words[i : i + step]))
        blocks: list[dict[str, Any]] = [make_text(text)] if text else []
        for call in calls:
            blocks.append(call)
            yield ToolCallEvent(call)
        prompt_chars = sum(len(b) for b in request.system_blocks) + sum(
            len(text_of(m)) + 40 * len(m.get("content") or ()) for m in request.messages
        )
        yield Usage(input_tokens=prompt_chars // 4 + 1, output_tokens=len(text) // 4 + 8 * len(calls) + 1)
        yield StopReason("tool_use" if calls else "end_turn")
        yield Completed(stamp(make_assistant(blocks), runtime=self.name, fidelity=PORTABLE))

    # --- the "model" -----------------------------------------------------------------------------------

    def _respond(self, request: Request) -> tuple[str, list[dict[str, Any]]]:
        messages = request.messages
        if request.system_blocks and request.system_blocks[0] == SUMMARIZE_INSTRUCTION:
            return self._summarize(messages), []
        tools = {t.name for t in request.tools}
        call_id = f"call_{len(messages)}"
        if messages and messages[-1].get("role") == "tool":
            return self._after_tool(messages, tools, call_id)
        owner = _owner_messages(messages)
        said = owner[-1] if owner else ""
        return self._command(said, owner, tools, call_id)

    def _command(
        self, said: str, owner: list[str], tools: set[str], call_id: str
    ) -> tuple[str, list[dict[str, Any]]]:
        memory = "memory"
        if (using := _USING.match(said)) and using["tool"].lower() in tools:
            memory, said = using["tool"].lower(), using["rest"].strip()
        if (m := _ASK.match(said)) and any(tool.startswith("ask_") for tool in tools):
            name = "ask_" + re.sub(r"[^a-z0-9]+", "_", m["who"].lower()).strip("_")
            if name not in tools:
                return f"I have no teammate called {_quote(m['who'])} here.", []
            return "", [make_tool_call(call_id, name, {"task": m["task"].strip()})]
        if m := _REMEMBER.match(said):
            if memory not in tools:
                return "I have no Memory connected here, so I can't keep that beyond this conversation.", []
            fact = m["fact"].strip()
            return "", [make_tool_call(call_id, memory, {"operation": "remember", "content": fact})]
        if m := _RECALL.match(said):
            if memory not in tools:
                return "I have no Memory connected here, so I can't look anything up.", []
            query = m["query"].strip()
            return "", [make_tool_call(call_id, memory, {"operation": "recall", "query": query})]
        if _RECALL_ALL.match(said):
            if memory not in tools:
                return "I have no Memory connected here.", []
            return "", [make_tool_call(call_id, memory, {"operation": "list"})]
        if m := _FORGET.match(said):
            if memory not in tools:
                return "I have no Memory connected here, so there is nothing to forget.", []
            query = m["query"].strip()
            return "", [make_tool_call(call_id, memory, {"operation": "recall", "query": query})]
        if m := _NOTE.match(said):
            if "notes" not in tools:
                return "I have no notes tool here, so I can't keep a working note.", []
            return "", [make_tool_call(call_id, "notes", {"operation": "add", "text": m["text"].strip()})]
        if _IDENTITY.search(said):
            return (
                "I'm the offline demo model: a small deterministic stand-in that runs without any API key. "
                "I can remember, recall and forget facts with the Memory tool, keep working notes, and I "
                "carry this conversation from one message to the next.",
                [],
            )
        if m := _SAID.search(said):
            earlier = owner[:-1]
            if not earlier:
                return "This is the first thing you've said in this conversation.", []
            if m["when"].lower() == "first":
                return f"The first thing you said was {_quote(earlier[0])}.", []
            return f"Just before this you said {_quote(earlier[-1])}.", []
        turn = len(owner)
        if turn <= 1:
            return f"(Offline demo model) You said {_quote(said)}. This is the start of our conversation.", []
        return (
            f"(Offline demo model) You said {_quote(said)}. This is turn {turn} of our conversation; "
            f"your first message was {_quote(owner[0])} and just before this you said {_quote(owner[-2])}.",
            [],
        )

    def _after_tool(
        self, messages: list[Message], tools: set[str], call_id: str
    ) -> tuple[str, list[dict[str, Any]]]:
        result_block = tool_result_of(messages[-1]) or {}
        result = _load(result_block.get("content", ""))
        call: dict[str, Any] = {}
        for m in reversed(messages):
            if m.get("role") == "assistant":
                calls = {c["id"]: c for c in tool_calls_of(m)}
                call = calls.get(result_block.get("tool_call_id", ""), {})
                break
        args = call.get("arguments") or {}
        name, operation = call.get("name"), args.get("operation")
        error = _error_of(result)
        if result_block.get("status") in {"not_run", "interrupted"}:
            return "That step did not run, so I can't tell you its outcome.", []
        if error is not None:
            return f"The {name} tool refused: {error}", []
        owner = _owner_messages(messages)
        said = owner[-1] if owner else ""
        if (using := _USING.match(said)) is not None:
            said = using["rest"].strip()
        is_memory = isinstance(name, str) and _MEMORY_TOOL.match(name) is not None
        if isinstance(name, str) and name.startswith("ask_") and isinstance(result, dict):
            return f"{result.get('teammate', name)} answered: {result.get('answer', '')}", []
        if is_memory and operation == "remember":
            return f"Got it. I'll remember that {args.get('content', '')}", []
        if is_memory and operation in {"recall", "list"}:
            items = _items_of(result)
            forget = _FORGET.match(said)
            if forget and operation == "recall":
                query = forget["query"].strip()
                if not items:
                    return f"I found nothing about {_quote(query)} to forget.", []
                top = items[0]
                memory_id = top.get("memory_id", top.get("id"))
                forget_args = {
                    "operation": "forget",
                    "memory_id": memory_id,
                    "expected_version": top.get("version", 1),
                }
                return "", [make_tool_call(call_id, str(name), forget_args)]
            query = args.get("query", "")
            if not items:
                if operation == "list":
                    return "I don't have anything remembered yet.", []
                return f"I don't remember anything about {_quote(query)}.", []
            lines = "\n".join(f"- {item.get('content', '')}" for item in items)
            # Recall answers a question without content words with the latest items ("match": "recent").
            topical = query and any(item.get("match") != "recent" for item in items)
            head = "Here is what I remember" + (f" about {_quote(query)}" if topical else "")
            return f"{head}:\n{lines}", []
        if is_memory and operation == "forget":
            forgotten = ""
            for m in reversed(messages[:-1]):
                block = tool_result_of(m) if m.get("role") == "tool" else None
                if block is not None:
                    items = _items_of(_load(block.get("content", "")))
                    if items:
                        forgotten = str(items[0].get("content", ""))
                    break
            return (f"Done. I forgot {_quote(forgotten)}." if forgotten else "Done. I forgot it."), []
        if name == "notes":
            if operation == "add":
                return f"Noted: {args.get('text', '')}", []
            return "My working notes are updated.", []
        return f"The {name} tool answered: {_quote(result_block.get('content', ''), 200)}", []

    @staticmethod
    def _summarize(messages: list[Message]) -> str:
        text = "\n".join(text_of(m) for m in messages)
        lines = [line for line in text.split("\n") if line.strip()]
        if not lines:
            return "Nothing of note was said earlier."
        summary = f"Earlier the owner and the assistant exchanged {len(lines)} lines. It began with {_quote(lines[0], 160)}"
        if len(lines) > 1:
            summary += f" and most recently covered {_quote(lines[-1], 160)}"
        return summary + "."
