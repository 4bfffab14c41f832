"""The agent program's session a conversation continues (Claude Code's session id): part of the
Context, recorded as of a stored cursor, so it is only ever used while the conversation is still
exactly what the session saw."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from conversations.models import AgentConversation
from conversations.services._common import _lock_head
from conversations.types import ConversationKey
from opencompany.core.errors import invalid

logger = logging.getLogger(__name__)


@transaction.atomic
def conversation_runtime_bind(
    *, key: ConversationKey, runtime: str, session_id: str, length: int, digest: str
) -> bool:
    """Bind the conversation to the program session `session_id` of `runtime`, as of the cursor
    `(length, digest)` the session has seen. Recorded only when the stored conversation is still at
    that cursor (else nothing is written and False is returned). The binding is not a message: the
    revision is not bumped and no event is published."""
    if not runtime or not session_id or length < 0:
        raise invalid("runtime, session_id and a non-negative length are required.")
    head = _lock_head(key, create=False)
    if head is None or head.length != length or head.head_digest != digest:
        return False
    binding: dict[str, Any] = {
        "runtime": runtime,
        "session_id": session_id,
        "length": length,
        "digest": digest,
    }
    AgentConversation.objects.filter(pk=head.pk).update(runtime_binding=binding)
    logger.info(
        "conversation bound workflow=%s generation=%s agent=%s runtime=%s length=%s",
        key.workflow_id,
        key.generation,
        key.agent_node_id,
        runtime,
        length,
    )
    return True


@transaction.atomic
def conversation_runtime_unbind(*, key: ConversationKey) -> bool:
    """Drop the conversation's program session binding (the session stays with the program). Returns
    whether there was one."""
    head = _lock_head(key, create=False)
    if head is None or not head.runtime_binding:
        return False
    AgentConversation.objects.filter(pk=head.pk).update(runtime_binding={})
    return True
