"""Row counts of every project table: a refused input must leave them all unchanged."""

from __future__ import annotations

from django.apps import apps

_APPS = ("chat", "conversations", "memory", "graphs", "authtoken", "auth", "sessions")


def row_counts() -> dict[str, int]:
    return {
        model._meta.label: model._default_manager.count()
        for model in apps.get_models()
        if model._meta.app_label in _APPS and not model._meta.proxy
    }
