"""The capability probe's kept answers for OpenAI-compatible servers (one per server and model)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from chat.models import ProviderProbe
from opencompany.llm.providers import CompatCapabilities


@transaction.atomic
def provider_probe_record(*, base_url: str, model: str, capabilities: CompatCapabilities) -> ProviderProbe:
    """Keep the probe's answer for `(base_url, model)`, replacing an older one (the pair is unique, so
    two processes probing at once both land on the one row)."""
    row, _ = ProviderProbe.objects.update_or_create(
        base_url=base_url,
        model=model,
        defaults={
            "capabilities": capabilities.as_dict(),
            "fidelity": capabilities.fidelity,
            "probed_at": timezone.now(),
        },
    )
    return row


def provider_probes_forget(*, ids: list[int]) -> int:
    """Drop kept answers, so the next run on that server and model probes again. Returns how many."""
    deleted, _ = ProviderProbe.objects.filter(pk__in=ids).delete()
    return int(deleted)
