"""Run one turn of a runtime program: start it in its own process group, commit what it reports
through the loop's sink, end the group on Stop.

Every write goes through the same :class:`~opencompany.llm.commit.Committer` as the agent loop's, so
the order and the codes are the loop's: an assistant message with tool calls before any of their
results, each result as the program reports it, the final answer (with the turn's usage) last, and a
write the sink refused ends the turn with ``persist_failed`` or ``context_changed``. Every
assistant message is stamped with the runtime and its fidelity (``observable``). Blocks gather into
one assistant message until a tool result arrives.

Stop sends SIGTERM to the process group, then SIGKILL after ``stop_grace_s``; the turn is saved as far
as it went: calls without a result get an ``interrupted`` result, and the text streamed so far becomes
the final message with ``metadata.status = "stopped"`` (``portable``, like any cut-off turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..commit import CommitFailed, Committer, Sink, stopped_answer
from ..fidelity import stamp
from ..loop import LoopResult, ToolResultEvent
from ..policies import DEFAULT_TOOL_RESULT_MAX_CHARS, cap_tool_results
from ..providers.base import (
    PROVIDER_ERROR,
    PROVIDER_NOT_CONFIGURED,
    ProviderError,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from ..wire import Block, Message, make_assistant, make_text, make_tool_result
from .base import Call, Delta, Done, Launch, Result, Runtime, RuntimeConfig, Session, Text, TurnRequest

logger = logging.getLogger(__name__)

INTERRUPTED_TEXT = "Interrupted: the owner stopped this answer while the call was running."
UNREPORTED_TEXT = "The program ended its turn without reporting this call's result."
_STDERR_KEEP = 4096

OnEvent = Callable[[Any], "Awaitable[None] | None"]


@dataclass
class TurnOutcome:
    """The loop's result for the turn, plus what the program said about its session.

    ``resume_failed``: the bound session could not be continued and nothing was committed, so the
    caller may start the turn again in a new session.
    """

    result: LoopResult
    session_id: str | None = None
    resume_failed: bool = False
    pid: int | None = None


@dataclass
class _Turn:
    """What the program reported so far, and what of it is committed."""

    runtime: Runtime
    committer: Committer
    on_event: OnEvent | None
    max_chars: int
    blocks: list[Block] = field(default_factory=list)  # the assistant message being gathered
    committed: bool = False  # the gathered message is committed; its results follow
    live: list[str] = field(default_factory=list)  # text streamed since the last complete block
    usage: Usage = field(default_factory=Usage)
    session_id: str | None = None
    done: Done | None = None

    async def emit(self, event: Any) -> None:
        if self.on_event is None:
            return
        try:
            result = self.on_event(event)
            if asyncio.iscoroutine(result):
                await result
        except Exception:
            logger.warning("on_event callback failed for %s", type(event).__name__, exc_info=True)

    def _message(self, blocks: list[Block], **metadata: Any) -> Message:
        return stamp(
            make_assistant(blocks, metadata), runtime=self.runtime.name, fidelity=self.runtime.fidelity
        )

    def _calls(self, blocks: list[Block]) -> list[Block]:
        return [b for b in blocks if b.get("type") == "tool_call"]

    async def _commit_gathered(self) -> None:
        """Commit the gathered message as an assistant message with calls (their results follow)."""
        await self.committer.assistant(self._message(self.blocks))
        self.committed = True

    def _start_block(self) -> None:
        # Blocks after a committed message start the next one. Text-only messages the program split
        # (a continuation) gather into one, so the stored turns never hold two answers in a row.
        if self.committed:
            self.blocks, self.committed = [], False

    async def handle(self, event: Any) -> None:
        if isinstance(event, Delta):
            if event.text:
                self.live.append(event.text)
                await self.emit(TextDelta(event.text))
        elif isinstance(event, Text):
            self._start_block()
            self.blocks.append(make_text(event.text))
            self.live.clear()
        elif isinstance(event, Call):
            self._start_block()
            self.blocks.append(event.block)
            self.live.clear()
            await self.emit(ToolCallEvent(event.block))
        elif isinstance(event, Result):
            await self._result(event)
        elif isinstance(event, Usage):
            self.usage = self.usage + event
        elif isinstance(event, Session):
            self.session_id = event.session_id
        elif isinstance(event, Done):
            self.done = event

    async def _result(self, event: Result) -> None:
        if not self.committed and any(b.get("id") == event.call_id for b in self._calls(self.blocks)):
            await self._commit_gathered()
        name = self.committer.open_calls.get(event.call_id)
        if name is None:
            return  # a result for a call this turn never showed (or already answered)
        status = event.status if event.status in ("ok", "error") else "error"
        message = cap_tool_results(
            [make_tool_result(event.call_id, name, event.content, status)], self.max_chars
        )[0]
        await self.committer.tool_result(message)
        await self.emit(ToolResultEvent(message))

    async def finish(self, *, stopped: bool) -> None:
        """Commit the rest: calls without results get one, the gathered text becomes the final answer."""
        gathered = [] if self.committed else self.blocks
        if self._calls(gathered):
            await self._commit_gathered()
            gathered = []
        if stopped:
            await self.committer.close_open_calls(INTERRUPTED_TEXT, "interrupted")
            text = "".join(b.get("text", "") for b in gathered) + "".join(self.live)
            if text:
                await self.committer.final(stopped_answer(text, runtime=self.runtime.name), self.usage)
            return
        await self.committer.close_open_calls(UNREPORTED_TEXT, "interrupted")
        if gathered:
            await self.committer.final(self._message(gathered), self.usage)


def _write_files(launch: Launch) -> None:
    for path, text in launch.files.items():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)


def _remove_files(launch: Launch) -> None:
    for path in launch.files:
        with contextlib.suppress(OSError):
            Path(path).unlink()


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (from ``/proc``; none where there is no ``/proc``)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), ()):
            found.append(child)
            pending.append(child)
    return found


async def end_process_group(process: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM to the program's process group, SIGKILL to what is left after ``grace_s``: the group
    and any process the program started in a group of its own (Codex CLI starts its MCP servers so)."""
    pgid = process.pid  # the program leads its own group (start_new_session)
    strays = _descendants(process.pid) if process.returncode is None else []
    if process.returncode is None:
        _signal_group(pgid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), grace_s)
    _signal_group(pgid, signal.SIGKILL)
    for pid in strays:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if process.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 5.0)


