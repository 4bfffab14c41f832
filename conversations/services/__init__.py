"""Writes of the conversation store.

Every write runs under the head row's lock (`select_for_update`), bumps `revision` and publishes
`context.updated {workflow_id, generation, agent_node_id, length, revision}` to the owner's group after
commit. A refused or no-op write writes nothing and publishes nothing.

Messages are validated as MessageWire and stored normalized; `digest[i] = sha256(digest[i-1] +
canonical_json(wire[i]))`, so a cursor `(length, digest)` is checked against one stored row.

Modules: `_common` (message preparation, the head lock, the event, the row writer), `conversation`
(append, save, rewind), `snapshots` (branch snapshots), `archive` (clear, archive, purge), `epoch` (a
provider switch's portable hand-off), `erase` (everything of deleted workflows), `binding` (an agent
program's session binding). Import the public names from this package.
"""

from conversations.selectors import conversation_cursor, conversation_list, conversation_load, notes_read
from conversations.services.archive import (
    archive_purge,
    conversation_clear,
    conversations_archive_for_reset,
    conversations_archive_for_workflow,
    conversations_owner_change_hook,
)
from conversations.services.binding import conversation_runtime_bind, conversation_runtime_unbind
from conversations.services.conversation import conversation_append, conversation_rewind, conversation_save
from conversations.services.epoch import EpochStart, conversation_start_epoch
from conversations.services.erase import conversations_erase
from conversations.services.notes import notes_add, notes_remove, notes_replace, render_notes_block
from conversations.services.snapshots import (
    BRANCH_SNAPSHOT_MAX_BYTES,
    BRANCH_SNAPSHOTS_PER_THREAD,
    branch_snapshot_keep,
    branch_snapshot_restore,
)

__all__ = [
    "BRANCH_SNAPSHOTS_PER_THREAD",
    "BRANCH_SNAPSHOT_MAX_BYTES",
    "EpochStart",
    "archive_purge",
    "branch_snapshot_keep",
    "branch_snapshot_restore",
    "conversation_append",
    "conversation_clear",
    "conversation_cursor",
    "conversation_list",
    "conversation_load",
    "conversation_rewind",
    "conversation_runtime_bind",
    "conversation_runtime_unbind",
    "conversation_save",
    "conversation_start_epoch",
    "conversations_archive_for_reset",
    "conversations_archive_for_workflow",
    "conversations_erase",
    "conversations_owner_change_hook",
    "notes_add",
    "notes_read",
    "notes_remove",
    "notes_replace",
    "render_notes_block",
]
