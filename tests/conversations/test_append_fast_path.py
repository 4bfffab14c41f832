"""The one-statement append on PostgreSQL stores exactly what the locked path stores."""

from __future__ import annotations

import secrets

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.errors import CONVERSATION_CONFLICT
from conversations.models import AgentConversation, ConversationMessage
from conversations.selectors import conversation_cursor, conversation_load
from conversations.services import conversation_append
from conversations.types import ConversationKey
from opencompany.core.errors import ApplicationError
from opencompany.core.json import canonical_json
from opencompany.llm import wire
from tests.conversations.conftest import tool_turn, turns

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_fast_path_matches_the_locked_path_and_is_one_statement(workflow, events):
    fast = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="fast")
    slow = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="slow")
    events.subscribe(f"owner.{workflow.owner_id}")
    first = conversation_append(key=fast, messages=turns(2), expected_length=0)
    conversation_append(key=slow, messages=turns(2), expected_length=0)
    events.drain()

    with CaptureQueriesContext(connection) as queries:
        write = conversation_append(
            key=fast,
            messages=tool_turn("c1"),
            expected_length=2,
            expected_digest=first.digest,
            usage={"input_tokens": 7, "output_tokens": 3},
        )
    conversation_append(
        key=slow, messages=tool_turn("c1"), expected_length=2, usage={"input_tokens": 7, "output_tokens": 3}
    )

    assert len(queries.captured_queries) == 1
    assert conversation_load(key=fast) == conversation_load(key=slow)
    assert conversation_cursor(key=fast).digest == conversation_cursor(key=slow).digest == write.digest
    heads = {h.agent_node_id: h for h in AgentConversation.objects.filter(workflow_id=workflow.pk)}
    for field in (
        "length",
        "revision",
        "bytes",
        "input_tokens",
        "output_tokens",
        "last_input_tokens",
        "head_digest",
    ):
        assert getattr(heads["fast"], field) == getattr(heads["slow"], field), field
    assert (write.length, write.revision) == (4, heads["fast"].revision)
    assert [e["data"]["agent_node_id"] for e in events.drain()] == ["fast", "slow"]


def test_a_stale_digest_or_length_falls_back_to_the_conflict(workflow, events):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="a")
    first = conversation_append(key=key, messages=turns(2), expected_length=0)
    events.subscribe(f"owner.{workflow.owner_id}")

    with pytest.raises(ApplicationError) as stale_length:
        conversation_append(key=key, messages=turns(1), expected_length=1, expected_digest=first.digest)
    # right length, wrong digest: the row is not this caller's idea of the conversation
    appended = conversation_append(key=key, messages=turns(1), expected_length=2, expected_digest="0" * 64)

    assert stale_length.value.code == CONVERSATION_CONFLICT
    assert stale_length.value.extra["length"] == 2
    assert appended.length == 3  # the locked path checks the length only, and it matched
    assert ConversationMessage.objects.filter(conversation__agent_node_id="a").count() == 3


def test_the_tables_keep_only_the_indexes_a_turn_needs():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, indexname FROM pg_indexes WHERE tablename IN "
            "('conversations_agentconversation', 'conversations_conversationmessage') ORDER BY 1, 2"
        )
        indexes = cursor.fetchall()

    assert indexes == [
        ("conversations_agentconversation", "conversation_owner_updated"),
        ("conversations_agentconversation", "conversation_unique_key"),
        ("conversations_agentconversation", "conversations_agentconversation_pkey"),
        ("conversations_conversationmessage", "conversation_message_unique_seq"),
        ("conversations_conversationmessage", "conversations_conversationmessage_pkey"),
    ]


def test_a_message_up_to_a_page_stays_in_its_row(workflow):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="inline")
    # ~6 KB that does not compress: the default ~2 KB target would move it to the TOAST table.
    noise = secrets.token_urlsafe(4_500)
    message = {"role": "user", "content": [{"type": "text", "text": noise}], "metadata": {}}

    conversation_append(key=key, messages=[message], expected_length=0)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_relation_size(reltoastrelid) FROM pg_class "
            "WHERE relname = 'conversations_conversationmessage'"
        )
        assert cursor.fetchone()[0] == 0  # nothing went to the TOAST table
    assert conversation_load(key=key) == [message]


def test_the_stored_text_is_the_canonical_text_the_digest_covers_on_every_write_path(workflow):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="exact")
    first = conversation_append(key=key, messages=turns(2), expected_length=0)  # the locked path (ORM insert)
    conversation_append(key=key, messages=tool_turn("c9"), expected_length=2, expected_digest=first.digest)
    stored = conversation_load(key=key)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT m.wire::text, m.digest FROM conversations_conversationmessage m "
            "JOIN conversations_agentconversation c ON c.id = m.conversation_id "
            "WHERE c.agent_node_id = %s ORDER BY m.seq",
            ["exact"],
        )
        rows = cursor.fetchall()

    assert [text for text, _ in rows] == [canonical_json(message) for message in stored]
    assert [digest for _, digest in rows] == wire.digests_of(stored)
    assert ConversationMessage.objects.filter(conversation__agent_node_id="exact").first().wire == stored[0]


def test_awkward_text_is_stored_byte_for_byte_by_the_one_statement_append(workflow):
    """The turn's arrays go in binary: nothing in a message is quoted, escaped or trimmed on the way."""
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="awkward")
    first = conversation_append(key=key, messages=turns(1), expected_length=0)
    texts = [
        'say "hi", {then} \\ leave',
        "NULL",
        "\\u0000 is written out, not a NUL",
        " \t\n\u00a0\u1680\u2003\u3000 ",
        "emoji 🧠 and RTL עברית",
        '{"a":[1,2]}',
    ]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": t}], "metadata": {"k": t}} for t in texts
    ]

    with CaptureQueriesContext(connection) as queries:
        conversation_append(key=key, messages=messages, expected_length=1, expected_digest=first.digest)

    assert len(queries.captured_queries) == 1  # the one-statement path took it
    assert conversation_load(key=key)[1:] == messages
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT m.wire::text FROM conversations_conversationmessage m "
            "JOIN conversations_agentconversation c ON c.id = m.conversation_id "
            "WHERE c.agent_node_id = %s AND m.seq > 0 ORDER BY m.seq",
            ["awkward"],
        )
        assert [row[0] for row in cursor.fetchall()] == [canonical_json(m) for m in messages]
