"""The publisher queue sends what is waiting as one batch; on Redis pub/sub, one pipelined round trip
that keeps the order of every group's events."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

from opencompany.core import events
from opencompany.core.events import _publish_batch

pytestmark = pytest.mark.redis


def test_a_batch_reaches_each_groups_subscribers_in_order() -> None:
    from channels_redis.pubsub import RedisPubSubChannelLayer

    layer = RedisPubSubChannelLayer(hosts=[os.environ["REDIS_URL"]], prefix=f"oc-test-{uuid.uuid4().hex[:8]}")

    async def scenario() -> tuple[list[Any], list[Any]]:
        a, b = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("chat.one", a)
        await layer.group_add("chat.two", b)
        batch = []
        for i in range(40):
            group = "chat.one" if i % 3 else "chat.two"
            batch.append((group, {"type": "app.event", "event": "run.delta", "data": {"seq": i}}))
        await _publish_batch(layer, batch)
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
    from channels.layers import InMemoryChannelLayer

    layer = InMemoryChannelLayer()

    async def scenario() -> list[Any]:
        ch = await layer.new_channel()
        await layer.group_add("g", ch)
        await _publish_batch(
            layer, [("g", {"type": "app.event", "event": "e", "data": {"seq": i}}) for i in range(5)]
        )
        return [await asyncio.wait_for(layer.receive(ch), 1) for _ in range(5)]

    assert [m["data"]["seq"] for m in asyncio.run(scenario())] == [0, 1, 2, 3, 4]


def _redis_layer(*hosts: str) -> Any:
    from channels_redis.pubsub import RedisPubSubChannelLayer

    return RedisPubSubChannelLayer(hosts=list(hosts), prefix=f"oc-test-{uuid.uuid4().hex[:8]}")


def test_without_a_serving_loop_a_redis_event_leaves_from_the_publisher_thread_in_order(monkeypatch) -> None:
    """A script or command has no serving loop: `publish_now` puts the event on the process's publisher
    thread and returns; the thread sends each group's events in order, across two shards."""
    url = os.environ["REDIS_URL"]
    base = url.rsplit("/", 1)[0]
    layer = _redis_layer(f"{base}/0", f"{base}/1")
    monkeypatch.setattr(events, "get_channel_layer", lambda *a, **k: layer)
    monkeypatch.setattr(events, "_serving_loop", None)
    sent: list[tuple[str, dict[str, Any]]] = []
    real_send = events._ThreadPublisher._send

    def recording_send(self: Any, batch: list[tuple[str, dict[str, Any]]]) -> None:
        sent.extend(batch)
        real_send(self, batch)

    monkeypatch.setattr(events._ThreadPublisher, "_send", recording_send)

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
    publisher = events._thread_publisher(layer)
    assert publisher is not None
    assert publisher.flush(5)


def test_the_publisher_thread_logs_an_unreachable_redis_and_never_raises(monkeypatch, caplog) -> None:
    layer = _redis_layer("redis://127.0.0.1:1/0")  # nothing listens on port 1
    monkeypatch.setattr(events, "get_channel_layer", lambda *a, **k: layer)
    monkeypatch.setattr(events, "_serving_loop", None)

    events.publish_now("owner.1", "memory.updated", {"operation": "remember"})  # returns at once
    publisher = events._thread_publisher(layer)

    assert publisher is not None
    assert publisher.flush(10)
    assert "event publish failed count=1" in caplog.text
    events.publish_now("owner.1", "memory.updated", {"operation": "forget"})  # the thread lives on
    assert publisher.flush(10)
    assert caplog.text.count("event publish failed") == 2
