"""Anthropic Messages streaming through the official ``anthropic`` SDK.

Fidelity is ``provider_replayable``: the assistant's blocks are kept in response order — thinking with
its signature, redacted thinking (opaque ``data``, never read), text, tool use, and any block kind this
adapter does not model (kept as ``{"type": "provider_block", "provider": "anthropic", "block": {...}}``)
— and replayed unchanged on the next request. Thinking, signatures and provider blocks reach Anthropic
only from turns Anthropic wrote.

A block whose input streams as ``input_json_delta`` keeps that input: a server tool use is kept whole
with it. A tool use the answer's token limit cut off (no ``content_block_stop``) is kept as its raw text
and marked ``cut_off``: the loop does not run it and answers it with an error, and it goes back as text,
since the API takes only an object as input. A refusal (``stop_reason: "refusal"``) is stored with
``metadata.refusal`` (its ``stop_details``); as Anthropic documents, the refused exchange — from the
owner's message that led to it through the refusal — is left out of every later request.

Extended thinking is on when the agent sets ``thinking_budget`` (at least 1,024 tokens, below
``max_output_tokens``, as the Messages API requires).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anthropic

from ..fidelity import PORTABLE, PROVIDER_REPLAYABLE, carried_fidelity, replays_opaque_state, stamp
from ..wire import Message, make_assistant, parse_tool_arguments, tool_result_of
from .base import (
    PROVIDER_ERROR,
    PROVIDER_NOT_CONFIGURED,
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
    parse_retry_after,
)

logger = logging.getLogger(__name__)

RUNTIME = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
PROVIDER_BLOCK = "provider_block"
MIN_THINKING_BUDGET = 1024
REFUSAL = "refusal"
CUT_OFF = "the answer reached its output token limit (max_tokens) before this call's arguments were complete"


def is_refusal(message: Message) -> bool:
    """An Anthropic turn its streaming classifier refused."""
    return replays_opaque_state(message, RUNTIME) and bool((message.get("metadata") or {}).get(REFUSAL))


def _refused_exchanges(messages: list[Message]) -> set[int]:
    """Indexes of the messages left out after refusals: each refused turn, back to (and with) the
    owner's message that led to it, and the results answering its calls."""
    skipped: set[int] = set()
    for i, m in enumerate(messages):
        if m.get("role") != "assistant" or not is_refusal(m):
            continue
        start = i
        while start > 0 and messages[start].get("role") != "user":
            start -= 1
        skipped.update(range(start, i + 1))
        end = i + 1
        while end < len(messages) and messages[end].get("role") == "tool":
            skipped.add(end)
            end += 1
    return skipped


def _textual_call(block: dict[str, Any]) -> dict[str, Any]:
    what = "was cut off" if block.get("cut_off") else "was malformed"
    return {"type": "text", "text": f"[a call of {block['name']} {what}: {block.get('raw_arguments', '')}]"}


def to_system(system_blocks: list[str]) -> list[dict[str, Any]]:
    """Block 0 (the byte-stable prompt) carries the cache breakpoint; block 1 (notes) follows it."""
    out: list[dict[str, Any]] = []
    for i, text in enumerate(system_blocks):
        if not text:
            continue
        block: dict[str, Any] = {"type": "text", "text": text}
        if i == 0:
            block["cache_control"] = {"type": "ephemeral"}
        out.append(block)
    return out


