"""The hand-written hot statements (opencompany/core/db.py) are prepared on PostgreSQL when asked."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import close_old_connections, connection
from django.db.utils import IntegrityError

from chat import services as chat_services
from chat.models import ChatRun
from conversations.selectors import conversation_load
from conversations.services import conversation_append
from conversations.types import ConversationKey
from memory.scope import memory_scope
from memory.services import memory_remember
from opencompany.core.db import hot_fetchall, hot_fetchone
from tests.conftest import node_id
from tests.conversations.conftest import turns

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

_PROBE = "SELECT %(n)s::int + 1 AS hot_probe"


def _prepared(fragment: str) -> list[str]:
    """Statements prepared on this connection whose text holds `fragment` (read through the ORM cursor)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", [f"%{fragment}%"]
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_hot_statement_is_prepared_once_on_a_connection_django_opened_without_a_threshold():
    connection.close()
    connection.close_pool()  # a new session
    connection.ensure_connection()
    assert connection.connection.prepare_threshold is None  # as Django opens it: prepared statements off

    assert [hot_fetchone(_PROBE, {"n": n}) for n in (1, 2, 3)] == [(2,), (3,), (4,)]

    assert len(_prepared("hot_probe")) == 1
    # the ORM's client-side cursors still never prepare
    list(connection.introspection.table_names())
    assert _prepared("information_schema") == _prepared("pg_catalog.pg_class") == []


def test_the_append_and_the_load_run_prepared(workflow):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="a")
    first = conversation_append(key=key, messages=turns(2), expected_length=0)
    conversation_append(key=key, messages=turns(2), expected_length=2, expected_digest=first.digest)
    conversation_load(key=key)

    assert len(_prepared("INSERT INTO conversations_conversationmessage")) == 1  # the one-statement append
    assert len(_prepared('"wire"::text FROM')) == 1  # the load


def test_the_chat_send_runs_prepared(workflow, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"  # no run of ours writes while the teardown truncates
    first = chat_services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first"
    )  # creates the thread: the locked path
    chat_services.run_finish(run_id=first.run.run_id, claimant=None, outcome="finished", text="ok", seq=1)

    chat_services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="second"
    )  # the one-statement send

    assert len(_prepared("INSERT INTO chat_chatmessage")) == 1


def test_the_remember_runs_prepared(workflow):
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    # the first call tries the statement without a receipt, finds no namespace, takes the general path
    memory_remember(scope=scope, content="creates the namespace", actor="owner:1")
    memory_remember(scope=scope, content="one", actor="agent:r", operation_id="op-1")  # one statement
    memory_remember(scope=scope, content="two", actor="agent:r", operation_id="op-2")

    # two shapes (with and without a receipt), each prepared once
    assert len(_prepared("INSERT INTO memory_memoryitem")) == 2
    assert len(_prepared("INSERT INTO memory_memoryreceipt")) == 1


def test_the_draft_save_runs_prepared_and_only_for_its_claimant(workflow, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    run_id = chat_services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello"
    ).run.run_id
    claimant = chat_services.new_claimant()
    assert chat_services.run_claim(run_id=run_id, claimant=claimant) is not None
    steps = [{"kind": "tool", "name": "memory", "status": "ok", "note": 'a "quoted" \\ step'}]

    saved = chat_services.run_save_draft(run_id=run_id, claimant=claimant, text="Half an", steps=steps, seq=4)
    assert ChatRun.objects.values_list("draft_text", "draft_steps").get(run_id=run_id) == ("Half an", steps)
    again = chat_services.run_save_draft(
        run_id=run_id, claimant=claimant, text="Half an answer", steps=[], seq=5
    )
    stale = chat_services.run_save_draft(run_id=run_id, claimant="someone-else", text="x", steps=[], seq=9)

    run = ChatRun.objects.get(run_id=run_id)
    assert (saved, again, stale) == (True, True, False)
    assert (run.draft_text, run.draft_steps, run.last_seq) == ("Half an answer", [], 5)
    assert len(_prepared("UPDATE chat_chatrun SET draft_text")) == 1


def test_a_pooled_session_outlives_the_cleanup_channels_runs_around_each_database_call():
    """Channels closes connections before and after every database_sync_to_async call; closing gives a
    pooled connection back, so a websocket frame takes a session the pool holds (no new connection)
    with its prepared statements still there."""
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] == 0
    connection.close()
    connection.close_pool()
    hot_fetchone(_PROBE, {"n": 1})
    pool = connection.pool
    opened = pool.get_stats()["connections_num"]
    sessions = set()

    for n in range(2, 12):
        close_old_connections()  # what Channels runs after a call
        close_old_connections()  # and before the next
        assert hot_fetchone(_PROBE, {"n": n}) == (n + 1,)
        sessions.add(connection.connection.info.backend_pid)
        assert len(_prepared("hot_probe")) == 1

    stats = pool.get_stats()
    assert stats["connections_num"] == opened  # every call took a pooled session
    assert len(sessions) <= stats["pool_size"]
    close_old_connections()
    assert pool.get_stats()["pool_available"] == stats["pool_available"] + 1  # and gave it back


def test_prepare_off_prepares_nothing(settings):
    settings.OPENCOMPANY_DB_PREPARE = False
    connection.close()
    connection.close_pool()

    assert hot_fetchall(_PROBE, {"n": 1}) == [(2,)]

    assert _prepared("hot_probe") == []
    assert connection.connection.prepare_threshold is None


def _plan_cache_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return str(cursor.fetchone()[0])


def test_a_prepared_statement_is_planned_once_for_any_values():
    connection.close()
    connection.close_pool()
    for n in range(8):
        hot_fetchone(_PROBE, {"n": n})

    assert _plan_cache_mode() == "force_generic_plan"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%hot_probe%"],
        )
        assert cursor.fetchall() == [(8, 0)]  # never planned for its values


def test_prepare_off_leaves_planning_as_postgresql_chooses(settings):
    settings.OPENCOMPANY_DB_PREPARE = False
    connection.close()
    connection.close_pool()
    connection.ensure_connection()

    assert _plan_cache_mode() == "auto"


def test_errors_are_django_errors(workflow):
    with pytest.raises(IntegrityError):
        hot_fetchone(
            "INSERT INTO conversations_agentconversation (id, owner_id, workflow_id, generation, agent_node_id,"
            " length, revision, bytes, head_digest, input_tokens, output_tokens, cache_read_tokens,"
            " cache_write_tokens, last_input_tokens, notes, notes_revision, created_at, updated_at)"
            " VALUES (1, %(owner)s, 'w', 0, 'a', 0, 0, 0, '', 0, 0, 0, 0, 0, '[]', 0, now(), now())",
            {"owner": workflow.owner_id},
        )
