"""The streaming provider protocol every model adapter implements.

Contract of :meth:`Provider.stream`: an async iterator of small event objects —
``TextDelta`` / ``ThinkingDelta`` as text arrives, one ``ToolCallEvent`` per complete tool call, at most
one ``Usage`` and one ``StopReason``, and, last, exactly one ``Completed(message)`` carrying the whole
assistant MessageWire (every block the provider exposed, in order, including signatures). Failures are
raised as :class:`ProviderError` (a consumer may also meet a ``ProviderErrorEvent`` from a scripted
provider; the loop treats both the same). Closing the iterator early (``aclose()``) abandons the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..fidelity import PORTABLE, PROVIDER_REPLAYABLE, Fidelity
from ..tools import ToolSpec
from ..wire import Message

PROVIDER_ERROR = "provider_error"
PROVIDER_NOT_CONFIGURED = "provider_not_configured"


@dataclass(frozen=True)
class ModelSettings:
    """Which model a node talks to and how. ``thinking_budget`` enables extended thinking (Anthropic,
    Gemini); ``reasoning_effort`` sets an OpenAI reasoning model's effort."""

    provider: str = "offline"
    model: str = "offline-demo"
    temperature: float | None = None
    max_output_tokens: int = 4096
    context_window: int = 128_000
    thinking_budget: int | None = None
    reasoning_effort: str | None = None


@dataclass(frozen=True)
class CompatCapabilities:
    """What an OpenAI-compatible server was verified to support (the capability probe's answer).

    ``tools``: it accepts function tools; ``json_arguments``: the tool call it made carried arguments
    that parse as a JSON object; ``streaming_usage``: it reports usage at the end of a stream;
    ``parallel_tool_calls``: it accepts the ``parallel_tool_calls`` parameter; ``continuation``: it
    accepted the next request carrying its tool call back (exact argument text, every extension field
    it emitted) with the call's result; ``continuation_fields``: the extension fields it emitted
    (``reasoning_content``, ``extra_content``, ...), so verified by that round trip. A feature it
    lacks is not sent.
    """

    tools: bool = False
    json_arguments: bool = False
    streaming_usage: bool = False
    parallel_tool_calls: bool = False
    continuation: bool = False
    continuation_fields: tuple[str, ...] = ()

    @property
    def fidelity(self) -> Fidelity:
        """Replayable only when tool turns round-trip exactly, continuation included, and usage is
        reported."""
        verified = self.tools and self.json_arguments and self.streaming_usage and self.continuation
        return PROVIDER_REPLAYABLE if verified else PORTABLE

    def as_dict(self) -> dict[str, Any]:
        return {
            "tools": self.tools,
            "json_arguments": self.json_arguments,
            "streaming_usage": self.streaming_usage,
            "parallel_tool_calls": self.parallel_tool_calls,
            "continuation": self.continuation,
            "continuation_fields": list(self.continuation_fields),
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> CompatCapabilities:
        fields = value.get("continuation_fields")
        return cls(
            **{name: bool(value.get(name)) for name in _COMPAT_FLAGS},
            continuation_fields=tuple(str(f) for f in fields) if isinstance(fields, list) else (),
        )


_COMPAT_FLAGS = ("tools", "json_arguments", "streaming_usage", "parallel_tool_calls", "continuation")


@dataclass(frozen=True)
class ProviderConfig:
    """Credentials and endpoints, built by the Django side from settings (the runtime never reads them).

    ``options``: every provider's configuration (keys, endpoints), by the option names its registry
    entry declares (``anthropic_api_key``, ...). ``models`` optionally restricts the models a provider
    accepts (provider name → allowed model names); a provider absent from it accepts any non-empty model
    name. ``offline_delay_ms`` paces the offline model's deltas (0 in tests).
    ``openai_compatible_capabilities`` is the probe's verdict for the server and model in use (None: not
    verified, so the turns are ``portable``).
    """

    options: Mapping[str, Any] = field(default_factory=dict)
    openai_compatible_capabilities: CompatCapabilities | None = None
    rlm_max_depth: int = 2
    offline_delay_ms: float = 0.0
    timeout_s: float = 600.0
    openai_max_tokens_param: str = "max_completion_tokens"
    models: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def option(self, name: str) -> str | None:
        """A configuration option as text, None when it is not set (or empty)."""
        value = self.options.get(name)
        return str(value) if value else None


@dataclass
class Request:
    """One provider request.

    ``system_blocks[0]`` is the byte-stable system prompt; ``system_blocks[1]``, when present, is the
    working-notes block (frozen for the run). ``messages`` holds no role-``system`` entries.
    """

    system_blocks: list[str]
    messages: list[Message]
    tools: list[ToolSpec]
    settings: ModelSettings
    cancel: asyncio.Event | None = None


# --- events ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """A complete tool call the model asked for (a wire ``tool_call`` block)."""

    block: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts. ``input_tokens`` is the WHOLE prompt (cache reads and writes included), so it is
    comparable across providers and measures context pressure; the cache counts are parts of it."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


@dataclass(frozen=True, slots=True)
class StopReason:
    reason: str


@dataclass(frozen=True, slots=True)
class ProviderErrorEvent:
    code: str
    message: str
    status: int | None = None
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Completed:
    """Last event of a successful stream: the complete assistant message."""

    message: Message


ProviderEvent = (
    TextDelta | ThinkingDelta | ToolCallEvent | Usage | StopReason | ProviderErrorEvent | Completed
)


class ProviderError(Exception):
    """A provider could not answer: ``provider_error`` (the call failed) or ``provider_not_configured``
    (unknown provider/model or a missing key — raised before any network request)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after

    @property
    def extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.status is not None:
            extra["status"] = self.status
        if self.retry_after is not None:
            extra["retry_after"] = self.retry_after
        return extra

    def __repr__(self) -> str:
        return f"ProviderError(code={self.code!r}, status={self.status!r})"


class Provider(Protocol):
    name: str
    fidelity: Fidelity

    def stream(self, request: Request) -> AsyncIterator[ProviderEvent]: ...


def parse_retry_after(headers: Mapping[str, str] | None, status: int | None) -> float | None:
    """Seconds to wait before retrying: ``retry-after-ms`` / ``retry-after`` headers, else 5 s for 429."""
    if headers is not None:
        ms = headers.get("retry-after-ms")
        if ms:
            try:
                return max(float(ms) / 1000.0, 0.0)
            except ValueError:
                pass
        value = headers.get("retry-after")
        if value:
            try:
                return max(float(value), 0.0)
            except ValueError:
                pass
    return 5.0 if status == 429 else None
