"""Runs whose agent names a runtime program (Claude Code, Codex CLI) instead of a provider: the turn
runs as a child process, the agent's tools reach it over MCP from this run, and a resumable program's
session stays bound to the conversation.

A bound session is resumed only when the stored conversation is still exactly what the session saw
(the binding's cursor plus the owner's new message); after an edit, a retry, a compaction, a branch
move or a provider switch the program starts a new session with the portable transcript. A finished
turn binds (or re-binds) the session; a stopped or failed one unbinds it, since the program was cut
off mid-write.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import uuid
from pathlib import Path

from django.conf import settings

from chat.executor.prepare import Prepared, runtime_config
from chat.executor.sink import ConversationSink
from chat.models import ChatRun
from conversations import services as conversations
from conversations.selectors import conversation_runtime_binding
from opencompany.core.asyncdb import db_call
from opencompany.core.json import canonical_json
from opencompany.llm.commit import CallRecord, CommitFailed, Committer
from opencompany.llm.loop import LoopResult, OnEvent
from opencompany.llm.providers.base import Request, Usage
from opencompany.llm.registry import context_adapter, get_program
from opencompany.llm.runtimes import (
    McpToolServer,
    Runtime,
    TurnOutcome,
    TurnRequest,
    firing_prompt,
    run_runtime_turn,
)
from opencompany.llm.tools import ToolContext, ToolSpec
from opencompany.llm.wire import Message, digest_chain, text_of, validate_message

logger = logging.getLogger("chat.executor")

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def agent_dirs(*, workflow_id: str, generation: int, agent_node_id: str) -> tuple[Path, Path]:
    """The program's home (its configuration and sessions) and working directory for one agent of one
    generation: a new generation starts with neither."""
    agent = hashlib.sha256(agent_node_id.encode("utf-8")).hexdigest()[:16]
    base = Path(settings.OPENCOMPANY_RUNTIME_HOME) / _UNSAFE.sub("_", workflow_id) / f"g{generation}" / agent
    return base / "home", base / "work"


def session_continues(binding: dict[str, object], runtime: str, messages: list[Message], digest: str) -> bool:
    """Whether the bound session saw exactly the stored conversation before the owner's new message
    (the last of `messages`, stored with chained digest `digest`)."""
    length, seen = binding.get("length"), binding.get("digest")
    if binding.get("runtime") != runtime or not binding.get("session_id"):
        return False
    if not isinstance(length, int) or not isinstance(seen, str) or len(messages) != length + 1:
        return False
    return digest_chain(seen, validate_message(messages[-1])) == digest


async def run_with_runtime(
    prepared: Prepared,
    run: ChatRun,
    *,
    tools: list[ToolSpec],
    context: ToolContext,
    sink: ConversationSink,
    stop: asyncio.Event,
    on_event: OnEvent,
) -> LoopResult:
    """One firing of an agent whose provider is a runtime program, committed through `sink`. Raises
    `ProviderError` (`provider_not_configured`) when the program is not installed or has no key."""
    config = runtime_config()
    runtime: Runtime = get_program(prepared.model.provider, config=config)
    home, workdir = agent_dirs(
        workflow_id=run.workflow_id, generation=run.generation, agent_node_id=prepared.agent_node_id
    )
    key = prepared.key
    binding = await db_call(conversation_runtime_binding)(key=key) if key and runtime.resumable else {}
    resume = session_continues(binding, runtime.name, prepared.messages, prepared.digest)

    def request(*, resume: bool, server: McpToolServer | None) -> TurnRequest:
        session_id = None
        if resume:
            session_id = str(binding["session_id"])
        elif runtime.resumable and key is not None:
            session_id = str(uuid.uuid4())
        return TurnRequest(
            prompt=text_of(prepared.messages[-1]) if resume else firing_prompt(prepared.messages),
            instructions="\n\n".join(prepared.system_blocks),
            model=prepared.model.model or None,
            home=home,
            workdir=workdir,
            session_id=session_id,
            resume=resume,
            mcp=server.endpoint if server is not None else None,
            env={"OPENCOMPANY_RUN_ID": run.run_id},
        )

    async with contextlib.AsyncExitStack() as stack:
        server = None
        if tools:
            server = await stack.enter_async_context(
                McpToolServer(tools, context, tool_result_max_chars=prepared.tool_result_max_chars)
            )
        outcome = await run_runtime_turn(
            runtime,
            request(resume=resume, server=server),
            sink,
            stop,
            config=config,
            on_event=on_event,
            tool_result_max_chars=prepared.tool_result_max_chars,
            run_id=run.run_id,
        )
        if outcome.resume_failed:
            logger.info("runtime session not resumable run=%s runtime=%s", run.run_id, runtime.name)
            outcome = await run_runtime_turn(
                runtime,
                request(resume=False, server=server),
                sink,
                stop,
                config=config,
                on_event=on_event,
                tool_result_max_chars=prepared.tool_result_max_chars,
                run_id=run.run_id,
            )
    try:
        # Through the loop's committer, so a refused record ends the run with the loop's code.
        await Committer(sink, run_id=run.run_id).record_call(_turn_record(prepared, runtime, outcome))
    except CommitFailed as exc:
        outcome.result.fail(exc.code, exc.message)
    if key is not None and runtime.resumable:
        await _keep_binding(prepared, runtime, outcome, sink, bound=bool(binding))
    return outcome.result


def _turn_record(prepared: Prepared, runtime: Runtime, outcome: TurnOutcome) -> CallRecord:
    """The program's turn as one ledger row: the usage it reported (the sum of its own calls) and, as
    the program's context cannot be counted from here, an estimated pressure."""
    result = outcome.result
    adapter = context_adapter(runtime.name)
    request = Request(
        system_blocks=prepared.system_blocks,
        messages=prepared.messages,
        tools=prepared.tools,
        settings=prepared.model,
    )
    measure = adapter.measure_active_context(request)
    status = {"finished": "ok", "stopped": "stopped"}.get(result.status, "error")
    reported = result.usage if result.usage != Usage() else None
    return CallRecord(
        kind="step",
        status=status,
        provider=runtime.name,
        model=prepared.model.model,
        usage=reported,
        settings={"model": prepared.model.model, "max_output_tokens": prepared.model.max_output_tokens},
        system_digest=hashlib.sha256(prepared.system_blocks[0].encode()).hexdigest(),
        notes_digest=(
            hashlib.sha256(prepared.system_blocks[1].encode()).hexdigest()
            if len(prepared.system_blocks) > 1
            else ""
        ),
        tools_digest=hashlib.sha256(
            canonical_json(
                [
                    {"name": t.name, "description": t.description, "schema": t.input_schema}
                    for t in prepared.tools
                ]
            ).encode()
        ).hexdigest(),
        message_count=len(prepared.messages),
        pressure=measure.tokens,
        pressure_estimated=measure.estimated,
        output_headroom=prepared.model.max_output_tokens,
        context_window=prepared.model.context_window,
        # What the firing carried, whatever its outcome: the program's declared fidelity.
        runtime=runtime.name,
        fidelity=runtime.fidelity,
    )


async def _keep_binding(
    prepared: Prepared, runtime: Runtime, outcome: TurnOutcome, sink: ConversationSink, *, bound: bool
) -> None:
    key = prepared.key
    if key is None:
        return
    if outcome.result.status == "finished" and outcome.session_id:
        await db_call(conversations.conversation_runtime_bind)(
            key=key,
            runtime=runtime.name,
            session_id=outcome.session_id,
            length=sink.length,
            digest=sink.digest,
        )
    elif bound:
        await db_call(conversations.conversation_runtime_unbind)(key=key)
