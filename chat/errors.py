"""Error codes of the owner chat (stable API)."""

RUN_IN_PROGRESS = "run_in_progress"
NOT_RUNNING = "not_running"
NOT_STOPPABLE = "not_stoppable"
REVISION_CONFLICT = "revision_conflict"
NOT_EDITABLE = "not_editable"
OLDER_GENERATION = "older_generation"
CANNOT_REWIND = "cannot_rewind"
BRANCH_UNAVAILABLE = "branch_unavailable"
MESSAGE_TOO_LONG = "message_too_long"
RATE_LIMITED = "rate_limited"
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
CHAT_NOT_ARCHIVED = "chat_not_archived"
SERVER_RESTARTING = "server_restarting"  # this server is shutting down: send again once reconnected

# run error codes (on `run.error` and `ChatRun.error_code`)
RUN_FAILED = "run_failed"
NOT_DELIVERED = "not_delivered"
TIMED_OUT = "timed_out"
INTERRUPTED = "interrupted"
CLEARED = "cleared"
RESET = "reset"
PERSIST_FAILED = "persist_failed"
RUN_ENDED = "run_ended"  # the run ended, or changed claimant, before its turn began

STATUS = {
    RUN_IN_PROGRESS: 409,
    NOT_RUNNING: 409,
    NOT_STOPPABLE: 409,
    REVISION_CONFLICT: 409,
    NOT_EDITABLE: 409,  # valid input; the message's place on the shown path refuses it
    OLDER_GENERATION: 409,
    CANNOT_REWIND: 409,
    BRANCH_UNAVAILABLE: 409,
    MESSAGE_TOO_LONG: 400,
    RUN_ENDED: 409,
    IDEMPOTENCY_KEY_REUSED: 409,
    CHAT_NOT_ARCHIVED: 409,
    SERVER_RESTARTING: 503,
}
