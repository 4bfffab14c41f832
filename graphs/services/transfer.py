"""Ownership transfer: a workflow, and everything kept for it, given to another owner on purpose.

A transfer names the new owner twice (the account, and its username typed to confirm), moves what every
registered owner-change hook keys by the owner (Memory namespaces, conversations and their archives;
the chat goes with the workflow row), records who gave what to whom, and closes the old owner's chat
sockets on this workflow: their browser says the workflow was transferred.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from graphs import errors
from graphs.hooks import OwnerChange, owner_change_hooks
from graphs.models import ContextArchiveOutbox, Workflow, WorkflowTransfer
from graphs.selectors import workflow_inventory
from opencompany.core.errors import ApplicationError, invalid
from opencompany.core.events import chat_group, owner_group, publish_on_commit
from opencompany.core.tokens import tokens_active_count

logger = logging.getLogger(__name__)

# Published to the workflow's chat group after a transfer commits; every socket on the workflow whose
# user is not the new owner closes with `4410` (chat.consumers).
TRANSFERRED_EVENT = "workflow.transferred"


def _username(user: Any) -> str:
    return str(user.get_username()) if user is not None else ""


@transaction.atomic
def workflow_transfer(
    *, workflow: Workflow, new_owner: Any, confirm_username: Any, actor: Any
) -> WorkflowTransfer:
    """Give the workflow, and everything kept for it, to `new_owner`, confirmed by typing their username.

    Refused, writing nothing: no new owner, an inactive one or the current owner (`invalid_request`
    naming `new_owner`); a typed username that is not the new owner's (`transfer_not_confirmed`, naming
    `confirm_username`); a live chat run (`run_in_progress`, from the chat's owner-change hook). Then every
    owner-change hook moves its rows, the workflow and its pending archive outbox rows take the new
    owner, and a `WorkflowTransfer` records the old and new owner, `actor`, the time and the inventory
    that moved (counted in this transaction, before the move). After commit the old owner's open chat
    sockets on this workflow are closed (`workflow.transferred`); their API tokens keep working for
    their other workflows and answer 404 for this one.
    """
    locked = Workflow.objects.select_for_update().select_related("owner").get(pk=workflow.pk)
    if new_owner is None or getattr(new_owner, "pk", None) is None:
        raise invalid("Choose the new owner.", {"new_owner": ["Required."]})
    if not new_owner.is_active:
        raise invalid(
            f"{_username(new_owner)} cannot sign in (inactive); choose an active account.",
            {"new_owner": ["This account is inactive."]},
        )
    if new_owner.pk == locked.owner_id:
        raise invalid(
            f"{_username(new_owner)} already owns this workflow.",
            {"new_owner": ["Choose someone other than the current owner."]},
        )
    typed = confirm_username.strip() if isinstance(confirm_username, str) else ""
    if typed != _username(new_owner):
        raise ApplicationError(
            errors.TRANSFER_NOT_CONFIRMED,
            f"Type the new owner's username ({_username(new_owner)}) exactly to confirm the transfer.",
            {"fields": {"confirm_username": [f"Does not match {_username(new_owner)}."]}},
        )
    old_owner = locked.owner
    moved = workflow_inventory(owner_id=old_owner.pk, workflow_ids=[locked.pk])
    change = OwnerChange(workflow_id=locked.pk, old_owner_id=old_owner.pk, new_owner_id=new_owner.pk)
    outcomes = {name: hook(change) for name, hook in sorted(owner_change_hooks().items())}
    Workflow.objects.filter(pk=locked.pk).update(
        owner_id=new_owner.pk, revision=F("revision") + 1, updated_at=timezone.now()
    )
    ContextArchiveOutbox.objects.filter(
        workflow_id=locked.pk, state=ContextArchiveOutbox.State.PENDING
    ).update(owner_id=new_owner.pk)
    record = WorkflowTransfer.objects.create(
        workflow_id=locked.pk,
        workflow_name=locked.name,
        from_owner=old_owner,
        from_username=_username(old_owner),
        to_owner=new_owner,
        to_username=_username(new_owner),
        actor=actor if getattr(actor, "pk", None) is not None else None,
        actor_username=_username(actor) if getattr(actor, "pk", None) is not None else "",
        moved=[
            {"app": line.app, "key": line.key, "label": line.label, "count": line.count} for line in moved
        ],
        tokens_stopped=tokens_active_count(user_id=old_owner.pk),
    )
    locked.refresh_from_db()
    for owner_id in (change.old_owner_id, change.new_owner_id):
        publish_on_commit(
            owner_group(owner_id),
            "workflow.updated",
            {"workflow_id": locked.pk, "revision": locked.revision, "change": "owner"},
        )
    publish_on_commit(
        chat_group(locked.pk), TRANSFERRED_EVENT, {"workflow_id": locked.pk, "owner_id": new_owner.pk}
    )
    logger.info(
        "workflow transferred workflow=%s from=%s to=%s actor=%s hooks=%s",
        locked.pk,
        change.old_owner_id,
        change.new_owner_id,
        record.actor_id,
        outcomes,
    )
    return record
