"""The capability probe for an OpenAI-compatible server: which of the features the runtime relies on does
this server (and model) really support?

Two small streamed requests through the ``openai`` SDK:

1. a one-word answer with ``stream_options.include_usage`` — ``streaming_usage`` when a usage chunk
   arrives (a server that refuses the option is asked again without it);
2. a request offering one function tool with ``parallel_tool_calls`` — ``parallel_tool_calls`` when the
   server takes the parameter (else asked again without it), ``tools`` when it takes tools at all, and
   ``json_arguments`` when the call it made carries arguments that parse as the JSON object the schema
   asks for;
3. when it made a call, the continuation: the next request carries the call back as the runtime sends
   it (exact argument text, and every extension field the server emitted: ``reasoning_content``,
   ``reasoning``, ``reasoning_details``, a call's ``extra_content``) with the call's result.
   ``continuation`` when the server accepts it; the fields it emitted are ``continuation_fields``.
   A server that wants a field back it did not get refuses such a request, as DeepSeek's and Gemini's
   do, and a server that refuses the fields fails it too: either way it is not verified.

A refusal (HTTP 400 or 422) means "not supported"; any other failure is raised as ``provider_error`` and
nothing is concluded. The caller caches the answer per (server, model).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import openai

from .base import CompatCapabilities
from .openai_compatible_provider import CALL_FIELD, LIST_FIELDS, TEXT_FIELDS, map_openai_error, merge_details

logger = logging.getLogger(__name__)

REFUSED = frozenset({400, 422})
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "record_probe",
        "description": "Records one probe value.",
        "parameters": {
            "type": "object",
            "properties": {"value": {"type": "string"}},
            "required": ["value"],
            "additionalProperties": False,
        },
    },
}
TOOL_PROMPT = (
    'Call the record_probe tool twice in one reply: once with value "alpha" and once with value "beta". '
    "Do not answer with text."
)
TEXT_PROMPT = "Reply with the single word: ready."


class _Refused(Exception):
    def __init__(self, error: openai.APIStatusError) -> None:
        super().__init__(error.status_code)
        self.error = error


async def _stream(client: openai.AsyncOpenAI, params: dict[str, Any]) -> list[Any]:
    try:
        stream = await client.chat.completions.create(**params)
        async with stream:
            return [chunk async for chunk in stream]
    except openai.APIStatusError as exc:
        if exc.status_code in REFUSED:
            raise _Refused(exc) from exc
        raise


def _assistant_turn(chunks: list[Any]) -> tuple[dict[str, Any], list[str]]:
    """The assistant message the streamed chunks make, as the runtime sends it back, and the extension
    fields the server emitted."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    texts: dict[str, list[str]] = {}
    lists: dict[str, list[Any]] = {}
    calls: dict[int, dict[str, Any]] = {}
    content: list[str] = []
    for chunk in chunks:
        for choice in chunk.choices or ():
            delta = choice.delta
            if delta is None:
                continue
            extra = delta.model_extra or {}
            for name in TEXT_FIELDS:
                if isinstance(extra.get(name), str) and extra[name]:
                    texts.setdefault(name, []).append(extra[name])
            for name in LIST_FIELDS:
                if isinstance(extra.get(name), list) and extra[name]:
                    lists.setdefault(name, []).extend(extra[name])
            if delta.content:
                content.append(delta.content)
            for tc in delta.tool_calls or ():
                slot = calls.setdefault(
                    tc.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] = tc.id or slot["id"]
                carried = (tc.model_extra or {}).get(CALL_FIELD)
                if isinstance(carried, dict):
                    slot[CALL_FIELD] = carried
                if tc.function is not None:
                    slot["function"]["name"] += tc.function.name or ""
                    arguments = tc.function.arguments
                    if arguments and not isinstance(arguments, str):
                        arguments = json.dumps(arguments, ensure_ascii=False)
                    slot["function"]["arguments"] += arguments or ""
    if content:
        message["content"] = "".join(content)
    for name, parts in texts.items():
        message[name] = "".join(parts)
    for name, items in lists.items():
        message[name] = merge_details(items)
    if calls:
        message["tool_calls"] = [
            {**slot, "id": slot["id"] or f"call_{index}"} for index, slot in sorted(calls.items())
        ]
    fields = [*texts, *lists]
    if any(CALL_FIELD in slot for slot in calls.values()):
        fields.append(CALL_FIELD)
    return message, fields


