"""Where an edit is made decides who made it: the owner's API (and the chat page's panel on it) records
`owner:<id>` even for a staff account, the admin `staff:<id>`. An expiry in the past is refused on the
admin form ("Expire now" hides items on purpose), and an empty edit is refused with the API's message
in the admin and through the API the panel calls."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from memory import selectors, services
from memory.models import MemoryItem, MemoryRevision
from memory.scope import MemoryScope, memory_scope
from opencompany.core.tokens import token_issue
from tests.conftest import make_workflow, node_id
from tests.memory.test_admin import edit_form

pytestmark = pytest.mark.django_db

BLANK = "Invalid request: check 'patch.content'. May not be blank."
NOTHING = "Invalid request: check 'patch'. Send at least one field to change."


@pytest.fixture
def superowner(db: Any) -> Any:
    """An owner who is also a superuser, as the demo owner is."""
    return get_user_model().objects.create_user(
        username="boss", password="boss-pass-123", is_staff=True, is_superuser=True
    )


@pytest.fixture
def item(scope: MemoryScope) -> MemoryItem:
    services.memory_remember(scope=scope, content="The gate code is 4321", title="Gate", actor="owner:1")
    return MemoryItem.objects.get()


def _change(item: MemoryItem) -> str:
    return reverse("admin:memory_memoryitem_change", args=[item.pk])


def test_an_owner_who_is_staff_edits_as_owner_through_the_api_and_as_staff_in_the_admin(superowner):
    workflow = make_workflow(superowner)
    memory_node = node_id(workflow, "simpleMemory")
    scope = memory_scope(workflow=workflow, memory_node_id=memory_node)
    created = services.memory_remember(scope=scope, content="Tea", actor=f"owner:{superowner.pk}")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token_issue(user=superowner)[0]}")
    admin = Client()
    admin.force_login(superowner)

    answer = api.patch(
        f"/api/v1/workflows/{workflow.pk}/memory/{memory_node}/items/{created.memory['id']}",
        {"expected_version": 1, "content": "Tea, no sugar"},
        format="json",
    )
    stored = MemoryItem.objects.get()
    page = admin.post(_change(stored), edit_form(stored, content="Green tea"))

    assert answer.status_code == 200
    assert page.status_code == 302
    assert list(MemoryRevision.objects.order_by("version").values_list("version", "actor")) == [
        (1, f"owner:{superowner.pk}"),
        (2, f"owner:{superowner.pk}"),
        (3, f"staff:{superowner.pk}"),
    ]
    assert MemoryItem.objects.get().updated_by == f"staff:{superowner.pk}"


def test_an_expiry_in_the_past_is_refused_on_the_form_and_the_item_stays_visible(client, staff, scope, item):
    client.force_login(staff)
    past = timezone.now() - timedelta(hours=1)

    response = client.post(
        _change(item),
        edit_form(item, expires_at_0=past.strftime("%Y-%m-%d"), expires_at_1=past.strftime("%H:%M:%S")),
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["expires_at"] == [
        "This time has passed: the item would disappear from the agent and the owner's panel at once. "
        "Choose a future time, or use the “Expire now” action to hide it on purpose."
    ]
    stored = MemoryItem.objects.get()
    assert (stored.version, stored.expires_at) == (1, None)
    assert [i["id"] for i in selectors.memory_list(scope=scope).items] == [item.memory_id]


def test_a_future_expiry_is_saved(client, staff, item):
    client.force_login(staff)
    later = timezone.now() + timedelta(days=2)

    response = client.post(
        _change(item),
        edit_form(item, expires_at_0=later.strftime("%Y-%m-%d"), expires_at_1=later.strftime("%H:%M:%S")),
    )

    assert response.status_code == 302
    stored = MemoryItem.objects.get()
    assert stored.version == 2
    assert stored.expires_at is not None
    assert stored.expires_at > timezone.now() + timedelta(days=1)


def test_expire_now_hides_the_selected_items_on_purpose_as_staff(client, staff, scope, item):
    client.force_login(staff)

    response = client.post(
        reverse("admin:memory_memoryitem_changelist"),
        {"action": "expire_now", "_selected_action": [item.pk]},
    )

    assert response.status_code == 302
    stored = MemoryItem.objects.get()
    assert stored.version == 2
    assert stored.expires_at is not None
    assert stored.expires_at <= timezone.now()
    assert MemoryRevision.objects.get(version=2).actor == f"staff:{staff.pk}"
    assert selectors.memory_list(scope=scope).items == []


@pytest.mark.parametrize(("content", "message"), [("", BLANK), ("   ", BLANK)])
def test_blank_content_in_the_admin_is_refused_with_the_apis_message(client, staff, item, content, message):
    client.force_login(staff)

    response = client.post(_change(item), edit_form(item, content=content))

    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["content"] == ["May not be blank."]
    assert form.non_field_errors() == [f"{message} (invalid_request)"]
    assert MemoryItem.objects.get().version == 1


def test_a_save_that_changes_nothing_is_refused_with_the_apis_message(client, staff, item):
    client.force_login(staff)

    response = client.post(_change(item), edit_form(item))

    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [
        "Send at least one field to change.",
        f"{NOTHING} (invalid_request)",
    ]
    assert "was changed successfully" not in response.content.decode()
    assert MemoryItem.objects.get().version == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [("", "Invalid request: check 'content'. May not be blank."), ("   ", BLANK)],
)
def test_the_api_the_panel_calls_refuses_blank_content_saying_why(
    api_client, workflow, scope, item, content, message
):
    url = f"/api/v1/workflows/{workflow.pk}/memory/{scope.memory_node_id}/items/{item.memory_id}"

    response = api_client.patch(url, {"expected_version": 1, "content": content}, format="json")

    assert response.status_code == 400
    assert (response.json()["code"], response.json()["message"]) == ("invalid_request", message)
    assert MemoryItem.objects.get().version == 1
