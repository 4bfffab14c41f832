"""Channel-layer events published after commit (metadata only, never content).

Groups: `owner.<user_id>` for context/memory/workflow events, `chat.<workflow_id>` for run events.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import queue
import threading
from collections.abc import Sequence
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from opencompany.core.layers import BatchPubSubChannelLayer

logger = logging.getLogger(__name__)


def owner_group(user_id: int | str) -> str:
    return f"owner.{user_id}"


def chat_group(workflow_id: str) -> str:
    return f"chat.{workflow_id}"


type _Event = tuple[str, dict[str, Any]]  # (group, message)

_serving_loop: asyncio.AbstractEventLoop | None = None
_queues: dict[asyncio.AbstractEventLoop, asyncio.Queue[_Event]] = {}


def remember_serving_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The ASGI process's event loop (set on every connection). Sync code publishing from a worker
    thread hands events to this loop instead of blocking on a round trip through it."""
    global _serving_loop
    _serving_loop = loop


def serving_loop() -> asyncio.AbstractEventLoop | None:
    loop = _serving_loop
    return loop if loop is not None and loop.is_running() and not loop.is_closed() else None


MAX_BATCH = 256


async def send_batch(layer: Any, batch: Sequence[_Event]) -> None:
    """Send `(group, message)` pairs in order: through the layer's batch send when it has one (one
    round trip per Redis shard), else one `group_send` after another."""
    if isinstance(layer, BatchPubSubChannelLayer):
        await layer.group_send_many(batch)
        return
    for group, message in batch:
        await layer.group_send(group, message)


async def _drain_queue(queue: asyncio.Queue[_Event]) -> None:
    """Publish queued events in arrival order, everything waiting at once in one batch."""
    while True:
        batch = [await queue.get()]
        while len(batch) < MAX_BATCH and not queue.empty():
            batch.append(queue.get_nowait())
        try:
            layer = get_channel_layer()
            if layer is not None:
                await send_batch(layer, batch)
        except Exception:
            logger.exception("event publish failed count=%d", len(batch))


def _enqueue(loop: asyncio.AbstractEventLoop, group: str, message: dict[str, Any]) -> None:
    """On `loop`'s thread: put the event on the loop's one publisher queue (FIFO keeps order)."""
    queue = _queues.get(loop)
    if queue is None:
        queue = asyncio.Queue()
        _queues[loop] = queue
        loop.create_task(_drain_queue(queue))
    queue.put_nowait((group, message))


class _PublisherThread:
    """The publisher of a process without a serving loop (a script, a command, a worker) on the batch
    layer: one daemon thread sending through the layer's blocking batch send. `put` costs the caller a
    queue append; the thread sends everything waiting as one batch, in arrival order. A blocking client
    in a thread costs the writers less CPU than an event loop in one (docs/decisions.md)."""

    def __init__(self, layer: BatchPubSubChannelLayer) -> None:
        self.layer = layer
        self._queue: queue.SimpleQueue[_Event | threading.Event] = queue.SimpleQueue()
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
                    self.layer.blocking_group_send_many(batch)
            except Exception:
                logger.exception("event publish failed count=%d", len(batch))
            for item in waiting:
                if isinstance(item, threading.Event):
                    item.set()


_publisher_threads: dict[int, _PublisherThread] = {}
_publisher_threads_lock = threading.Lock()


def publisher_thread(layer: Any) -> _PublisherThread | None:
    """This process's publisher thread for `layer` when it has a blocking batch send, else None."""
    if not isinstance(layer, BatchPubSubChannelLayer):
        return None
    with _publisher_threads_lock:
        publisher = _publisher_threads.get(id(layer))
        if publisher is None or publisher.layer is not layer:
            publisher = _publisher_threads[id(layer)] = _PublisherThread(layer)
        return publisher


def _message(type: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": "app.event", "event": type, "data": data}


def publish_now(group: str, type: str, data: dict[str, Any]) -> None:
    """Send one event to a group; a failing layer is logged, never raised.

    In an ASGI process the event joins the serving loop's publisher queue and this returns at once;
    elsewhere, on the Redis layer, it joins the process's publisher thread. One queue per process keeps
    events in order. The in-memory layer (embedded default, tests) is sent to before this returns.
    """
    message = _message(type, data)
    try:
        loop = serving_loop()
        if loop is not None:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                _enqueue(loop, group, message)
            else:
                loop.call_soon_threadsafe(_enqueue, loop, group, message)
            return
        layer = get_channel_layer()
        if layer is None:
            return
        publisher = publisher_thread(layer)
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
        await layer.group_send(group, _message(type, data))
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
