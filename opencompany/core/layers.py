"""The Redis channel layer of a deployment with `REDIS_URL`: channels_redis's pub/sub layer, plus batch
publishing.

Subscriptions, receiving and single sends are the pub/sub layer's own. A batch of group messages leaves
as one pipelined round trip per Redis shard, from the running loop (`group_send_many`) or from a thread
without one (`blocking_group_send_many`). Group channel names and shards are the ones the pub/sub layer
subscribes to, so every process, batching or not, sees the same groups.
"""

from __future__ import annotations

import asyncio
import binascii
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.sentinel
from channels_redis.pubsub import RedisPubSubChannelLayer
from channels_redis.utils import create_pool, decode_hosts

type GroupMessage = tuple[str, dict[str, Any]]

# A blocking send must not hang its thread on a Redis that stopped answering.
BLOCKING_SOCKET_TIMEOUT_S = 5


def shard_index(name: str, shard_count: int) -> int:
    """The shard of a channel or group channel name: the pub/sub layer's hash ring (crc32 over 4096
    slots, split evenly between the shards)."""
    if shard_count == 1:
        return 0
    slot = binascii.crc32(name.encode("utf-8")) & 0xFFF
    return int(slot / (4096 / float(shard_count)))


class BatchPubSubChannelLayer(RedisPubSubChannelLayer):
    """`RedisPubSubChannelLayer` that also sends a batch of group messages in one pipelined round trip
    per shard. Each group maps to one shard and each shard's pipeline keeps its order, so every group's
    messages arrive in the order of the batch."""

    def __init__(self, hosts: Any = None, prefix: str = "asgi", **kwargs: Any) -> None:
        super().__init__(hosts=hosts, prefix=prefix, **kwargs)
        self.hosts: list[dict[str, Any]] = decode_hosts(hosts)
        self.prefix = prefix
        # redis.asyncio connections belong to the loop that opened them: one client per shard per loop.
        self._loop_clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, list[redis.asyncio.Redis]
        ] = weakref.WeakKeyDictionary()
        self._blocking_clients: list[redis.Redis] | None = None
        self._clients_lock = threading.Lock()  # loops in several threads share one layer

    def group_channel_name(self, group: str) -> str:
        """The Redis channel a group's members are subscribed to."""
        return f"{self.prefix}__group__{group}"

    def _by_shard(self, messages: Iterable[GroupMessage]) -> dict[int, list[tuple[str, bytes]]]:
        shards: dict[int, list[tuple[str, bytes]]] = {}
        for group, message in messages:
            name = self.group_channel_name(group)
            shards.setdefault(shard_index(name, len(self.hosts)), []).append((name, self.serialize(message)))
        return shards

    async def group_send_many(self, messages: Sequence[GroupMessage]) -> None:
        """Send `(group, message)` pairs from the running loop, in order per group."""
        clients = self._clients_for_loop()
        for shard, items in self._by_shard(messages).items():
            async with clients[shard].pipeline(transaction=False) as pipe:
                for name, data in items:
                    pipe.publish(name, data)
                await pipe.execute()

    def blocking_group_send_many(self, messages: Sequence[GroupMessage]) -> None:
        """Send `(group, message)` pairs from a thread without an event loop, in order per group.
        Sockets time out after `BLOCKING_SOCKET_TIMEOUT_S` unless the host config says otherwise."""
        clients = self._clients_blocking()
        for shard, items in self._by_shard(messages).items():
            if len(items) == 1:
                clients[shard].publish(*items[0])
                continue
            pipe = clients[shard].pipeline(transaction=False)
            for name, data in items:
                pipe.publish(name, data)
            pipe.execute()

    async def flush(self) -> None:
        """The pub/sub layer's flush, after closing this loop's batch clients."""
        for client in self._loop_clients.pop(asyncio.get_running_loop(), []):
            await client.aclose(close_connection_pool=True)
        # The parent serves `flush` (like every layer method) through its per-loop proxy.
        await super().__getattr__("flush")()

    def _clients_for_loop(self) -> list[redis.asyncio.Redis]:
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            clients = self._loop_clients.get(loop)
            if clients is None:
                clients = [redis.asyncio.Redis(connection_pool=create_pool(host)) for host in self.hosts]
                self._loop_clients[loop] = clients
            return clients

    def _clients_blocking(self) -> list[redis.Redis]:
        with self._clients_lock:
            if self._blocking_clients is None:
                self._blocking_clients = [redis.Redis(connection_pool=_blocking_pool(h)) for h in self.hosts]
            return self._blocking_clients


def _blocking_pool(host: dict[str, Any]) -> redis.ConnectionPool:
    """A blocking connection pool for one host entry, read as channels_redis reads it for asyncio."""
    config = dict(host)
    config.setdefault("socket_timeout", BLOCKING_SOCKET_TIMEOUT_S)
    config.setdefault("socket_connect_timeout", BLOCKING_SOCKET_TIMEOUT_S)
    if "address" in config:
        return redis.ConnectionPool.from_url(config.pop("address"), **config)
    if "master_name" in config:
        sentinel = redis.sentinel.Sentinel(
            config.pop("sentinels"), sentinel_kwargs=config.pop("sentinel_kwargs", None)
        )
        return redis.sentinel.SentinelConnectionPool(config.pop("master_name"), sentinel, **config)
    return redis.ConnectionPool(**config)
