"""Channel-layer events published after commit (metadata only, never content).

Groups: `owner.<user_id>` for context/memory/workflow events, `chat.<workflow_id>` for run events.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import queue
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)


def owner_group(user_id: int | str) -> str:
    return f"owner.{user_id}"


def chat_group(workflow_id: str) -> str:
    return f"chat.{workflow_id}"


_serving_loop: asyncio.AbstractEventLoop | None = None
_queues: dict[asyncio.AbstractEventLoop, asyncio.Queue[tuple[str, dict[str, Any]]]] = {}
_queues_lock = threading.Lock()


def remember_serving_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The ASGI process's event loop (set on every connection). Sync code publishing from a worker
    thread hands events to this loop instead of blocking on a round trip through it."""
    global _serving_loop
    _serving_loop = loop


def serving_loop() -> asyncio.AbstractEventLoop | None:
    loop = _serving_loop
    return loop if loop is not None and loop.is_running() and not loop.is_closed() else None


MAX_BATCH = 256


async def _drain_queue(queue: asyncio.Queue[tuple[str, dict[str, Any]]]) -> None:
    """Publish queued events in arrival order, everything waiting at once in one batch."""
    while True:
        batch = [await queue.get()]
        while len(batch) < MAX_BATCH and not queue.empty():
            batch.append(queue.get_nowait())
        try:
            layer = get_channel_layer()
            if layer is not None:
                await _publish_batch(layer, batch)
        except Exception:
            logger.exception("event publish failed count=%d", len(batch))


async def _publish_batch(layer: Any, batch: list[tuple[str, dict[str, Any]]]) -> None:
    """Send a batch of group messages in order. On the Redis pub/sub layer the batch is one pipelined
    round trip per shard (a group always maps to one shard, so each group's order holds); other layers
    get one `group_send` after another."""
    loop_layer = _pubsub_loop_layer(layer)
    if loop_layer is None:
        for group, message in batch:
            await layer.group_send(group, message)
        return
    shards: dict[int, tuple[Any, list[tuple[str, bytes]]]] = {}
    for group, message in batch:
        name = loop_layer._get_group_channel_name(group)
        shard = loop_layer._get_shard(name)
        shards.setdefault(id(shard), (shard, []))[1].append((name, layer.serialize(message)))
    for shard, items in shards.values():
        shard._ensure_redis()
        async with shard._redis.pipeline(transaction=False) as pipe:
            for name, data in items:
                pipe.publish(name, data)
            await pipe.execute()


def _pubsub_loop_layer(layer: Any) -> Any:
    """The running loop's `channels_redis` pub/sub layer, or None for any other layer."""
    try:
        from channels_redis.pubsub import RedisPubSubChannelLayer
    except ImportError:  # pragma: no cover - channels-redis is a dependency
        return None
    if not isinstance(layer, RedisPubSubChannelLayer):
        return None
    return layer._get_layer()


def _enqueue(loop: asyncio.AbstractEventLoop, group: str, message: dict[str, Any]) -> None:
    """On `loop`'s thread: put the event on the loop's one publisher queue (FIFO keeps order)."""
    queue = _queues.get(loop)
    if queue is None:
        queue = asyncio.Queue()
        _queues[loop] = queue
        loop.create_task(_drain_queue(queue))
    queue.put_nowait((group, message))