async def run_runtime_turn(
    runtime: Runtime,
    request: TurnRequest,
    sink: Sink,
    stop: asyncio.Event,
    *,
    config: RuntimeConfig,
    on_event: OnEvent | None = None,
    tool_result_max_chars: int = DEFAULT_TOOL_RESULT_MAX_CHARS,
    run_id: str | None = None,
) -> TurnOutcome:
    """Run the program for one turn to its end, a stop, an error or the timeout.

    Raises ``ProviderError`` (``provider_not_configured``) when the program cannot be started; a
    program that fails reports ``provider_error`` in the result, with whatever it committed kept.
    """
    launch = runtime.launch(request)
    for directory in (request.home, request.workdir):
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_files(launch)
    committer = Committer(sink, run_id=run_id, unanswered=UNREPORTED_TEXT)
    turn = _Turn(runtime, committer, on_event, tool_result_max_chars)
    result = LoopResult(status="finished", iterations=1)
    stderr_tail: deque[bytes] = deque(maxlen=32)
    try:
        try:
            process = await asyncio.create_subprocess_exec(
                *launch.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(launch.cwd),
                env=launch.env,
                start_new_session=True,
                limit=64 * 1024 * 1024,
            )
        except OSError as exc:
            raise ProviderError(
                PROVIDER_NOT_CONFIGURED,
                f"{runtime.display_name} could not be started ({type(exc).__name__}).",
            ) from exc
        logger.info("runtime started runtime=%s pid=%s resume=%s", runtime.name, process.pid, request.resume)
        outcome = TurnOutcome(result=result, pid=process.pid)
        try:
            stopped, timed_out = await _drive(process, launch, turn, stop, config, stderr_tail)
        except CommitFailed as exc:
            await end_process_group(process, config.stop_grace_s)
            result.fail(exc.code, exc.message)
            return outcome
        except BaseException:
            await end_process_group(process, 0)
            raise
        try:
            await turn.finish(stopped=stopped)
        except CommitFailed as exc:
            result.fail(exc.code, exc.message)
            return outcome
        result.usage = turn.usage
        result.final_message = committer.final_message
        outcome.session_id = turn.session_id
        if stopped:
            result.status = "stopped"
        elif timed_out:
            _fail(result, ProviderError(PROVIDER_ERROR, f"{runtime.display_name} ran past its time limit."))
        elif turn.done is None:
            tail = b"".join(stderr_tail).decode("utf-8", "replace").strip().splitlines()
            detail = f": {tail[-1][:200]}" if tail else ""
            _fail(
                result,
                ProviderError(
                    PROVIDER_ERROR,
                    f"{runtime.display_name} ended without finishing its turn "
                    f"(exit status {process.returncode}){detail}",
                ),
            )
        elif turn.done.error is not None:
            _fail(result, turn.done.error)
            outcome.resume_failed = request.resume and turn.session_id is None and committer.commits == 0
        logger.info(
            "runtime ended runtime=%s pid=%s status=%s exit=%s commits=%s",
            runtime.name,
            process.pid,
            result.status,
            process.returncode,
            committer.commits,
        )
        return outcome
    finally:
        _remove_files(launch)