def _assistant_blocks(m: Message, textual: set[str]) -> list[dict[str, Any]]:
    own = replays_opaque_state(m, RUNTIME)
    out: list[dict[str, Any]] = []
    for b in m.get("content") or ():
        kind = b.get("type")
        if kind == "text":
            if b.get("text"):
                out.append({"type": "text", "text": b["text"]})
        elif not own and kind in {"thinking", "redacted_thinking", PROVIDER_BLOCK}:
            continue  # another runtime's state means nothing here
        elif kind == "thinking":
            block = {"type": "thinking", "thinking": b["thinking"]}
            if "signature" in b:
                block["signature"] = b["signature"]
            out.append(block)
        elif kind == "redacted_thinking":
            out.append({"type": "redacted_thinking", "data": b["data"]})
        elif kind == "tool_call" and "raw_arguments" in b:
            # Input must be an object: a malformed or cut-off call goes back as the text it was.
            textual.add(b["id"])
            out.append(_textual_call(b))
        elif kind == "tool_call":
            block = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": b.get("arguments") or {}}
            if own and isinstance(b.get("caller"), dict):
                block["caller"] = b["caller"]
            out.append(block)
        elif (
            kind == PROVIDER_BLOCK
            and b.get("provider") == "anthropic"
            and isinstance(b.get("block"), dict)
            and not b.get("input_error")
        ):
            out.append(b["block"])
    return out


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """MessageWire → Messages API turns: tool results ride user turns, and adjacent turns of the same
    role are merged (so consecutive results become one user message, results first). Refused
    exchanges are left out."""
    out: list[dict[str, Any]] = []
    textual: set[str] = set()
    skipped = _refused_exchanges(messages)
    for index, m in enumerate(messages):
        if index in skipped:
            continue
        role = m.get("role")
        blocks: list[dict[str, Any]]
        if role == "user":
            blocks = [
                {"type": "text", "text": b["text"]}
                for b in m.get("content") or ()
                if b.get("type") == "text" and b.get("text")
            ]
            api_role = "user"
        elif role == "assistant":
            blocks = _assistant_blocks(m, textual)
            api_role = "assistant"
        elif role == "tool":
            result = tool_result_of(m)
            if result is None:
                continue
            if result["tool_call_id"] in textual:
                text = f"[result of that call: {result.get('content', '')}]"
                blocks, api_role = [{"type": "text", "text": text}], "user"
                if out and out[-1]["role"] == api_role:
                    out[-1]["content"].extend(blocks)
                else:
                    out.append({"role": api_role, "content": blocks})
                continue
            block = {
                "type": "tool_result",
                "tool_use_id": result["tool_call_id"],
                "content": result.get("content", ""),
            }
            if result.get("status") != "ok":
                block["is_error"] = True
            blocks = [block]
            api_role = "user"
        else:
            continue
        if not blocks:
            continue
        if out and out[-1]["role"] == api_role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": api_role, "content": blocks})
    if out and out[-1]["role"] == "user":
        last = out[-1]["content"][-1]
        if last.get("type") in {"text", "tool_result"}:
            out[-1]["content"][-1] = {**last, "cache_control": {"type": "ephemeral"}}
    return out


def map_anthropic_error(exc: Exception) -> ProviderError:
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        headers = exc.response.headers if exc.response is not None else None
        return ProviderError(
            PROVIDER_ERROR,
            f"Anthropic answered HTTP {status}.",
            status=status,
            retry_after=parse_retry_after(headers, status),
        )
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderError(PROVIDER_ERROR, "Anthropic timed out.")
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError(PROVIDER_ERROR, "Could not connect to Anthropic.")
    return ProviderError(PROVIDER_ERROR, f"Anthropic failed ({type(exc).__name__}).")


