"""The provider configuration a run uses, with the OpenAI-compatible server's verified capabilities:
probed on the first run for a server and model, then reused from the kept answer until it ages out."""

from __future__ import annotations

from django.conf import settings

from chat.executor.prepare import provider_config
from chat.selectors import provider_probe_fresh
from chat.services import provider_probe_record
from opencompany.core.asyncdb import db_call
from opencompany.llm.providers import CompatCapabilities, ModelSettings, ProviderConfig, probe_capabilities

COMPATIBLE = "openai_compatible"


async def compatible_capabilities(model: str) -> CompatCapabilities:
    """The kept probe answer for `model` on the configured server, probing (and keeping) it when there
    is none younger than `OPENCOMPANY_PROVIDER_PROBE_TTL_S`. Raises `ProviderError` when the server
    cannot be probed."""
    base_url = str(settings.OPENAI_COMPATIBLE_BASE_URL)
    kept = await db_call(provider_probe_fresh)(
        base_url=base_url, model=model, max_age_s=float(settings.OPENCOMPANY_PROVIDER_PROBE_TTL_S)
    )
    if kept is not None:
        return kept
    probed = await probe_capabilities(
        api_key=settings.OPENAI_COMPATIBLE_API_KEY or None, base_url=base_url, model=model
    )
    await db_call(provider_probe_record)(base_url=base_url, model=model, capabilities=probed)
    return probed


async def verified_config(model: ModelSettings) -> ProviderConfig:
    """`provider_config()`, carrying the probe's verdict when the run talks to an OpenAI-compatible
    server (a missing base URL is left to the provider factory to refuse)."""
    if model.provider != COMPATIBLE or not settings.OPENAI_COMPATIBLE_BASE_URL or not model.model:
        return provider_config()
    return provider_config(capabilities=await compatible_capabilities(model.model))