def _fail(result: LoopResult, error: ProviderError) -> None:
    result.fail(error.code, error.message, error.extra)


async def _drive(
    process: asyncio.subprocess.Process,
    launch: Launch,
    turn: _Turn,
    stop: asyncio.Event,
    config: RuntimeConfig,
    stderr_tail: deque[bytes],
) -> tuple[bool, bool]:
    """Feed stdin, read the program's lines and commit their events until it ends, Stop or the time
    limit. Returns ``(stopped, timed_out)``; the program has exited (or been killed) on return."""
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
    if stdin is None or stdout is None or stderr is None:
        raise RuntimeError("the program was started without its pipes")
    parser = turn.runtime.parser()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    end = object()

    async def feed_stdin() -> None:
        with contextlib.suppress(ConnectionError, BrokenPipeError):
            stdin.write(launch.stdin)
            await stdin.drain()
            stdin.close()

    async def read_stdout() -> None:
        try:
            while line := await stdout.readline():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line of plain text among the JSON lines
                if isinstance(event, dict):
                    for item in parser.feed(event):
                        queue.put_nowait(item)
        except (ValueError, asyncio.LimitOverrunError):
            logger.warning("runtime %s printed an over-long line", turn.runtime.name)
        finally:
            queue.put_nowait(end)

    async def read_stderr() -> None:
        while chunk := await stderr.read(_STDERR_KEEP):
            stderr_tail.append(chunk)

    async def on_stop() -> None:
        await stop.wait()
        started = time.monotonic()
        await end_process_group(process, config.stop_grace_s)
        logger.info(
            "runtime stopped runtime=%s pid=%s after=%.2fs",
            turn.runtime.name,
            process.pid,
            time.monotonic() - started,
        )
        queue.put_nowait(end)

    helpers = [
        asyncio.ensure_future(feed_stdin()),
        asyncio.ensure_future(read_stdout()),
        asyncio.ensure_future(read_stderr()),
        asyncio.ensure_future(on_stop()),
    ]
    deadline = time.monotonic() + config.timeout_s
    timed_out = False
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                timed_out = True
                await end_process_group(process, config.stop_grace_s)
                break
            if item is end or stop.is_set():
                break
            await turn.handle(item)
        if stop.is_set():
            await helpers[3]  # the process group is ended
            return True, False
        if not timed_out:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 10.0)
            await end_process_group(process, config.stop_grace_s)
        return False, timed_out
    finally:
        for helper in helpers:
            helper.cancel()
        for helper in helpers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await helper
