"""Hostile websocket frames: each is answered with an `invalid_request` error frame naming the field,
the socket stays open, and nothing is written."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from tests.chat.wsclient import connect, frames_until, next_frame
from tests.rows import row_counts

pytestmark = pytest.mark.django_db(transaction=True)

NUL = "a\x00b"
SURROGATE = "a\ud800b"

FRAMES = [
    ({"type": "send", "text": NUL}, "text"),
    ({"type": "send", "text": SURROGATE}, "text"),
    ({"type": "send", "text": "hi", "client_message_id": NUL}, "client_message_id"),
    ({"type": "send", "text": "hi", "expected_revision": 10**20}, "expected_revision"),
    ({"type": "edit", "message_id": NUL, "text": "hi"}, "message_id"),
    ({"type": "edit", "message_id": "m_x", "text": SURROGATE}, "text"),
    ({"type": "edit", "message_id": "m_x", "text": "hi", "expected_revision": 10**20}, "expected_revision"),
    ({"type": "stop", "run_id": NUL}, "run_id"),
    ({"type": "stop", "run_id": SURROGATE}, "run_id"),
    ({"type": "feedback", "message_id": SURROGATE, "value": "up"}, "message_id"),
    ({"type": "feedback", "message_id": "m_x", "value": NUL}, "value"),
    ({"type": "switch", "message_id": NUL}, "message_id"),
    ({"type": "switch", "message_id": "m_x", "expected_revision": 10**20}, "expected_revision"),
    ({"type": "retry", "message_id": "m_x", "expected_revision": -1}, "expected_revision"),
    ({"type": "resume", "run_id": "run_x", "after_seq": 10**20}, "after_seq"),
    ({"type": "history", "before": NUL}, "before"),
]


async def test_every_hostile_frame_is_refused_naming_its_field_and_writes_nothing(workflow, owner):
    communicator, connected, _ = await connect(workflow.pk, owner)
    assert connected
    assert (await next_frame(communicator))["type"] == "thread"
    before = await sync_to_async(row_counts)()

    for n, (frame, field) in enumerate(FRAMES):
        await communicator.send_to(text_data=json.dumps({**frame, "request_id": f"r{n}"}))
        [reply] = await frames_until(communicator, lambda f: f["type"] in ("error", "ack"))
        assert (reply["type"], reply["code"], reply["request_id"]) == ("error", "invalid_request", f"r{n}"), (
            frame,
            reply,
        )
        assert list(reply["extra"]["fields"]) == [field], (frame, reply)

    await communicator.send_to(text_data=json.dumps({"type": "ping", "request_id": "still-open"}))
    assert await next_frame(communicator) == {"type": "ack", "request_id": "still-open", "pong": True}
    assert await sync_to_async(row_counts)() == before
    await communicator.disconnect()


async def test_a_frame_nested_a_thousand_deep_is_refused_before_parsing(workflow, owner):
    communicator, _, _ = await connect(workflow.pk, owner)
    await next_frame(communicator)
    before = await sync_to_async(row_counts)()

    await communicator.send_to(text_data='{"type": "send", "text": ' + "[" * 1000 + "]" * 1000 + "}")
    reply = await next_frame(communicator)

    assert (reply["type"], reply["code"], reply["extra"]["fields"]) == (
        "error",
        "invalid_request",
        {"text": ["Nested deeper than 64 levels."]},
    )
    assert await sync_to_async(row_counts)() == before
    await communicator.disconnect()


async def test_a_workflow_id_holding_a_nul_closes_the_socket_as_not_found(owner):
    communicator, connected, _ = await connect("wf_\x00x", owner)

    assert connected  # accepted, then closed with the not-found code
    assert (await communicator.receive_output(timeout=5))["code"] == 4404


async def test_unknown_message_and_run_ids_are_not_found_and_the_socket_stays_open(workflow, owner):
    communicator, _, _ = await connect(workflow.pk, owner)
    await next_frame(communicator)
    frames = [
        {"type": "edit", "message_id": "m_nothing", "text": "hi"},
        {"type": "retry", "message_id": "m_nothing"},
        {"type": "switch", "message_id": "m_nothing"},
        {"type": "feedback", "message_id": "m_nothing", "value": "up"},
        {"type": "stop", "run_id": "run_nothing"},
        {"type": "resume", "run_id": "run_nothing", "after_seq": 0},
    ]

    codes = []
    for n, frame in enumerate(frames):
        await communicator.send_to(text_data=json.dumps({**frame, "request_id": n}))
        [reply] = await frames_until(communicator, lambda f: f["type"] in ("error", "ack"))
        codes.append((reply["request_id"], reply["code"]))

    assert codes == [(n, "not_found") for n in range(len(frames))]
    await communicator.send_to(text_data=json.dumps({"type": "ping", "request_id": "open"}))
    assert (await next_frame(communicator))["request_id"] == "open"
    await communicator.disconnect()


async def test_junk_frames_count_against_the_rate_limit_before_they_are_parsed(workflow, owner, settings):
    settings.OPENCOMPANY_WS_FRAMES_PER_S = 0.001
    settings.OPENCOMPANY_WS_FRAME_BURST = 5
    communicator, connected, _ = await connect(workflow.pk, owner)
    assert connected
    assert (await next_frame(communicator))["type"] == "thread"

    replies = []
    for n in range(8):
        junk = "not json" if n % 2 else '{"request_id": "j' + str(n) + '", "type": '  # unparseable either way
        await communicator.send_to(text_data=junk)
        replies.append(await next_frame(communicator))

    assert [r["code"] for r in replies] == ["invalid_request"] * 5 + ["rate_limited"] * 3
    # A refused frame's request id is still echoed where one is seen, though the frame is never parsed.
    assert [r["request_id"] for r in replies[5:]] == [None, "j6", None]
    await communicator.disconnect()


async def test_a_socket_gets_a_byte_budget_charged_before_parsing(workflow, owner, settings):
    settings.OPENCOMPANY_WS_BYTES_PER_S = 1
    settings.OPENCOMPANY_WS_BYTE_BURST = 4 * 60_000
    communicator, connected, _ = await connect(workflow.pk, owner)
    assert connected
    assert (await next_frame(communicator))["type"] == "thread"

    codes = []
    for n in range(6):
        big = json.dumps({"type": "ping", "request_id": f"b{n}", "pad": "x" * 59_900})
        await communicator.send_to(text_data=big)
        codes.append((await next_frame(communicator)).get("code"))
    await communicator.send_to(text_data=json.dumps({"type": "ping", "request_id": "small"}))

    assert codes == [
        None,
        None,
        None,
        None,
        "rate_limited",
        "rate_limited",
    ]  # 4 frames of 60 KB, then refused
    # What is left of the budget still carries a small frame.
    assert await next_frame(communicator) == {"type": "ack", "request_id": "small", "pong": True}
    await communicator.disconnect()
