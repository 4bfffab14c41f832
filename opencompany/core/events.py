"""Channel-layer events published after commit (metadata only, never content).

Groups: `owner.<user_id>` for context/memory/workflow events, `chat.<workflow_id>` for run events.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)


def owner_group(user_id: int | str) -> str:
    return f"owner.{user_id}"


def chat_group(workflow_id: str) -> str:
    return f"chat.{workflow_id}"


def publish_now(group: str, type: str, data: dict[str, Any]) -> None:
    """Send one event to a group right away; a failing layer is logged, never raised."""
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        async_to_sync(layer.group_send)(group, {"type": "app.event", "event": type, "data": data})
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
