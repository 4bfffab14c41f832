"""The websocket consumer: every client frame, error frames, authorization, events."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from chat.models import ChatMessage, ChatRun
from tests.chat.wsclient import connect, frames_until, next_frame

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _inprocess_runs(settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "inprocess"


async def _open(workflow, owner):
    communicator, connected, _ = await connect(workflow.pk, owner)
    assert connected
    thread = await next_frame(communicator)
    assert thread["type"] == "thread"
    return communicator, thread


async def test_connect_sends_the_thread(workflow, owner):
    communicator, thread = await _open(workflow, owner)

    assert (thread["workflow_id"], thread["generation"], thread["path"], thread["revision"]) == (
        workflow.pk,
        1,
        [],
        0,
    )
    await communicator.disconnect()


async def test_send_streams_and_finishes(workflow, owner):
    communicator, _ = await _open(workflow, owner)

    await communicator.send_to(
        text_data=json.dumps({"type": "send", "request_id": "r1", "text": "Hello agent"})
    )
    frames = await frames_until(communicator, lambda f: f["type"] == "run.finished")

    ack = next(f for f in frames if f["type"] == "ack")
    assert ack["request_id"] == "r1"
    run_frames = [f for f in frames if f["type"].startswith("run.")]
    assert run_frames[0]["type"] == "run.started"
    assert [f["seq"] for f in run_frames] == list(range(1, len(run_frames) + 1))
    streamed = "".join(f["delta"] for f in run_frames if f["type"] == "run.delta")
    assert streamed == run_frames[-1]["text"]
    reply = await sync_to_async(ChatMessage.objects.get)(role="assistant")
    assert reply.text == streamed
    await communicator.disconnect()


async def test_second_send_while_live_is_run_in_progress(workflow, owner, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    communicator, _ = await _open(workflow, owner)

    await communicator.send_to(text_data=json.dumps({"type": "send", "request_id": "a", "text": "one"}))
    first = await frames_until(communicator, lambda f: f["type"] == "ack")
    await communicator.send_to(text_data=json.dumps({"type": "send", "request_id": "b", "text": "two"}))
    second = await frames_until(communicator, lambda f: f["type"] == "error")

    assert second[-1]["request_id"] == "b"
    assert second[-1]["code"] == "run_in_progress"
    assert second[-1]["extra"] == {"run_id": first[-1]["run_id"]}
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ("not json", "invalid_request"),
        (json.dumps([1, 2]), "invalid_request"),
        (json.dumps({"type": "nope"}), "invalid_request"),
        (json.dumps({"type": "send", "text": ""}), "invalid_request"),
        (json.dumps({"type": "send", "text": "x", "expected_revision": "1"}), "invalid_request"),
        (json.dumps({"type": "send", "text": "x" * 50_001}), "message_too_long"),
        (json.dumps({"type": "send", "text": "x" * 70_000}), "too_large"),
        (json.dumps({"type": "stop", "run_id": "run_nope"}), "not_found"),
        (json.dumps({"type": "switch", "message_id": "m_nope"}), "not_found"),
        (json.dumps({"type": "edit", "message_id": "m_nope", "text": "x"}), "not_found"),
        (json.dumps({"type": "retry", "message_id": "m_nope"}), "not_found"),
        (json.dumps({"type": "feedback", "message_id": "a_nope", "value": "up"}), "not_found"),
        (json.dumps({"type": "feedback", "message_id": "a_nope", "value": "meh"}), "invalid_request"),
        (json.dumps({"type": "resume", "run_id": "run_nope", "after_seq": 0}), "not_found"),
        (json.dumps({"type": "history", "limit": "ten"}), "invalid_request"),
    ],
)
async def test_bad_frames_get_error_frames_and_the_socket_stays_open(workflow, owner, payload, code):
    communicator, _ = await _open(workflow, owner)

    await communicator.send_to(text_data=payload)
    error = await next_frame(communicator)
    await communicator.send_to(text_data=json.dumps({"type": "ping", "request_id": "p"}))
    pong = await next_frame(communicator)

    assert (error["type"], error["code"]) == ("error", code)
    assert pong == {"type": "ack", "request_id": "p", "pong": True}
    assert await sync_to_async(ChatMessage.objects.count)() == 0
    await communicator.disconnect()


async def test_rate_limit_answers_rate_limited(workflow, owner, settings):
    settings.OPENCOMPANY_WS_FRAMES_PER_S = 0.001
    settings.OPENCOMPANY_WS_FRAME_BURST = 2
    communicator, _ = await _open(workflow, owner)

    codes = []
    for i in range(3):
        await communicator.send_to(text_data=json.dumps({"type": "ping", "request_id": i}))
        codes.append((await next_frame(communicator)).get("code"))

    assert codes == [None, None, "rate_limited"]
    await communicator.disconnect()


async def test_another_owner_is_closed_with_4404(workflow, other_owner):
    communicator, _, _ = await connect(workflow.pk, other_owner)

    output = await communicator.receive_output(timeout=5)

    assert output == {"type": "websocket.close", "code": 4404}


async def test_unknown_workflow_is_closed_with_4404(owner):
    communicator, _, _ = await connect("wf_missing", owner)

    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}


async def test_unauthenticated_socket_is_refused(workflow):
    communicator, _, _ = await connect(workflow.pk, None)

    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}


async def test_foreign_origin_is_refused(workflow, owner):
    from channels.testing import WebsocketCommunicator

    from opencompany.asgi import application

    communicator = WebsocketCommunicator(
        application,
        f"/ws/chat/{workflow.pk}/",
        headers=[(b"origin", b"http://evil.example"), (b"host", b"127.0.0.1")],
    )
    connected, _ = await communicator.connect()

    assert connected is False


async def test_resume_answers_a_snapshot(workflow, owner):
    communicator, _ = await _open(workflow, owner)
    await communicator.send_to(text_data=json.dumps({"type": "send", "request_id": "s", "text": "Hello"}))
    frames = await frames_until(communicator, lambda f: f["type"] == "run.finished")
    run_id = frames[-1]["run_id"]

    await communicator.send_to(
        text_data=json.dumps({"type": "resume", "request_id": "r", "run_id": run_id, "after_seq": 0})
    )
    snapshot = await next_frame(communicator)

    run = await sync_to_async(ChatRun.objects.get)(run_id=run_id)
    assert snapshot["type"] == "run.snapshot"
    assert (snapshot["request_id"], snapshot["state"], snapshot["seq"], snapshot["text"]) == (
        "r",
        "finished",
        run.last_seq,
        frames[-1]["text"],
    )
    await communicator.disconnect()


async def test_a_client_message_id_reused_with_another_text_is_refused_over_the_socket(
    workflow, owner, settings
):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    communicator, _ = await _open(workflow, owner)
    send = {"type": "send", "client_message_id": "c-1"}

    await communicator.send_to(text_data=json.dumps({**send, "request_id": "a", "text": "one"}))
    first = (await frames_until(communicator, lambda f: f["type"] == "ack"))[-1]
    await communicator.send_to(text_data=json.dumps({**send, "request_id": "b", "text": "one"}))
    same = (await frames_until(communicator, lambda f: f.get("request_id") == "b"))[-1]
    await communicator.send_to(text_data=json.dumps({**send, "request_id": "c", "text": "two"}))
    other = (await frames_until(communicator, lambda f: f.get("request_id") == "c"))[-1]

    assert (same["type"], same["created"], same["message_id"]) == ("ack", False, first["message_id"])
    assert (other["type"], other["code"], other["extra"]) == (
        "error",
        "idempotency_key_reused",
        {"message_id": first["message_id"]},
    )
    assert await sync_to_async(list)(ChatMessage.objects.values_list("text", flat=True)) == ["one"]
    await communicator.disconnect()


async def test_a_run_event_that_arrives_twice_is_sent_once(workflow, owner):
    from channels.layers import get_channel_layer

    from opencompany.core.events import chat_group

    communicator, _ = await _open(workflow, owner)
    layer = get_channel_layer()
    delta = {"run_id": "run_x", "seq": 2, "workflow_id": workflow.pk, "delta": "Hel"}

    for data in (delta, delta, {**delta, "seq": 3, "delta": "lo"}):
        # A publish that timed out is delivered in the process, and later through Redis as well.
        await layer.group_send(
            chat_group(workflow.pk), {"type": "app.event", "event": "run.delta", "data": data}
        )
    frames = [await next_frame(communicator) for _ in range(2)]

    assert [(f["seq"], f["delta"]) for f in frames] == [(2, "Hel"), (3, "lo")]
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()
