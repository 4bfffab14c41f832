"""`execute_run`: claim a run, begin its turn, run the agent loop with a sink that appends per turn while
the stream publishes its events, and end the run in one terminal state.

A run ends `error/interrupted`, with every character it streamed kept (the reply, and the agent's
Context through `ConversationSink.keep_unsaved`), when its process shuts down past the grace period or
the database stays unreachable past a step's retry budget; its end is written as soon as the database
answers, which frees the lane."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from chat import errors
from chat import services as chat_services
from chat.executor.live import live_run_attach, live_run_end
from chat.executor.prepare import prepare_run
from chat.executor.probe import verified_config
from chat.executor.runtime import run_with_runtime
from chat.executor.sink import ConversationSink
from chat.executor.stop import listen_for_stop
from chat.executor.stream import RunStream, heartbeat
from chat.models import ChatRun
from conversations.services.context import CallScope
from opencompany.core.asyncdb import db_call
from opencompany.core.errors import ApplicationError
from opencompany.core.retry import commit_retry
from opencompany.core.unavailable import transient_database_error
from opencompany.llm.loop import LoopResult, ToolResultEvent, run_agent_loop
from opencompany.llm.providers import ProviderError, TextDelta, ToolCallEvent
from opencompany.llm.providers.base import Request
from opencompany.llm.registry import get_provider, is_program
from opencompany.llm.tools import ToolContext

logger = logging.getLogger("chat.executor")


RESTARTED_MESSAGE = "The server restarted before the agent finished; this answer may be incomplete."
UNAVAILABLE_MESSAGE = "The database was unreachable while the agent answered; this answer may be incomplete."


async def execute_run(run_id: str, *, claimant: str | None = None, claimed: ChatRun | None = None) -> str:
    """Claim the run and take it to one terminal state. Returns that state, or `not_claimed`.

    `claimed`: the admission already claimed the run for this process and published `run.started`."""
    try:
        return await _execute(run_id, claimant=claimant, claimed=claimed)
    finally:
        live_run_end(run_id)


async def _execute(run_id: str, *, claimant: str | None, claimed: ChatRun | None) -> str:
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
    live = live_run_attach(run_id, stop)
    listener = asyncio.ensure_future(listen_for_stop(run_id, stop))
    beating = asyncio.ensure_future(heartbeat(stream))
    outcome, code, message = "error", errors.RUN_FAILED, "The run failed."
    usage: dict[str, Any] = {}
    sink: ConversationSink | None = None
    try:
        prepared = await db_call(prepare_run)(run, claimant=claimant, stop=stop)
        provider = None  # an agent program runs the turn itself
        if not is_program(prepared.model.provider):
            provider = get_provider(prepared.model, config=await verified_config(prepared.model))
        tools = prepared.tools
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
            extras={"actor": f"agent:{run.run_id}"},
        )
        run_sink = ConversationSink(
            prepared.key,
            len(prepared.messages),
            prepared.digest,
            prepared.epoch,
            scope=CallScope(
                workflow_id=run.workflow_id,
                generation=run.generation,
                agent_node_id=prepared.agent_node_id,
                run_id=run.run_id,
                key=prepared.key,
            ),
        )
        sink = run_sink

        async def on_event(event: Any) -> None:
            if isinstance(event, TextDelta):
                run_sink.stream(event.text)
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

        result: LoopResult
        if provider is None:
            result = await run_with_runtime(
                prepared, run, tools=tools, context=context, sink=run_sink, stop=stop, on_event=on_event
            )
        else:
            result = await run_agent_loop(
                request,
                provider,
                tools,
                run_sink,
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
        if transient_database_error(exc):
            outcome, code, message = "error", errors.INTERRUPTED, UNAVAILABLE_MESSAGE
        else:
            logger.exception("run failed run=%s error=%s", run_id, type(exc).__name__)
            outcome, code, message = "error", errors.RUN_FAILED, "The run failed."
    finally:
        listener.cancel()
        beating.cancel()
        await stream.flush_pending()
        await stream.close()
    if live.interrupted and outcome != "finished":
        outcome, code, message = "error", errors.INTERRUPTED, RESTARTED_MESSAGE
    elif code == errors.PERSIST_FAILED and sink is not None and sink.database_unavailable:
        outcome, code, message = "error", errors.INTERRUPTED, UNAVAILABLE_MESSAGE
    elif stop.is_set() and outcome == "error" and code == errors.PERSIST_FAILED:
        outcome = "stopped"
    if outcome == "error" and sink is not None:
        await sink.keep_unsaved()
    await commit_retry(
        lambda: db_call(chat_services.run_finish)(
            run_id=run_id,
            claimant=claimant,
            outcome=outcome,
            text=stream.text,
            seq=stream.seq,
            steps=stream.steps,
            error_code=code,
            error_message=message,
            usage=usage,
        ),
        budget_s=None,
        what=f"run end run={run_id}",
    )
    return outcome
