"""Error codes of the conversation store (stable API: tests and clients match on them)."""

CONVERSATION_CONFLICT = "conversation_conflict"
CANNOT_REWIND = "cannot_rewind"
BRANCH_UNAVAILABLE = "branch_unavailable"
INVALID_MESSAGE = "invalid_message"
CONVERSATION_LOAD_FAILED = "conversation_load_failed"
NOTES_FULL = "notes_full"
NOTES_CONFLICT = "notes_conflict"
NOTE_NOT_FOUND = "note_not_found"
CONTEXT_CHANGED = "context_changed"

STATUS = {
    CONVERSATION_CONFLICT: 409,
    CANNOT_REWIND: 409,
    BRANCH_UNAVAILABLE: 409,
    INVALID_MESSAGE: 400,
    CONVERSATION_LOAD_FAILED: 503,
    NOTES_FULL: 400,
    NOTES_CONFLICT: 409,
    NOTE_NOT_FOUND: 404,
    CONTEXT_CHANGED: 409,
}
