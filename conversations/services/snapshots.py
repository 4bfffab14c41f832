"""Branch snapshots: the conversation and notes kept per chat branch leaf, restored when the owner
switches back (at most 1 MiB each and 50 per thread, the oldest evicted).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from conversations import errors
from conversations.models import AgentConversation, BranchSnapshot
from conversations.selectors import conversation_load
from conversations.services._common import (
    _clean_notes,
    _error,
    _lock_head,
    _prepare,
    _workflow_owner_id,
    clean_pressure,
    pressure_of,
)
from conversations.services.conversation import _save_locked
from conversations.types import ConversationKey, ConversationWrite
from opencompany.core.errors import invalid
from opencompany.core.json import json_size

logger = logging.getLogger(__name__)

BRANCH_SNAPSHOT_MAX_BYTES = 1_048_576
BRANCH_SNAPSHOTS_PER_THREAD = 50


# --- branch snapshots ---------------------------------------------------------------------------------


def _check_snapshot_key(thread_key: str, leaf_uid: str) -> None:
    if not isinstance(thread_key, str) or not thread_key or len(thread_key) > 255:
        raise invalid("thread_key must be a non-empty string of at most 255 characters.")
    if not isinstance(leaf_uid, str) or not leaf_uid or len(leaf_uid) > 64:
        raise invalid("leaf_uid must be a non-empty string of at most 64 characters.")


@transaction.atomic
def branch_snapshot_keep(*, key: ConversationKey, thread_key: str, leaf_uid: str) -> bool:
    """Keep the conversation (messages, notes and context pressure) under `(thread_key, leaf_uid, agent)`.

    Returns False when it is larger than 1 MiB: it is then not kept and any older snapshot under that
    key is dropped (coming back answers `branch_unavailable`). At most 50 snapshots per thread are
    kept; the oldest go first.
    """
    _check_snapshot_key(thread_key, leaf_uid)
    lookup = {"thread_key": thread_key, "leaf_uid": leaf_uid, "agent_node_id": key.agent_node_id}
    head = _lock_head(key, create=False)
    notes: list[dict[str, Any]] = list(head.notes) if head is not None else []
    too_large = head is not None and head.bytes > BRANCH_SNAPSHOT_MAX_BYTES
    messages: list[dict[str, Any]] = []
    size = 0
    if not too_large:
        messages = conversation_load(key=key) if head is not None and head.length else []
        size = json_size({"messages": messages, "notes": notes})
        too_large = size > BRANCH_SNAPSHOT_MAX_BYTES
    if too_large:
        BranchSnapshot.objects.filter(**lookup).delete()
        logger.info(
            "branch snapshot not kept (over %s bytes) workflow=%s agent=%s",
            BRANCH_SNAPSHOT_MAX_BYTES,
            key.workflow_id,
            key.agent_node_id,
        )
        return False
    owner_id = head.owner_id if head is not None else _workflow_owner_id(key.workflow_id)
    BranchSnapshot.objects.update_or_create(
        thread_key=thread_key,
        leaf_uid=leaf_uid,
        agent_node_id=key.agent_node_id,
        defaults={
            "owner_id": owner_id,
            "workflow_id": key.workflow_id,
            "generation": key.generation,
            "messages": messages,
            "notes": notes,
            "pressure": pressure_of(head),
            "bytes": size,
            "created_at": timezone.now(),
        },
    )
    excess = list(
        BranchSnapshot.objects.filter(thread_key=thread_key)
        .order_by("-created_at", "-id")
        .values_list("pk", flat=True)[BRANCH_SNAPSHOTS_PER_THREAD:]
    )
    if excess:
        BranchSnapshot.objects.filter(pk__in=excess).delete()
    return True


@transaction.atomic
def branch_snapshot_restore(*, key: ConversationKey, thread_key: str, leaf_uid: str) -> ConversationWrite:
    """Make the conversation equal to the snapshot kept for `(thread_key, leaf_uid, agent)` (messages,
    notes and the context pressure it had). `branch_unavailable` when none was kept for this workflow and generation."""
    _check_snapshot_key(thread_key, leaf_uid)
    snapshot = BranchSnapshot.objects.filter(
        thread_key=thread_key,
        leaf_uid=leaf_uid,
        agent_node_id=key.agent_node_id,
        workflow_id=key.workflow_id,
        generation=key.generation,
    ).first()
    if snapshot is None:
        raise _error(
            errors.BRANCH_UNAVAILABLE,
            "That branch's conversation was not kept; it cannot be restored.",
            {"agent_node_id": key.agent_node_id},
        )
    written = _save_locked(key, _prepare(list(snapshot.messages)), notes=_clean_notes(snapshot.notes))
    pressure = clean_pressure(snapshot.pressure)
    if pressure is not None:
        AgentConversation.objects.filter(**key.filter_kwargs()).update(**pressure)
    return written
