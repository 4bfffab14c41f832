"""Model providers behind one streaming protocol, and the factory that picks one from settings.

``get_provider`` checks everything it can without the network — a known provider, a model name, a key —
and raises ``ProviderError("provider_not_configured", ...)`` before any request is made.
"""

from __future__ import annotations

from .base import (
    PROVIDER_ERROR,
    PROVIDER_NOT_CONFIGURED,
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

PROVIDERS = ("offline", "openai", "anthropic")


def get_provider(settings_obj: ModelSettings, *, config: ProviderConfig) -> Provider:
    """The provider for a node's model settings. No network access happens here."""
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
        if not config.openai_api_key:
            raise ProviderError(PROVIDER_NOT_CONFIGURED, "No API key is configured for the OpenAI provider.")
        # Each SDK is imported only when its provider is used: most processes never load either.
        from .openai_provider import OpenAIProvider

        return OpenAIProvider(
            api_key=config.openai_api_key,
            base_url=config.openai_base_url,
            timeout_s=config.timeout_s,
            max_tokens_param=config.openai_max_tokens_param,
        )
    if not config.anthropic_api_key:
        raise ProviderError(PROVIDER_NOT_CONFIGURED, "No API key is configured for the Anthropic provider.")
    from .anthropic_provider import AnthropicProvider  # deferred like the OpenAI SDK above

    return AnthropicProvider(
        api_key=config.anthropic_api_key, base_url=config.anthropic_base_url, timeout_s=config.timeout_s
    )


__all__ = [
    "PROVIDERS",
    "PROVIDER_ERROR",
    "PROVIDER_NOT_CONFIGURED",
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
]
