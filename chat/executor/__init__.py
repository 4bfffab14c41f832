"""Run execution: claim a run, begin its turn from the stores, run the agent loop with a sink that
appends per turn, stream events, end the run in one terminal state.

Executors (`OPENCOMPANY_RUN_EXECUTOR`): `inprocess` (an asyncio task on the serving process's event
loop, started after the admitting commit), `tasks` (Django's Tasks framework; `manage.py db_worker`
runs runs on any number of worker processes) or `manual` (nothing is started; tests drive
`execute_run`). Stop reaches a run wherever it executes through the channel layer group
`run.<run_id>`, with a database re-check as the fallback.

Modules: `dispatch` (where a run executes and how it is started; the chat app registers `dispatch_run`
as the services' run dispatcher), `tasks` (the task the `tasks` executor enqueues), `prepare` (the
agent, model and tools, and the turn's beginning), `probe` (the OpenAI-compatible server's verified
capabilities), `sink` (the per-turn appends), `stream` (events, draft and heartbeat), `stop` (the stop
listener), `runtime` (agents whose runtime is a program: Claude Code, Codex CLI) and `run`
(`execute_run`). Import the public names from this package.
"""

from chat.executor.dispatch import dispatch_run, run_loop_for_process, spawn
from chat.executor.prepare import Prepared, prepare_run, provider_config, runtime_problem
from chat.executor.run import execute_run
from chat.executor.sink import ConversationSink
from chat.executor.stop import STOP_POLL_S
from chat.executor.stream import DRAFT_FLUSH_S, HEARTBEAT_S, RunStream

__all__ = [
    "DRAFT_FLUSH_S",
    "HEARTBEAT_S",
    "STOP_POLL_S",
    "ConversationSink",
    "Prepared",
    "RunStream",
    "dispatch_run",
    "execute_run",
    "prepare_run",
    "provider_config",
    "run_loop_for_process",
    "runtime_problem",
    "spawn",
]
