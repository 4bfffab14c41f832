"""Clear, archive and purge: a conversation is archived (messages, notes and its agent program's session
binding) before it is emptied, on Clear Context, when its Context node is removed, and on Reset;
archives past retention are purged.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from conversations.models import (
    AgentConversation,
    BranchSnapshot,
    CompactionAttempt,
    ConversationArchive,
    ConversationMessage,
    ProviderCall,
)
from conversations.services._common import EMPTY_PRESSURE, _lock_head, _publish
from conversations.types import ClearResult, ConversationKey
from graphs.hooks import OwnerChange, ResetContext
from opencompany.core.errors import invalid

logger = logging.getLogger(__name__)


# --- clear, archive, purge ----------------------------------------------------------------------------


def _archive_copy(head: AgentConversation, reason: str) -> ConversationArchive:
    """Copy the conversation (messages and notes) into an archive; the conversation is not changed.

    Precondition: call inside the transaction that locked `head`.
    """
    messages = list(
        ConversationMessage.objects.filter(conversation=head).order_by("seq").values_list("wire", flat=True)
    )
    return ConversationArchive.objects.create(
        owner_id=head.owner_id,
        workflow_id=head.workflow_id,
        generation=head.generation,
        agent_node_id=head.agent_node_id,
        reason=reason,
        messages=messages,
        notes=list(head.notes or []),
        runtime_binding=dict(head.runtime_binding or {}),
        length=head.length,
        bytes=head.bytes,
        revision=head.revision,
    )


def _archive_and_empty(head: AgentConversation, reason: str) -> ConversationArchive:
    """Copy the conversation into an archive, then empty it (messages and notes).

    Precondition: call inside the transaction that locked `head`.
    """
    archive = _archive_copy(head, reason)
    ConversationMessage.objects.filter(conversation=head).delete()
    changes: dict[str, Any] = {
        "length": 0,
        "bytes": 0,
        "head_digest": "",
        "revision": F("revision") + 1,
        "updated_at": timezone.now(),
        **EMPTY_PRESSURE,
    }
    if head.notes:
        changes["notes"] = []
        changes["notes_revision"] = F("notes_revision") + 1
    if head.runtime_binding:
        changes["runtime_binding"] = {}  # the program's session went with the archive
    AgentConversation.objects.filter(pk=head.pk).update(**changes)
    _publish(head, length=0, revision=head.revision + 1)
    logger.info(
        "conversation archived archive=%s workflow=%s generation=%s agent=%s reason=%s length=%s",
        archive.pk,
        head.workflow_id,
        head.generation,
        head.agent_node_id,
        reason,
        head.length,
    )
    return archive


def _has_content(head: AgentConversation) -> bool:
    return head.length > 0 or bool(head.notes)


@transaction.atomic
def conversation_clear(
    *, key: ConversationKey, reason: str = ConversationArchive.Reason.CLEARED
) -> ClearResult:
    """Archive the conversation, then empty it, notes included. Memory is never touched.
    Clearing an empty conversation writes nothing."""
    if reason not in ConversationArchive.Reason.values:
        raise invalid(f"reason must be one of {sorted(ConversationArchive.Reason.values)}.")
    head = _lock_head(key, create=False)
    if head is None or not _has_content(head):
        return ClearResult(cleared=False, archive_id=None, length=0, revision=head.revision if head else 0)
    archive = _archive_and_empty(head, reason)
    return ClearResult(cleared=True, archive_id=archive.pk, length=0, revision=head.revision + 1)


def _archive_heads(heads: list[AgentConversation], reason: str) -> int:
    archived = 0
    for head in heads:
        if _has_content(head):
            _archive_and_empty(head, reason)
            archived += 1
    return archived


@transaction.atomic
def conversations_archive_for_workflow(
    *, workflow_id: str, owner_id: int, context_node_id: str, reason: str
) -> dict[str, Any]:
    """Outbox archiver: archive and empty every conversation of the workflow (all generations).

    Idempotent: a retried drain finds them empty and archives nothing more. When the workflow itself
    was deleted, the emptied head rows and the workflow's branch snapshots go too.
    """
    heads = list(
        AgentConversation.objects.select_for_update()
        .filter(workflow_id=workflow_id)
        .order_by("generation", "agent_node_id")
    )
    archived = _archive_heads(heads, ConversationArchive.Reason.CONTEXT_REMOVED)
    removed = 0
    if reason == "workflow_deleted":
        removed, _ = AgentConversation.objects.filter(workflow_id=workflow_id).delete()
        BranchSnapshot.objects.filter(workflow_id=workflow_id).delete()
    return {"conversations_archived": archived, "conversations_removed": removed}


@transaction.atomic
def conversations_archive_for_reset(ctx: ResetContext) -> dict[str, Any]:
    """Reset hook: archive (reason `reset`) and empty the closed generation's conversations, notes
    included. Runs inside Reset's transaction."""
    heads = list(
        AgentConversation.objects.select_for_update()
        .filter(workflow_id=ctx.workflow_id, generation=ctx.generation)
        .order_by("agent_node_id")
    )
    return {"conversations_archived": _archive_heads(heads, ConversationArchive.Reason.RESET)}


@transaction.atomic
def archive_purge(*, older_than_days: int | None = None) -> int:
    """Delete archives older than the retention window (`OPENCOMPANY_CONTEXT_ARCHIVE_DAYS`, 30 by
    default). Returns how many were deleted."""
    days = int(settings.OPENCOMPANY_CONTEXT_ARCHIVE_DAYS if older_than_days is None else older_than_days)
    if days < 0:
        raise invalid("older_than_days must be ≥ 0.")
    cutoff = timezone.now() - timedelta(days=days)
    deleted, _ = ConversationArchive.objects.filter(archived_at__lt=cutoff).delete()
    return int(deleted)


@transaction.atomic
def conversations_owner_change_hook(change: OwnerChange) -> dict[str, Any]:
    """Owner-change hook (`graphs.hooks`): the workflow's conversations, archives, branch snapshots,
    usage ledger and compaction attempts take the new owner, so its panels and events follow the workflow."""
    moved = {}
    for name, model in (
        ("conversations", AgentConversation),
        ("archives", ConversationArchive),
        ("snapshots", BranchSnapshot),
        ("provider_calls", ProviderCall),
        ("compaction_attempts", CompactionAttempt),
    ):
        moved[name] = model.objects.filter(  # type: ignore[attr-defined]
            workflow_id=change.workflow_id, owner_id=change.old_owner_id
        ).update(owner_id=change.new_owner_id)
    return moved
