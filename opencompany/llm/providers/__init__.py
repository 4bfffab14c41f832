"""Model providers behind one streaming protocol, and the factory that picks one from settings.

``get_provider`` checks everything it can without the network — a known provider, a model name, a key —
and raises ``ProviderError("provider_not_configured", ...)`` before any request is made.
"""

from __future__ import annotations

from .base import (
    PROVIDER_ERROR,
    PROVIDER_NOT_CONFIGURED,
    CompatCapabilities,
    Completed,
    Fidelity,
    ModelSettings,
    Provider,
    ProviderConfig,
    ProviderError,
    ProviderErrorEvent,
    ProviderEvent,
    Request,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    Usage,
)
from .offline import OFFLINE_MODELS, OfflineProvider

PROVIDERS = ("offline", "openai", "openai_compatible", "anthropic", "gemini", "vertex", "rlm")


def _require(value: str | None, what: str, name: str) -> str:
    if not value:
        raise ProviderError(PROVIDER_NOT_CONFIGURED, f"No {what} is configured for the {name} provider.")
    return value


def get_provider(settings_obj: ModelSettings, *, config: ProviderConfig) -> Provider:
    """The provider for a node's model settings. No network access happens here.

    Each SDK is imported only when its provider is used: most processes never load any of them.
    """
    name = settings_obj.provider
    model = settings_obj.model
    if name not in PROVIDERS:
        raise ProviderError(PROVIDER_NOT_CONFIGURED, f"Unknown model provider {name!r}.")
    if not model or not isinstance(model, str):
        raise ProviderError(PROVIDER_NOT_CONFIGURED, f"No model is set for provider {name!r}.")
    allowed = config.models.get(name)
    if name == "offline" and allowed is None:
        allowed = OFFLINE_MODELS
    if allowed is not None and model not in allowed:
        raise ProviderError(
            PROVIDER_NOT_CONFIGURED, f"Model {model!r} is not available for provider {name!r}."
        )
    if name == "offline":
        return OfflineProvider(delay_ms=config.offline_delay_ms)
    if name == "openai":
        from .openai_responses_provider import OpenAIResponsesProvider

        return OpenAIResponsesProvider(
            api_key=_require(config.openai_api_key, "API key", "OpenAI"),
            base_url=config.openai_base_url,
            timeout_s=config.timeout_s,
        )
    if name == "openai_compatible":
        from .openai_compatible_provider import OpenAICompatibleProvider

        return OpenAICompatibleProvider(
            # Local servers (Ollama, LM Studio) take no key; the SDK insists on one.
            api_key=config.openai_compatible_api_key or "unused",
            base_url=_require(config.openai_compatible_base_url, "base URL", "OpenAI-compatible"),
            timeout_s=config.timeout_s,
            max_tokens_param=config.openai_max_tokens_param,
            capabilities=config.openai_compatible_capabilities,
        )
    if name == "vertex":
        return _vertex(config)
    if name == "rlm":
        from .rlm_provider import RLMProvider

        return RLMProvider(
            api_key=config.rlm_api_key or "unused",
            base_url=_require(config.rlm_base_url, "base URL", "RLM"),
            timeout_s=config.timeout_s,
            max_depth=config.rlm_max_depth,
        )
    if name == "gemini":
        from .gemini_provider import GeminiProvider

        return GeminiProvider(
            api_key=_require(config.gemini_api_key, "API key", "Gemini"),
            base_url=config.gemini_base_url,
            timeout_s=config.timeout_s,
        )
    from .anthropic_provider import AnthropicProvider

    return AnthropicProvider(
        api_key=_require(config.anthropic_api_key, "API key", "Anthropic"),
        base_url=config.anthropic_base_url,
        timeout_s=config.timeout_s,
    )


def _vertex(config: ProviderConfig) -> Provider:
    """Vertex needs a project, a location and a credentials file (read here, without the network: the
    access token is fetched with the first request)."""
    from .vertex_provider import VertexProvider, load_credentials

    project = _require(config.vertex_project, "project", "Vertex")
    location = _require(config.vertex_location, "location", "Vertex")
    path = _require(config.vertex_credentials_file, "credentials file", "Vertex")
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
        base_url=config.vertex_base_url,
        timeout_s=config.timeout_s,
    )


async def probe_capabilities(
    *,
    api_key: str | None,
    base_url: str,
    model: str,
    timeout_s: float = 60.0,
    max_tokens_param: str = "max_completion_tokens",
) -> CompatCapabilities:
    """Probe an OpenAI-compatible server for a model (network); raises ``ProviderError`` on failure."""
    from .openai_compatible_probe import probe_openai_compatible  # the SDK loads only when used

    return await probe_openai_compatible(
        api_key=api_key or "unused",
        base_url=base_url,
        model=model,
        timeout_s=timeout_s,
        max_tokens_param=max_tokens_param,
    )


__all__ = [
    "PROVIDERS",
    "PROVIDER_ERROR",
    "PROVIDER_NOT_CONFIGURED",
    "CompatCapabilities",
    "Completed",
    "Fidelity",
    "ModelSettings",
    "OfflineProvider",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "ProviderErrorEvent",
    "ProviderEvent",
    "Request",
    "StopReason",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallEvent",
    "Usage",
    "get_provider",
    "probe_capabilities",
]
