"""Provider context adapters: what a runtime's context can hold, how full a request is, how a prefix is
compacted for it, and whether a compacted transcript still serializes for it.

Every runtime has one adapter (its registry entry's; ``opencompany.llm.registry.context_adapter``). Central compaction (``compaction.py``) and the
executor branch on :class:`Capabilities`, never on provider names:

* ``token_counting`` — the provider reports the input tokens of each request, so context pressure is
  its count; otherwise pressure is an estimate and marked as one;
* ``app_compaction`` — the app may compact the stored conversation (an agent program that keeps its
  own context compacts it itself);
* ``native_compaction`` — the provider offers a server-side compaction the adapter uses; none of the
  runtimes here does, so every compaction is the portable one (a summary into the working-notes slot).

Pure: no I/O, no Django. The portable summary call goes through the summarizer the caller hands in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opencompany.core.json import canonical_json

from .fidelity import OPAQUE_KINDS, replays_opaque_state
from .policies import Summarizer
from .providers.base import ModelSettings, Request
from .tools import ToolSpec
from .wire import Message, WireError, tool_calls_of, tool_result_of, validate_message

CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class Capabilities:
    context_window: int
    max_output_tokens: int
    token_counting: bool
    app_compaction: bool
    native_compaction: bool = False


@dataclass(frozen=True, slots=True)
class Measure:
    """Tokens of a request's input; ``estimated`` when the provider did not count them."""

    tokens: int
    estimated: bool


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """How a prefix is compacted: the findings written into the working-notes slot are at most
    ``findings_max_chars`` long."""

    findings_max_chars: int = 2000


def estimate_tokens(
    *, system_blocks: Sequence[str], messages: Sequence[Message], tools: Sequence[ToolSpec]
) -> int:
    """A provider-neutral estimate: characters of the rendered request over four."""
    chars = sum(len(b) for b in system_blocks) + len(canonical_json(list(messages)))
    chars += sum(len(t.name) + len(t.description) + len(canonical_json(t.input_schema)) for t in tools)
    return chars // CHARS_PER_TOKEN + 1


class ContextAdapter:
    """The portable behaviour; a runtime's adapter overrides what its provider does differently."""

    runtime = "portable"
    token_counting = True
    app_compaction = True

    def capabilities(self, model: ModelSettings) -> Capabilities:
        return Capabilities(
            context_window=model.context_window,
            max_output_tokens=model.max_output_tokens,
            token_counting=self.token_counting,
            app_compaction=self.app_compaction,
        )

    def measure_active_context(self, request: Request, *, reported: int | None = None) -> Measure:
        """The input tokens of ``request``: the provider's count (``reported``, the usage it returned for
        exactly this request) where it has one, else an estimate marked as such."""
        if reported is not None and self.token_counting:
            return Measure(tokens=reported, estimated=False)
        return Measure(
            tokens=estimate_tokens(
                system_blocks=request.system_blocks, messages=request.messages, tools=request.tools
            ),
            estimated=True,
        )

    async def compact(self, prefix: list[Message], policy: CompactionPolicy, summarizer: Summarizer) -> str:
        """The findings of a committed prefix, for the working-notes slot (a summary call)."""
        findings = (await summarizer.summarize(prefix)).strip()
        if len(findings) > policy.findings_max_chars:
            findings = findings[: policy.findings_max_chars - 1].rstrip() + "…"
        return findings

    def validate_replay(self, candidate: Sequence[Message]) -> list[str]:
        """Why ``candidate`` would not serialize as this runtime's next request (empty: it would)."""
        problems: list[str] = []
        if candidate and candidate[0].get("role") != "user":
            problems.append("first_message_not_user")
        open_calls: set[str] = set()
        for index, message in enumerate(candidate):
            try:
                validate_message(message)
            except WireError:
                problems.append(f"invalid_message:{index}")
                continue
            for call in tool_calls_of(message):
                open_calls.add(str(call.get("id")))
            if message.get("role") == "tool":
                block = tool_result_of(message) or {}
                call_id = str(block.get("tool_call_id"))
                if call_id not in open_calls:
                    problems.append(f"orphan_tool_result:{index}")
                open_calls.discard(call_id)
            if message.get("role") == "assistant" and self._foreign_state(message):
                problems.append(f"foreign_state:{index}")
        if open_calls:
            problems.append("unanswered_tool_call")
        return problems

    def _foreign_state(self, message: Message) -> bool:
        opaque = any(block.get("type") in OPAQUE_KINDS for block in message.get("content") or ())
        return opaque and not replays_opaque_state(message, self.runtime)


class OfflineContext(ContextAdapter):
    runtime = "offline"


class AnthropicContext(ContextAdapter):
    runtime = "anthropic"


class OpenAIResponsesContext(ContextAdapter):
    runtime = "openai"


class OpenAICompatibleContext(ContextAdapter):
    """Chat Completions servers: usage is counted only where the server reports it (the probe's
    ``streaming_usage``); pressure falls back to the estimate otherwise."""

    runtime = "openai_compatible"


class GeminiContext(ContextAdapter):
    runtime = "gemini"


class VertexContext(ContextAdapter):
    runtime = "vertex"


class RLMContext(ContextAdapter):
    """The recursive runtime's usage sums its root and sub-query calls, so pressure is an estimate;
    every request carries the portable conversation, which the app may compact."""

    runtime = "rlm"
    token_counting = False


class ProgramContext(ContextAdapter):
    """An agent program (Claude Code, Codex CLI) runs its own loop and keeps its own context: the usage
    it reports sums its internal calls, so pressure is an estimate, and the program compacts itself."""

    token_counting = False
    app_compaction = False

    def __init__(self, runtime: str) -> None:
        self.runtime = runtime
