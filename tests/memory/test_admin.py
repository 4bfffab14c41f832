"""The Memory admin as staff use it (Django test client): every write through a service, its refusal on
the form and never beside a success, expired and removed items visible to staff but not to the model,
and the staff actions (Clear Memory, purge expired) through their services once confirmed (their pages:
tests/graphs/test_admin_confirmations.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone

from graphs.models import Workflow
from memory import selectors, services
from memory.models import MemoryItem, MemoryNamespace, MemoryRevision
from memory.scope import MemoryScope
from tests.conftest import node_id

pytestmark = pytest.mark.django_db

SUCCESS = "was changed successfully"


def edit_form(item: MemoryItem, **changes: str) -> dict[str, str]:
    form = {
        "title": item.title or "",
        "content": item.content,
        "category": item.category or "",
        "tags": "[]",
        "expires_at_0": "",
        "expires_at_1": "",
        "expected_version": str(item.version),
        "revisions-TOTAL_FORMS": "0",
        "revisions-INITIAL_FORMS": "0",
        "revisions-MIN_NUM_FORMS": "0",
        "revisions-MAX_NUM_FORMS": "1000",
    }
    form.update(changes)
    return form


@pytest.fixture
def remembered(scope: MemoryScope) -> MemoryItem:
    services.memory_remember(scope=scope, content="The gate code is 4321", title="Gate", actor="owner:1")
    return MemoryItem.objects.get()


def test_a_stale_edit_shows_the_conflict_on_the_form_and_no_success(
    client: Any, staff: Any, scope: MemoryScope, remembered: MemoryItem
) -> None:
    services.memory_update(
        scope=scope,
        memory_id=remembered.memory_id,
        expected_version=1,
        patch={"title": "Agent's"},
        actor="agent:r1",
    )
    client.force_login(staff)

    response = client.post(
        reverse("admin:memory_memoryitem_change", args=[remembered.pk]),
        edit_form(remembered, content="The gate code is 9999"),
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert "expected version 1, current 2" in page
    assert "(version_conflict)" in page
    assert SUCCESS not in page
    assert "Not saved" not in page
    stored = MemoryItem.objects.get()
    assert (stored.content, stored.title, stored.version) == ("The gate code is 4321", "Agent's", 2)
    assert MemoryRevision.objects.count() == 2


def test_an_over_long_title_is_refused_with_its_limit_and_nothing_is_written(
    client: Any, staff: Any, remembered: MemoryItem
) -> None:
    client.force_login(staff)

    response = client.post(
        reverse("admin:memory_memoryitem_change", args=[remembered.pk]),
        edit_form(remembered, title="t" * 501),
    )

    assert response.status_code == 200
    assert "Ensure this value has at most 500 characters (it has 501)." in response.content.decode()
    assert MemoryItem.objects.get().version == 1


def test_a_tag_the_service_refuses_is_shown_on_the_tags_field(
    client: Any, staff: Any, remembered: MemoryItem
) -> None:
    client.force_login(staff)

    response = client.post(
        reverse("admin:memory_memoryitem_change", args=[remembered.pk]),
        edit_form(remembered, tags='["x", ""]'),
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert errors["tags"] == ["May not be blank."]
    assert SUCCESS not in response.content.decode()
    assert MemoryItem.objects.get().version == 1


def _delete_leaving_its_memory(workflow: Workflow) -> None:
    """Delete the workflow row alone, as releases before a workflow's deletion erased its Memory did:
    the items they left must stay manageable by staff."""
    Workflow.objects.filter(pk=workflow.pk).delete()


def test_deleting_an_item_whose_workflow_is_gone_answers_a_page_and_forgets_it(
    client: Any, staff: Any, workflow: Workflow, remembered: MemoryItem
) -> None:
    _delete_leaving_its_memory(workflow)
    client.force_login(staff)
    url = reverse("admin:memory_memoryitem_delete", args=[remembered.pk])

    confirm = client.get(url)
    response = client.post(url, {"post": "yes"})

    assert confirm.status_code == 200
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:memory_memoryitem_changelist")
    assert MemoryItem.objects.exists() is False
    tombstone = MemoryRevision.objects.get(operation="forget")
    assert (tombstone.memory_id, tombstone.actor) == (remembered.memory_id, f"staff:{staff.pk}")
    assert MemoryNamespace.objects.get(pk=remembered.namespace).item_count == 0


def test_editing_an_item_whose_workflow_is_gone_is_refused_on_the_page(
    client: Any, staff: Any, workflow: Workflow, remembered: MemoryItem
) -> None:
    _delete_leaving_its_memory(workflow)
    client.force_login(staff)

    response = client.post(
        reverse("admin:memory_memoryitem_change", args=[remembered.pk]), edit_form(remembered, title="New")
    )

    assert response.status_code == 200
    assert "The item&#x27;s workflow no longer exists; it can only be deleted. (not_found)" in (
        response.content.decode()
    )
    assert MemoryItem.objects.get().title == "Gate"


def test_expired_items_are_listed_for_staff_and_hidden_from_the_model(
    client: Any, staff: Any, scope: MemoryScope
) -> None:
    past = timezone.now() - timedelta(minutes=1)
    services.memory_remember(scope=scope, content="old boat code", actor="owner:1", expires_at=past)
    services.memory_remember(scope=scope, content="new boat code", actor="owner:1")
    client.force_login(staff)
    changelist = reverse("admin:memory_memoryitem_changelist")

    everything = client.get(changelist)
    expired = client.get(changelist, {"expiry": "expired"})
    searched = client.get(changelist, {"q": "old boat"})

    assert everything.context["cl"].result_count == 2
    assert [i.content for i in expired.context["cl"].result_list] == ["old boat code"]
    assert [i.content for i in searched.context["cl"].result_list] == ["old boat code"]
    assert "expired (hidden from the agent)" in expired.content.decode()
    old = MemoryItem.objects.get(content="old boat code")
    change = client.get(reverse("admin:memory_memoryitem_change", args=[old.pk]))
    assert change.status_code == 200
    assert "content" not in change.context["adminform"].form.fields  # read-only once expired
    assert [i["content"] for i in selectors.memory_list(scope=scope).items] == ["new boat code"]
    assert [i["content"] for i in selectors.memory_recall(scope=scope, query="boat code").items] == [
        "new boat code"
    ]


def test_forgotten_items_stay_visible_to_staff_as_removed_revisions_without_their_text(
    client: Any, staff: Any, scope: MemoryScope, remembered: MemoryItem
) -> None:
    services.memory_forget(scope=scope, memory_id=remembered.memory_id, expected_version=1, actor="owner:1")
    client.force_login(staff)

    removed = client.get(reverse("admin:memory_memoryrevision_changelist"), {"removed": "yes"})

    assert [(r.memory_id, r.operation, r.content) for r in removed.context["cl"].result_list] == [
        (remembered.memory_id, "forget", None)  # forget erases the text, in every revision
    ]
    assert selectors.memory_list(scope=scope).items == []


def test_clear_memory_action_empties_the_namespace_through_the_service(
    client: Any, staff: Any, scope: MemoryScope, remembered: MemoryItem
) -> None:
    client.force_login(staff)
    namespace = MemoryNamespace.objects.get()

    response = client.post(
        reverse("admin:memory_memorynamespace_changelist"),
        {"action": "clear_memory", "_selected_action": [namespace.pk], "confirm": "yes"},
    )

    assert response.status_code == 302
    assert MemoryItem.objects.exists() is False
    assert MemoryRevision.objects.get(operation="clear").actor == f"staff:{staff.pk}"
    assert MemoryNamespace.objects.get().item_count == 0


def test_purge_expired_action_removes_only_expired_items(client: Any, staff: Any, scope: MemoryScope) -> None:
    services.memory_remember(
        scope=scope, content="stale", actor="owner:1", expires_at=timezone.now() - timedelta(seconds=1)
    )
    services.memory_remember(scope=scope, content="fresh", actor="owner:1")
    client.force_login(staff)
    fresh = MemoryItem.objects.get(content="fresh")

    response = client.post(
        reverse("admin:memory_memoryitem_changelist"),
        {"action": "purge_expired", "_selected_action": [fresh.pk], "confirm": "yes"},
    )

    assert response.status_code == 302
    assert list(MemoryItem.objects.values_list("content", flat=True)) == ["fresh"]
    assert MemoryRevision.objects.filter(operation="expire").count() == 1


def test_namespaces_embeddings_and_revisions_are_read_only(
    client: Any, staff: Any, remembered: MemoryItem
) -> None:
    client.force_login(staff)
    namespace = MemoryNamespace.objects.get()
    revision = MemoryRevision.objects.get()

    assert (
        client.get(reverse("admin:memory_memorynamespace_change", args=[quote(namespace.pk)])).status_code
        == 200
    )
    assert (
        client.post(
            reverse("admin:memory_memorynamespace_delete", args=[quote(namespace.pk)]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert (
        client.post(
            reverse("admin:memory_memoryrevision_delete", args=[revision.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert client.get(reverse("admin:memory_memoryembedding_add")).status_code == 403
    assert (MemoryNamespace.objects.count(), MemoryRevision.objects.count()) == (1, 1)


def test_the_admin_scope_derivation_matches_the_tools(workflow: Workflow, remembered: MemoryItem) -> None:
    from memory.admin import scope_of_item

    assert scope_of_item(remembered).memory_node_id == node_id(workflow, "simpleMemory")
