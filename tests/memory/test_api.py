"""Memory API: authorization matrix, shapes, validation, Idempotency-Key, clear; admin edits."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory import services
from memory.models import MemoryItem, MemoryReceipt, MemoryRevision
from tests.conftest import node_id


def _base(workflow, node=None):
    node = node or node_id(workflow, "simpleMemory")
    return f"/api/v1/workflows/{workflow.pk}/memory/{node}"


@pytest.fixture
def item(scope):
    return services.memory_remember(
        scope=scope, content="Likes espresso", title="Coffee", actor="owner:1"
    ).memory


def _endpoints(workflow, memory_id):
    base = _base(workflow)
    return [
        ("get", f"{base}/items", None),
        ("get", f"{base}/items?query=espresso", None),
        ("post", f"{base}/items", {"content": "x"}),
        ("get", f"{base}/items/{memory_id}", None),
        ("patch", f"{base}/items/{memory_id}", {"expected_version": 1, "title": "t"}),
        ("delete", f"{base}/items/{memory_id}?expected_version=1", None),
        ("get", f"{base}/items/{memory_id}/revisions", None),
        ("post", f"{base}/clear", {"confirm": True}),
    ]


@pytest.mark.parametrize("index", range(8))
def test_anonymous_callers_are_refused_everywhere(anon_client, workflow, item, index):
    method, url, body = _endpoints(workflow, item["id"])[index]

    response = getattr(anon_client, method)(url, body, format="json")

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert MemoryItem.objects.count() == 1


@pytest.mark.parametrize("index", range(8))
def test_another_owner_gets_not_found_everywhere(other_client, workflow, item, index):
    method, url, body = _endpoints(workflow, item["id"])[index]

    response = getattr(other_client, method)(url, body, format="json")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert MemoryItem.objects.get().version == 1


@pytest.mark.parametrize(
    ("index", "status"), [(0, 200), (1, 200), (2, 201), (3, 200), (4, 200), (5, 204), (6, 200), (7, 200)]
)
def test_owner_reaches_every_endpoint(api_client, workflow, item, index, status):
    method, url, body = _endpoints(workflow, item["id"])[index]

    response = getattr(api_client, method)(url, body, format="json")

    assert response.status_code == status, response.content
    if status == 204:
        assert response.content == b""


def test_a_node_that_is_not_a_memory_node_is_not_found(api_client, workflow):
    response = api_client.get(f"{_base(workflow, node_id(workflow, 'aiAgent'))}/items")

    assert response.status_code == 404


def test_memory_node_in_another_owners_workflow_is_not_found_by_id_swap(api_client, workflow, other_workflow):
    response = api_client.get(
        f"/api/v1/workflows/{workflow.pk}/memory/{node_id(other_workflow, 'simpleMemory')}/items"
    )

    assert response.status_code == 404


def test_remember_with_idempotency_key_replays(api_client, workflow):
    url = f"{_base(workflow)}/items"
    body = {"content": "Likes tea", "tags": ["Tea"]}

    first = api_client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="req-1")
    second = api_client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="req-1")
    reused = api_client.post(url, {"content": "other"}, format="json", HTTP_IDEMPOTENCY_KEY="req-1")

    assert first.status_code == 201
    assert second.status_code == 200
    assert second.json()["memory"] == first.json()["memory"]
    assert second.json()["receipt"] == {"operation_id": "api:req-1", "applied": False}
    assert reused.status_code == 409
    assert reused.json()["code"] == "idempotency_key_reused"
    assert MemoryItem.objects.count() == 1


def test_list_and_recall_shapes(api_client, workflow, item):
    listed = api_client.get(f"{_base(workflow)}/items").json()
    recalled = api_client.get(f"{_base(workflow)}/items", {"query": "espresso", "tags": ""}).json()

    assert listed["retrieval"] == "list"
    assert [i["id"] for i in listed["results"]] == [item["id"]]
    assert recalled == {
        "results": recalled["results"],
        "next_cursor": None,
        "has_more": False,
        "retrieval": "fts",
        "degraded": None,
    }
    assert recalled["results"][0]["content"] == "Likes espresso"


def test_update_conflict_is_409_with_current_version(api_client, workflow, item):
    response = api_client.patch(
        f"{_base(workflow)}/items/{item['id']}", {"expected_version": 4, "title": "x"}, format="json"
    )

    assert response.status_code == 409
    assert response.json()["code"] == "version_conflict"
    assert response.json()["extra"]["current_version"] == 1


def test_forget_then_revisions_still_show_history(api_client, workflow, item):
    api_client.delete(f"{_base(workflow)}/items/{item['id']}?expected_version=1")

    history = api_client.get(f"{_base(workflow)}/items/{item['id']}/revisions").json()

    assert [(r["version"], r["operation"]) for r in history["results"]] == [(1, "remember"), (2, "forget")]
    assert (history["next_cursor"], history["has_more"]) == (None, False)


def test_clear_requires_confirm_true(api_client, workflow, item):
    refused = api_client.post(f"{_base(workflow)}/clear", {"confirm": False}, format="json")
    cleared = api_client.post(f"{_base(workflow)}/clear", {"confirm": True}, format="json")

    assert refused.status_code == 400
    assert list(refused.json()["extra"]["fields"]) == ["confirm"]
    assert cleared.json() == {"cleared": 1, "receipt": {"operation_id": None, "applied": True}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content": "x" * 50_001}, "content"),
        ({"content": "x", "tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"content": "x", "expires_at": "31/02/2030"}, "expires_at"),
        ({"content": "x", "namespace": "mns_other"}, "namespace"),
        ({"content": "x", "operation": "summarize"}, "operation"),
        ({"content": "   "}, "content"),
        ({"content": "x", "tags": ["  "]}, "tags"),
    ],
)
def test_bad_remember_input_is_invalid_request_naming_the_field(api_client, workflow, body, field):
    response = api_client.post(f"{_base(workflow)}/items", body, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert field in response.json()["extra"]["fields"]
    assert MemoryItem.objects.exists() is False


def test_bad_update_input_names_the_field(api_client, workflow, item):
    response = api_client.patch(
        f"{_base(workflow)}/items/{item['id']}", {"expected_version": 1, "content": None}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()["extra"]["fields"]) == ["content"]
    assert MemoryItem.objects.get().version == 1


def test_bad_list_parameters_are_invalid_request(api_client, workflow, item):
    too_many = api_client.get(f"{_base(workflow)}/items", {"limit": 101})
    too_long = api_client.get(f"{_base(workflow)}/items", {"query": "x" * 2001})
    bad_cursor = api_client.get(f"{_base(workflow)}/items", {"query": "espresso", "cursor": "nope"})

    assert (too_many.status_code, list(too_many.json()["extra"]["fields"])) == (400, ["limit"])
    assert (too_long.status_code, list(too_long.json()["extra"]["fields"])) == (400, ["query"])
    assert (bad_cursor.status_code, bad_cursor.json()["code"]) == (400, "invalid_cursor")


def test_writes_are_throttled(api_client, workflow, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "memory_write": "2/min",
        },
    }
    codes = [
        api_client.post(f"{_base(workflow)}/items", {"content": f"n{i}"}, format="json").status_code
        for i in range(3)
    ]
    read = api_client.get(f"{_base(workflow)}/items")

    assert codes == [201, 201, 429]
    assert read.status_code == 200


# --- admin ---------------------------------------------------------------------------------


def test_admin_edit_goes_through_the_service(
    client, staff, workflow, item, events, django_capture_on_commit_callbacks
):
    client.force_login(staff)
    obj = MemoryItem.objects.get()
    events.subscribe(f"owner.{workflow.owner_id}")
    url = reverse("admin:memory_memoryitem_change", args=[obj.pk])

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            url,
            {
                "title": "Coffee (edited)",
                "content": "Likes espresso",
                "category": "",
                "tags": "[]",
                "expires_at_0": "",
                "expires_at_1": "",
                "expected_version": "1",
                "revisions-TOTAL_FORMS": "1",
                "revisions-INITIAL_FORMS": "1",
                "revisions-MIN_NUM_FORMS": "0",
                "revisions-MAX_NUM_FORMS": "1000",
            },
        )

    assert response.status_code == 302
    obj.refresh_from_db()
    assert (obj.title, obj.version, obj.updated_by) == ("Coffee (edited)", 2, f"staff:{staff.pk}")
    assert list(MemoryRevision.objects.order_by("version").values_list("version", "actor")) == [
        (1, "owner:1"),
        (2, f"staff:{staff.pk}"),
    ]
    assert [(e["type"], e["data"]["operation"], e["data"]["version"]) for e in events.drain()] == [
        ("memory.updated", "update", 2)
    ]


def test_admin_delete_forgets_through_the_service(client, staff, workflow, item):
    client.force_login(staff)
    obj = MemoryItem.objects.get()

    response = client.post(reverse("admin:memory_memoryitem_delete", args=[obj.pk]), {"post": "yes"})

    assert response.status_code == 302
    assert MemoryItem.objects.exists() is False
    assert MemoryRevision.objects.filter(operation="forget", actor=f"staff:{staff.pk}").count() == 1


def test_admin_pages_render_and_receipts_are_read_only(client, staff, scope):
    services.memory_remember(scope=scope, content="x", actor="owner:1", operation_id="k")
    client.force_login(staff)

    assert (
        client.get(reverse("admin:memory_memoryitem_changelist"), {"expiry": "active", "q": "x"}).status_code
        == 200
    )
    assert client.get(reverse("admin:memory_memoryrevision_changelist")).status_code == 200
    receipt = MemoryReceipt.objects.get()
    assert client.get(reverse("admin:memory_memoryreceipt_change", args=[receipt.pk])).status_code == 200
    assert client.get(reverse("admin:memory_memoryreceipt_add")).status_code == 403
