"""Channel-layer events published after commit (metadata only, never content).

Groups: `owner.<user_id>` for context/memory/workflow events, `chat.<workflow_id>` for run events.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import time
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


_publisher_loop: asyncio.AbstractEventLoop | None = None


def _publisher() -> asyncio.AbstractEventLoop:
    """A process-wide publisher loop in a daemon thread (processes without a serving loop)."""
    global _publisher_loop
    with _queues_lock:
        if _publisher_loop is None or _publisher_loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="event-publisher", daemon=True).start()
            _publisher_loop = loop
            atexit.register(_flush_publisher, loop)
        return _publisher_loop


def _flush_publisher(loop: asyncio.AbstractEventLoop, timeout: float = 5.0) -> None:
    """At exit, give queued events a few seconds to leave."""
    queue = _queues.get(loop)
    deadline = time.monotonic() + timeout
    while queue is not None and not queue.empty() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)


def publish_now(group: str, type: str, data: dict[str, Any]) -> None:
    """Send one event to a group; a failing layer is logged, never raised.

    With a network layer (Redis) the event is handed to a publisher queue and this returns at once:
    the serving loop's in an ASGI process, else a process-wide publisher thread's. One queue per
    process keeps events in order. The in-memory layer (embedded default, tests) is sent to before this
    returns.
    """
    message = {"type": "app.event", "event": type, "data": data}
    loop = serving_loop()
    if loop is None:
        try:
            layer = get_channel_layer()
        except Exception:
            logger.exception("no channel layer group=%s type=%s", group, type)
            return
        if layer is not None and not isinstance(layer, InMemoryChannelLayer):
            loop = _publisher()
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
