"""Model providers behind one streaming protocol. Which provider a name means, and how it is built,
is the registry's business (``opencompany.llm.registry.get_provider``).
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
from .offline import OfflineProvider


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
    "probe_capabilities",
]
