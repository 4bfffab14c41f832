"""Executing a run: the sink that appends per turn, the event stream with its draft and heartbeat, the
stop listener, and `execute_run`, which ends the run in one terminal state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings

from chat import errors
from chat import services as chat_services
from chat.executor.prepare import prepare_run, provider_config
from chat.models import ChatRun
from conversations import services as conversations
from conversations.types import ConversationKey
from opencompany.core.asyncdb import db_call
from opencompany.core.errors import ApplicationError
from opencompany.core.events import apublish_now, chat_group
from opencompany.llm.loop import LoopResult, ToolResultEvent, run_agent_loop
from opencompany.llm.providers import ProviderError, TextDelta, ToolCallEvent, Usage, get_provider
from opencompany.llm.providers.base import Request
from opencompany.llm.tools import ToolContext, get_tool
from opencompany.llm.wire import Message

logger = logging.getLogger("chat.executor")  # the package's name, as before the split


DRAFT_FLUSH_S = 0.25


HEARTBEAT_S = 5.0


STOP_POLL_S = 2.0  # fallback only: Stop normally arrives through the channel layer


# --- the sink -----------------------------------------------------------------------------------------


class ConversationSink:
    """Appends every committed message to the stored conversation (`conversation_append` with the
    expected length, so a concurrent writer is refused rather than merged)."""

    def __init__(self, key: ConversationKey | None, length: int, digest: str = "") -> None:
        self.key = key
        self.length = length
        self.digest = digest

    async def _append(self, message: Message, usage: Usage | None = None) -> None:
        if self.key is None:
            self.length += 1
            return
        write = await db_call(conversations.conversation_append)(
            key=self.key,
            messages=[message],
            expected_length=self.length,
            usage=usage.as_dict() if usage is not None else None,
            expected_digest=self.digest or None,
        )
        self.length, self.digest = write.length, write.digest

    async def assistant(self, message: Message) -> None:
        await self._append(message)

    async def tool_result(self, message: Message) -> None:
        await self._append(message)

    async def final(self, message: Message, usage: Usage) -> None:
        await self._append(message, usage)

    async def replace_all(self, messages: list[Message]) -> None:
        if self.key is not None:
            write = await db_call(conversations.conversation_save)(key=self.key, messages=messages)
            self.digest = write.digest
        self.length = len(messages)


# --- streaming --------------------------------------------------------------------------------------


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

    async def maybe_flush(self, *, force: bool = False) -> bool:
        now = time.monotonic()
        due = now - self._flushed_at >= (DRAFT_FLUSH_S if self._dirty else HEARTBEAT_S)
        if not (force or due):
            return True
        self._flushed_at = now
        self._dirty = False
        return await db_call(chat_services.run_save_draft)(
            run_id=self.run_id, claimant=self.claimant, text=self.text, steps=list(self.steps), seq=self.seq
        )


async def _heartbeat(stream: RunStream) -> None:
    """Keep the claim alive while tools run or the model thinks; the watchdog ends runs whose
    claimant stopped heartbeating (the worker died)."""
    interval = float(settings.OPENCOMPANY_RUN_HEARTBEAT_S)
    while True:
        await asyncio.sleep(interval)
        try:
            await stream.maybe_flush(force=True)
        except Exception:
            logger.warning("heartbeat failed run=%s", stream.run_id)


async def _listen_for_stop(run_id: str, stop: asyncio.Event) -> None:
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
                state = await db_call(chat_services.run_state)(run_id=run_id)
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


async def execute_run(run_id: str, *, claimant: str | None = None, claimed: ChatRun | None = None) -> str:
    """Claim the run and take it to one terminal state. Returns that state, or `not_claimed`.

    `claimed`: the admission already claimed the run for this process and published `run.started`."""
    if claimed is not None:
        run = claimed
        claimant = run.claimant
    else:
        claimant = claimant or chat_services.new_claimant()
        claimed_now = await db_call(chat_services.run_claim)(run_id=run_id, claimant=claimant)
        if claimed_now is None:
            return "not_claimed"
        run = claimed_now
    stream = RunStream(run, claimant)
    if claimed is None:
        await stream.emit("run.started", chat_services.run_started_event(run), seq=run.last_seq)
    stop = asyncio.Event()
    listener = asyncio.ensure_future(_listen_for_stop(run_id, stop))
    beating = asyncio.ensure_future(_heartbeat(stream))
    outcome, code, message = "error", errors.RUN_FAILED, "The run failed."
    usage: dict[str, Any] = {}
    try:
        prepared = await db_call(prepare_run)(run)
        provider = get_provider(prepared.model, config=provider_config())
        tools = [t for t in (get_tool(name) for name in prepared.tool_names) if t is not None]
        request = Request(
            system_blocks=prepared.system_blocks,
            messages=prepared.messages,
            tools=tools,
            settings=prepared.model,
        )
        context = ToolContext(
            run_id=run.run_id,
            workflow_id=run.workflow_id,
            generation=run.generation,
            agent_node_id=prepared.agent_node_id,
            owner_id=prepared.owner_id,
            extras={"memory_node_id": prepared.memory_node_id, "actor": f"agent:{run.run_id}"},
        )
        sink = ConversationSink(prepared.key, len(prepared.messages), prepared.digest)

        async def on_event(event: Any) -> None:
            if isinstance(event, TextDelta):
                await stream.delta(event.text)
            elif isinstance(event, ToolCallEvent):
                block = event.block
                await stream.step(
                    {"id": str(block.get("id")), "name": str(block.get("name")), "state": "running"}
                )
            elif isinstance(event, ToolResultEvent):
                for block in event.message.get("content", []):
                    if block.get("type") == "tool_result":
                        state = (
                            "done" if block.get("status") == "ok" else str(block.get("status") or "failed")
                        )
                        await stream.step(
                            {
                                "id": str(block.get("tool_call_id")),
                                "name": str(block.get("name")),
                                "state": state,
                            }
                        )

        result: LoopResult = await run_agent_loop(
            request,
            provider,
            tools,
            sink,
            stop,
            tool_context=context,
            tool_result_max_chars=prepared.tool_result_max_chars,
            policies=prepared.policies,
            on_event=on_event,
        )
        usage = result.usage.as_dict()
        if result.status == "finished":
            outcome, code, message = "finished", "", ""
        elif result.status == "stopped":
            outcome, code, message = "stopped", "", ""
        else:
            outcome = "error"
            code = result.error_code or result.status
            message = result.error_message or "The run failed."
    except ProviderError as exc:
        outcome, code, message = "error", exc.code, exc.message
    except ApplicationError as exc:
        outcome, code, message = "error", exc.code, exc.message
    except Exception as exc:
        logger.exception("run failed run=%s error=%s", run_id, type(exc).__name__)
        outcome, code, message = "error", errors.RUN_FAILED, "The run failed."
    finally:
        listener.cancel()
        beating.cancel()
        await stream.flush_pending()
    if stop.is_set() and outcome == "error" and code == errors.PERSIST_FAILED:
        outcome = "stopped"
    await db_call(chat_services.run_finish)(
        run_id=run_id,
        claimant=claimant,
        outcome=outcome,
        text=stream.text,
        seq=stream.seq,
        steps=stream.steps,
        error_code=code,
        error_message=message,
        usage=usage,
    )
    return outcome
