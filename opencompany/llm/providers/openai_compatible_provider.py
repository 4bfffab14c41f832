"""OpenAI-compatible servers (Ollama, vLLM, LM Studio, ...) on Chat Completions through the official
``openai`` SDK.

What is sent follows the server's verified capabilities (:class:`CompatCapabilities`, from the probe
in ``openai_compatible_probe``): tools, ``stream_options.include_usage`` and ``parallel_tool_calls``
only where the server takes them; without tools, tool turns are sent as text.

Continuation beyond text and tool calls rides extension fields some servers add, kept per message and
sent back to the same runtime exactly as they came: the reasoning text of thinking models
(``reasoning_content``, as DeepSeek's API requires back after tool calls, or ``reasoning``) and
structured reasoning (``reasoning_details``), kept as ``reasoning`` blocks naming their field; and a
tool call's ``extra_content`` (Gemini's OpenAI-compatible endpoint carries its thought signatures
there). Tool arguments go back as the exact text the server streamed. Fidelity is
``provider_replayable`` only where the probe passed and verified the round trip of every continuation
field the turn carries; ``portable`` otherwise.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import openai

from ..fidelity import PORTABLE, PROVIDER_REPLAYABLE, carried_fidelity, replays_opaque_state, stamp
from ..wire import (
    Message,
    make_assistant,
    make_text,
    parse_tool_arguments,
    text_of,
    tool_calls_of,
    tool_result_of,
)
from .base import (
    PROVIDER_ERROR,
    CompatCapabilities,
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

RUNTIME = "openai_compatible"
# Message-level extension fields that carry a thinking model's continuation: text fields, then lists.
TEXT_FIELDS = ("reasoning_content", "reasoning")
LIST_FIELDS = ("reasoning_details",)
CONTINUATION_FIELDS = (*TEXT_FIELDS, *LIST_FIELDS)
# A tool call's extension field (Gemini's thought signature rides it).
CALL_FIELD = "extra_content"


def _arguments_text(call: dict[str, Any]) -> str:
    """The argument text a call goes back with: as the model wrote it (kept exactly as it streamed,
    or raw when malformed), else the arguments serialized."""
    if "raw_arguments" in call:
        return str(call["raw_arguments"])
    if isinstance(call.get("provider_arguments"), str):
        return str(call["provider_arguments"])
    return json.dumps(call.get("arguments") or {}, ensure_ascii=False)


def continuation_fields_of(message: Message) -> list[str]:
    """The extension fields an assistant turn carries (message-level, then ``extra_content``)."""
    fields = [
        b["field"]
        for b in message.get("content") or ()
        if b.get("type") == "reasoning" and b.get("field") in CONTINUATION_FIELDS
    ]
    if any(CALL_FIELD in c for c in tool_calls_of(message)):
        fields.append(CALL_FIELD)
    return fields


def _call_text(call: dict[str, Any]) -> str:
    return f"[called {call['name']} with {_arguments_text(call)}]"


def to_chat_messages(
    system_blocks: list[str], messages: list[Message], *, tools: bool = True
) -> list[dict[str, Any]]:
    """MessageWire → Chat Completions messages. The system blocks become ONE system message (the stable
    prompt first, so the provider's prefix cache still matches); thinking/reasoning/unknown blocks are
    not sent, except the extension fields of this runtime's own turns; role ``system`` entries inside
    ``messages`` are ignored. ``tools=False`` (a server without tool support) sends tool calls and
    results as text."""
    out: list[dict[str, Any]] = []
    system = "\n\n".join(b for b in system_blocks if b)
    if system:
        out.append({"role": "system", "content": system})
    for m in messages:
        role = m.get("role")
        if role == "user":
            text = text_of(m)
            if text:
                out.append({"role": "user", "content": text})
        elif role == "assistant" and not tools:
            text = "\n".join(filter(None, [text_of(m), *(_call_text(c) for c in tool_calls_of(m))]))
            if text:
                out.append({"role": "assistant", "content": text})
        elif role == "assistant":
            own = replays_opaque_state(m, RUNTIME)
            entry: dict[str, Any] = {"role": "assistant", "content": text_of(m) or None}
            if own:
                for b in m.get("content") or ():
                    if b.get("type") != "reasoning":
                        continue
                    if b.get("field") in TEXT_FIELDS:
                        entry[b["field"]] = b.get("text", "")
                    elif b.get("field") in LIST_FIELDS:
                        entry[b["field"]] = b.get("details") or []
            calls = []
            for c in tool_calls_of(m):
                call: dict[str, Any] = {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": _arguments_text(c)},
                }
                if own and isinstance(c.get(CALL_FIELD), dict):
                    call[CALL_FIELD] = c[CALL_FIELD]
                calls.append(call)
            if calls:
                entry["tool_calls"] = calls
            if entry["content"] is not None or calls or len(entry) > 2:
                out.append(entry)
        elif role == "tool" and not tools:
            block = tool_result_of(m)
            if block is not None:
                text = f"[result of {block.get('name', '')}: {block.get('content', '')}]"
                out.append({"role": "user", "content": text})
        elif role == "tool":
            block = tool_result_of(m)
            if block is not None:
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": block["tool_call_id"],
                        "content": block.get("content", ""),
                    }
                )
    return out


def to_chat_tools(request: Request) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
        }
        for t in request.tools
    ]


def map_openai_error(exc: Exception, *, label: str = "The OpenAI-compatible provider") -> ProviderError:
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        headers = exc.response.headers if exc.response is not None else None
        return ProviderError(
            PROVIDER_ERROR,
            f"{label} answered HTTP {status}.",
            status=status,
            retry_after=parse_retry_after(headers, status),
        )
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError(PROVIDER_ERROR, f"{label} timed out.")
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError(PROVIDER_ERROR, f"Could not connect to {label}.")
    return ProviderError(PROVIDER_ERROR, f"{label} failed ({type(exc).__name__}).")


# Before a probe: send everything, claim nothing.
UNVERIFIED = CompatCapabilities(tools=True, streaming_usage=True)


class OpenAICompatibleProvider:
    name = RUNTIME

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        timeout_s: float = 600.0,
        max_tokens_param: str = "max_completion_tokens",
        capabilities: CompatCapabilities | None = None,
    ) -> None:
        self._api_key = api_key
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._max_tokens_param = max_tokens_param
        self.verified = capabilities is not None
        self.capabilities = capabilities or UNVERIFIED
        self.fidelity: Fidelity = capabilities.fidelity if capabilities is not None else PORTABLE

    def _params(self, request: Request) -> dict[str, Any]:
        s = request.settings
        caps = self.capabilities
        params: dict[str, Any] = {
            "model": s.model,
            "messages": to_chat_messages(request.system_blocks, request.messages, tools=caps.tools),
            "stream": True,
            self._max_tokens_param: s.max_output_tokens,
        }
        if caps.streaming_usage:
            params["stream_options"] = {"include_usage": True}
        if request.tools and caps.tools:
            params["tools"] = to_chat_tools(request)
            if caps.parallel_tool_calls:
                params["parallel_tool_calls"] = True
        if s.temperature is not None:
            params["temperature"] = s.temperature
        return params

    def turn_fidelity(self, message: Message) -> Fidelity:
        """A turn is replayable when the server was verified and the round trip of every extension
        field the turn carries was too."""
        if self.fidelity != PROVIDER_REPLAYABLE:
            return PORTABLE
        verified = set(self.capabilities.continuation_fields)
        return PROVIDER_REPLAYABLE if set(continuation_fields_of(message)) <= verified else PORTABLE

    def request_fidelity(self, request: Request) -> Fidelity:
        return carried_fidelity(request.messages, RUNTIME, self.fidelity)

    async def stream(self, request: Request) -> AsyncIterator[ProviderEvent]:
        params = self._params(request)
        text_parts: list[str] = []
        reasoning: dict[str, list[str]] = {}
        details: dict[str, list[Any]] = {}
        calls: dict[int, dict[str, Any]] = {}
        usage: Usage | None = None
        finish: str | None = None
        try:
            async with openai.AsyncOpenAI(
                api_key=self._api_key, base_url=self._base_url, max_retries=0, timeout=self._timeout_s
            ) as client:
                stream = await client.chat.completions.create(**params)
                async with stream:
                    async for chunk in stream:
                        if chunk.usage is not None:
                            found = chunk.usage.prompt_tokens_details
                            usage = Usage(
                                input_tokens=chunk.usage.prompt_tokens or 0,
                                output_tokens=chunk.usage.completion_tokens or 0,
                                cache_read_tokens=(found.cached_tokens or 0) if found is not None else 0,
                            )
                        for choice in chunk.choices or ():
                            if choice.index != 0:
                                continue
                            delta = choice.delta
                            if delta is not None:
                                extra = delta.model_extra or {}
                                for name in TEXT_FIELDS:
                                    piece = extra.get(name)
                                    if isinstance(piece, str) and piece:
                                        reasoning.setdefault(name, []).append(piece)
                                        yield ThinkingDelta(piece)
                                for name in LIST_FIELDS:
                                    items = extra.get(name)
                                    if isinstance(items, list) and items:
                                        details.setdefault(name, []).extend(items)
                                if delta.content:
                                    text_parts.append(delta.content)
                                    yield TextDelta(delta.content)
                                for tc in delta.tool_calls or ():
                                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": []})
                                    if tc.id:
                                        slot["id"] = tc.id
                                    carried = (tc.model_extra or {}).get(CALL_FIELD)
                                    if isinstance(carried, dict):
                                        slot[CALL_FIELD] = carried
                                    if tc.function is not None:
                                        if tc.function.name:
                                            slot["name"] += tc.function.name
                                        arguments = tc.function.arguments
                                        if arguments and not isinstance(arguments, str):
                                            # A server that sends an object, not JSON text.
                                            arguments = json.dumps(arguments, ensure_ascii=False)
                                        if arguments:
                                            slot["arguments"].append(arguments)
                            if choice.finish_reason:
                                finish = choice.finish_reason
        except ProviderError:
            raise
        except openai.OpenAIError as exc:
            logger.info("openai-compatible provider call failed: %s", type(exc).__name__)
            raise map_openai_error(exc) from exc
        blocks: list[dict[str, Any]] = [
            {"type": "reasoning", "field": name, "text": "".join(parts)} for name, parts in reasoning.items()
        ]
        blocks += [
            {"type": "reasoning", "field": name, "details": merge_details(items)}
            for name, items in details.items()
        ]
        text = "".join(text_parts)
        if text:
            blocks.append(make_text(text))
        for index in sorted(calls):
            slot = calls[index]
            call_id = slot["id"] or f"call_{index}"
            exact = "".join(slot["arguments"])
            block = parse_tool_arguments(call_id, slot["name"], exact)
            if "arguments" in block and exact:
                block["provider_arguments"] = exact
            if CALL_FIELD in slot:
                block[CALL_FIELD] = slot[CALL_FIELD]
            blocks.append(block)
            yield ToolCallEvent(block)
        if usage is not None:
            yield Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
            )
        yield StopReason(finish or "stop")
        message = make_assistant(blocks)
        yield Completed(stamp(message, runtime=RUNTIME, fidelity=self.turn_fidelity(message)))


def merge_details(items: list[Any]) -> list[Any]:
    """Streamed ``reasoning_details`` entries joined into whole ones: entries sharing an ``index`` are
    one detail whose text fields arrive in pieces; any other field is kept as it came."""
    merged: list[Any] = []
    by_index: dict[Any, dict[str, Any]] = {}
    for item in items:
        if not isinstance(item, dict) or "index" not in item:
            merged.append(item)
            continue
        current = by_index.get(item["index"])
        if current is None:
            current = by_index[item["index"]] = dict(item)
            merged.append(current)
            continue
        for key, value in item.items():
            if key in {"text", "summary", "data"} and isinstance(value, str):
                current[key] = str(current.get(key) or "") + value
            elif value is not None:
                current[key] = value
    return merged
