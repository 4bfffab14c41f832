"""Optimistic versions under real concurrency (PostgreSQL, real threads and connections)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from memory import services
from memory.models import MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from opencompany.core.errors import ApplicationError


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_threads_updating_one_version_apply_exactly_once(scope):
    memory_id = services.memory_remember(scope=scope, content="start", actor="owner:1").memory["id"]
    barrier = threading.Barrier(8)
    outcomes: list[tuple[str, object]] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        try:
            barrier.wait()
            result = services.memory_update(
                scope=scope,
                memory_id=memory_id,
                expected_version=1,
                patch={"title": f"t{n}"},
                actor=f"agent:r{n}",
            )
            outcome: tuple[str, object] = ("applied", result.memory["version"])
        except ApplicationError as exc:
            outcome = (exc.code, exc.extra.get("current_version"))
        finally:
            connection.close()
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes, key=str) == sorted([("applied", 2)] + [("version_conflict", 2)] * 7, key=str)
    assert MemoryItem.objects.get().version == 2
    assert list(MemoryRevision.objects.order_by("version").values_list("version", flat=True)) == [1, 2]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_of_one_operation_id_apply_once(scope):
    barrier = threading.Barrier(4)
    applied: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            barrier.wait()
            result = services.memory_remember(
                scope=scope, content="same", actor="agent:r", operation_id="r:c1"
            )
            with lock:
                applied.append(result.receipt.applied)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(applied) == [False, False, False, True]
    assert MemoryItem.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_in_an_existing_namespace_apply_once_and_keep_the_count(scope, store):
    """The namespace exists, so every retry first tries the store's single write; the losers of the
    receipt race write nothing that stays and replay the winner's result."""
    services.memory_remember(scope=scope, content="creates the namespace", actor="owner:1")
    barrier = threading.Barrier(4)
    outcomes: list[tuple[bool, str]] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            barrier.wait()
            result = services.memory_remember(
                scope=scope, content="same", actor="agent:r", operation_id="r:c2"
            )
            with lock:
                outcomes.append((result.receipt.applied, result.memory["id"]))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    remembered = MemoryItem.objects.get(content="same")
    assert sorted(outcomes) == [(False, remembered.memory_id)] * 3 + [(True, remembered.memory_id)]
    assert MemoryItem.objects.count() == 2
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 2
    assert MemoryReceipt.objects.filter(operation_id="r:c2").count() == 1
    assert MemoryRevision.objects.filter(memory_id=remembered.memory_id).count() == 1
