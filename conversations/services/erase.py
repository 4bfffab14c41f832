"""Erasure of the conversations kept for deleted workflows (a registered `graphs` eraser)."""

from __future__ import annotations

from typing import Any

from conversations.models import (
    AgentConversation,
    BranchSnapshot,
    CompactionAttempt,
    ConversationArchive,
    ProviderCall,
)


def conversations_erase(*, owner_id: int, workflow_ids: list[str] | None) -> dict[str, int]:
    """Delete the owner's conversations (with their messages), archives, branch snapshots, usage ledger
    (request records) and compaction attempts of these workflows (all of the owner's with
    `workflow_ids=None`). Call inside the deleting transaction."""
    scope: dict[str, Any] = {"owner_id": owner_id}
    if workflow_ids is not None:
        scope["workflow_id__in"] = list(workflow_ids)
    heads = AgentConversation.objects.filter(**scope)
    conversations = heads.count()
    heads.delete()  # messages go with their head (cascade)
    archives, _ = ConversationArchive.objects.filter(**scope).delete()
    snapshots, _ = BranchSnapshot.objects.filter(**scope).delete()
    calls, _ = ProviderCall.objects.filter(**scope).delete()
    attempts, _ = CompactionAttempt.objects.filter(**scope).delete()
    return {
        "conversations": conversations,
        "archives": archives,
        "snapshots": snapshots,
        "provider_calls": calls,
        "compaction_attempts": attempts,
    }
