"""Eight real threads append to one conversation on PostgreSQL."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from conversations.models import ConversationMessage
from conversations.selectors import conversation_cursor, conversation_load
from conversations.services import conversation_append
from conversations.types import ConversationKey
from opencompany.core.errors import ApplicationError
from tests.conftest import make_workflow, node_id
from tests.conversations.conftest import user

WRITERS = 8
ROUNDS = 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("with_digest", "store"),
    [(False, "postgresql"), (True, "portable"), (True, "postgresql")],
    ids=["locked", "digest-portable", "digest-postgresql"],
    indirect=["store"],
)
def test_eight_writers_with_the_same_length_one_wins_per_length_and_nothing_is_lost(
    owner, with_digest, store
):
    """`with_digest`: each writer passes the head digest it read, so the append is the store's
    compare-and-set (UPDATE first); it must still let exactly one writer through per length."""
    workflow = make_workflow(owner)
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    seeded = 0
    if with_digest:  # the compare-and-set needs an existing head
        conversation_append(key=key, messages=[user("seed")], expected_length=0)
        seeded = 1
    barrier = threading.Barrier(WRITERS)
    first_round: dict[str, list[str]] = {"won": [], "conflict": []}
    lock = threading.Lock()
    refusals: list[tuple[str, bool]] = []

    def writer(n: int) -> None:
        try:
            mine = [user(f"w{n}-r{r}") for r in range(ROUNDS)]
            pending = list(mine)
            first = True
            while pending:
                cursor = conversation_cursor(key=key)
                if first:
                    barrier.wait()  # every writer read the same head before anyone appends
                length, digest = cursor.length, cursor.digest if with_digest else None
                try:
                    conversation_append(
                        key=key, messages=[pending[0]], expected_length=length, expected_digest=digest
                    )
                    outcome = "won"
                    pending.pop(0)
                except ApplicationError as exc:
                    with lock:
                        refusals.append((exc.code, exc.extra["length"] >= length))
                    outcome = "conflict"
                if first:
                    with lock:
                        first_round[outcome].append(f"w{n}")
                    first = False
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert all(t.is_alive() is False for t in threads)
    assert len(first_round["won"]) == 1
    assert refusals
    assert set(refusals) == {("conversation_conflict", True)}
    assert len(first_round["conflict"]) == WRITERS - 1
    seqs = list(ConversationMessage.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(seeded + WRITERS * ROUNDS))
    texts = sorted(m["content"][0]["text"] for m in conversation_load(key=key)[seeded:])
    assert texts == sorted(f"w{n}-r{r}" for n in range(WRITERS) for r in range(ROUNDS))
