"""Chat ids are opaque and random, as every id we mint (a number would tell the system's volume); chats
made before they were get theirs when the database is migrated."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from chat import services
from chat.models import ChatThread

pytestmark = pytest.mark.django_db(transaction=True)

CHAT_ID = re.compile(r"chat_[a-z0-9]{20}")


def _chat_of(workflow) -> ChatThread:
    services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hello")
    return ChatThread.objects.get(workflow=workflow)


def test_chat_ids_are_random_and_the_row_number_reaches_nothing(
    api_client, workflow, other_workflow, settings
):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    mine, theirs = _chat_of(workflow), _chat_of(other_workflow)

    listed = api_client.get(f"/api/v1/workflows/{workflow.pk}/chats").json()["results"]
    by_number = api_client.get(f"/api/v1/workflows/{workflow.pk}/chats/{mine.pk}")

    assert [chat["id"] for chat in listed] == [mine.uid]
    assert CHAT_ID.fullmatch(mine.uid)
    assert CHAT_ID.fullmatch(theirs.uid)
    assert mine.uid != theirs.uid
    assert by_number.status_code == 404
    assert api_client.get(f"/api/v1/workflows/{workflow.pk}/chats/{mine.uid}").status_code == 200


def test_chats_made_before_ids_were_random_get_one_each_when_migrated(workflow):
    executor = MigrationExecutor(connection)
    before, after = [("chat", "0005_chat_admin_plural_names")], [("chat", "0006_chat_threads_random_ids")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("chat", "ChatThread")
    made = [
        old.objects.create(workflow_id=None, home_workflow_id=workflow.pk, archived_at="2026-01-01T00:00Z").pk
        for _ in range(3)
    ]

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)

    ids = list(ChatThread.objects.filter(pk__in=made).values_list("uid", flat=True))
    assert len(ids) == len(set(ids)) == 3
    assert all(CHAT_ID.fullmatch(uid) for uid in ids)
