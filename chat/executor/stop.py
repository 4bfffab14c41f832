"""How Stop reaches a running run: the run's control group on the channel layer, with the run row
re-checked as the fallback."""

from __future__ import annotations

import asyncio
import logging

from channels.layers import get_channel_layer

from chat import services as chat_services
from chat.models import ChatRun
from opencompany.core.asyncdb import db_call
from opencompany.core.unavailable import transient_database_error

logger = logging.getLogger("chat.executor")

STOP_POLL_S = 2.0  # fallback only: Stop normally arrives through the channel layer


async def listen_for_stop(run_id: str, stop: asyncio.Event) -> None:
    """Stop reaches the run through the channel layer; the row is re-checked as a fallback."""
    layer = get_channel_layer()
    channel = None
    group = chat_services.run_control_group(run_id)
    try:
        if layer is not None:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)

        async def from_layer() -> None:
            if layer is None or channel is None:
                await asyncio.Event().wait()
                return
            while True:
                message = await layer.receive(channel)
                if message.get("event") == "run.stop":
                    return

        async def from_db() -> None:
            while True:
                await asyncio.sleep(STOP_POLL_S)
                try:
                    state = await db_call(chat_services.run_state)(run_id=run_id)
                except Exception as exc:
                    # The database cannot say now: that is no Stop; ask again at the next poll.
                    if not transient_database_error(exc):
                        raise
                    continue
                if state != ChatRun.State.RUNNING:
                    return

        waiters = [asyncio.ensure_future(from_layer()), asyncio.ensure_future(from_db())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        stop.set()
    finally:
        if layer is not None and channel is not None:
            try:
                await layer.group_discard(group, channel)
            except Exception:
                logger.debug("group_discard failed run=%s", run_id)
