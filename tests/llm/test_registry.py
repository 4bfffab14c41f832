"""The runtime registry: OPENCOMPANY_PROVIDERS lists the entries, and a bad list fails loudly."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from opencompany.llm.providers import ModelSettings, ProviderConfig, ProviderError
from opencompany.llm.registry import get_program, get_provider, is_program, load_providers, provider_names


def test_the_setting_lists_the_builtin_runtimes_in_order():
    assert provider_names() == (
        "offline",
        "openai",
        "openai_compatible",
        "anthropic",
        "gemini",
        "vertex",
        "rlm",
        "claude_code",
        "codex_cli",
    )
    assert [name for name in provider_names() if is_program(name)] == ["claude_code", "codex_cli"]


def test_a_path_that_is_not_an_entry_is_refused(settings):
    settings.OPENCOMPANY_PROVIDERS = [
        "opencompany.llm.builtin.OFFLINE",
        "opencompany.llm.builtin.OfflineProvider",
    ]

    with pytest.raises(ImproperlyConfigured, match="is not a ProviderEntry"):
        load_providers()


def test_a_name_listed_twice_is_refused(settings):
    settings.OPENCOMPANY_PROVIDERS = ["opencompany.llm.builtin.OFFLINE", "opencompany.llm.builtin.OFFLINE"]

    with pytest.raises(ImproperlyConfigured, match="listed twice"):
        load_providers()


def test_a_name_the_setting_does_not_list_is_not_configured(settings):
    settings.OPENCOMPANY_PROVIDERS = ["opencompany.llm.builtin.OFFLINE"]

    with pytest.raises(ProviderError) as unknown:
        get_provider(ModelSettings(provider="anthropic", model="claude-test"), config=ProviderConfig())

    assert (unknown.value.code, unknown.value.message) == (
        "provider_not_configured",
        "Unknown model provider 'anthropic'.",
    )


def test_a_program_is_not_built_as_a_provider_nor_a_provider_as_a_program():
    with pytest.raises(ProviderError, match="is an agent program, not a provider"):
        get_provider(ModelSettings(provider="claude_code", model="m"), config=ProviderConfig())
    with pytest.raises(ProviderError, match="is a provider, not an agent program"):
        get_program("offline", config=None)
