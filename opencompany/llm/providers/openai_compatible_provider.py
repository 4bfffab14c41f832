"""OpenAI-compatible servers (Ollama, vLLM, LM Studio, ...) on Chat Completions through the official
``openai`` SDK.

What is sent follows the server's verified capabilities (:class:`CompatCapabilities`, from the probe
in ``openai_compatible_probe``): tools, ``stream_options.include_usage`` and ``parallel_tool_calls``
only where the server takes them; without tools, tool turns are sent as text. Fidelity is
``provider_replayable`` only where the probe passed — Chat Completions exposes no signatures or
encrypted state, so text, tool calls and results are the whole continuation — and ``portable``
otherwise, or for a turn whose streamed reasoning text the API offers no way to send back. The argument
text of a malformed tool call is replayed exactly as the model sent it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import openai

from ..fidelity import PORTABLE, stamp
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


def _call_text(call: dict[str, Any]) -> str:
    arguments = call.get("raw_arguments")
    if arguments is None:
        arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
    return f"[called {call['name']} with {arguments}]"


def to_chat_messages(
    system_blocks: list[str], messages: list[Message], *, tools: bool = True
) -> list[dict[str, Any]]:
    """MessageWire → Chat Completions messages. The system blocks become ONE system message (the stable
    prompt first, so the provider's prefix cache still matches); thinking/reasoning/unknown blocks are
    not sent; role ``system`` entries inside ``messages`` are ignored. ``tools=False`` (a server without
    tool support) sends tool calls and results as text."""
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
            entry: dict[str, Any] = {"role": "assistant", "content": text_of(m) or None}
            calls = []
            for c in tool_calls_of(m):
                if "raw_arguments" in c:
                    arguments = c["raw_arguments"]
                else:
                    arguments = json.dumps(c.get("arguments") or {}, ensure_ascii=False)
                calls.append(
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": arguments},
                    }
                )
            if calls:
                entry["tool_calls"] = calls
            if entry["content"] is not None or calls:
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

    async def stream(self, request: Request) -> AsyncIterator[ProviderEvent]:
        params = self._params(request)
        text_parts: list[str] = []
        reasoned = False
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
                            details = chunk.usage.prompt_tokens_details
                            usage = Usage(
                                input_tokens=chunk.usage.prompt_tokens or 0,
                                output_tokens=chunk.usage.completion_tokens or 0,
                                cache_read_tokens=(details.cached_tokens or 0) if details is not None else 0,
                            )
                        for choice in chunk.choices or ():
                            if choice.index != 0:
                                continue
                            delta = choice.delta
                            if delta is not None:
                                reasoning = getattr(delta, "reasoning_content", None) or getattr(
                                    delta, "reasoning", None
                                )
                                if isinstance(reasoning, str) and reasoning:
                                    # Shown live, not kept: Chat Completions offers no replayable form of it.
                                    reasoned = True
                                    yield ThinkingDelta(reasoning)
                                if delta.content:
                                    text_parts.append(delta.content)
                                    yield TextDelta(delta.content)
                                for tc in delta.tool_calls or ():
                                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": []})
                                    if tc.id:
                                        slot["id"] = tc.id
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
        blocks: list[dict[str, Any]] = []
        text = "".join(text_parts)
        if text:
            blocks.append(make_text(text))
        for index in sorted(calls):
            slot = calls[index]
            call_id = slot["id"] or f"call_{index}"
            block = parse_tool_arguments(call_id, slot["name"], "".join(slot["arguments"]))
            blocks.append(block)
            yield ToolCallEvent(block)
        if usage is not None:
            yield Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
            )
        yield StopReason(finish or "stop")
        fidelity = PORTABLE if reasoned else self.fidelity
        yield Completed(stamp(make_assistant(blocks), runtime=RUNTIME, fidelity=fidelity))
