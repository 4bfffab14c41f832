"""Remember/update/forget/clear: versions, revisions, receipts, quota, events, expiry, constraints."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from memory import selectors, services
from memory.models import MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from opencompany.core.errors import ApplicationError

ACTOR = "owner:1"


def _remember(scope, content="Likes espresso", **kwargs):
    return services.memory_remember(scope=scope, content=content, actor=ACTOR, **kwargs)


def test_remember_stores_version_one_with_normalized_labels_and_a_revision(scope):
    result = _remember(scope, title=" Coffee ", category=" Food ", tags=["Drinks", "drinks ", "Morning"])

    item = MemoryItem.objects.get()
    assert result.memory["version"] == 1
    assert (item.title, item.category, item.tags) == ("Coffee", "food", ["drinks", "morning"])
    assert item.namespace == scope.namespace
    assert item.created_by == ACTOR
    assert MemoryRevision.objects.get().operation == "remember"
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 1
    assert result.receipt.as_dict() == {"operation_id": None, "applied": True}


def test_update_patches_only_sent_fields_and_bumps_the_version(scope):
    memory_id = _remember(scope, title="Coffee", category="food", tags=["a"]).memory["id"]

    result = services.memory_update(
        scope=scope, memory_id=memory_id, expected_version=1, patch={"category": "drinks"}, actor="staff:9"
    )

    item = MemoryItem.objects.get()
    assert result.memory["version"] == 2
    assert (item.title, item.content, item.category, item.tags) == (
        "Coffee",
        "Likes espresso",
        "drinks",
        ["a"],
    )
    assert item.updated_by == "staff:9"
    assert list(MemoryRevision.objects.order_by("version").values_list("version", "operation")) == [
        (1, "remember"),
        (2, "update"),
    ]


def test_update_with_stale_version_is_refused_with_current_version_and_writes_nothing(scope, events):
    memory_id = _remember(scope).memory["id"]
    services.memory_update(
        scope=scope, memory_id=memory_id, expected_version=1, patch={"title": "t"}, actor=ACTOR
    )
    events.subscribe(f"owner.{scope.owner_id}")

    with pytest.raises(ApplicationError) as exc:
        services.memory_update(
            scope=scope, memory_id=memory_id, expected_version=1, patch={"title": "x"}, actor=ACTOR
        )

    assert exc.value.code == "version_conflict"
    assert exc.value.extra["current_version"] == 2
    assert MemoryItem.objects.get().title == "t"
    assert MemoryRevision.objects.count() == 2
    assert events.drain() == []


def test_update_refuses_content_null(scope):
    memory_id = _remember(scope).memory["id"]

    with pytest.raises(ApplicationError) as exc:
        services.memory_update(
            scope=scope, memory_id=memory_id, expected_version=1, patch={"content": None}, actor=ACTOR
        )

    assert exc.value.code == "invalid_request"
    assert list(exc.value.extra["fields"]) == ["patch.content"]
    assert MemoryItem.objects.get().version == 1


def test_expired_item_cannot_be_updated_but_can_be_forgotten(scope):
    memory_id = _remember(scope, expires_at=timezone.now() - timedelta(seconds=1)).memory["id"]

    with pytest.raises(ApplicationError) as exc:
        services.memory_update(
            scope=scope, memory_id=memory_id, expected_version=1, patch={"title": "x"}, actor=ACTOR
        )
    result = services.memory_forget(scope=scope, memory_id=memory_id, expected_version=1, actor=ACTOR)

    assert exc.value.code == "not_found"
    assert result.memory["id"] == memory_id
    assert MemoryItem.objects.exists() is False


def test_forget_keeps_history_and_records_the_forget(scope):
    memory_id = _remember(scope).memory["id"]
    services.memory_update(
        scope=scope, memory_id=memory_id, expected_version=1, patch={"title": "t"}, actor=ACTOR
    )

    services.memory_forget(scope=scope, memory_id=memory_id, expected_version=2, actor="agent:run_1")

    assert MemoryItem.objects.exists() is False
    assert list(MemoryRevision.objects.order_by("version").values_list("version", "operation", "actor")) == [
        (1, "remember", ACTOR),
        (2, "update", ACTOR),
        (3, "forget", "agent:run_1"),
    ]
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 0
    history = selectors.memory_revisions(scope=scope, memory_id=memory_id)
    assert [r["version"] for r in history["results"]] == [1, 2, 3]


def test_forget_with_stale_version_is_refused(scope):
    memory_id = _remember(scope).memory["id"]

    with pytest.raises(ApplicationError) as exc:
        services.memory_forget(scope=scope, memory_id=memory_id, expected_version=2, actor=ACTOR)

    assert exc.value.code == "version_conflict"
    assert exc.value.extra["current_version"] == 1
    assert MemoryItem.objects.count() == 1


# --- receipts ------------------------------------------------------------------------------


def test_retry_with_same_key_and_request_replays_without_writing(
    scope, events, django_capture_on_commit_callbacks
):
    events.subscribe(f"owner.{scope.owner_id}")
    with django_capture_on_commit_callbacks(execute=True):
        first = _remember(scope, title="Coffee", tags=["x"], operation_id="run_1:call_1")
    with django_capture_on_commit_callbacks(execute=True):
        second = _remember(scope, title="Coffee", tags=["x"], operation_id="run_1:call_1")

    assert second.memory == first.memory
    assert first.receipt.applied is True
    assert second.receipt.as_dict() == {"operation_id": "run_1:call_1", "applied": False}
    assert MemoryItem.objects.count() == 1
    assert MemoryRevision.objects.count() == 1
    assert MemoryReceipt.objects.count() == 1
    assert [e["type"] for e in events.drain()] == ["memory.updated"]


def test_receipt_keeps_no_content(scope):
    _remember(scope, content="secret espresso habit", title="private title", operation_id="k")

    receipt = MemoryReceipt.objects.get()
    assert "secret" not in str(receipt.result)
    assert "private" not in str(receipt.result)
    assert receipt.result["memory_id"] == MemoryItem.objects.get().memory_id


def test_same_key_with_different_request_is_refused(scope):
    _remember(scope, operation_id="k")

    with pytest.raises(ApplicationError) as exc:
        _remember(scope, content="Something else", operation_id="k")

    assert exc.value.code == "idempotency_key_reused"
    assert MemoryItem.objects.count() == 1


def test_failed_mutation_writes_no_receipt_and_can_be_retried(scope):
    memory_id = _remember(scope).memory["id"]

    with pytest.raises(ApplicationError):
        services.memory_update(
            scope=scope,
            memory_id=memory_id,
            expected_version=5,
            patch={"title": "t"},
            actor=ACTOR,
            operation_id="u1",
        )
    assert MemoryReceipt.objects.exists() is False

    result = services.memory_update(
        scope=scope,
        memory_id=memory_id,
        expected_version=1,
        patch={"title": "t"},
        actor=ACTOR,
        operation_id="u1",
    )
    assert result.receipt.applied is True


def test_update_and_forget_replays_return_the_first_result(scope):
    memory_id = _remember(scope).memory["id"]
    updated = services.memory_update(
        scope=scope,
        memory_id=memory_id,
        expected_version=1,
        patch={"title": "t"},
        actor=ACTOR,
        operation_id="u",
    )
    forgotten = services.memory_forget(
        scope=scope, memory_id=memory_id, expected_version=2, actor=ACTOR, operation_id="f"
    )

    updated_again = services.memory_update(
        scope=scope,
        memory_id=memory_id,
        expected_version=1,
        patch={"title": "t"},
        actor=ACTOR,
        operation_id="u",
    )
    forgotten_again = services.memory_forget(
        scope=scope, memory_id=memory_id, expected_version=2, actor=ACTOR, operation_id="f"
    )

    # The item is forgotten since: the replays keep the ids and versions, never its content.
    assert (updated.memory["title"], forgotten.memory["title"]) == ("t", "t")
    assert (updated_again.memory["version"], updated_again.memory["title"]) == (2, None)
    assert updated_again.memory["content"] is None
    assert updated_again.receipt.applied is False
    assert forgotten_again.memory["id"] == forgotten.memory["id"]
    assert (forgotten_again.memory["version"], forgotten_again.memory["content"]) == (2, None)
    assert forgotten_again.receipt.applied is False


def test_same_operation_id_in_two_namespaces_does_not_collide(two_memory_workflow):
    from memory.scope import memory_scope

    a = memory_scope(workflow=two_memory_workflow, memory_node_id=f"{two_memory_workflow.pk}:simpleMemory:1")
    b = memory_scope(workflow=two_memory_workflow, memory_node_id=f"{two_memory_workflow.pk}:simpleMemory:2")

    _remember(a, operation_id="k")
    second = _remember(b, content="Other", operation_id="k")

    assert second.receipt.applied is True
    assert MemoryItem.objects.count() == 2


def test_receipt_unique_constraint_holds_per_namespace(scope):
    _remember(scope, operation_id="k")

    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryReceipt.objects.create(
            namespace=scope.namespace,
            workflow_id=scope.workflow_id,
            operation_id="k",
            operation="x",
            fingerprint="f",
        )


def test_receipts_older_than_the_setting_are_pruned(scope, settings):
    settings.OPENCOMPANY_MEMORY_RECEIPT_DAYS = 30
    _remember(scope, operation_id="old")
    _remember(scope, content="new", operation_id="new")
    MemoryReceipt.objects.filter(operation_id="old").update(created_at=timezone.now() - timedelta(days=31))

    assert services.memory_receipts_prune() == 1
    assert list(MemoryReceipt.objects.values_list("operation_id", flat=True)) == ["new"]


# --- quota, events, clear, purge -----------------------------------------------------------


def test_quota_is_enforced_per_namespace(scope, other_scope, settings):
    settings.OPENCOMPANY_MEMORY_MAX_ITEMS = 2
    _remember(scope, content="one")
    _remember(scope, content="two")

    with pytest.raises(ApplicationError) as exc:
        _remember(scope, content="three", operation_id="k3")
    _remember(other_scope, content="elsewhere")

    assert exc.value.code == "memory_quota_exceeded"
    assert MemoryItem.objects.filter(namespace=scope.namespace).count() == 2
    assert MemoryReceipt.objects.exists() is False


def test_events_carry_metadata_only_after_commit(scope, events, django_capture_on_commit_callbacks):
    events.subscribe(f"owner.{scope.owner_id}")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        result = _remember(scope, content="very private content")
    assert events.drain() == []

    for callback in callbacks:
        callback()

    assert events.drain() == [
        {
            "type": "memory.updated",
            "data": {
                "workflow_id": scope.workflow_id,
                "memory_node_id": scope.memory_node_id,
                "operation": "remember",
                "memory_id": result.memory["id"],
                "version": 1,
            },
        }
    ]


def test_clear_removes_items_only_of_its_namespace_with_tombstones(scope, other_scope):
    _remember(scope, content="a")
    _remember(scope, content="b", expires_at=timezone.now() - timedelta(days=1))
    _remember(other_scope, content="c")

    result = services.memory_clear(scope=scope, actor=ACTOR, operation_id="clear-1")
    again = services.memory_clear(scope=scope, actor=ACTOR, operation_id="clear-1")

    assert result.cleared == 2
    assert again.as_dict() == {
        "operation": "clear",
        "cleared": 2,
        "receipt": {"operation_id": "clear-1", "applied": False},
    }
    assert list(MemoryItem.objects.values_list("content", flat=True)) == ["c"]
    assert MemoryRevision.objects.filter(operation="clear").count() == 2
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 0


def test_purge_expired_deletes_only_expired_items(scope):
    _remember(scope, content="keep")
    _remember(scope, content="later", expires_at=timezone.now() + timedelta(days=1))
    _remember(scope, content="gone", expires_at=timezone.now() - timedelta(days=1))

    assert services.memory_purge_expired() == 1

    assert sorted(MemoryItem.objects.values_list("content", flat=True)) == ["keep", "later"]
    assert MemoryRevision.objects.filter(operation="expire").count() == 1
    assert MemoryNamespace.objects.get(pk=scope.namespace).item_count == 2


def test_purge_command_and_prune_command_report_counts(scope):
    from io import StringIO

    from django.core.management import call_command

    # The stems and words tables are not Django models: rows earlier transactional tests left are
    # pruned first, so the counts below are this test's own.
    services.memory_stems_prune(batch=1_000_000)
    services.memory_words_prune(batch=1_000_000)
    _remember(scope, content="gone", expires_at=timezone.now() - timedelta(days=1))
    out = StringIO()
    call_command("purge_expired_memory", stdout=out)
    call_command("prune_memory_receipts", "--days", "0", stdout=out)

    # PostgreSQL's stems and words tables drop the purged item's word ("gone"); SQLite's index needs
    # no prune.
    pruned = 1 if connection.vendor == "postgresql" else 0
    assert out.getvalue().splitlines() == [
        "purged=1",
        f"stems_pruned={pruned}",
        f"words_pruned={pruned}",
        "pruned=0",
    ]


def test_item_version_check_constraint_holds(scope):
    _remember(scope)

    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryItem.objects.update(version=0)


def test_item_content_may_not_be_empty_in_the_database(scope):
    _remember(scope)

    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryItem.objects.update(content="")


def test_revision_versions_are_unique_per_item(scope):
    _remember(scope)
    revision = MemoryRevision.objects.get()

    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryRevision.objects.create(
            memory_id=revision.memory_id,
            namespace=revision.namespace,
            workflow_id=revision.workflow_id,
            memory_node_id=revision.memory_node_id,
            version=1,
            operation="update",
            content="x",
            actor=ACTOR,
        )
