"""The runtimes an agent can answer through: model providers and agent programs, each declared once.

A runtime is one :class:`ProviderEntry` in its own module: its name, the settings that hold its
configuration and credentials, its context adapter, what a graph's agent node may set for it (the
default model, the models it offers) and how it is built. The ``OPENCOMPANY_PROVIDERS`` setting lists
the entries by dotted path, loaded with ``import_string`` as Django loads ``CACHES`` backends; the
chat app loads them when it is ready, so a bad path fails the start. Adding a provider is one module
and one line in that list.

Everything here resolves a name through the list: the graph's provider choice, the executor's provider
or program, the context adapter. Nothing else spells a provider's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .context import ContextAdapter
from .providers.base import PROVIDER_NOT_CONFIGURED, ModelSettings, Provider, ProviderConfig, ProviderError

# Where Django settings are not configured (pure callers such as a benchmark), the built-in runtimes.
DEFAULT_PROVIDERS = (
    "opencompany.llm.builtin.OFFLINE",
    "opencompany.llm.builtin.OPENAI",
    "opencompany.llm.builtin.OPENAI_COMPATIBLE",
    "opencompany.llm.builtin.ANTHROPIC",
    "opencompany.llm.builtin.GEMINI",
    "opencompany.llm.builtin.VERTEX",
    "opencompany.llm.builtin.RLM",
    "opencompany.llm.builtin.CLAUDE_CODE",
    "opencompany.llm.builtin.CODEX_CLI",
)


@dataclass(frozen=True)
class ProviderEntry:
    """One runtime, as the rest of the project sees it.

    ``settings``: configuration option → the Django setting holding it (keys, endpoints); the options
    reach ``build`` in ``ProviderConfig.options``. ``context``: its context adapter. ``default_model``: the model an agent node that names none
    uses; ``models``: the only models it accepts (empty: any non-empty name). Exactly one of ``build``
    (a model provider, built per run without network access) and ``program`` (an agent program run as
    a child process; it takes the program runtime's configuration) is set.
    """

    name: str
    display_name: str
    context: ContextAdapter
    settings: Mapping[str, str] = field(default_factory=dict)
    default_model: str = ""
    models: frozenset[str] = frozenset()
    build: Callable[[ModelSettings, ProviderConfig], Provider] | None = None
    program: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if (self.build is None) == (self.program is None):
            raise ValueError(f"provider {self.name!r} must set exactly one of build and program")

    @property
    def is_program(self) -> bool:
        return self.program is not None


_loaded: tuple[tuple[str, ...], dict[str, ProviderEntry]] | None = None


def _paths() -> tuple[str, ...]:
    if not settings.configured:
        return DEFAULT_PROVIDERS
    return tuple(getattr(settings, "OPENCOMPANY_PROVIDERS", DEFAULT_PROVIDERS))


def load_providers() -> dict[str, ProviderEntry]:
    """The entries ``OPENCOMPANY_PROVIDERS`` lists, by name (loaded again when the setting changes).

    Raises ``ImproperlyConfigured`` for a path that is not a :class:`ProviderEntry` or a name listed twice.
    """
    global _loaded
    paths = _paths()
    loaded = _loaded
    if loaded is not None and loaded[0] == paths:
        return loaded[1]
    entries: dict[str, ProviderEntry] = {}
    for path in paths:
        entry = import_string(path)
        if not isinstance(entry, ProviderEntry):
            raise ImproperlyConfigured(f"OPENCOMPANY_PROVIDERS: {path} is not a ProviderEntry.")
        if entry.name in entries:
            raise ImproperlyConfigured(f"OPENCOMPANY_PROVIDERS: the name {entry.name!r} is listed twice.")
        entries[entry.name] = entry
    _loaded = (paths, entries)
    return entries


def provider_names() -> tuple[str, ...]:
    """Every runtime's name, in the order the setting lists them."""
    return tuple(load_providers())


def provider_entry(name: str) -> ProviderEntry:
    """The entry named ``name``; ``provider_not_configured`` for a name the setting does not list."""
    entry = load_providers().get(name)
    if entry is None:
        raise ProviderError(PROVIDER_NOT_CONFIGURED, f"Unknown model provider {name!r}.")
    return entry


def is_program(name: str) -> bool:
    """Whether ``name`` is an agent program (Claude Code, Codex CLI) rather than a model provider."""
    entry = load_providers().get(name)
    return entry is not None and entry.is_program


def context_adapter(runtime: str) -> ContextAdapter:
    """The adapter of a provider or agent program (the portable one for a name the setting does not list)."""
    entry = load_providers().get(runtime)
    return entry.context if entry is not None else ContextAdapter()


def configured_options(values: Callable[[str], Any]) -> dict[str, Any]:
    """Every runtime's configuration options, each read with ``values(setting name)`` (empty: None)."""
    return {
        option: values(setting) or None
        for entry in load_providers().values()
        for option, setting in entry.settings.items()
    }


def get_provider(settings_obj: ModelSettings, *, config: ProviderConfig) -> Provider:
    """The provider for a node's model settings. No network access happens here.

    Checks everything it can without the network (a known provider, a model it offers, its key) and
    raises ``ProviderError("provider_not_configured", ...)`` before any request is made. An agent
    program is not a provider: it is started through :func:`get_program`.
    """
    name, model = settings_obj.provider, settings_obj.model
    entry = provider_entry(name)
    if entry.build is None:
        raise ProviderError(
            PROVIDER_NOT_CONFIGURED, f"{entry.display_name} is an agent program, not a provider."
        )
    if not model or not isinstance(model, str):
        raise ProviderError(PROVIDER_NOT_CONFIGURED, f"No model is set for provider {name!r}.")
    allowed = config.models.get(name)
    if allowed is None and entry.models:
        allowed = entry.models
    if allowed is not None and model not in allowed:
        raise ProviderError(
            PROVIDER_NOT_CONFIGURED, f"Model {model!r} is not available for provider {name!r}."
        )
    return entry.build(settings_obj, config)


def get_program(name: str, *, config: Any) -> Any:
    """The agent program named ``name``, built with the program runtime's configuration; raises
    ``ProviderError("provider_not_configured", ...)`` when it is not installed or has no key."""
    entry = provider_entry(name)
    if entry.program is None:
        raise ProviderError(
            PROVIDER_NOT_CONFIGURED, f"{entry.display_name} is a provider, not an agent program."
        )
    return entry.program(config)
