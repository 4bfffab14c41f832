"""The Redis channel layer of a deployment with `REDIS_URL`: channels_redis's pub/sub layer, plus batch
publishing, with Redis as an accelerator rather than a dependency.

Subscriptions, receiving and single sends are the pub/sub layer's own. A batch of group messages leaves
as one pipelined round trip per Redis shard, from the running loop (`group_send_many`) or from a thread
without one (`blocking_group_send_many`). Group channel names and shards are the ones the pub/sub layer
subscribes to, so every process, batching or not, sees the same groups.

A Redis that stops answering counts as unreachable once a publish or a subscribe has waited
`REDIS_ANSWER_TIMEOUT_S` (a publish that then reaches Redis after all may arrive twice: run events carry a
sequence number, and the chat socket forwards each once).

When Redis cannot be reached, channels and groups still work inside the process: the pub/sub layer
already keeps its members' queues here, so a message that cannot be published is put on them directly.
The process logs one warning per outage (no content), keeps trying to subscribe again, and once Redis
answers, every channel and group of the process is subscribed again and delivery across processes
resumes.
"""

from __future__ import annotations

import asyncio
import binascii
import logging
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.sentinel
from channels_redis.pubsub import RedisPubSubChannelLayer, RedisPubSubLoopLayer, RedisSingleShardConnection
from channels_redis.utils import _wrap_close, create_pool, decode_hosts

logger = logging.getLogger(__name__)

type GroupMessage = tuple[str, dict[str, Any]]

# A blocking send must not hang its thread on a Redis that stopped answering.
BLOCKING_SOCKET_TIMEOUT_S = 5
# How often a loop cut off from Redis tries to subscribe its channels and groups again.
RESUBSCRIBE_EVERY_S = 1.0
HEALTH_TIMEOUT_S = 1.0
# How long a publish or a subscribe waits for Redis before Redis counts as unreachable.
REDIS_ANSWER_TIMEOUT_S = 1.0
# What an unreachable or failing Redis raises.
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


