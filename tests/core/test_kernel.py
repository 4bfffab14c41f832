"""The shared kernel: sanitizer, events after commit, error rendering, ids, cursors."""

from __future__ import annotations

import pytest
from django.db import transaction

from opencompany.core import events as core_events
from opencompany.core.errors import ApplicationError, render_error
from opencompany.core.events import publish_now, publish_on_commit
from opencompany.core.ids import mint_id
from opencompany.core.pagination import make_cursor, read_cursor
from opencompany.core.sanitize import blocked_keys_in, is_blocked_key, sanitize_payload


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "apiKey",
        "API-KEY",
        "openai_api_key",
        "accessToken",
        "refresh_token",
        "token",
        "authToken",
        "client_secret",
        "password",
        "private_key",
        "memory_content",
        "memoryContent",
        "last_session_id",
        "thoughtSignature",
        "signature",
        "encrypted_content",
        "provider_bindings",
        "raw_transcript",
        "Authorization",
        "credentials",
        "github_token",
        "session_token",
    ],
)
def test_blocked_keys(key):
    assert is_blocked_key(key) is True


@pytest.mark.parametrize(
    "key",
    [
        "max_tokens",
        "maxTokens",
        "max_output_tokens",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "label",
        "reset_policy",
        "system_prompt",
        "model",
        "temperature",
        "context_window",
        "next_page_token",
    ],
)
def test_safe_keys(key):
    assert is_blocked_key(key) is False


def test_sanitize_is_deep_and_does_not_mutate():
    value = {"a": [{"api_key": "x", "keep": 1}], "nested": {"memory_content": "m", "max_tokens": 5}}

    out = sanitize_payload(value)

    assert out == {"a": [{"keep": 1}], "nested": {"max_tokens": 5}}
    assert value["nested"]["memory_content"] == "m"
    assert blocked_keys_in(out) == []
    assert blocked_keys_in(value) == ["a[0].api_key", "nested.memory_content"]


def test_mint_id_is_prefixed_and_unique():
    ids = {mint_id("wf") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("wf_") and len(i) == 23 for i in ids)


def test_cursor_roundtrip_and_binding():
    token = make_cursor(salt="t", bound_to=["ns", "q"], position=[3, "x"])

    assert read_cursor(token, salt="t", bound_to=["ns", "q"]) == [3, "x"]
    assert read_cursor(None, salt="t", bound_to=["ns", "q"]) is None
    for bad in (token[:-2] + "zz", "garbage"):
        with pytest.raises(ApplicationError) as err:
            read_cursor(bad, salt="t", bound_to=["ns", "q"])
        assert err.value.code == "invalid_cursor"
    with pytest.raises(ApplicationError) as err:
        read_cursor(token, salt="t", bound_to=["other", "q"])
    assert err.value.code == "invalid_cursor"


@pytest.mark.django_db(transaction=True)
def test_publish_on_commit_waits_for_commit_and_skips_on_rollback(events):
    events.subscribe("owner.1")

    with transaction.atomic():
        publish_on_commit("owner.1", "x.updated", {"id": 1})
        assert events.drain() == []
    assert events.drain() == [{"type": "x.updated", "data": {"id": 1}}]

    def rolled_back() -> None:
        with transaction.atomic():
            publish_on_commit("owner.1", "x.updated", {"id": 2})
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        rolled_back()
    assert events.drain() == []


@pytest.mark.django_db(transaction=True)
def test_a_failing_channel_layer_never_raises_into_the_caller(monkeypatch):
    class Broken:
        async def group_send(self, *args, **kwargs):
            raise ConnectionError("redis down")

    monkeypatch.setattr(core_events, "get_channel_layer", lambda *a, **k: Broken())

    with transaction.atomic():
        publish_on_commit("owner.1", "x", {})
    publish_now("owner.1", "x", {})  # no exception


def test_in_memory_events_for_a_group_nobody_joined_spin_up_no_loop(events, monkeypatch):
    """Without a serving loop the in-memory layer is sent to through `async_to_sync`, a new event loop
    per call; an event for a group with no member in this process skips that."""
    calls: list[str] = []
    real = core_events.async_to_sync

    def counting(fn):
        calls.append(getattr(fn, "__name__", "?"))
        return real(fn)

    monkeypatch.setattr(core_events, "async_to_sync", counting)
    monkeypatch.setattr(core_events, "_serving_loop", None)
    events.subscribe("owner.1")

    publish_now("owner.2", "x.updated", {"id": 1})  # nobody joined owner.2
    assert calls == []
    publish_now("owner.1", "x.updated", {"id": 2})
    assert calls == ["group_send"]
    assert events.drain() == [{"type": "x.updated", "data": {"id": 2}}]


def test_application_error_defaults():
    err = ApplicationError("version_conflict", "stale", {"current_version": 3}, status=409)

    assert render_error(err) == {
        "code": "version_conflict",
        "message": "stale",
        "extra": {"current_version": 3},
    }
    assert ApplicationError("not_found", "x").status == 404
    assert ApplicationError("anything_else", "x").status == 400
