"""The publisher queue sends what is waiting as one batch; on Redis pub/sub, one pipelined round trip
that keeps the order of every group's events."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

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
