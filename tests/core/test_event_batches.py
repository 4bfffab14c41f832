"""The publisher queue sends what is waiting as one batch; on Redis pub/sub, one pipelined round trip
that keeps the order of every group's events."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer

from opencompany.core import events
from opencompany.core.events import send_batch
from opencompany.core.layers import BatchPubSubChannelLayer

pytestmark = pytest.mark.redis


def _redis_layer(*hosts: str) -> BatchPubSubChannelLayer:
    return BatchPubSubChannelLayer(hosts=list(hosts), prefix=f"oc-test-{uuid.uuid4().hex[:8]}")


def test_a_batch_reaches_each_groups_subscribers_in_order() -> None:
    layer = _redis_layer(os.environ["REDIS_URL"])

    async def scenario() -> tuple[list[Any], list[Any]]:
        a, b = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("chat.one", a)
        await layer.group_add("chat.two", b)
        batch = []
        for i in range(40):
            group = "chat.one" if i % 3 else "chat.two"
            batch.append((group, {"type": "app.event", "event": "run.delta", "data": {"seq": i}}))
        await send_batch(layer, batch)
        got_a = [
            await asyncio.wait_for(layer.receive(a), 5)
            for _ in range(sum(1 for g, _ in batch if g == "chat.one"))
        ]
        got_b = [
            await asyncio.wait_for(layer.receive(b), 5)
            for _ in range(sum(1 for g, _ in batch if g == "chat.two"))
        ]
        await layer.flush()
        return got_a, got_b

    got_a, got_b = asyncio.run(scenario())
    assert [m["data"]["seq"] for m in got_a] == [i for i in range(40) if i % 3]
    assert [m["data"]["seq"] for m in got_b] == [i for i in range(40) if not i % 3]


def test_other_layers_get_one_group_send_after_another() -> None:
    layer = InMemoryChannelLayer()

    async def scenario() -> list[Any]:
        ch = await layer.new_channel()
        await layer.group_add("g", ch)
        await send_batch(
            layer, [("g", {"type": "app.event", "event": "e", "data": {"seq": i}}) for i in range(5)]
        )
        return [await asyncio.wait_for(layer.receive(ch), 1) for _ in range(5)]

    assert [m["data"]["seq"] for m in asyncio.run(scenario())] == [0, 1, 2, 3, 4]


def test_without_a_serving_loop_a_redis_event_leaves_from_the_publisher_thread_in_order(monkeypatch) -> None:
    """A script or command has no serving loop: `publish_now` puts the event on the process's publisher
    thread and returns; the thread sends each group's events in order, across two shards."""
    url = os.environ["REDIS_URL"]
    base = url.rsplit("/", 1)[0]
    layer = _redis_layer(f"{base}/0", f"{base}/1")
    monkeypatch.setattr(events, "get_channel_layer", lambda *a, **k: layer)
    monkeypatch.setattr(events, "_serving_loop", None)
    sent: list[tuple[str, dict[str, Any]]] = []
    real_send = BatchPubSubChannelLayer.blocking_group_send_many

    def recording_send(self: Any, batch: list[tuple[str, dict[str, Any]]]) -> None:
        sent.extend(batch)
        real_send(self, batch)

    monkeypatch.setattr(BatchPubSubChannelLayer, "blocking_group_send_many", recording_send)

    async def scenario() -> dict[str, list[int]]:
        channels = {group: await layer.new_channel() for group in ("chat.one", "chat.two", "owner.7")}
        for group, channel in channels.items():
            await layer.group_add(group, channel)
        groups = list(channels)
        for i in range(60):
            events.publish_now(groups[i % 3], "run.delta", {"seq": i})
        got = {
            group: [(await asyncio.wait_for(layer.receive(channel), 5))["data"]["seq"] for _ in range(20)]
            for group, channel in channels.items()
        }
        await layer.flush()
        return got

    got = asyncio.run(scenario())

    assert got == {
        group: list(range(n, 60, 3)) for n, group in enumerate(("chat.one", "chat.two", "owner.7"))
    }
    assert len(sent) == 60  # every event went through the publisher thread
    publisher = events.publisher_thread(layer)
    assert publisher is not None
    assert publisher.flush(5)


def test_the_publisher_thread_warns_once_about_an_unreachable_redis_and_never_raises(
    monkeypatch, caplog
) -> None:
    layer = _redis_layer("redis://127.0.0.1:1/0")  # nothing listens on port 1
    monkeypatch.setattr(events, "get_channel_layer", lambda *a, **k: layer)
    monkeypatch.setattr(events, "_serving_loop", None)

    events.publish_now("owner.1", "memory.updated", {"operation": "remember"})  # returns at once
    publisher = events.publisher_thread(layer)

    assert publisher is not None
    assert publisher.flush(10)
    events.publish_now("owner.1", "memory.updated", {"operation": "forget"})  # the thread lives on
    assert publisher.flush(10)
    assert caplog.text.count("channel layer unreachable") == 1  # one warning per outage
    assert "remember" not in caplog.text
    assert layer.outage.active is True


async def _shut_down(layer: BatchPubSubChannelLayer) -> None:
    """End the loop's other tasks (the publisher queue's drain) and close the layer's connections."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    await layer.flush()


def test_with_a_serving_loop_events_from_other_threads_leave_in_batches_in_order(monkeypatch) -> None:
    """In an ASGI process, events published from worker threads join the serving loop's queue and
    leave through the layer's batch send, each group's in publish order."""
    layer = _redis_layer(os.environ["REDIS_URL"])
    monkeypatch.setattr(events, "get_channel_layer", lambda *a, **k: layer)
    monkeypatch.setattr(events, "_queues", {})
    batches: list[int] = []
    real_send_many = BatchPubSubChannelLayer.group_send_many

    async def recording_send_many(self: Any, messages: Any) -> None:
        batches.append(len(messages))
        await real_send_many(self, messages)

    monkeypatch.setattr(BatchPubSubChannelLayer, "group_send_many", recording_send_many)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    groups = ("chat.one", "chat.two", "owner.7")

    async def join() -> dict[str, str]:
        channels = {group: await layer.new_channel() for group in groups}
        for group, channel in channels.items():
            await layer.group_add(group, channel)
        return channels

    async def receive(channels: dict[str, str]) -> dict[str, list[int]]:
        return {
            group: [(await asyncio.wait_for(layer.receive(channel), 5))["data"]["seq"] for _ in range(20)]
            for group, channel in channels.items()
        }

    try:
        channels = asyncio.run_coroutine_threadsafe(join(), loop).result(5)
        monkeypatch.setattr(events, "_serving_loop", loop)
        for i in range(60):
            events.publish_now(groups[i % 3], "run.delta", {"seq": i})
        got = asyncio.run_coroutine_threadsafe(receive(channels), loop).result(10)
    finally:
        asyncio.run_coroutine_threadsafe(_shut_down(layer), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()

    assert got == {group: list(range(n, 60, 3)) for n, group in enumerate(groups)}
    assert sum(batches) == 60
