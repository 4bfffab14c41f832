"""Every block kind survives encode → store → load byte-identically (canonical form)."""

from __future__ import annotations

from typing import Any

import pytest

from conversations.models import ConversationMessage
from conversations.selectors import conversation_load
from conversations.services import conversation_append, conversation_save
from opencompany.core.errors import ApplicationError
from opencompany.llm import wire
from opencompany.llm.wire import canonical, digests_of

pytestmark = pytest.mark.django_db

EVERY_KIND: list[dict[str, Any]] = [
    {"role": "system", "content": [{"type": "text", "text": "You are helpful. ünïcødé ✓"}], "metadata": {}},
    {
        "role": "user",
        "content": [{"type": "text", "text": 'line1\nline2\t"quoted" \\ back'}],
        "metadata": {"k": 1},
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "let me think", "signature": "EqQBCkYIBxgCKkD+sig/=="},
            {"type": "redacted_thinking", "data": "ZW5jcnlwdGVkLWJsb2I="},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAAB-encrypted", "summary": []},
            {"type": "text", "text": "I will call two tools."},
            {
                "type": "tool_call",
                "id": "call_1",
                "name": "memory",
                "arguments": {"q": "x", "n": [1, 2.5, None]},
            },
            {
                "type": "tool_call",
                "id": "call_2",
                "name": "notes",
                "raw_arguments": '{"operation": "add", "text": ',
                "parse_error": "invalid JSON: Expecting value",
            },
            {"type": "future_block", "payload": {"nested": [True, False, 0, -1, 1e-7]}, "z": "last"},
        ],
        "metadata": {"provider": "anthropic", "usage": {"input_tokens": 10}},
    },
    {
        "role": "tool",
        "content": [
            {
                "type": "tool_result",
                "tool_call_id": "call_1",
                "name": "memory",
                "content": "found",
                "status": "ok",
            }
        ],
        "metadata": {},
    },
    {
        "role": "tool",
        "content": [
            {
                "type": "tool_result",
                "tool_call_id": "call_2",
                "name": "notes",
                "content": "bad args",
                "status": "error",
            }
        ],
        "metadata": {},
    },
    {
        "role": "tool",
        "content": [
            {"type": "tool_result", "tool_call_id": "c3", "name": "x", "content": "", "status": "not_run"}
        ],
        "metadata": {},
    },
    {
        "role": "tool",
        "content": [
            {"type": "tool_result", "tool_call_id": "c4", "name": "x", "content": "", "status": "interrupted"}
        ],
        "metadata": {},
    },
]


def test_every_block_kind_round_trips_through_the_store_byte_identically(key):
    encoded = [wire.encode(m) for m in EVERY_KIND]

    conversation_append(key=key, messages=[wire.decode(e) for e in encoded], expected_length=0)
    loaded = conversation_load(key=key)

    assert [canonical(m) for m in loaded] == encoded
    assert loaded == EVERY_KIND


def test_stored_digests_are_the_chain_of_the_canonical_messages(key):
    conversation_append(key=key, messages=EVERY_KIND[:3], expected_length=0)
    conversation_append(key=key, messages=EVERY_KIND[3:], expected_length=3)

    stored = list(ConversationMessage.objects.order_by("seq").values_list("seq", "digest"))

    assert stored == list(enumerate(digests_of(EVERY_KIND)))


def test_whole_list_save_round_trips_the_same_way(key):
    conversation_save(key=key, messages=EVERY_KIND)

    assert [canonical(m) for m in conversation_load(key=key)] == [canonical(m) for m in EVERY_KIND]


def test_image_bytes_are_refused_and_nothing_is_stored(key):
    image = {"role": "user", "content": [{"type": "image", "source": {"kind": "bytes", "data": "AAAA"}}]}

    with pytest.raises(ApplicationError) as exc:
        conversation_append(key=key, messages=[image], expected_length=0)

    assert exc.value.code == "invalid_message"
    assert exc.value.extra == {"index": 0}
    assert ConversationMessage.objects.exists() is False


def test_nul_characters_are_refused_instead_of_failing_in_the_database(key):
    with pytest.raises(ApplicationError) as exc:
        conversation_append(key=key, messages=[wire.make_user("a\x00b")], expected_length=0)

    assert exc.value.code == "invalid_message"
    assert ConversationMessage.objects.exists() is False


def test_an_escaped_backslash_before_u0000_text_is_not_mistaken_for_nul(key):
    message = wire.make_user("literal \\u0000 text")

    conversation_append(key=key, messages=[message], expected_length=0)

    assert conversation_load(key=key) == [message]
