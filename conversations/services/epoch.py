"""A new epoch of a conversation: when its agent moves to another provider, the conversation as stored
(the old runtime's signatures and encrypted state with it) is archived and its portable hand-off takes
its place, so no runtime is ever sent another's opaque state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from conversations.models import AgentConversation, ConversationArchive
from conversations.services._common import _lock_head, _prepare
from conversations.services.archive import _archive_copy
from conversations.services.conversation import _save_locked
from conversations.types import ConversationKey, ConversationWrite

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpochStart:
    archive_id: int | None
    write: ConversationWrite


@transaction.atomic
def conversation_start_epoch(*, key: ConversationKey, messages: Sequence[Mapping[str, Any]]) -> EpochStart:
    """Archive the stored conversation (reason `provider_switch`), then store exactly `messages`, its
    portable hand-off, in its place; working notes are kept, an agent program's session binding is
    archived and dropped. The messages are checked before anything
    is written; an empty conversation archives nothing."""
    prepared = _prepare(list(messages))
    head = _lock_head(key, create=False)
    archive_id = None
    if head is not None and head.length > 0:
        archive_id = _archive_copy(head, ConversationArchive.Reason.PROVIDER_SWITCH).pk
        logger.info(
            "conversation epoch started archive=%s workflow=%s generation=%s agent=%s length=%s",
            archive_id,
            key.workflow_id,
            key.generation,
            key.agent_node_id,
            head.length,
        )
    write = _save_locked(key, prepared)
    if head is not None and head.runtime_binding:
        # The program's session holds the old epoch's turns: the new epoch starts without it.
        AgentConversation.objects.filter(pk=head.pk).update(runtime_binding={})
    return EpochStart(archive_id=archive_id, write=write)
