"""OpenAI native: the Responses API, streamed, through the official ``openai`` SDK.

Requests are stateless (``store: false``) and ask for ``reasoning.encrypted_content``, so the stored
Context is the whole state: fidelity is ``provider_replayable``. The response's output items are kept
in order — a reasoning item as a ``reasoning`` block holding the item exactly as the stream's
``response.output_item.done`` gave it (id, summary, encrypted content), output text with its item id,
function calls with their item id and argument text, and any other item kind as
``{"type": "provider_block", "provider": "openai", "block": {...}}`` — and sent back as input items on
the next request. Reasoning and item ids reach OpenAI only from turns OpenAI wrote.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import openai

from ..fidelity import PORTABLE, PROVIDER_REPLAYABLE, carried_fidelity, replays_opaque_state, stamp
from ..wire import Message, make_assistant, parse_tool_arguments, text_of, tool_result_of
from .base import (
    PROVIDER_ERROR,
    Completed,
    Fidelity,
    ProviderError,
    ProviderEvent,
    Request,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    Usage,
)
from .openai_compatible_provider import map_openai_error

logger = logging.getLogger(__name__)

RUNTIME = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
PROVIDER_BLOCK = "provider_block"
INCLUDE = ["reasoning.encrypted_content"]


def _call_arguments(block: dict[str, Any], own: bool) -> str:
    if "raw_arguments" in block:
        return str(block["raw_arguments"])
    if own and isinstance(block.get("provider_arguments"), str):
        return str(block["provider_arguments"])
    return json.dumps(block.get("arguments") or {}, ensure_ascii=False)


def _text_part(block: dict[str, Any]) -> dict[str, Any]:
    if block.get("part_type") == "refusal":
        return {"type": "refusal", "refusal": block.get("text", "")}
    return {
        "type": "output_text",
        "text": block.get("text", ""),
        "annotations": block.get("annotations") or [],
    }


def _assistant_items(m: Message) -> list[dict[str, Any]]:
    own = replays_opaque_state(m, RUNTIME)
    items: list[dict[str, Any]] = []
    for b in m.get("content") or ():
        kind = b.get("type")
        if kind == "text":
            item_id = b.get("item_id") if own else None
            previous = items[-1] if items else None
            if item_id and previous is not None and previous.get("id") == item_id:
                previous["content"].append(_text_part(b))
            elif item_id:
                message = {
                    "type": "message",
                    "id": item_id,
                    "role": "assistant",
                    "status": "completed",
                    "content": [_text_part(b)],
                }
                if b.get("phase"):
                    message["phase"] = b["phase"]
                items.append(message)
            elif b.get("text"):
                items.append({"role": "assistant", "content": b["text"]})
        elif kind == "reasoning" and own:
            items.append(dict(b))
        elif kind == "tool_call":
            item: dict[str, Any] = {
                "type": "function_call",
                "call_id": b["id"],
                "name": b["name"],
                "arguments": _call_arguments(b, own),
            }
            if own and b.get("item_id"):
                item["id"] = b["item_id"]
            items.append(item)
        elif (
            kind == PROVIDER_BLOCK
            and own
            and b.get("provider") == RUNTIME
            and isinstance(b.get("block"), dict)
        ):
            items.append(b["block"])
    return items


def to_responses_input(messages: list[Message]) -> list[dict[str, Any]]:
    """MessageWire → Responses input items (role ``system`` entries are ignored: they are instructions)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "user":
            text = text_of(m)
            if text:
                out.append({"role": "user", "content": text})
        elif role == "assistant":
            out.extend(_assistant_items(m))
        elif role == "tool":
            result = tool_result_of(m)
            if result is not None:
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": result["tool_call_id"],
                        "output": result.get("content", ""),
                    }
                )
    return out


