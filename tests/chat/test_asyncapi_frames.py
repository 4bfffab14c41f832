"""docs/asyncapi.yaml against the real consumer: a chat driven through every client frame and the events
of its workflow and owner; every frame the server sends is recorded and validated against the document,
and a frame the document does not describe fails the validation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from chat import services as chat_services
from chat.models import ChatRun
from graphs import services as graph_services
from memory import services as memory_services
from memory.scope import memory_scope
from tests.chat import asyncapi
from tests.chat.wsclient import connect
from tests.conftest import demo_graph, node_id

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder:
    """Every frame the server sent on one socket, in order."""

    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self.communicator = communicator
        self.frames: list[dict[str, Any]] = []

    async def send(self, frame: dict[str, Any]) -> None:
        asyncapi.validate(frame, sent_by="client")
        await self.communicator.send_to(text_data=json.dumps(frame))

    async def until(self, predicate: Any, timeout: float = 10) -> dict[str, Any]:
        while True:
            frame = json.loads(await self.communicator.receive_from(timeout=timeout))
            self.frames.append(frame)
            if predicate(frame):
                return frame

    async def drain(self) -> None:
        while True:
            try:
                frame = await self.communicator.receive_from(timeout=0.3)
            except TimeoutError:
                return
            self.frames.append(json.loads(frame))


def _answer(request_id: str) -> Any:
    return lambda f: f.get("request_id") == request_id


async def test_every_frame_of_a_real_chat_is_described_by_the_asyncapi_document(workflow, owner, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "inprocess"
    communicator, connected, _ = await connect(workflow.pk, owner)
    assert connected
    socket = Recorder(communicator)
    await socket.until(lambda f: f["type"] == "thread")

    await socket.send(
        {
            "type": "send",
            "request_id": "s1",
            "text": "Remember that I take my coffee black",
            "client_message_id": "c-1",
        }
    )
    await socket.until(lambda f: f["type"] == "run.finished")
    first = await sync_to_async(ChatRun.objects.get)()
    await socket.send({"type": "ping", "request_id": "p"})
    await socket.until(_answer("p"))
    await socket.send(
        {"type": "feedback", "request_id": "f", "message_id": first.reply_message_uid, "value": "up"}
    )
    await socket.until(_answer("f"))
    await socket.send({"type": "history", "request_id": "h", "limit": 10})
    await socket.until(_answer("h"))
    await socket.send({"type": "resume", "request_id": "r", "run_id": first.run_id, "after_seq": 0})
    await socket.until(_answer("r"))
    await socket.send({"type": "stop", "request_id": "x", "run_id": first.run_id})
    await socket.until(_answer("x"))
    await socket.send({"type": "edit", "request_id": "e", "message_id": first.user_message_uid, "text": "Hi"})
    await socket.until(lambda f: f["type"] == "run.finished" and f["run_id"] != first.run_id)
    await socket.send({"type": "switch", "request_id": "w", "message_id": first.user_message_uid})
    await socket.until(_answer("w"))
    await socket.send({"type": "retry", "request_id": "t", "message_id": first.reply_message_uid})
    await socket.until(
        lambda f: f["type"] == "run.finished" and f["seq"] > 1 and f["run_id"] not in {first.run_id}
    )
    await socket.communicator.send_to(text_data=json.dumps({"type": "dance", "request_id": "u"}))
    await socket.until(_answer("u"))

    # a queued run stopped at once, and one a reset ends
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    await socket.send({"type": "send", "request_id": "s2", "text": "Wait for it"})
    queued = await socket.until(_answer("s2"))
    await socket.send({"type": "stop", "request_id": "s3", "run_id": queued["run_id"]})
    await socket.until(lambda f: f["type"] == "run.stopped")
    await socket.send({"type": "send", "request_id": "s4", "text": "And this one"})
    await socket.until(_answer("s4"))
    await sync_to_async(graph_services.workflow_reset)(workflow=workflow, actor=owner)
    await socket.until(lambda f: f["type"] == "run.error")

    # the owner's events for this workflow
    scope = await sync_to_async(memory_scope)(
        workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory")
    )
    await sync_to_async(memory_services.memory_remember)(
        scope=scope, content="Likes espresso", actor="owner:1"
    )
    await socket.until(lambda f: f["type"] == "memory.updated")
    await sync_to_async(graph_services.workflow_save)(
        workflow=workflow, graph=demo_graph(), expected_revision=workflow.revision
    )
    await socket.until(lambda f: f["type"] == "workflow.updated")
    await sync_to_async(graph_services.workflow_deploy)(workflow=workflow, actor=owner)
    await socket.until(lambda f: f["type"] == "workflow.deployed")
    await sync_to_async(chat_services.chat_archive)(workflow=workflow)
    await socket.until(lambda f: f["type"] == "chats.updated")
    await sync_to_async(graph_services.workflow_delete)(workflow=workflow)
    await socket.until(lambda f: f["type"] == "workflow.deleted")
    await socket.drain()
    if not communicator.future.done():
        await communicator.disconnect()

    for frame in socket.frames:
        asyncapi.validate(frame)
    seen = {frame["type"] for frame in socket.frames}
    assert seen == asyncapi.server_frame_types(), seen
    assert {f["code"] for f in socket.frames if f["type"] == "error"} == {"not_stoppable", "invalid_request"}
    assert len({f["run_id"] for f in socket.frames if f["type"] == "run.finished"}) == 3


def test_a_frame_the_document_does_not_describe_fails_validation() -> None:
    delta = {"type": "run.delta", "run_id": "run_1", "seq": 2, "workflow_id": "wf_1", "delta": "Hi"}
    asyncapi.validate(delta)

    with pytest.raises(asyncapi.FrameNotDescribed, match=r"no server frame of type 'run\.progress'"):
        asyncapi.validate({**delta, "type": "run.progress"})
    with pytest.raises(asyncapi.FrameNotDescribed, match="does not match its schema"):
        asyncapi.validate({**delta, "content": "a field no one documented"})
    with pytest.raises(asyncapi.FrameNotDescribed, match="does not match its schema"):
        asyncapi.validate({**delta, "seq": "2"})
    with pytest.raises(asyncapi.FrameNotDescribed, match=r"no client frame of type 'run\.delta'"):
        asyncapi.validate(delta, sent_by="client")


def test_a_timestamp_in_another_format_fails_validation() -> None:
    mark = {"kind": "context_cleared", "after_id": None, "at": "2026-12-03T08:00:00+00:00"}
    thread = {
        "type": "thread",
        "request_id": None,
        "workflow_id": "wf_1",
        "generation": 1,
        "revision": 0,
        "path": [],
        "has_more": False,
        "editable": [],
        "active_runs": [],
        "marks": [mark],
    }

    with pytest.raises(asyncapi.FrameNotDescribed, match="does not match its schema"):
        asyncapi.validate(thread)
    asyncapi.validate({**thread, "marks": [{**mark, "at": "2026-12-03T08:00:00Z"}]})
