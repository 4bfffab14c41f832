"""The built-in runtimes, one :class:`~opencompany.llm.registry.ProviderEntry` each, as the
``OPENCOMPANY_PROVIDERS`` setting lists them.

Each provider's SDK is imported only when the provider is built: most processes never load any of them.
"""

from __future__ import annotations

from .context import (
    AnthropicContext,
    GeminiContext,
    OfflineContext,
    OpenAICompatibleContext,
    OpenAIResponsesContext,
    ProgramContext,
    RLMContext,
    VertexContext,
)
from .providers.base import PROVIDER_NOT_CONFIGURED, ModelSettings, Provider, ProviderConfig, ProviderError
from .providers.offline import OFFLINE_MODELS, OfflineProvider
from .registry import ProviderEntry
from .runtimes.base import RuntimeConfig
from .runtimes.claude_code import ClaudeCode
from .runtimes.codex_cli import CodexCli


def _require(value: str | None, what: str, name: str) -> str:
    if not value:
        raise ProviderError(PROVIDER_NOT_CONFIGURED, f"No {what} is configured for the {name} provider.")
    return value


def _offline(model: ModelSettings, config: ProviderConfig) -> Provider:
    return OfflineProvider(delay_ms=config.offline_delay_ms)


def _openai(model: ModelSettings, config: ProviderConfig) -> Provider:
    from .providers.openai_responses_provider import OpenAIResponsesProvider

    return OpenAIResponsesProvider(
        api_key=_require(config.option("openai_api_key"), "API key", "OpenAI"),
        base_url=config.option("openai_base_url"),
        timeout_s=config.timeout_s,
    )


def _openai_compatible(model: ModelSettings, config: ProviderConfig) -> Provider:
    from .providers.openai_compatible_provider import OpenAICompatibleProvider

    return OpenAICompatibleProvider(
        # Local servers (Ollama, LM Studio) take no key; the SDK insists on one.
        api_key=config.option("openai_compatible_api_key") or "unused",
        base_url=_require(config.option("openai_compatible_base_url"), "base URL", "OpenAI-compatible"),
        timeout_s=config.timeout_s,
        max_tokens_param=config.openai_max_tokens_param,
        capabilities=config.openai_compatible_capabilities,
    )


def _anthropic(model: ModelSettings, config: ProviderConfig) -> Provider:
    from .providers.anthropic_provider import AnthropicProvider

    return AnthropicProvider(
        api_key=_require(config.option("anthropic_api_key"), "API key", "Anthropic"),
        base_url=config.option("anthropic_base_url"),
        timeout_s=config.timeout_s,
    )


def _gemini(model: ModelSettings, config: ProviderConfig) -> Provider:
    from .providers.gemini_provider import GeminiProvider

    return GeminiProvider(
        api_key=_require(config.option("gemini_api_key"), "API key", "Gemini"),
        base_url=config.option("gemini_base_url"),
        timeout_s=config.timeout_s,
    )


def _vertex(model: ModelSettings, config: ProviderConfig) -> Provider:
    """Vertex needs a project, a location and a credentials file (read here, without the network: the
    access token is fetched with the first request)."""
    from .providers.vertex_provider import VertexProvider, load_credentials

    project = _require(config.option("vertex_project"), "project", "Vertex")
    location = _require(config.option("vertex_location"), "location", "Vertex")
    path = _require(config.option("vertex_credentials_file"), "credentials file", "Vertex")
    try:
        credentials = load_credentials(path)
    except Exception as exc:
        raise ProviderError(
            PROVIDER_NOT_CONFIGURED, f"The Vertex credentials file could not be read ({type(exc).__name__})."
        ) from exc
    return VertexProvider(
        project=project,
        location=location,
        credentials=credentials,
        base_url=config.option("vertex_base_url"),
        timeout_s=config.timeout_s,
    )


def _rlm(model: ModelSettings, config: ProviderConfig) -> Provider:
    from .providers.rlm_provider import RLMProvider

    return RLMProvider(
        api_key=config.option("rlm_api_key") or "unused",
        base_url=_require(config.option("rlm_base_url"), "base URL", "RLM"),
        timeout_s=config.timeout_s,
        max_depth=config.rlm_max_depth,
    )


def _claude_code(config: RuntimeConfig) -> ClaudeCode:
    return ClaudeCode(config)


def _codex_cli(config: RuntimeConfig) -> CodexCli:
    return CodexCli(config)


OFFLINE = ProviderEntry(
    name="offline",
    display_name="Offline demo",
    context=OfflineContext(),
    default_model="offline-demo",
    models=OFFLINE_MODELS,
    build=_offline,
)
OPENAI = ProviderEntry(
    name="openai",
    display_name="OpenAI",
    context=OpenAIResponsesContext(),
    settings={"openai_api_key": "OPENAI_API_KEY", "openai_base_url": "OPENAI_BASE_URL"},
    build=_openai,
)
OPENAI_COMPATIBLE = ProviderEntry(
    name="openai_compatible",
    display_name="OpenAI-compatible",
    context=OpenAICompatibleContext(),
    settings={
        "openai_compatible_api_key": "OPENAI_COMPATIBLE_API_KEY",
        "openai_compatible_base_url": "OPENAI_COMPATIBLE_BASE_URL",
    },
    build=_openai_compatible,
)
ANTHROPIC = ProviderEntry(
    name="anthropic",
    display_name="Anthropic",
    context=AnthropicContext(),
    settings={"anthropic_api_key": "ANTHROPIC_API_KEY", "anthropic_base_url": "ANTHROPIC_BASE_URL"},
    build=_anthropic,
)
GEMINI = ProviderEntry(
    name="gemini",
    display_name="Gemini",
    context=GeminiContext(),
    settings={"gemini_api_key": "GEMINI_API_KEY", "gemini_base_url": "GEMINI_BASE_URL"},
    build=_gemini,
)
VERTEX = ProviderEntry(
    name="vertex",
    display_name="Vertex AI",
    context=VertexContext(),
    settings={
        "vertex_project": "VERTEX_PROJECT",
        "vertex_location": "VERTEX_LOCATION",
        "vertex_credentials_file": "VERTEX_CREDENTIALS_FILE",
        "vertex_base_url": "VERTEX_BASE_URL",
    },
    build=_vertex,
)
RLM = ProviderEntry(
    name="rlm",
    display_name="RLM",
    context=RLMContext(),
    settings={"rlm_api_key": "RLM_API_KEY", "rlm_base_url": "RLM_BASE_URL"},
    build=_rlm,
)
CLAUDE_CODE = ProviderEntry(
    name="claude_code",
    display_name="Claude Code",
    context=ProgramContext("claude_code"),
    settings={"anthropic_api_key": "ANTHROPIC_API_KEY", "anthropic_base_url": "ANTHROPIC_BASE_URL"},
    program=_claude_code,
)
CODEX_CLI = ProviderEntry(
    name="codex_cli",
    display_name="Codex CLI",
    context=ProgramContext("codex_cli"),
    settings={"openai_api_key": "OPENAI_API_KEY", "openai_base_url": "OPENAI_BASE_URL"},
    program=_codex_cli,
)