class Outage:
    """Whether this process can reach Redis, logged once when that changes (never with content)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = False

    def began(self) -> None:
        with self._lock:
            if self.active:
                return
            self.active = True
        logger.warning("channel layer unreachable: events are delivered within this process until it returns")

    def ended(self) -> None:
        if not self.active:  # every successful publish calls this: no lock while nothing changes
            return
        with self._lock:
            if not self.active:
                return
            self.active = False
        logger.warning("channel layer reachable again: delivery across processes resumed")


class _Shard(RedisSingleShardConnection):
    """A shard connection whose receive loop reports a lost connection to the outage instead of
    logging each failed read."""

    def __init__(self, host: Any, channel_layer: Any, outage: Outage) -> None:
        super().__init__(host, channel_layer)
        self.outage = outage

    async def _do_receiving(self) -> None:
        while True:
            try:
                if self._pubsub and self._pubsub.subscribed:
                    message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
                    self._receive_message(message)
                else:
                    await asyncio.sleep(0.1)
            except (TimeoutError, asyncio.CancelledError, GeneratorExit):
                raise
            except REDIS_DOWN:
                self.outage.began()
                self.channel_layer.cut_off()
                await asyncio.sleep(RESUBSCRIBE_EVERY_S)
            except Exception:
                logger.exception("unexpected error in the channel layer's receive loop")
                await asyncio.sleep(1)


class ResilientLoopLayer(RedisPubSubLoopLayer):
    """One event loop's side of the pub/sub layer, delivering inside the process while Redis is out of
    reach and subscribing everything again once it answers."""

    def __init__(self, *args: Any, outage: Outage, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outage = outage
        hosts: list[Any] = [shard.host for shard in self._shards]  # type: ignore[has-type]
        self._shards = [_Shard(host, self, outage) for host in hosts]
        self.unsubscribed = False  # some channel or group of this loop is not subscribed in Redis
        self._resubscriber: asyncio.Task[None] | None = None
        self._tried_at = 0.0

    def cut_off(self) -> None:
        """Redis failed this loop: keep trying to subscribe again until it answers."""
        self.unsubscribed = True
        self._tried_at = asyncio.get_running_loop().time()  # it just failed: no inline retry right away
        if self._resubscriber is None or self._resubscriber.done():
            self._resubscriber = asyncio.get_running_loop().create_task(self._resubscribe_until_back())

    async def _resubscribe_until_back(self) -> None:
        while self.unsubscribed:
            await asyncio.sleep(RESUBSCRIBE_EVERY_S)
            await self.resubscribe()

    async def resubscribe(self) -> bool:
        """Subscribe every channel and group this loop holds; True when nothing is left unsubscribed.

        A loop that only publishes (a run loop) subscribes nothing, which says nothing of Redis: its
        next successful publish ends the outage instead."""
        names = [*self.channels, *self.groups]
        try:
            for name in names:
                await asyncio.wait_for(self._get_shard(name).subscribe(name), REDIS_ANSWER_TIMEOUT_S)
        except REDIS_DOWN:
            return False
        self.unsubscribed = False
        if names:
            self.outage.ended()
        return True

    async def try_resubscribe(self) -> bool:
        """`resubscribe`, at most once per `RESUBSCRIBE_EVERY_S` (else False at once): a publish during
        an outage is delivered in the process without waiting on Redis each time."""
        now = asyncio.get_running_loop().time()
        if now - self._tried_at < RESUBSCRIBE_EVERY_S:
            return False
        self._tried_at = now
        return await self.resubscribe()

    async def _subscribe(self, name: str) -> None:
        try:
            await asyncio.wait_for(self._get_shard(name).subscribe(name), REDIS_ANSWER_TIMEOUT_S)
        except REDIS_DOWN:
            self.outage.began()
            self.cut_off()

    async def _subscribe_to_channel(self, channel: str) -> None:
        self.channels[channel] = asyncio.Queue()
        await self._subscribe(channel)

    async def _publish(self, name: str, data: bytes) -> bool:
        """Publish through Redis; False (and nothing sent) when Redis cannot take it."""
        if self.unsubscribed and not await self.try_resubscribe():
            return False
        try:
            await asyncio.wait_for(self._get_shard(name).publish(name, data), REDIS_ANSWER_TIMEOUT_S)
        except REDIS_DOWN:
            self.outage.began()
            self.cut_off()
            return False
        self.outage.ended()
        return True

    def deliver_here(self, name: str, data: bytes) -> None:
        """Put a serialized message on the queues of this loop's members of `name` (a channel or a
        group channel), as the receive loop does with what Redis delivers."""
        if name in self.channels:
            self.channels[name].put_nowait(data)
            return
        for channel in self.groups.get(name, ()):
            queue = self.channels.get(channel)
            if queue is not None:
                queue.put_nowait(data)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        data = self.channel_layer.serialize(message)
        if not await self._publish(channel, data):
            self.channel_layer.deliver_in_process(channel, data)

    async def group_add(self, group: str, channel: str) -> None:
        if channel not in self.channels:
            raise RuntimeError("group_add() needs a channel that exists in this process")
        group_channel = self._get_group_channel_name(group)
        self.groups.setdefault(group_channel, set()).add(channel)
        await self._subscribe(group_channel)

    async def group_discard(self, group: str, channel: str) -> None:
        try:
            await super().group_discard(group, channel)
        except REDIS_DOWN:
            self.outage.began()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        group_channel = self._get_group_channel_name(group)
        data = self.channel_layer.serialize(message)
        if not await self._publish(group_channel, data):
            self.channel_layer.deliver_in_process(group_channel, data)


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
        self.outage = Outage()

    def _get_layer(self) -> ResilientLoopLayer:
        loop = asyncio.get_running_loop()
        layer = self._layers.get(loop)
        if layer is None:
            layer = ResilientLoopLayer(*self._args, **self._kwargs, channel_layer=self, outage=self.outage)
            self._layers[loop] = layer
            _wrap_close(self, loop)
        return layer

    def deliver_in_process(self, name: str, data: bytes) -> None:
        """Deliver a serialized message to this process's members of `name` on every loop (each on its
        own loop's thread): what Redis would have done for this process."""
        running = _running_loop()
        for loop, layer in list(self._layers.items()):
            if loop is running:
                layer.deliver_here(name, data)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(layer.deliver_here, name, data)

    def _deliver_batch_in_process(self, messages: Sequence[GroupMessage]) -> None:
        for group, message in messages:
            self.deliver_in_process(self.group_channel_name(group), self.serialize(message))

    def reachable(self) -> bool:
        """Whether every Redis shard answers a ping now (a short timeout: for the health endpoint)."""
        for host in self.hosts:
            pool = _blocking_pool(
                {**host, "socket_timeout": HEALTH_TIMEOUT_S, "socket_connect_timeout": HEALTH_TIMEOUT_S}
            )
            try:
                redis.Redis(connection_pool=pool).ping()
            except REDIS_DOWN:
                return False
            finally:
                pool.disconnect()
        return True

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
        """Send `(group, message)` pairs from the running loop, in order per group; inside the process
        while Redis cannot take them."""
        layer = self._get_layer()
        if layer.unsubscribed and not await layer.try_resubscribe():
            self._deliver_batch_in_process(messages)
            return
        try:
            clients = self._clients_for_loop()
            for shard, items in self._by_shard(messages).items():
                async with clients[shard].pipeline(transaction=False) as pipe:
                    for name, data in items:
                        pipe.publish(name, data)
                    await asyncio.wait_for(pipe.execute(), REDIS_ANSWER_TIMEOUT_S)
        except REDIS_DOWN:
            self.outage.began()
            layer.cut_off()
            self._deliver_batch_in_process(messages)
            return
        self.outage.ended()

    def blocking_group_send_many(self, messages: Sequence[GroupMessage]) -> None:
        """Send `(group, message)` pairs from a thread without an event loop, in order per group;
        inside the process while Redis cannot take them. Sockets time out after
        `BLOCKING_SOCKET_TIMEOUT_S` unless the host config says otherwise."""
        try:
            clients = self._clients_blocking()
            for shard, items in self._by_shard(messages).items():
                if len(items) == 1:
                    clients[shard].publish(*items[0])
                    continue
                pipe = clients[shard].pipeline(transaction=False)
                for name, data in items:
                    pipe.publish(name, data)
                pipe.execute()
        except REDIS_DOWN:
            self.outage.began()
            self._deliver_batch_in_process(messages)
            return
        self.outage.ended()

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


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


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