def _arguments_ok(chunks: list[Any]) -> tuple[bool, bool]:
    """(a tool call was made, every call's arguments are a JSON object with a string ``value``)."""
    calls: dict[int, list[str]] = {}
    well_formed = True
    for chunk in chunks:
        for choice in chunk.choices or ():
            for tc in (choice.delta.tool_calls if choice.delta is not None else None) or ():
                pieces = calls.setdefault(tc.index, [])
                arguments = tc.function.arguments if tc.function is not None else None
                if arguments is None:
                    continue
                if not isinstance(arguments, str):
                    well_formed = False
                    continue
                pieces.append(arguments)
    if not calls:
        return False, False
    for pieces in calls.values():
        try:
            parsed = json.loads("".join(pieces))
        except ValueError:
            return True, False
        if not isinstance(parsed, dict) or not isinstance(parsed.get("value"), str):
            return True, False
    return True, well_formed


async def probe_openai_compatible(
    *,
    api_key: str,
    base_url: str,
    model: str,
    timeout_s: float = 60.0,
    max_tokens_param: str = "max_completion_tokens",
) -> CompatCapabilities:
    """Ask the server what it supports. Raises ``ProviderError`` when it cannot be reached or fails."""
    try:
        async with openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s
        ) as client:
            base = {"model": model, "stream": True, max_tokens_param: 64}
            text = {**base, "messages": [{"role": "user", "content": TEXT_PROMPT}]}
            try:
                chunks = await _stream(client, {**text, "stream_options": {"include_usage": True}})
                streaming_usage = any(getattr(c, "usage", None) is not None for c in chunks)
            except _Refused:
                await _stream(client, text)
                streaming_usage = False

            tool_params = {
                **base,
                "messages": [{"role": "user", "content": TOOL_PROMPT}],
                "tools": [PROBE_TOOL],
            }
            if streaming_usage:
                tool_params["stream_options"] = {"include_usage": True}
            parallel = tools = True
            try:
                chunks = await _stream(client, {**tool_params, "parallel_tool_calls": True})
            except _Refused:
                parallel = False
                try:
                    chunks = await _stream(client, tool_params)
                except _Refused:
                    tools, chunks = False, []
            called, json_arguments = _arguments_ok(chunks) if tools else (False, False)
            continuation, fields = False, list[str]()
            if called:
                turn, fields = _assistant_turn(chunks)
                results = [
                    {"role": "tool", "tool_call_id": call["id"], "content": '{"recorded": true}'}
                    for call in turn["tool_calls"]
                ]
                sent: list[Any] = [{"role": "user", "content": TOOL_PROMPT}, turn, *results]
                follow_up = {**tool_params, "messages": sent}
                try:
                    await _stream(client, follow_up)
                    continuation = True
                except _Refused:
                    continuation = False
    except _Refused as exc:  # the plain text request itself was refused
        raise map_openai_error(exc.error) from exc
    except openai.OpenAIError as exc:
        logger.info("openai-compatible probe failed: %s", type(exc).__name__)
        raise map_openai_error(exc) from exc
    capabilities = CompatCapabilities(
        tools=tools,
        json_arguments=called and json_arguments,
        streaming_usage=streaming_usage,
        parallel_tool_calls=tools and parallel,
        continuation=continuation,
        continuation_fields=tuple(fields) if continuation else (),
    )
    logger.info("openai-compatible probe model=%s result=%s", model, capabilities.as_dict())
    return capabilities
