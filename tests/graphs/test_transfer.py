"""Ownership transfer: an explicit action that names the new owner twice, says what moves with counts,
moves it in one transaction or refuses and moves nothing, records who transferred what and when, and
closes the old owner's chat sockets with 4410. The owner is read-only on the workflow's form."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from chat import services as chat_services
from chat.models import ChatThread
from conversations.models import AgentConversation, ConversationArchive
from conversations.services import conversation_append
from conversations.types import ConversationKey
from graphs import services
from graphs.models import Workflow, WorkflowTransfer
from memory import services as memory_services
from memory.models import MemoryItem
from memory.scope import memory_scope
from opencompany.core.errors import ApplicationError
from opencompany.core.events import chat_group
from opencompany.llm.wire import make_assistant, make_text, make_user
from tests.conftest import make_workflow, node_id

pytestmark = pytest.mark.django_db

# What `stocked` keeps for the workflow, as the transfer page and the record count it.
STOCKED_MOVES = {
    "chat.chats": 2,
    "chat.messages": 2,
    "chat.runs": 2,
    "chat.notes": 0,
    "chat.feedback": 0,
    "memory.namespaces": 1,
    "memory.items": 1,
    "memory.revisions": 2,
    "memory.receipts": 0,
    "memory.embeddings": 0,
    "conversations.conversations": 1,
    "conversations.messages": 1,
    "conversations.archives": 1,
    "conversations.snapshots": 0,
    "conversations.provider_calls": 0,
    "conversations.compaction_attempts": 0,
    "graphs.deployments": 1,
    "graphs.legacy_artifacts": 0,
    "graphs.archive_outbox": 0,
}


@pytest.fixture
def stocked(workflow: Workflow, settings: Any) -> Workflow:
    """The demo workflow with a Memory item edited once, an archived chat whose Context went to an
    archive, and a current chat with one more Context message; no run is live."""
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    item = memory_services.memory_remember(
        scope=scope, content="The boat is moored at pier 7", actor=f"owner:{workflow.owner_id}"
    )
    memory_services.memory_update(
        scope=scope,
        memory_id=item.memory["id"],
        expected_version=1,
        patch={"title": "Boat"},
        actor=f"owner:{workflow.owner_id}",
    )
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    conversation_append(
        key=key, messages=[make_user("hi"), make_assistant([make_text("hello")])], expected_length=0
    )
    first = chat_services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first")
    chat_services.chat_end_run(run_id=first.run.run_id)
    chat_services.chat_archive(workflow=workflow)
    conversation_append(key=key, messages=[make_user("again")], expected_length=0)
    second = chat_services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello")
    chat_services.chat_end_run(run_id=second.run.run_id)
    return workflow


def _moved(record: WorkflowTransfer) -> dict[str, int]:
    return {f"{m['app']}.{m['key']}": m["count"] for m in record.moved}


def test_a_transfer_moves_everything_records_it_and_tells_the_old_owners_sockets(
    stocked, owner, other_owner, staff, api_client, other_client, events, run_on_commit
):
    workflow = stocked
    events.subscribe(chat_group(workflow.pk))
    memory_node = node_id(workflow, "simpleMemory")

    with run_on_commit(execute=True):
        record = services.workflow_transfer(
            workflow=workflow, new_owner=other_owner, confirm_username="mallory", actor=staff
        )

    stored = WorkflowTransfer.objects.get()
    assert stored.pk == record.pk
    assert (stored.workflow_id, stored.workflow_name) == (workflow.pk, "Demo")
    assert (stored.from_owner_id, stored.from_username) == (owner.pk, "owner")
    assert (stored.to_owner_id, stored.to_username) == (other_owner.pk, "mallory")
    assert (stored.actor_id, stored.actor_username) == (staff.pk, "staff")
    assert stored.tokens_stopped == 1  # api_client's token
    assert _moved(stored) == STOCKED_MOVES
    moved = Workflow.objects.get(pk=workflow.pk)
    assert (moved.owner_id, moved.revision) == (other_owner.pk, workflow.revision + 1)
    assert set(MemoryItem.objects.values_list("owner_id", flat=True)) == {other_owner.pk}
    assert set(AgentConversation.objects.values_list("owner_id", flat=True)) == {other_owner.pk}
    assert set(ConversationArchive.objects.values_list("owner_id", flat=True)) == {other_owner.pk}
    assert ChatThread.objects.filter(home_workflow=workflow).count() == 2
    url = f"/api/v1/workflows/{workflow.pk}/memory/{memory_node}/items?query=boat"
    answer = other_client.get(url)
    assert [i["content"] for i in answer.json()["results"]] == ["The boat is moored at pier 7"]
    assert api_client.get(url).status_code == 404
    assert [e for e in events.drain() if e["type"] == "workflow.transferred"] == [
        {"type": "workflow.transferred", "data": {"workflow_id": workflow.pk, "owner_id": other_owner.pk}}
    ]


def test_a_typed_username_that_is_not_the_new_owners_refuses_and_moves_nothing(
    stocked, owner, other_owner, staff
):
    namespaces = set(MemoryItem.objects.values_list("namespace", flat=True))

    with pytest.raises(ApplicationError) as refused:
        services.workflow_transfer(
            workflow=stocked, new_owner=other_owner, confirm_username="malory", actor=staff
        )

    assert refused.value.code == "transfer_not_confirmed"
    assert refused.value.extra == {"fields": {"confirm_username": ["Does not match mallory."]}}
    assert Workflow.objects.get(pk=stocked.pk).owner_id == owner.pk
    assert set(MemoryItem.objects.values_list("namespace", flat=True)) == namespaces
    assert WorkflowTransfer.objects.exists() is False


@pytest.mark.parametrize("who", ["current owner", "inactive", "nobody"])
def test_a_transfer_to_no_one_to_the_owner_or_to_an_inactive_account_is_refused(workflow, owner, staff, who):
    target = {
        "current owner": owner,
        "inactive": get_user_model().objects.create_user(username="gone", is_active=False),
        "nobody": None,
    }[who]

    with pytest.raises(ApplicationError) as refused:
        services.workflow_transfer(
            workflow=workflow,
            new_owner=target,
            confirm_username=target.username if target else "",
            actor=staff,
        )

    assert (refused.value.code, list(refused.value.extra["fields"])) == ("invalid_request", ["new_owner"])
    assert WorkflowTransfer.objects.exists() is False
    assert Workflow.objects.get(pk=workflow.pk).owner_id == owner.pk


def test_a_transfer_while_the_agent_answers_is_refused_and_moves_nothing(
    workflow, owner, other_owner, staff, settings
):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    memory_services.memory_remember(scope=scope, content="kept", actor="owner:1")
    chat_services.chat_send(owner_id=owner.pk, workflow_id=workflow.pk, text="hello")

    with pytest.raises(ApplicationError) as refused:
        services.workflow_transfer(
            workflow=workflow, new_owner=other_owner, confirm_username="mallory", actor=staff
        )

    assert refused.value.code == "run_in_progress"
    assert Workflow.objects.get(pk=workflow.pk).owner_id == owner.pk
    assert MemoryItem.objects.get().namespace == scope.namespace
    assert WorkflowTransfer.objects.exists() is False


# --- the admin ----------------------------------------------------------------------------------------


@pytest.fixture
def staff_client(staff: Any) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def transfer_url(workflow: Workflow) -> str:
    return reverse("admin:graphs_workflow_transfer", args=[quote(workflow.pk)])


def test_the_owner_is_read_only_on_the_workflow_form_which_links_the_transfer_page(
    staff_client, workflow, owner, other_owner
):
    url = reverse("admin:graphs_workflow_change", args=[quote(workflow.pk)])
    form = {
        "name": "Renamed",
        "owner": str(other_owner.pk),
        "graph": json.dumps(workflow.graph),
        "expected_revision": str(workflow.revision),
        "deployments-TOTAL_FORMS": "0",
        "deployments-INITIAL_FORMS": "0",
        "deployments-MIN_NUM_FORMS": "0",
        "deployments-MAX_NUM_FORMS": "1000",
    }

    page = staff_client.get(url)
    response = staff_client.post(url, form)

    assert "owner" not in page.context["adminform"].form.fields
    assert f'href="{transfer_url(workflow)}"' in page.content.decode()
    assert response.status_code == 302
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.name, stored.owner_id) == ("Renamed", owner.pk)


def test_the_transfer_page_counts_what_moves_and_a_wrong_username_moves_nothing(
    staff_client, stocked, owner, other_owner, api_client
):
    page = staff_client.get(transfer_url(stocked))
    refused = staff_client.post(
        transfer_url(stocked), {"new_owner": str(other_owner.pk), "confirm_username": "owner"}
    )

    assert page.status_code == 200
    html = page.content.decode()
    assert '<li data-key="memory.items">Memory items: <strong>1</strong></li>' in html
    assert '<li data-key="memory.revisions">Memory revisions (history): <strong>2</strong></li>' in html
    assert '<li data-key="chat.chats">Chats (current and archived): <strong>2</strong></li>' in html
    assert '<li data-key="chat.messages">Chat messages: <strong>2</strong></li>' in html
    assert (
        '<li data-key="conversations.conversations">Contexts (agent conversations): <strong>1</strong></li>'
        in html
    )
    assert '<li data-key="conversations.archives">Context archives: <strong>1</strong></li>' in html
    assert "API tokens of owner: <strong>1</strong>" in html
    assert {f"{m.app}.{m.key}": m.count for m in page.context["moves"]} == STOCKED_MOVES
    assert refused.status_code == 200
    form = refused.context["form"]
    assert form.errors["confirm_username"] == ["Does not match mallory."]
    assert form.non_field_errors() == [
        "Type the new owner's username (mallory) exactly to confirm the transfer. (transfer_not_confirmed)"
    ]
    assert Workflow.objects.get(pk=stocked.pk).owner_id == owner.pk
    assert WorkflowTransfer.objects.exists() is False


def test_confirming_the_transfer_page_moves_the_workflow_and_staff_see_the_record(
    staff_client, stocked, other_owner
):
    response = staff_client.post(
        transfer_url(stocked), {"new_owner": str(other_owner.pk), "confirm_username": "mallory"}, follow=True
    )

    assert response.redirect_chain == [
        (reverse("admin:graphs_workflow_change", args=[quote(stocked.pk)]), 302)
    ]
    assert [str(m) for m in response.context["messages"]] == [
        "Transferred “Demo” from owner to mallory: 2 chats (current and archived), 2 chat messages, "
        "2 chat runs, 1 memory namespaces, 1 memory items, 2 memory revisions (history), "
        "1 contexts (agent conversations), 1 context messages, 1 context archives, "
        "1 generations (deployments)."
    ]
    assert Workflow.objects.get(pk=stocked.pk).owner_id == other_owner.pk
    records = staff_client.get(reverse("admin:graphs_workflowtransfer_changelist"))
    assert [
        (r.from_username, r.to_username, r.actor_username) for r in records.context["cl"].result_list
    ] == [("owner", "mallory", "staff")]


def test_the_transfer_action_opens_the_page_for_one_workflow_and_refuses_several(
    staff_client, workflow, owner
):
    second = make_workflow(owner, name="Second")
    changelist = reverse("admin:graphs_workflow_changelist")

    one = staff_client.post(changelist, {"action": "transfer", "_selected_action": [workflow.pk]})
    two = staff_client.post(
        changelist, {"action": "transfer", "_selected_action": [workflow.pk, second.pk]}, follow=True
    )

    assert (one.status_code, one["Location"]) == (302, transfer_url(workflow))
    assert [str(m) for m in two.context["messages"]] == [
        "Select exactly one workflow to transfer: each transfer is confirmed on its own page, with what "
        "moves and the new owner's username."
    ]


# --- the old owner's chat ------------------------------------------------------------------------------


def test_the_old_owners_chat_page_says_the_workflow_was_transferred(workflow, owner, other_owner, staff):
    services.workflow_transfer(
        workflow=workflow, new_owner=other_owner, confirm_username="mallory", actor=staff
    )
    client = Client()
    client.force_login(owner)

    gone = client.get(f"/chat/{workflow.pk}/")
    unknown = client.get("/chat/wf_unknown/")

    assert gone.status_code == 404
    assert "was transferred to another owner on" in gone.content.decode()
    assert unknown.status_code == 404
    assert "There is no workflow with this address among yours." in unknown.content.decode()


@pytest.mark.django_db(transaction=True)
async def test_the_old_owners_socket_closes_with_4410_and_the_new_owners_stays_open(
    workflow, owner, other_owner, staff
):
    from tests.chat.wsclient import connect, next_frame

    old, connected, _ = await connect(workflow.pk, owner)
    assert connected
    assert (await next_frame(old))["type"] == "thread"

    await sync_to_async(services.workflow_transfer)(
        workflow=workflow, new_owner=other_owner, confirm_username="mallory", actor=staff
    )

    outputs = [await old.receive_output(timeout=5)]
    while outputs[-1]["type"] != "websocket.close":
        outputs.append(await old.receive_output(timeout=5))
    assert outputs[-1] == {"type": "websocket.close", "code": 4410}
    # Before it: at most the owner change every owner's socket hears; no frame of the new owner's.
    assert [json.loads(o["text"])["type"] for o in outputs[:-1]] in ([], ["workflow.updated"])
    new, connected, _ = await connect(workflow.pk, other_owner)
    assert connected
    assert (await next_frame(new))["type"] == "thread"
    await new.disconnect()
