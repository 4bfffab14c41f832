"""RLM: a recursive language model runtime over an OpenAI-compatible Chat Completions server.

The root model answers the request with the agent's tools plus one more, ``llm_query(prompt)``: a
recursive call, answered inside this runtime by a fresh call of the same model on that prompt alone
(which may query further, down to ``max_depth``). The root model goes on with each answer until it
replies or calls one of the agent's tools, which the agent loop runs as usual.

Observable-only and non-resumable: the stored turn is what the run showed — the recursive queries with
their answers (``provider_block`` s of kind ``llm_query``), the root's text, the agent's tool calls — and
every request sends the stored conversation in its portable form (text, tool calls, tool results), so
nothing of a run's own state is kept or claimed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ..fidelity import OBSERVABLE, carried_fidelity, stamp
from ..tools import ToolContext, ToolSpec
from ..wire import Message, make_assistant, make_tool_result, make_user, text_of, tool_calls_of
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
)
from .openai_compatible_provider import OpenAICompatibleProvider

RUNTIME = "rlm"
QUERY_TOOL = "llm_query"
PROVIDER_BLOCK = "provider_block"
MAX_STEPS = 12
INSTRUCTION = (
    "You can call llm_query(prompt) to have a language model answer a self-contained sub-question; "
    "split large or many-part work into such queries, then answer from their results."
)


def _unused(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:  # pragma: no cover
    raise AssertionError("llm_query is answered by the runtime, never by the loop")


QUERY_SPEC = ToolSpec(
    QUERY_TOOL,
    "Ask a language model a self-contained sub-question; returns its answer as text.",
    {
        "type": "object",
        "properties": {"prompt": {"type": "string", "minLength": 1}},
        "required": ["prompt"],
        "additionalProperties": False,
    },
    _unused,
)


class RLMProvider:
    name = RUNTIME
    fidelity: Fidelity = OBSERVABLE

    def __init__(self, *, api_key: str, base_url: str, timeout_s: float = 600.0, max_depth: int = 2) -> None:
        self._inner = OpenAICompatibleProvider(
            api_key=api_key,
            base_url=base_url,
            timeout_s=timeout_s,
            # Sent as to any server that takes tools and reports usage; nothing is claimed from it.
            capabilities=CompatCapabilities(tools=True, streaming_usage=True),
        )
        self.max_depth = max_depth

    def request_fidelity(self, request: Request) -> Fidelity:
        return carried_fidelity(request.messages, RUNTIME, self.fidelity)

    async def _call(
        self,
        request: Request,
        messages: list[Message],
        tools: list[ToolSpec],
        usage: list[Usage],
        *,
        live: bool,
    ) -> AsyncIterator[ProviderEvent | Message]:
        """One model call: its text deltas (``live``: shown as the answer, else as thinking), then the
        assistant message it made."""
        sub = Request(request.system_blocks, messages, tools, request.settings, request.cancel)
        async for event in self._inner.stream(sub):
            if isinstance(event, TextDelta):
                yield event if live else ThinkingDelta(event.text)
            elif isinstance(event, ThinkingDelta):
                yield event
            elif isinstance(event, Usage):
                usage.append(event)
            elif isinstance(event, Completed):
                yield event.message

    async def _query(
        self, request: Request, prompt: str, depth: int, usage: list[Usage], observed: list[dict[str, Any]]
    ) -> AsyncIterator[ProviderEvent]:
        """Answer one ``llm_query`` with a fresh call (itself able to query while ``depth`` allows)."""
        messages: list[Message] = [make_user(prompt)]
        tools = [QUERY_SPEC] if depth < self.max_depth else []
        request = Request([INSTRUCTION] if tools else [], [], [], request.settings, request.cancel)
        for _ in range(MAX_STEPS):
            reply: Message | None = None
            async for item in self._call(request, messages, tools, usage, live=False):
                if isinstance(item, dict):
                    reply = item
                else:
                    yield item
            if reply is None:
                raise ProviderError(PROVIDER_ERROR, "The RLM sub-query ended without an answer.")
            queries = [c for c in tool_calls_of(reply) if c["name"] == QUERY_TOOL]
            if not queries:
                observed.append(
                    {
                        "type": PROVIDER_BLOCK,
                        "provider": RUNTIME,
                        "block": {
                            "type": QUERY_TOOL,
                            "prompt": prompt,
                            "depth": depth,
                            "answer": text_of(reply),
                        },
                    }
                )
                return
            messages.append(reply)
            for call in queries:
                async for event in self._query(
                    request, str((call.get("arguments") or {}).get("prompt", "")), depth + 1, usage, observed
                ):
                    yield event
                messages.append(make_tool_result(call["id"], QUERY_TOOL, observed[-1]["block"]["answer"]))
        raise ProviderError(PROVIDER_ERROR, "The RLM sub-query did not finish within its steps.")

    async def stream(self, request: Request) -> AsyncIterator[ProviderEvent]:
        system = [*request.system_blocks[:1], INSTRUCTION, *request.system_blocks[1:]]
        root = Request(system, request.messages, request.tools, request.settings, request.cancel)
        messages = list(request.messages)
        tools = [*request.tools, QUERY_SPEC]
        usage: list[Usage] = []
        observed: list[dict[str, Any]] = []
        for _ in range(MAX_STEPS):
            reply: Message | None = None
            async for item in self._call(root, messages, tools, usage, live=True):
                if isinstance(item, dict):
                    reply = item
                else:
                    yield item
            if reply is None:
                raise ProviderError(PROVIDER_ERROR, "The RLM runtime ended without an answer.")
            calls = tool_calls_of(reply)
            queries = [c for c in calls if c["name"] == QUERY_TOOL]
            if not queries or len(queries) < len(calls):
                break
            messages.append(reply)
            for call in queries:
                prompt = str((call.get("arguments") or {}).get("prompt", ""))
                async for event in self._query(request, prompt, 1, usage, observed):
                    yield event
                # A query's own record is the last one written: deeper queries record first.
                messages.append(make_tool_result(call["id"], QUERY_TOOL, observed[-1]["block"]["answer"]))
        else:
            raise ProviderError(PROVIDER_ERROR, "The RLM runtime did not finish within its steps.")
        kept = [
            b
            for b in reply["content"]
            if b.get("type") == "text" or (b.get("type") == "tool_call" and b["name"] != QUERY_TOOL)
        ]
        for block in kept:
            if block["type"] == "tool_call":
                yield ToolCallEvent(block)
        total = Usage()
        for part in usage:
            total = total + part
        yield total
        yield StopReason("stop")
        message = make_assistant([*observed, *kept])
        yield Completed(stamp(message, runtime=RUNTIME, fidelity=OBSERVABLE))
