"""Counts of what the chat keeps, read before a destructive or moving action so its confirmation page
can say what it will touch: a workflow's chats (`graphs.hooks` inventory) and an archived chat's purge."""

from __future__ import annotations

from django.db.models import Count

from chat.models import ChatFeedback, ChatMessage, ChatNote, ChatRun, ChatThread
from conversations.models import BranchSnapshot
from graphs.hooks import InventoryLine


def chat_inventory(*, owner_id: int, workflow_ids: list[str]) -> list[InventoryLine]:
    """Inventory (`graphs.hooks`): the workflows' chats, current and archived, with their messages,
    runs, notes and ratings. Chats belong to their workflow, whoever owns it."""
    threads = ChatThread.objects.filter(home_workflow_id__in=list(workflow_ids))
    return [
        InventoryLine("chat", "chats", "Chats (current and archived)", threads.count()),
        InventoryLine(
            "chat", "messages", "Chat messages", ChatMessage.objects.filter(thread__in=threads).count()
        ),
        InventoryLine("chat", "runs", "Chat runs", ChatRun.objects.filter(thread__in=threads).count()),
        InventoryLine(
            "chat", "notes", "Chat notes for the agent", ChatNote.objects.filter(thread__in=threads).count()
        ),
        InventoryLine(
            "chat", "feedback", "Answer ratings", ChatFeedback.objects.filter(thread__in=threads).count()
        ),
    ]


def chat_purge_inventory(*, thread: ChatThread) -> list[InventoryLine]:
    """What purging this archived chat deletes: its messages, runs, notes and ratings (with the chat)
    and the branch snapshots kept under it (deleted by the purge service)."""
    counts = ChatThread.objects.filter(pk=thread.pk).aggregate(
        messages=Count("messages", distinct=True),
        runs=Count("runs", distinct=True),
        notes=Count("notes", distinct=True),
        feedback=Count("feedback", distinct=True),
    )
    return [
        InventoryLine("chat", "messages", "Chat messages", counts["messages"]),
        InventoryLine("chat", "runs", "Chat runs", counts["runs"]),
        InventoryLine("chat", "notes", "Chat notes for the agent", counts["notes"]),
        InventoryLine("chat", "feedback", "Answer ratings", counts["feedback"]),
        InventoryLine(
            "conversations",
            "snapshots",
            "Branch snapshots",
            BranchSnapshot.objects.filter(thread_key=thread.snapshot_key).count(),
        ),
    ]
