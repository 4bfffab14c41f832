"""Channel-layer events published after commit (metadata only, never content).

Groups: `owner.<user_id>` for context/memory/workflow events, `chat.<workflow_id>` for run events.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
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


async def _drain_queue(queue: asyncio.Queue[tuple[str, dict[str, Any]]]) -> None:
    while True:
        group, message = await queue.get()
        try:
            layer = get_channel_layer()
            if layer is not None:
                await layer.group_send(group, message)
        except Exception:
            logger.exception("event publish failed group=%s type=%s", group, message.get("event"))


def _enqueue(loop: asyncio.AbstractEventLoop, group: str, message: dict[str, Any]) -> None:
    """On `loop`'s thread: put the event on the loop's one publisher queue (FIFO keeps order)."""
    queue = _queues.get(loop)
    if queue is None:
        queue = asyncio.Queue()
        _queues[loop] = queue
        loop.create_task(_drain_queue(queue))
    queue.put_nowait((group, message))


def publish_now(group: str, type: str, data: dict[str, Any]) -> None:
    """Send one event to a group; a failing layer is logged, never raised.

    In a serving process called from a worker thread, the event is handed to the serving loop's
    publisher queue and this returns at once (events from one process keep their order). Elsewhere
    (commands, task workers, tests) it is sent before this returns.
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
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.exception("event publish failed group=%s type=%s", group, type)


async def apublish_now(group: str, type: str, data: dict[str, Any]) -> None:
    """Async twin of `publish_now` for code already on the event loop."""
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
