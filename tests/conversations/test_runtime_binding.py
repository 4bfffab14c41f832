"""An agent program's session binding is part of the Context: recorded only at the cursor the session
saw, archived with the conversation (Clear, Reset, a provider switch), never part of what is exported."""

from __future__ import annotations

from typing import Any

import pytest

from chat.executor.runtime import session_continues
from conversations import services
from conversations.models import AgentConversation, ConversationArchive
from conversations.selectors import conversation_cursor, conversation_runtime_binding
from graphs import services as graph_services
from opencompany.core.sanitize import sanitize_payload
from opencompany.llm.wire import digest_chain, make_user, validate_message
from tests.conversations.conftest import turns

pytestmark = pytest.mark.django_db

SESSION = "0b9f8a52-3c1d-4e7a-9f0e-2d6c5b4a3e21"


def _bind(key: Any) -> dict[str, Any]:
    cursor = conversation_cursor(key=key)
    assert services.conversation_runtime_bind(
        key=key, runtime="claude_code", session_id=SESSION, length=cursor.length, digest=cursor.digest
    )
    return conversation_runtime_binding(key=key)


def test_a_binding_is_recorded_at_the_cursor_the_session_saw_without_a_new_revision(key):
    services.conversation_append(key=key, messages=turns(2), expected_length=0)
    revision = AgentConversation.objects.get().revision

    binding = _bind(key)

    head = AgentConversation.objects.get()
    assert binding == {
        "runtime": "claude_code",
        "session_id": SESSION,
        "length": 2,
        "digest": head.head_digest,
    }
    assert head.runtime_binding == binding
    assert head.revision == revision


def test_a_binding_at_a_stale_cursor_is_refused_and_writes_nothing(key):
    services.conversation_append(key=key, messages=turns(2), expected_length=0)
    stale = conversation_cursor(key=key)
    services.conversation_append(key=key, messages=turns(2, "n"), expected_length=2)

    bound = services.conversation_runtime_bind(
        key=key, runtime="claude_code", session_id=SESSION, length=stale.length, digest=stale.digest
    )

    assert bound is False
    assert AgentConversation.objects.get().runtime_binding == {}


def test_clear_archives_the_binding_with_the_conversation_and_empties_it(key):
    services.conversation_append(key=key, messages=turns(2), expected_length=0)
    binding = _bind(key)

    services.conversation_clear(key=key)

    assert ConversationArchive.objects.get(reason="cleared").runtime_binding == binding
    assert AgentConversation.objects.get().runtime_binding == {}


def test_reset_archives_the_binding_and_the_next_generation_starts_without_one(workflow, key):
    services.conversation_append(key=key, messages=turns(2), expected_length=0)
    binding = _bind(key)

    graph_services.workflow_reset(workflow=workflow, actor=workflow.owner)

    assert ConversationArchive.objects.get(reason="reset").runtime_binding == binding
    assert AgentConversation.objects.get(generation=1).runtime_binding == {}


def test_a_provider_switch_archives_the_binding_and_drops_it(key):
    services.conversation_append(key=key, messages=turns(2), expected_length=0)
    binding = _bind(key)

    services.conversation_start_epoch(key=key, messages=turns(2, "portable"))

    assert ConversationArchive.objects.get(reason="provider_switch").runtime_binding == binding
    assert AgentConversation.objects.get().runtime_binding == {}


def test_unbinding_drops_the_binding_and_reports_whether_there_was_one(key):
    services.conversation_append(key=key, messages=turns(2), expected_length=0)
    _bind(key)

    assert services.conversation_runtime_unbind(key=key) is True
    assert services.conversation_runtime_unbind(key=key) is False
    assert AgentConversation.objects.get().runtime_binding == {}


def test_the_sanitizer_drops_a_runtime_binding_wherever_it_appears():
    payload = {
        "parameters": {"model": "m", "runtime_binding": {"session_id": SESSION}, "runtimeBindings": [1]}
    }

    assert sanitize_payload(payload) == {"parameters": {"model": "m"}}


def test_a_session_continues_only_while_the_conversation_is_what_it_saw():
    stored = [
        make_user("Hi"),
        {"role": "assistant", "content": [{"type": "text", "text": "Hello"}], "metadata": {}},
    ]
    digests = [digest_chain("", validate_message(stored[0]))]
    digests.append(digest_chain(digests[0], validate_message(stored[1])))
    new = make_user("Again")
    after = digest_chain(digests[1], validate_message(new))
    binding = {"runtime": "claude_code", "session_id": SESSION, "length": 2, "digest": digests[1]}

    assert session_continues(binding, "claude_code", [*stored, new], after) is True
    assert session_continues(binding, "codex_cli", [*stored, new], after) is False
    assert session_continues({**binding, "length": 1}, "claude_code", [*stored, new], after) is False
    assert session_continues({**binding, "digest": digests[0]}, "claude_code", [*stored, new], after) is False
    assert session_continues({}, "claude_code", [*stored, new], after) is False