def _dump(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", exclude_none=True)
    return dict(obj)


def thinking_param(budget: int | None, max_tokens: int) -> dict[str, Any] | None:
    """The ``thinking`` parameter for a budget; refused before any request when the API would refuse it."""
    if not budget:
        return None
    if budget < MIN_THINKING_BUDGET or budget >= max_tokens:
        raise ProviderError(
            PROVIDER_NOT_CONFIGURED,
            f"thinking_budget must be at least {MIN_THINKING_BUDGET} and below max_output_tokens "
            f"({max_tokens}); it is {budget}.",
        )
    return {"type": "enabled", "budget_tokens": budget}


def usage_from(input_tokens: int, output_tokens: int, cache_read: int, cache_write: int) -> Usage:
    """Anthropic counts cache reads and writes apart from ``input_tokens``: the whole prompt is their sum."""
    return Usage(
        input_tokens=input_tokens + cache_read + cache_write,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


class AnthropicProvider:
    name = RUNTIME
    fidelity: Fidelity = PROVIDER_REPLAYABLE

    def __init__(self, *, api_key: str, base_url: str | None = None, timeout_s: float = 600.0) -> None:
        self._api_key = api_key
        self._base_url = base_url or DEFAULT_BASE_URL
        self._timeout_s = timeout_s

    def request_fidelity(self, request: Request) -> Fidelity:
        skipped = _refused_exchanges(request.messages)
        kept = [m for i, m in enumerate(request.messages) if i not in skipped]
        return carried_fidelity(kept, RUNTIME, self.fidelity)

    def _params(self, request: Request) -> dict[str, Any]:
        s = request.settings
        params: dict[str, Any] = {
            "model": s.model,
            "max_tokens": s.max_output_tokens,
            "messages": to_anthropic_messages(request.messages),
            "stream": True,
        }
        system = to_system(request.system_blocks)
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = [t.definition() for t in request.tools]
        thinking = thinking_param(s.thinking_budget, s.max_output_tokens)
        if thinking is not None:
            params["thinking"] = thinking
        # ``temperature`` is not sent: the Messages API version this SDK speaks does not take it.
        return params

    async def stream(self, request: Request) -> AsyncIterator[ProviderEvent]:
        params = self._params(request)
        slots: dict[int, dict[str, Any]] = {}
        input_tokens = cache_read = cache_write = output_tokens = 0
        stop_reason: str | None = None
        stop_details: dict[str, Any] | None = None
        try:
            async with anthropic.AsyncAnthropic(
                api_key=self._api_key, base_url=self._base_url, max_retries=0, timeout=self._timeout_s
            ) as client:
                stream = await client.messages.create(**params)
                async with stream:
                    async for event in stream:
                        kind = event.type
                        if kind == "content_block_delta":
                            slot = slots.get(event.index)
                            if slot is None:
                                continue
                            delta = event.delta
                            dtype = delta.type
                            if dtype == "text_delta":
                                slot["text"].append(delta.text)
                                yield TextDelta(delta.text)
                            elif dtype == "thinking_delta":
                                slot["thinking"].append(delta.thinking)
                                yield ThinkingDelta(delta.thinking)
                            elif dtype == "signature_delta":
                                slot["signature"].append(delta.signature)
                            elif dtype == "input_json_delta":
                                slot["json"].append(delta.partial_json)
                            elif dtype == "citations_delta":
                                slot.setdefault("citations", []).append(_dump(delta.citation))
                        elif kind == "content_block_start":
                            start = _dump(event.content_block)
                            slots[event.index] = {
                                "start": start,
                                "text": [start.get("text", "")] if start.get("type") == "text" else [],
                                "thinking": [start.get("thinking", "")]
                                if start.get("type") == "thinking"
                                else [],
                                "signature": [start.get("signature", "")]
                                if start.get("type") == "thinking"
                                else [],
                                "json": [],
                            }
                        elif kind == "content_block_stop":
                            slot = slots.get(event.index)
                            if slot is not None:
                                slot["stopped"] = True
                            if slot is not None and slot["start"].get("type") == "tool_use":
                                slot["block"] = self._tool_block(slot)
                                yield ToolCallEvent(slot["block"])
                        elif kind == "message_start":
                            u = event.message.usage
                            input_tokens = u.input_tokens or 0
                            cache_read = u.cache_read_input_tokens or 0
                            cache_write = u.cache_creation_input_tokens or 0
                            output_tokens = u.output_tokens or 0
                        elif kind == "message_delta":
                            if event.delta.stop_reason:
                                stop_reason = event.delta.stop_reason
                            details = getattr(event.delta, "stop_details", None)
                            if details is not None:
                                stop_details = _dump(details)
                            u = event.usage
                            output_tokens = u.output_tokens or output_tokens
                            if u.input_tokens is not None:
                                input_tokens = u.input_tokens
                            if u.cache_read_input_tokens is not None:
                                cache_read = u.cache_read_input_tokens
                            if u.cache_creation_input_tokens is not None:
                                cache_write = u.cache_creation_input_tokens
        except ProviderError:
            raise
        except anthropic.AnthropicError as exc:
            logger.info("anthropic provider call failed: %s", type(exc).__name__)
            raise map_anthropic_error(exc) from exc
        blocks = [self._finish_block(slots[i]) for i in sorted(slots)]
        for block in blocks:
            if block is not None and block.get("cut_off"):
                yield ToolCallEvent(block)
        yield usage_from(input_tokens, output_tokens, cache_read, cache_write)
        yield StopReason(stop_reason or "end_turn")
        metadata: dict[str, Any] = {}
        if stop_reason == REFUSAL:
            metadata[REFUSAL] = stop_details or {"type": REFUSAL}
        message = make_assistant([b for b in blocks if b is not None], metadata)
        # A server tool's input that did not parse cannot be sent back as the API wants it.
        broken = any(b is not None and b.get("input_error") for b in blocks)
        fidelity = PORTABLE if broken else PROVIDER_REPLAYABLE
        yield Completed(stamp(message, runtime=RUNTIME, fidelity=fidelity))

    @staticmethod
    def _tool_block(slot: dict[str, Any]) -> dict[str, Any]:
        start = slot["start"]
        raw = "".join(slot["json"])
        if not raw and start.get("input"):
            block = {
                "type": "tool_call",
                "id": start["id"],
                "name": start["name"],
                "arguments": start["input"],
            }
        elif not slot.get("stopped"):
            # Never closed: the answer ended (max_tokens) in the middle of the arguments.
            block = {
                "type": "tool_call",
                "id": start["id"],
                "name": start["name"],
                "raw_arguments": raw,
                "parse_error": CUT_OFF,
                "cut_off": True,
            }
        else:
            block = parse_tool_arguments(start["id"], start["name"], raw)
        if isinstance(start.get("caller"), dict):
            block["caller"] = start["caller"]
        return block

    def _finish_block(self, slot: dict[str, Any]) -> dict[str, Any] | None:
        start = slot["start"]
        kind = start.get("type")
        if kind == "text":
            text = "".join(slot["text"])
            if not text:
                return None
            block: dict[str, Any] = {"type": "text", "text": text}
            if slot.get("citations") or start.get("citations"):
                # Text with citations is not modelled; keep the provider's own shape for replay.
                raw = {
                    **start,
                    "text": text,
                    "citations": [*(start.get("citations") or []), *slot.get("citations", [])],
                }
                return {"type": PROVIDER_BLOCK, "provider": "anthropic", "block": raw}
            return block
        if kind == "thinking":
            return {
                "type": "thinking",
                "thinking": "".join(slot["thinking"]),
                "signature": "".join(slot["signature"]),
            }
        if kind == "redacted_thinking":
            return {"type": "redacted_thinking", "data": start.get("data", "")}
        if kind == "tool_use":
            return slot.get("block") or self._tool_block(slot)
        streamed = "".join(slot["json"])
        if streamed:
            # Streamed input (a server tool use): the block is whole only with it.
            try:
                start = {**start, "input": json.loads(streamed)}
            except ValueError:
                return {
                    "type": PROVIDER_BLOCK,
                    "provider": "anthropic",
                    "block": start,
                    "partial_json": streamed,
                    "input_error": "the streamed input is not valid JSON",
                }
        return {"type": PROVIDER_BLOCK, "provider": "anthropic", "block": start}
