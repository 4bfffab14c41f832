"""Gemini ``generate_content`` streaming through Google's official ``google-genai`` SDK.

Fidelity is ``provider_replayable``: the model's parts are kept in order — thought summaries as
``thinking`` blocks, text, function calls — each with the thought signature Gemini attached to it
(``thought_signature``, base64 of the signature bytes), and any part kind this adapter does not model
as ``{"type": "provider_block", "provider": "gemini", "block": {...}}``. They are sent back unchanged
on the next request. Signatures reach Gemini only from turns Gemini wrote.

A function call Gemini could not form (finish reason ``MALFORMED_FUNCTION_CALL``) is kept raw: a
``tool_call`` whose ``raw_arguments`` hold the service's finish message (Vertex sends the model's text;
the Gemini API, through this SDK, sends none, so it is empty) and whose name is the one the text calls,
else ``unknown``. It is replayed as text, since it never was a function call part.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from ..fidelity import PROVIDER_REPLAYABLE, carried_fidelity, replays_opaque_state, stamp
from ..wire import Message, make_assistant, tool_result_of
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
    parse_retry_after,
)

logger = logging.getLogger(__name__)

RUNTIME = "gemini"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
API_VERSION = "v1beta"
PROVIDER_BLOCK = "provider_block"
MALFORMED_CALL = "MALFORMED_FUNCTION_CALL"
# Gemini words a malformed call as Python ("print(default_api.memory(operation=...))").
_CALLED_NAME = re.compile(r"default_api\.([A-Za-z_][\w\-]*)\s*\(")


def _signature(block: dict[str, Any]) -> bytes | None:
    value = block.get("thought_signature")
    return base64.b64decode(value) if isinstance(value, str) and value else None


def _textual_call(block: dict[str, Any]) -> str:
    raw = block.get("raw_arguments") or ""
    return f"[malformed function call: {raw}]" if raw else "[malformed function call]"


def _model_parts(
    m: Message, called_with_id: set[str], textual: set[str], replays: Callable[[Message], bool]
) -> list[types.Part]:
    own = replays(m)
    parts: list[types.Part] = []
    for b in m.get("content") or ():
        kind = b.get("type")
        signature = _signature(b) if own else None
        if kind == "text":
            if b.get("text") or signature:
                parts.append(types.Part(text=b.get("text", ""), thought_signature=signature))
        elif kind == "thinking" and own:
            parts.append(types.Part(text=b["thinking"], thought=True, thought_signature=signature))
        elif kind == "tool_call":
            if "raw_arguments" in b:
                textual.add(b["id"])
                parts.append(types.Part(text=_textual_call(b)))
                continue
            call_id = b["id"] if own and not b.get("local_id") else None
            if call_id is not None:
                called_with_id.add(call_id)
            call = types.FunctionCall(id=call_id, name=b["name"], args=dict(b.get("arguments") or {}))
            parts.append(types.Part(function_call=call, thought_signature=signature))
        elif (
            kind == PROVIDER_BLOCK
            and own
            and b.get("provider") in {RUNTIME, "vertex"}
            and isinstance(b.get("block"), dict)
        ):
            parts.append(types.Part.model_validate_json(json.dumps(b["block"])))
    return parts


def _gemini_turn(message: Message) -> bool:
    return replays_opaque_state(message, RUNTIME)


def to_gemini_contents(
    messages: list[Message], *, own: Callable[[Message], bool] = _gemini_turn
) -> list[types.Content]:
    """MessageWire → ``contents``: assistant turns become ``model`` contents, tool results ride ``user``
    contents as function responses, and adjacent contents of one role are merged. ``own`` says which
    turns' signatures and provider blocks go back (Gemini's own, by default)."""
    out: list[types.Content] = []
    called_with_id: set[str] = set()
    textual: set[str] = set()
    for m in messages:
        role = m.get("role")
        parts: list[types.Part]
        if role == "user":
            parts = [
                types.Part(text=b["text"])
                for b in m.get("content") or ()
                if b.get("type") == "text" and b.get("text")
            ]
            api_role = "user"
        elif role == "assistant":
            parts = _model_parts(m, called_with_id, textual, own)
            api_role = "model"
        elif role == "tool":
            result = tool_result_of(m)
            if result is None:
                continue
            call_id = result["tool_call_id"]
            content = result.get("content", "")
            if call_id in textual:
                parts = [types.Part(text=f"[result of the malformed function call: {content}]")]
            else:
                key = "output" if result.get("status") == "ok" else "error"
                response = types.FunctionResponse(
                    id=call_id if call_id in called_with_id else None,
                    name=result.get("name", ""),
                    response={key: content},
                )
                parts = [types.Part(function_response=response)]
            api_role = "user"
        else:
            continue
        if not parts:
            continue
        if out and out[-1].role == api_role:
            out[-1].parts = [*(out[-1].parts or []), *parts]
        else:
            out.append(types.Content(role=api_role, parts=parts))
    return out


def to_gemini_config(request: Request) -> types.GenerateContentConfig:
    s = request.settings
    system = "\n\n".join(b for b in request.system_blocks if b)
    config = types.GenerateContentConfig(
        system_instruction=system or None,
        max_output_tokens=s.max_output_tokens,
        temperature=s.temperature,
        # The loop runs the tools: the SDK must never call Python functions by itself.
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    if request.tools:
        config.tools = [
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name=t.name, description=t.description, parameters_json_schema=t.input_schema
                    )
                    for t in request.tools
                ]
            )
        ]
    if s.thinking_budget:
        config.thinking_config = types.ThinkingConfig(
            include_thoughts=True, thinking_budget=s.thinking_budget
        )
    return config


def usage_from(metadata: types.GenerateContentResponseUsageMetadata) -> Usage:
    """The whole prompt (cached part included) as input; answer and thoughts as output."""
    return Usage(
        input_tokens=(metadata.prompt_token_count or 0) + (metadata.tool_use_prompt_token_count or 0),
        output_tokens=(metadata.candidates_token_count or 0) + (metadata.thoughts_token_count or 0),
        cache_read_tokens=metadata.cached_content_token_count or 0,
    )


def map_gemini_error(exc: Exception) -> ProviderError:
    if isinstance(exc, genai_errors.APIError):
        status = exc.code if isinstance(exc.code, int) else None
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        return ProviderError(
            PROVIDER_ERROR,
            f"Gemini answered HTTP {status}." if status else "Gemini reported an error in the stream.",
            status=status,
            retry_after=parse_retry_after(headers, status),
        )
    return ProviderError(PROVIDER_ERROR, f"Gemini failed ({type(exc).__name__}).")


class _Collector:
    """Builds wire blocks from streamed parts: unsigned text deltas of one kind join; a part that carries
    a thought signature stays a block of its own, as Gemini requires (a signature never moves to text
    it did not come with); every other part is a block of its own."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    def text(self, text: str, *, thought: bool, signature: bytes | None) -> None:
        kind = "thinking" if thought else "text"
        field = "thinking" if thought else "text"
        if self._open is None or self._open["type"] != kind or signature:
            self._open = {"type": kind, field: ""}
            self.blocks.append(self._open)
        self._open[field] += text
        if signature:
            self._open["thought_signature"] = base64.b64encode(signature).decode("ascii")
            self._open = None

    def add(self, block: dict[str, Any]) -> None:
        self._open = None
        self.blocks.append(block)