def to_responses_params(request: Request) -> dict[str, Any]:
    s = request.settings
    params: dict[str, Any] = {
        "model": s.model,
        "input": to_responses_input(request.messages),
        "stream": True,
        "store": False,
        "include": list(INCLUDE),
        "max_output_tokens": s.max_output_tokens,
    }
    instructions = "\n\n".join(b for b in request.system_blocks if b)
    if instructions:
        params["instructions"] = instructions
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
                "strict": False,
            }
            for t in request.tools
        ]
    if s.temperature is not None:
        params["temperature"] = s.temperature
    if s.reasoning_effort:
        params["reasoning"] = {"effort": s.reasoning_effort, "summary": "auto"}
    return params


def usage_from(usage: Any) -> Usage:
    """The whole prompt as input (cached part included); reasoning tokens are part of the output."""
    details = getattr(usage, "input_tokens_details", None)
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0,
        cache_write_tokens=(getattr(details, "cache_write_tokens", 0) or 0) if details is not None else 0,
    )


def _dump(item: Any) -> dict[str, Any]:
    return item.model_dump(mode="json", exclude_none=True, by_alias=True)


def blocks_of_item(item: Any) -> list[dict[str, Any]]:
    """Wire blocks for one finished output item."""
    kind = getattr(item, "type", None)
    if kind == "reasoning":
        return [_dump(item)]
    if kind == "function_call":
        block = parse_tool_arguments(item.call_id, item.name, item.arguments)
        if item.id:
            block["item_id"] = item.id
        if "arguments" in block:
            block["provider_arguments"] = item.arguments
        return [block]
    if kind == "message":
        blocks: list[dict[str, Any]] = []
        phase = getattr(item, "phase", None)
        for part in item.content or ():
            part_block: dict[str, Any] = {"type": "text", "item_id": item.id}
            if phase:
                part_block["phase"] = phase
            if part.type == "output_text":
                part_block["text"] = part.text
                annotations = [a.model_dump(mode="json", exclude_none=True) for a in part.annotations or ()]
                if annotations:
                    part_block["annotations"] = annotations
            else:
                part_block["text"], part_block["part_type"] = part.refusal, "refusal"
            blocks.append(part_block)
        return blocks
    return [{"type": PROVIDER_BLOCK, "provider": RUNTIME, "block": _dump(item)}]


def _failure(message: str, code: str | None = None) -> ProviderError:
    detail = f" ({code})" if code else ""
    return ProviderError(PROVIDER_ERROR, f"OpenAI reported a failed response{detail}: {message[:200]}")


class _Assembly:
    """Output items as the stream's smaller events build them, for a stream whose items never end
    with ``response.output_item.done``."""

    def __init__(self) -> None:
        self.opened: dict[int, dict[str, Any]] = {}
        self.texts: dict[tuple[int, int], list[str]] = {}
        self.arguments: dict[int, list[str]] = {}
        self.arguments_done: dict[int, str] = {}

    def feed(self, event: Any) -> None:
        kind = event.type
        if kind == "response.output_item.added":
            self.opened[event.output_index] = _dump(event.item)
        elif kind in {"response.output_text.delta", "response.refusal.delta"}:
            key = (event.output_index, event.content_index)
            self.texts.setdefault(key, []).append(event.delta)
        elif kind == "response.function_call_arguments.delta":
            self.arguments.setdefault(event.output_index, []).append(event.delta)
        elif kind == "response.function_call_arguments.done":
            self.arguments_done[event.output_index] = event.arguments

    def indexes(self) -> set[int]:
        return set(self.opened) | {index for index, _ in self.texts}

    def item(self, index: int) -> tuple[list[dict[str, Any]], bool]:
        """The blocks of one unfinished item, and whether they are whole."""
        opened = self.opened.get(index) or {}
        kind = opened.get("type")
        if kind == "message" or (kind is None and any(i == index for i, _ in self.texts)):
            parts = sorted((c, "".join(t)) for (i, c), t in self.texts.items() if i == index)
            blocks: list[dict[str, Any]] = []
            for _, text in parts:
                if text:
                    block = {"type": "text", "text": text}
                    if opened.get("id"):
                        block["item_id"] = opened["id"]
                    blocks.append(block)
            return blocks, bool(opened.get("id"))
        if kind == "function_call":
            exact = self.arguments_done.get(index, "".join(self.arguments.get(index, [])))
            block = parse_tool_arguments(opened.get("call_id", ""), opened.get("name", ""), exact)
            if opened.get("id"):
                block["item_id"] = opened["id"]
            if "arguments" in block:
                block["provider_arguments"] = exact
            return [block], True
        return [], False


