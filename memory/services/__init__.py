"""Writes of Memory: remember, update, forget, clear, purge, receipts, embeddings, index rebuild.

Every mutation is one transaction that (a) claims its receipt when an `operation_id` is given — a
retry of the same request replays the first result with `applied: false` and writes nothing, the
same id with a different request is `idempotency_key_reused`, a refused mutation leaves no receipt
because the claim rolls back with it — (b) checks versions in the UPDATE's WHERE, (c) records a
revision for every applied version (and a tombstone for a removal), and (d) publishes
`memory.updated` and schedules embedding only after commit.

Modules: `_common` (results, receipts, quota, revisions, the event), `remember`, `edits` (update, forget,
clear), `maintenance` (expiry purge, receipt pruning, embeddings, index rebuild), `erase` (everything of
deleted workflows), `owner` (namespaces follow a workflow to its new owner). Import the public names from
this package.
"""

from memory.services._common import (
    EVENT_TYPE,
    ClearResult,
    MemoryResult,
    Receipt,
    owner_actor,
    staff_actor,
)
from memory.services.edits import memory_clear, memory_forget, memory_update
from memory.services.erase import memory_erase
from memory.services.maintenance import (
    EMBED_BATCH,
    memory_embed,
    memory_index_rebuild,
    memory_purge_expired,
    memory_receipts_prune,
    memory_stems_prune,
    memory_words_prune,
)
from memory.services.owner import memory_namespaces_move, memory_owner_change_hook
from memory.services.remember import memory_remember

__all__ = [
    "EMBED_BATCH",
    "EVENT_TYPE",
    "ClearResult",
    "MemoryResult",
    "Receipt",
    "memory_clear",
    "memory_embed",
    "memory_erase",
    "memory_forget",
    "memory_index_rebuild",
    "memory_namespaces_move",
    "memory_owner_change_hook",
    "memory_purge_expired",
    "memory_receipts_prune",
    "memory_remember",
    "memory_stems_prune",
    "memory_update",
    "memory_words_prune",
    "owner_actor",
    "staff_actor",
]
