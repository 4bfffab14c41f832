"""The batch channel layer: the pub/sub layer's groups and shards, one pipelined round trip per shard."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
import redis.asyncio.client
import redis.client

from opencompany.core.layers import BatchPubSubChannelLayer, shard_index


def _layer(*hosts: str) -> BatchPubSubChannelLayer:
    return BatchPubSubChannelLayer(hosts=list(hosts), prefix=f"oc-test-{uuid.uuid4().hex[:8]}")


def _two_shards() -> tuple[str, str]:
    base = os.environ["REDIS_URL"].rsplit("/", 1)[0]
    return f"{base}/0", f"{base}/1"


def _groups_on_both_shards(layer: BatchPubSubChannelLayer) -> list[str]:
    """Four group names, two on each of the layer's two shards."""
    by_shard: dict[int, list[str]] = {0: [], 1: []}
    n = 0
    while min(len(v) for v in by_shard.values()) < 2:
        group = f"chat.g{n}"
        shard = shard_index(layer.group_channel_name(group), 2)
        if len(by_shard[shard]) < 2:
            by_shard[shard].append(group)
        n += 1
    return by_shard[0] + by_shard[1]


def test_groups_get_the_channel_names_and_shards_the_pubsub_layer_subscribes_to() -> None:
    # Subscribers listen where channels_redis's own loop layer says; publishing must agree with it.
    layer = _layer("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1", "redis://127.0.0.1:6379/2")
    groups = [f"chat.wf_{i}" for i in range(300)] + [f"owner.{i}" for i in range(300)]

    async def theirs() -> list[tuple[str, int]]:
        loop_layer = layer._get_layer()
        out = []
        for group in groups:
            name = loop_layer._get_group_channel_name(group)
            out.append((name, loop_layer._shards.index(loop_layer._get_shard(name))))
        return out

    expected = asyncio.run(theirs())

    ours = [(layer.group_channel_name(g), shard_index(layer.group_channel_name(g), 3)) for g in groups]
    assert ours == expected
    assert {shard for _, shard in ours} == {0, 1, 2}
    assert layer.hosts == [
        {"address": "redis://127.0.0.1:6379/0"},
        {"address": "redis://127.0.0.1:6379/1"},
        {"address": "redis://127.0.0.1:6379/2"},
    ]
    assert layer.prefix.startswith("oc-test-")


@pytest.mark.redis
def test_a_batch_from_a_loop_is_one_pipelined_round_trip_per_shard_in_order(monkeypatch) -> None:
    layer = _layer(*_two_shards())
    groups = _groups_on_both_shards(layer)
    executed: list[int] = []
    real_execute = redis.asyncio.client.Pipeline.execute

    async def counting_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        executed.append(len(self.command_stack))
        return await real_execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.client.Pipeline, "execute", counting_execute)

    async def scenario() -> dict[str, list[int]]:
        channels = {group: await layer.new_channel() for group in groups}
        for group, channel in channels.items():
            await layer.group_add(group, channel)
        await layer.group_send_many(
            [
                (groups[i % 4], {"type": "app.event", "event": "run.delta", "data": {"seq": i}})
                for i in range(40)
            ]
        )
        got = {
            group: [(await asyncio.wait_for(layer.receive(channel), 5))["data"]["seq"] for _ in range(10)]
            for group, channel in channels.items()
        }
        await layer.flush()
        return got

    got = asyncio.run(scenario())

    assert got == {group: list(range(n, 40, 4)) for n, group in enumerate(groups)}
    assert executed == [20, 20]


@pytest.mark.redis
def test_a_blocking_batch_is_one_pipelined_round_trip_per_shard_in_order(monkeypatch) -> None:
    layer = _layer(*_two_shards())
    groups = _groups_on_both_shards(layer)
    executed: list[int] = []
    real_execute = redis.client.Pipeline.execute

    def counting_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        executed.append(len(self.command_stack))
        return real_execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counting_execute)

    async def scenario() -> dict[str, list[int]]:
        channels = {group: await layer.new_channel() for group in groups}
        for group, channel in channels.items():
            await layer.group_add(group, channel)
        batch = [(groups[i % 4], {"type": "app.event", "event": "e", "data": {"seq": i}}) for i in range(40)]
        await asyncio.to_thread(layer.blocking_group_send_many, batch)
        await asyncio.to_thread(
            layer.blocking_group_send_many,
            [(groups[0], {"type": "app.event", "event": "e", "data": {"seq": 40}})],
        )
        got = {
            group: [(await asyncio.wait_for(layer.receive(channel), 5))["data"]["seq"] for _ in range(10)]
            for group, channel in channels.items()
        }
        got[groups[0]].append((await asyncio.wait_for(layer.receive(channels[groups[0]]), 5))["data"]["seq"])
        await layer.flush()
        return got

    got = asyncio.run(scenario())

    expected = {group: list(range(n, 40, 4)) for n, group in enumerate(groups)}
    expected[groups[0]].append(40)
    assert got == expected
    assert executed == [20, 20]  # the lone message of the second batch is a plain PUBLISH