def _call_block(call: types.FunctionCall, signature: bytes | None) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_call",
        "id": call.id or "",
        "name": call.name or "",
        "arguments": {},
    }
    if not call.id:
        # Gemini sent no id: one is assigned here and never sent back as if Gemini had made it.
        block["id"], block["local_id"] = f"gemini_{uuid.uuid4().hex[:16]}", True
    block["arguments"] = dict(call.args or {})
    if signature:
        block["thought_signature"] = base64.b64encode(signature).decode("ascii")
    return block


def _malformed_block(message: str) -> dict[str, Any]:
    found = _CALLED_NAME.search(message)
    name = found.group(1) if found else "unknown"
    return {
        "type": "tool_call",
        "id": f"gemini_{uuid.uuid4().hex[:16]}",
        "local_id": True,
        "name": name,
        "raw_arguments": message,
        "parse_error": "Gemini could not form this function call (MALFORMED_FUNCTION_CALL).",
    }


class GeminiProvider:
    name = RUNTIME
    fidelity: Fidelity = PROVIDER_REPLAYABLE

    def __init__(self, *, api_key: str, base_url: str | None = None, timeout_s: float = 600.0) -> None:
        self._api_key = api_key
        self._base_url = base_url or DEFAULT_BASE_URL
        self._timeout_s = timeout_s

    def request_fidelity(self, request: Request) -> Fidelity:
        return carried_fidelity(request.messages, self.name, self.fidelity)

    def _client(self) -> genai.Client:
        options = types.HttpOptions(
            base_url=self._base_url,
            api_version=API_VERSION,
            timeout=int(self._timeout_s * 1000),
            # One attempt: the app decides about retries (the loop reports the error).
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        return genai.Client(api_key=self._api_key, http_options=options)

    def _contents(self, messages: list[Message]) -> list[types.Content]:
        return to_gemini_contents(messages)

    def _finished(self, message: Message, response_id: str | None) -> Message:
        return stamp(message, runtime=RUNTIME, fidelity=PROVIDER_REPLAYABLE)

    async def stream(self, request: Request) -> AsyncIterator[ProviderEvent]:
        contents = self._contents(request.messages)
        config = to_gemini_config(request)
        collected = _Collector()
        usage: Usage | None = None
        finish: str | None = None
        finish_message = ""
        response_id: str | None = None
        try:
            async with self._client().aio as client:
                stream = await client.models.generate_content_stream(
                    model=request.settings.model, contents=contents, config=config
                )
                async for chunk in stream:
                    response_id = chunk.response_id or response_id
                    if chunk.usage_metadata is not None:
                        usage = usage_from(chunk.usage_metadata)
                    for candidate in (chunk.candidates or ())[:1]:
                        if candidate.finish_reason is not None:
                            finish = str(candidate.finish_reason.value)
                            finish_message = candidate.finish_message or ""
                        parts = candidate.content.parts if candidate.content is not None else None
                        for part in parts or ():
                            signature = part.thought_signature
                            if part.function_call is not None:
                                block = _call_block(part.function_call, signature)
                                collected.add(block)
                                yield ToolCallEvent(block)
                            elif part.text is not None:
                                collected.text(part.text, thought=bool(part.thought), signature=signature)
                                if part.text:
                                    yield ThinkingDelta(part.text) if part.thought else TextDelta(part.text)
                            else:
                                raw = json.loads(part.model_dump_json(exclude_none=True, by_alias=True))
                                collected.add({"type": PROVIDER_BLOCK, "provider": self.name, "block": raw})
        except ProviderError:
            raise
        except Exception as exc:
            # The SDK raises APIError for HTTP and in-stream errors, and its HTTP client's own errors
            # (connection, timeout) unwrapped: each is a failed call.
            logger.info("gemini provider call failed: %s", type(exc).__name__)
            raise map_gemini_error(exc) from exc
        if finish == MALFORMED_CALL:
            block = _malformed_block(finish_message)
            collected.add(block)
            yield ToolCallEvent(block)
        if usage is not None:
            yield usage
        yield StopReason((finish or "STOP").lower())
        yield Completed(self._finished(make_assistant(collected.blocks), response_id))
