"""Erasure: deleting a workflow deletes everything kept for it, and an owner can erase all their data.

The registered erasers (`graphs.hooks`) delete what their apps keep (Memory items, revisions, receipts
and embeddings; conversations, their archives and branch snapshots) in the same transaction as the
workflow rows, whose own dependants (deployments, legacy artifacts, the chat) go with them.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from graphs.hooks import erasers
from graphs.models import ContextArchiveOutbox, Workflow
from opencompany.core.events import owner_group, publish_on_commit

logger = logging.getLogger(__name__)


def _erase(*, owner_id: int, workflow_ids: list[str] | None) -> dict[str, dict[str, int]]:
    report = {
        name: eraser(owner_id=owner_id, workflow_ids=workflow_ids)
        for name, eraser in sorted(erasers().items())
    }
    outbox = ContextArchiveOutbox.objects.filter(owner_id=owner_id)
    if workflow_ids is not None:
        outbox = outbox.filter(workflow_id__in=workflow_ids)
    report["graphs"] = {"archive_outbox": outbox.delete()[0]}
    return report


def _delete_workflows(workflows: list[Workflow]) -> int:
    for workflow in workflows:
        publish_on_commit(owner_group(workflow.owner_id), "workflow.deleted", {"workflow_id": workflow.pk})
    deleted, _ = Workflow.objects.filter(pk__in=[w.pk for w in workflows]).delete()
    return len(workflows) if deleted else 0


@transaction.atomic
def workflow_delete(*, workflow: Workflow) -> dict[str, Any]:
    """Delete the workflow and everything kept for it: its Memory (items, revisions, receipts,
    embeddings), conversations with their archives and snapshots, chat, deployments and artifacts.
    Returns the counts per app."""
    locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
    report: dict[str, Any] = _erase(owner_id=locked.owner_id, workflow_ids=[locked.pk])
    report["workflows"] = _delete_workflows([locked])
    logger.info("workflow erased workflow=%s report=%s", locked.pk, report)
    return report


@transaction.atomic
def owner_data_erase(*, owner: Any) -> dict[str, Any]:
    """Delete every workflow of `owner` and everything kept for them, workflows deleted earlier
    included. The account itself stays (and stays signed in). Returns the counts per app."""
    workflows = list(Workflow.objects.select_for_update().filter(owner=owner).order_by("pk"))
    report: dict[str, Any] = _erase(owner_id=owner.pk, workflow_ids=None)
    report["workflows"] = _delete_workflows(workflows)
    logger.info("owner data erased owner=%s report=%s", owner.pk, report)
    return report