class OpenAIResponsesProvider:
    name = RUNTIME
    fidelity: Fidelity = PROVIDER_REPLAYABLE

    def request_fidelity(self, request: Request) -> Fidelity:
        return carried_fidelity(request.messages, RUNTIME, self.fidelity)

    def __init__(self, *, api_key: str, base_url: str | None = None, timeout_s: float = 600.0) -> None:
        self._api_key = api_key
        self._base_url = base_url or DEFAULT_BASE_URL
        self._timeout_s = timeout_s

    async def stream(self, request: Request) -> AsyncIterator[ProviderEvent]:
        params = to_responses_params(request)
        items: dict[int, list[dict[str, Any]]] = {}
        assembly = _Assembly()
        whole = True
        usage: Usage | None = None
        status = "completed"
        try:
            async with openai.AsyncOpenAI(
                api_key=self._api_key, base_url=self._base_url, max_retries=0, timeout=self._timeout_s
            ) as client:
                stream = await client.responses.create(**params)
                async with stream:
                    async for event in stream:
                        kind = event.type
                        assembly.feed(event)
                        if kind in {"response.output_text.delta", "response.refusal.delta"}:
                            yield TextDelta(event.delta)
                        elif kind in {
                            "response.reasoning_summary_text.delta",
                            "response.reasoning_text.delta",
                        }:
                            yield ThinkingDelta(event.delta)
                        elif kind == "response.output_item.done":
                            # The done event's item is the complete one (encrypted content included).
                            blocks = blocks_of_item(event.item)
                            items[event.output_index] = blocks
                            for block in blocks:
                                if block["type"] == "tool_call":
                                    yield ToolCallEvent(block)
                        elif kind in {"response.completed", "response.incomplete"}:
                            response = event.response
                            if response.usage is not None:
                                usage = usage_from(response.usage)
                            for index, item in enumerate(response.output or ()):
                                if index not in items:
                                    items[index] = blocks_of_item(item)
                                    for block in items[index]:
                                        if block["type"] == "tool_call":
                                            yield ToolCallEvent(block)
                            status = response.status or "completed"
                            details = response.incomplete_details
                            if kind == "response.incomplete" and details is not None and details.reason:
                                status = f"incomplete:{details.reason}"
                        elif kind == "response.failed":
                            error = event.response.error
                            raise _failure(
                                error.message if error else "no detail", error.code if error else None
                            )
                        elif kind == "error":
                            raise _failure(event.message, event.code)
        except ProviderError:
            raise
        except openai.OpenAIError as exc:
            logger.info("openai responses call failed: %s", type(exc).__name__)
            raise map_openai_error(exc, label="OpenAI") from exc
        for index in sorted(assembly.indexes() - set(items)):
            assembled, complete = assembly.item(index)
            items[index], whole = assembled, whole and complete
            for block in assembled:
                if block["type"] == "tool_call":
                    yield ToolCallEvent(block)
        if usage is not None:
            yield usage
        yield StopReason(status)
        blocks = [block for index in sorted(items) for block in items[index]]
        fidelity = PROVIDER_REPLAYABLE if whole and blocks else PORTABLE
        yield Completed(stamp(make_assistant(blocks), runtime=RUNTIME, fidelity=fidelity))
