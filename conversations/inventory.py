"""Counts of what the conversation store keeps, read before a destructive or moving action so its
confirmation page can say what it will touch: a workflow's Contexts (`graphs.hooks` inventory), a
Clear Context and the archive purge."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from conversations.models import (
    AgentConversation,
    BranchSnapshot,
    CompactionAttempt,
    ConversationArchive,
    ConversationMessage,
    ProviderCall,
)
from conversations.types import ConversationKey
from graphs.hooks import InventoryLine


def conversations_inventory(*, owner_id: int, workflow_ids: list[str]) -> list[InventoryLine]:
    """Inventory (`graphs.hooks`): the owner's Contexts of these workflows with their messages, the
    archives, branch snapshots, usage records and compaction records, as the eraser and the
    owner-change hook select them."""
    scope = {"owner_id": owner_id, "workflow_id__in": list(workflow_ids)}
    heads = AgentConversation.objects.filter(**scope)
    return [
        InventoryLine("conversations", "conversations", "Contexts (agent conversations)", heads.count()),
        InventoryLine(
            "conversations",
            "messages",
            "Context messages",
            ConversationMessage.objects.filter(conversation__in=heads).count(),
        ),
        InventoryLine(
            "conversations",
            "archives",
            "Context archives",
            ConversationArchive.objects.filter(**scope).count(),
        ),
        InventoryLine(
            "conversations", "snapshots", "Branch snapshots", BranchSnapshot.objects.filter(**scope).count()
        ),
        InventoryLine(
            "conversations",
            "provider_calls",
            "Usage records (provider calls)",
            ProviderCall.objects.filter(**scope).count(),
        ),
        InventoryLine(
            "conversations",
            "compaction_attempts",
            "Compaction records",
            CompactionAttempt.objects.filter(**scope).count(),
        ),
    ]


def conversation_clear_inventory(*, key: ConversationKey) -> list[InventoryLine]:
    """What Clear Context does to this conversation: its messages and working notes leave it (copied
    into one new archive first, which is kept for the retention window). Memory is not touched."""
    head = AgentConversation.objects.filter(**key.filter_kwargs()).only("length", "notes").first()
    messages = head.length if head is not None else 0
    notes = len(head.notes or []) if head is not None else 0
    return [
        InventoryLine("conversations", "messages", "Context messages removed", messages),
        InventoryLine("conversations", "notes", "Working notes removed", notes),
        InventoryLine(
            "conversations", "archives", "Archives written (a copy of both)", int(bool(messages or notes))
        ),
    ]


def archive_purge_inventory(*, older_than_days: int | None = None) -> list[InventoryLine]:
    """What `archive_purge` deletes: every archive older than the retention window, in every workflow."""
    days = int(settings.OPENCOMPANY_CONTEXT_ARCHIVE_DAYS if older_than_days is None else older_than_days)
    cutoff = timezone.now() - timedelta(days=days)
    return [
        InventoryLine(
            "conversations",
            "archives",
            f"Context archives older than {days} days (every workflow)",
            ConversationArchive.objects.filter(archived_at__lt=cutoff).count(),
        )
    ]
