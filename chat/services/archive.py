"""New chat (archive the current chat), renaming a chat, and purging an archived one."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from chat import errors
from chat.models import LIVE_STATES, ChatMessage, ChatRun, ChatThread
from chat.selectors import TITLE_MAX_CHARS, chat_of, live_generation
from chat.services._common import _err, _publish_stop
from chat.services.runs import run_finish
from conversations import services as conversations
from conversations.models import AgentConversation, BranchSnapshot
from conversations.types import ConversationKey
from graphs.models import Workflow
from opencompany.core.errors import invalid
from opencompany.core.events import chat_group, publish_on_commit


def _publish_chats_changed(workflow_id: str) -> None:
    publish_on_commit(chat_group(workflow_id), "chats.updated", {"workflow_id": workflow_id})


@transaction.atomic
def chat_archive(*, workflow: Workflow) -> dict[str, Any]:
    """New chat: the current chat becomes read-only and is kept in the chat list with its messages,
    versions, runs and ratings; the next message starts a fresh chat. The agents of the live
    generation get a new mind (their Context archived and emptied, notes included); Memory is untouched.

    Live runs end `error/cleared`, their drafts kept as stopped answers in the archived chat. A chat
    with no messages is not archived (the list never shows empty chats); the agents' minds are
    cleared all the same. Lock order as in every chat write: the thread, its runs, the conversations.
    """
    thread = ChatThread.objects.select_for_update().filter(workflow=workflow).first()
    ended: list[str] = []
    if thread is not None:
        for run_id in ChatRun.objects.filter(thread=thread, state__in=LIVE_STATES).values_list(
            "run_id", flat=True
        ):
            run = ChatRun.objects.get(run_id=run_id)
            if run_finish(
                run_id=run_id,
                claimant=None,
                outcome=ChatRun.State.ERROR,
                text=run.draft_text,
                seq=run.last_seq,
                error_code=errors.CLEARED,
                error_message="A new chat was started.",
            ):
                transaction.on_commit(partial(_publish_stop, run_id), robust=True)
                ended.append(run_id)
    archived = 0
    generation = live_generation(workflow=workflow)
    if generation:
        agents = sorted(
            AgentConversation.objects.filter(workflow_id=workflow.pk, generation=generation).values_list(
                "agent_node_id", flat=True
            )
        )
        for agent in agents:
            result = conversations.conversation_clear(
                key=ConversationKey(workflow_id=workflow.pk, generation=generation, agent_node_id=agent)
            )
            archived += int(result.cleared)
    archived_chat: str | None = None
    if thread is not None and ChatMessage.objects.filter(thread=thread).exists():
        # The branch snapshots served moves between versions; an archived chat makes none.
        BranchSnapshot.objects.filter(thread_key=thread.snapshot_key).delete()
        ChatThread.objects.filter(pk=thread.pk).update(workflow=None, archived_at=timezone.now())
        archived_chat = thread.uid
        _publish_chats_changed(workflow.pk)
    publish_on_commit(
        chat_group(workflow.pk), "thread.updated", {"workflow_id": workflow.pk, "revision": 0, "role": None}
    )
    return {
        "cleared": archived_chat is not None or archived > 0,
        "archived_chat_id": archived_chat,
        "runs_ended": ended,
        "conversations_archived": archived,
    }


def _check_title(title: Any) -> str:
    if not isinstance(title, str):
        raise invalid("title must be text.", {"title": ["Not a valid string."]})
    title = " ".join(title.split())
    if len(title) > TITLE_MAX_CHARS:
        raise invalid(
            f"A title may hold at most {TITLE_MAX_CHARS} characters.",
            {"title": [f"Ensure this field has no more than {TITLE_MAX_CHARS} characters."]},
        )
    return title


@transaction.atomic
def chat_rename(*, workflow: Workflow, chat_id: str, title: Any) -> ChatThread:
    """Give a chat of the workflow (current or archived) a title; a blank title goes back to the one
    taken from its first message. Whitespace runs fold to one space."""
    title = _check_title(title)
    thread = chat_of(workflow=workflow, chat_id=chat_id, for_update=True)
    ChatThread.objects.filter(pk=thread.pk).update(title=title)
    thread.title = title
    _publish_chats_changed(workflow.pk)
    return thread


@transaction.atomic
def chat_purge(*, workflow: Workflow, chat_id: str, confirm: Any) -> dict[str, Any]:
    """Delete an archived chat for good: its messages, runs, notes and ratings. Only with
    `confirm=True`; the current chat is refused (`chat_not_archived`): start a new chat first."""
    if confirm is not True:
        raise invalid("Send confirm: true to delete this chat for good.", {"confirm": ["Must be true."]})
    thread = chat_of(workflow=workflow, chat_id=chat_id, for_update=True)
    if thread.archived_at is None:
        raise _err(
            errors.CHAT_NOT_ARCHIVED,
            "The current chat cannot be deleted; start a new chat first, then delete the archived one.",
            {"chat_id": thread.uid},
        )
    BranchSnapshot.objects.filter(thread_key=thread.snapshot_key).delete()
    _, deleted = thread.delete()
    _publish_chats_changed(workflow.pk)
    return {
        "purged": True,
        "chat_id": chat_id,
        "messages_deleted": deleted.get(ChatMessage._meta.label, 0),
    }