class _ThreadPublisher:
    """The publisher of a process without a serving loop (a script, a command, a worker) on Redis pub/sub:
    one daemon thread with a blocking Redis client per shard. `put` costs the caller a queue append; the
    thread sends everything waiting as one pipelined round trip per shard, in arrival order (a group
    always maps to one shard, so each group's order holds). Measured against an event loop in a thread
    doing the same with the asyncio client: ~0.1 ms of CPU per event against ~0.25 ms, and about 0.3 ms
    less added to each write that publishes one (docs/benchmarks.md)."""

    def __init__(self, layer: Any) -> None:
        from channels_redis.utils import decode_hosts

        self._layer = layer
        self._prefix = layer._kwargs.get("prefix", "asgi")
        self._hosts = decode_hosts(layer._kwargs.get("hosts"))
        self._clients: dict[int, Any] = {}
        self._queue: queue.SimpleQueue[tuple[str, dict[str, Any]] | threading.Event] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="event-publisher", daemon=True).start()
        atexit.register(self.flush)

    def put(self, group: str, message: dict[str, Any]) -> None:
        self._queue.put((group, message))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (at most `timeout` seconds) until everything put before this call has been sent (or has
        failed and been logged). True when it has."""
        marker = threading.Event()
        self._queue.put(marker)
        return marker.wait(timeout)

    def _serve(self) -> None:
        while True:
            waiting = [self._queue.get()]
            while len(waiting) < MAX_BATCH:
                try:
                    waiting.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batch = [item for item in waiting if not isinstance(item, threading.Event)]
            try:
                if batch:
                    self._send(batch)
            except Exception:
                logger.exception("event publish failed count=%d", len(batch))
            for item in waiting:
                if isinstance(item, threading.Event):
                    item.set()

    def _send(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        from channels_redis.utils import _consistent_hash

        shards: dict[int, list[tuple[str, bytes]]] = {}
        for group, message in batch:
            name = f"{self._prefix}__group__{group}"  # the pub/sub layer's group channel name
            shard = _consistent_hash(name, len(self._hosts))
            shards.setdefault(shard, []).append((name, self._layer.serialize(message)))
        for shard, items in shards.items():
            client = self._client(shard)
            if len(items) == 1:
                client.publish(*items[0])
                continue
            pipe = client.pipeline(transaction=False)
            for name, data in items:
                pipe.publish(name, data)
            pipe.execute()

    def _client(self, shard: int) -> Any:
        """A blocking client for the shard, configured as channels_redis configures its asyncio one."""
        client = self._clients.get(shard)
        if client is None:
            import redis
            import redis.sentinel

            host = dict(self._hosts[shard])
            host.setdefault("socket_timeout", 5)
            host.setdefault("socket_connect_timeout", 5)
            if "address" in host:
                pool = redis.ConnectionPool.from_url(host.pop("address"), **host)
            elif "master_name" in host:
                sentinel = redis.sentinel.Sentinel(
                    host.pop("sentinels"), sentinel_kwargs=host.pop("sentinel_kwargs", None)
                )
                pool = redis.sentinel.SentinelConnectionPool(host.pop("master_name"), sentinel, **host)
            else:
                pool = redis.ConnectionPool(**host)
            client = self._clients[shard] = redis.Redis(connection_pool=pool)
        return client


_thread_publishers: dict[int, _ThreadPublisher] = {}


def _thread_publisher(layer: Any) -> _ThreadPublisher | None:
    """This process's publisher thread for `layer` when it is a Redis pub/sub layer, else None."""
    try:
        from channels_redis.pubsub import RedisPubSubChannelLayer
    except ImportError:  # pragma: no cover - channels-redis is a dependency
        return None
    if not isinstance(layer, RedisPubSubChannelLayer):
        return None
    with _queues_lock:
        publisher = _thread_publishers.get(id(layer))
        if publisher is None or publisher._layer is not layer:
            publisher = _thread_publishers[id(layer)] = _ThreadPublisher(layer)
        return publisher


def publish_now(group: str, type: str, data: dict[str, Any]) -> None:
    """Send one event to a group; a failing layer is logged, never raised.

    With a network layer (Redis) the event is handed to a publisher queue and this returns at once:
    the serving loop's in an ASGI process, else a process-wide publisher thread's. One queue per
    process keeps events in order. The in-memory layer (embedded default, tests) is sent to before this
    returns.
    """
    message = {"type": "app.event", "event": type, "data": data}
    loop = serving_loop()
    if loop is not None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop:
            with _queues_lock:
                loop.call_soon_threadsafe(_enqueue, loop, group, message)
            return
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        if loop is None:
            publisher = _thread_publisher(layer)
            if publisher is not None:
                publisher.put(group, message)
                return
            if isinstance(layer, InMemoryChannelLayer) and not layer.groups.get(group):
                return  # nobody in this process joined the group: nothing to deliver, no loop to spin up
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.exception("event publish failed group=%s type=%s", group, type)


async def apublish_now(group: str, type: str, data: dict[str, Any]) -> None:
    """Async twin of `publish_now` for code already on an event loop. On a loop other than the serving
    loop (the run loop), the event joins the serving loop's publisher queue and this returns at once:
    one FIFO per process keeps every event in order, and the run loop never waits on a publish."""
    loop = serving_loop()
    if loop is not None and loop is not asyncio.get_running_loop():
        publish_now(group, type, data)
        return
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        await layer.group_send(group, {"type": "app.event", "event": type, "data": data})
    except Exception:
        logger.exception("event publish failed group=%s type=%s", group, type)


def publish_on_commit(group: str, type: str, data: dict[str, Any]) -> None:
    """Publish after the current transaction commits (at once when none is open). Never raises."""
    payload = dict(data)

    def _send() -> None:
        publish_now(group, type, payload)

    try:
        transaction.on_commit(_send, robust=True)
    except Exception:
        logger.exception("event scheduling failed group=%s type=%s", group, type)
