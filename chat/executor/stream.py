"""A run's event stream: per-run event numbering, batched text deltas, and the reply draft kept durable
on the run row (which doubles as the claim's heartbeat).

The draft is saved beside the stream, never in its way: one save at a time runs in the background, a
save that fails (the database unreachable) is logged and made again at the next flush, and the stream
goes on meanwhile."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from django.conf import settings

from chat import services as chat_services
from chat.models import ChatRun
from opencompany.core.asyncdb import db_call
from opencompany.core.events import apublish_now, chat_group
from opencompany.core.logs import error_text

logger = logging.getLogger("chat.executor")

DRAFT_FLUSH_S = 0.25
HEARTBEAT_S = 5.0


class RunStream:
    """Per-run event numbering, the reply draft, and its durable snapshot on the run row.

    Text deltas are batched (sent when 160 characters are waiting or 50 ms have passed), so a fast
    model does not turn every token into a frame. The draft on the row only ever holds text already
    sent with a `seq`, so a snapshot plus the later events never doubles text.
    """

    FLUSH_CHARS = 160
    FLUSH_S = 0.05

    def __init__(self, run: ChatRun, claimant: str) -> None:
        self.run_id = run.run_id
        self.workflow_id = run.workflow_id
        self.claimant = claimant
        self.seq = run.last_seq
        self.text = ""
        self.steps: list[dict[str, Any]] = []
        self._flushed_at = time.monotonic()  # the claim just wrote the row
        self._dirty = False
        self._separate = False
        self._pending = ""
        self._emitted_at = 0.0
        self._timer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._saving: asyncio.Task[None] | None = None
        self._save_failed = False

    async def emit(self, type: str, data: dict[str, Any], *, seq: int | None = None) -> None:
        async with self._lock:  # one publish at a time keeps seq order on the wire
            if seq is None:
                self.seq += 1
                seq = self.seq
            if type == "run.delta":
                self.text += data["delta"]
                self._dirty = True
            self._emitted_at = time.monotonic()
            await apublish_now(
                chat_group(self.workflow_id),
                type,
                {
                    "run_id": self.run_id,
                    "seq": seq,
                    "workflow_id": self.workflow_id,
                    "ts": time.time(),
                    **data,
                },
            )

    async def flush_pending(self) -> None:
        if self._timer is not None and self._timer is not asyncio.current_task():
            self._timer.cancel()
        self._timer = None
        if self._pending:
            text, self._pending = self._pending, ""
            await self.emit("run.delta", {"delta": text})

    async def _flush_later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        await self.flush_pending()
        await self.maybe_flush()

    async def delta(self, text: str) -> None:
        if not text:
            return
        if self._separate and (self.text or self._pending) and not (self.text + self._pending).endswith("\n"):
            text = "\n\n" + text
        self._separate = False
        self._pending += text
        waited = time.monotonic() - self._emitted_at
        if len(self._pending) >= self.FLUSH_CHARS or waited >= self.FLUSH_S:
            await self.flush_pending()
            await self.maybe_flush()
        elif self._timer is None:
            self._timer = asyncio.ensure_future(self._flush_later(self.FLUSH_S - waited))

    async def step(self, step: dict[str, Any]) -> None:
        for i, existing in enumerate(self.steps):
            if existing["id"] == step["id"]:
                self.steps[i] = step
                break
        else:
            self.steps.append(step)
        self._dirty = True
        self._separate = True
        await self.flush_pending()
        await self.emit("run.step", {"step": step})
        await self.maybe_flush()

    async def maybe_flush(self, *, force: bool = False) -> None:
        """Start saving the draft (text, steps, seq) and the heartbeat when one is due (or `force`d),
        unless a save is still running; does not wait for it."""
        now = time.monotonic()
        due = now - self._flushed_at >= (DRAFT_FLUSH_S if self._dirty else HEARTBEAT_S)
        if not (force or due) or (self._saving is not None and not self._saving.done()):
            return
        self._flushed_at = now
        self._dirty = False
        self._saving = asyncio.ensure_future(self._save(self.text, list(self.steps), self.seq))

    async def _save(self, text: str, steps: list[dict[str, Any]], seq: int) -> None:
        try:
            await db_call(chat_services.run_save_draft)(
                run_id=self.run_id, claimant=self.claimant, text=text, steps=steps, seq=seq
            )
        except Exception as exc:
            self._dirty = True  # the next flush saves it again
            if not self._save_failed:
                logger.warning("draft not saved run=%s: %s", self.run_id, error_text(exc))
            self._save_failed = True
            return
        self._save_failed = False

    async def close(self) -> None:
        """Stop the draft saves (the run's end writes the final text)."""
        if self._saving is not None and not self._saving.done():
            self._saving.cancel()
            try:
                await self._saving
            except (asyncio.CancelledError, Exception):
                logger.debug("draft save cancelled run=%s", self.run_id)


async def heartbeat(stream: RunStream) -> None:
    """Keep the claim alive while tools run or the model thinks; the watchdog ends runs whose
    claimant stopped heartbeating (the worker died)."""
    interval = float(settings.OPENCOMPANY_RUN_HEARTBEAT_S)
    while True:
        await asyncio.sleep(interval)
        await stream.maybe_flush(force=True)
