"""Owner chat writes: send, stop, edit, retry, switch, feedback, new chat (archive), rename, purge, and
the run lifecycle.

Every entry point owns its transaction. The thread row is the chat's lock: admissions, branch moves, a
run's beginning and its end take it first (`select_for_update`), then the run row, then the conversation
head rows in agent order, then notes, so two writers to one chat serialize instead of forking the tree.
Events go out after commit; admitted runs start after commit through the run dispatcher the executor
registers (`run_dispatcher_register`), so these services never import the executor.

The send's admission, a run's locks, notes, draft and state go through the chat store (`chat.stores`),
one implementation per database; the services word its refusals and publish its writes.

Modules: `_common` (shared helpers, admission, dispatch, run and thread events), `send` (send, stop),
`branches` (feedback, branch moves), `archive` (new chat, rename, purge), `runs` (a turn's notes and the
run lifecycle), `probes` (the OpenAI-compatible capability probe's kept answers). Import the public
names from this package.
"""

from chat.services._common import (
    FEEDBACK_EXCERPT_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_NOTES_PER_TURN,
    Admission,
    RunDispatcher,
    new_claimant,
    run_control_group,
    run_dispatcher_register,
    run_started_event,
)
from chat.services.archive import chat_archive, chat_purge, chat_rename
from chat.services.branches import chat_edit, chat_feedback, chat_retry, chat_switch
from chat.services.owner import chat_owner_change_hook
from chat.services.probes import provider_probe_record, provider_probes_forget
from chat.services.runs import (
    RunBegun,
    chat_end_run,
    chat_reset_hook,
    notes_claim,
    notes_deliver,
    process_beat,
    process_gone,
    run_begin,
    run_claim,
    run_delegate_begin,
    run_finish,
    run_save_draft,
    run_state,
    runs_needing_watchdog,
    watchdog_pass,
    watchdog_sweep,
)
from chat.services.send import chat_send, chat_stop

__all__ = [
    "FEEDBACK_EXCERPT_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_NOTES_PER_TURN",
    "Admission",
    "RunBegun",
    "RunDispatcher",
    "chat_archive",
    "chat_edit",
    "chat_end_run",
    "chat_feedback",
    "chat_owner_change_hook",
    "chat_purge",
    "chat_rename",
    "chat_reset_hook",
    "chat_retry",
    "chat_send",
    "chat_stop",
    "chat_switch",
    "new_claimant",
    "notes_claim",
    "notes_deliver",
    "process_beat",
    "process_gone",
    "provider_probe_record",
    "provider_probes_forget",
    "run_begin",
    "run_claim",
    "run_control_group",
    "run_delegate_begin",
    "run_dispatcher_register",
    "run_finish",
    "run_save_draft",
    "run_started_event",
    "run_state",
    "runs_needing_watchdog",
    "watchdog_pass",
    "watchdog_sweep",
]
