"""Reads for the owner chat: the message tree, the active path, versions, editable ids, history, and
the workflow's chats (current and archived)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce, Substr
from django.utils import timezone

from chat.models import (
    LIVE_STATES,
    TERMINAL_STATES,
    ChatFeedback,
    ChatMessage,
    ChatRun,
    ChatThread,
    ProviderProbe,
)
from conversations.models import CompactionAttempt, ConversationArchive
from graphs.models import Workflow
from graphs.selectors import live_deployment
from graphs.wiring import chat_agent
from opencompany.core import gate
from opencompany.core.errors import not_found
from opencompany.core.times import rfc3339, rfc3339_or_none
from opencompany.llm.providers import CompatCapabilities


@dataclass
class Tree:
    """All messages of one generation of a thread, indexed for path walks."""

    by_uid: dict[str, ChatMessage]
    children: dict[str, list[ChatMessage]]  # parent uid ("" = root) → children by id

    @classmethod
    def of(cls, messages: Iterable[ChatMessage]) -> Tree:
        by_uid: dict[str, ChatMessage] = {}
        children: dict[str, list[ChatMessage]] = {}
        for m in sorted(messages, key=lambda m: m.pk):
            by_uid[m.uid] = m
            children.setdefault(m.parent_uid, []).append(m)
        return cls(by_uid=by_uid, children=children)

    def path_to(self, leaf_uid: str) -> list[ChatMessage]:
        """Root → leaf, oldest first (cycle-safe). An unknown leaf gives the newest message's path."""
        leaf = self.by_uid.get(leaf_uid)
        if leaf is None and self.by_uid:
            leaf = max(self.by_uid.values(), key=lambda m: m.pk)
        path: list[ChatMessage] = []
        seen: set[str] = set()
        while leaf is not None and leaf.uid not in seen:
            seen.add(leaf.uid)
            path.append(leaf)
            leaf = self.by_uid.get(leaf.parent_uid) if leaf.parent_uid else None
        path.reverse()
        return path

    def siblings(self, message: ChatMessage) -> list[ChatMessage]:
        return [m for m in self.children.get(message.parent_uid, []) if m.role == message.role]

    def newest_leaf_under(self, uid: str) -> str:
        best = self.by_uid[uid]
        stack = [uid]
        while stack:
            current = stack.pop()
            for child in self.children.get(current, []):
                if child.pk > best.pk:
                    best = child
                stack.append(child.uid)
        return best.uid

    def subtree_path(self, top_uid: str, leaf_uid: str) -> list[ChatMessage]:
        """Messages from `top_uid` down to `leaf_uid` (inclusive), oldest first."""
        full = self.path_to(leaf_uid)
        uids = [m.uid for m in full]
        return full[uids.index(top_uid) :] if top_uid in uids else []


def owned_workflow(*, owner_id: int, workflow_id: str) -> Workflow:
    """The workflow `owner_id` owns, or `not_found` (404): the same answer for a missing and a foreign id."""
    gate.identifier(workflow_id, field="workflow_id")
    workflow = Workflow.objects.filter(owner_id=owner_id, pk=str(workflow_id)[:40]).first()
    if workflow is None:
        raise not_found("workflow")
    return workflow


def thread_of(*, workflow: Workflow) -> ChatThread | None:
    return ChatThread.objects.filter(workflow=workflow).first()


def live_generation(*, workflow: Workflow) -> int:
    deployment = live_deployment(workflow=workflow)
    return deployment.generation if deployment else 0


CLEARED_MARK = "context_cleared"
SUMMARIZED_MARK = "context_summarized"


def context_marks(
    *, workflow: Workflow, thread: ChatThread, generation: int, path: list[ChatMessage]
) -> list[dict[str, Any]]:
    """Where the answering agent's Context was cleared or compacted during this chat, from the stored
    rows (archives with reason `cleared`, applied compaction attempts), each placed after the last
    message of the active path written before it (`after_id` None: before the first). A New chat's
    clear archives the chat at the same moment, so a chat never shows the clear that began the next."""
    scope = {"workflow_id": workflow.pk, "generation": generation}
    found = [
        (at, agent, CLEARED_MARK)
        for at, agent in ConversationArchive.objects.filter(
            **scope, reason=ConversationArchive.Reason.CLEARED, archived_at__gte=thread.created_at
        ).values_list("archived_at", "agent_node_id")
    ]
    found += [
        (at, agent, SUMMARIZED_MARK)
        for at, agent in CompactionAttempt.objects.filter(
            **scope, outcome=CompactionAttempt.Outcome.APPLIED, created_at__gte=thread.created_at
        ).values_list("created_at", "agent_node_id")
    ]
    if not found:
        return []  # the usual case: no deployed graph to read
    deployment = live_deployment(workflow=workflow)
    answering = chat_agent(deployment.graph or {}) if deployment is not None else None
    marks = []
    for at, _, kind in sorted(row for row in found if row[1] == answering):
        before = [m for m in path if m.created_at <= at]
        marks.append({"kind": kind, "after_id": before[-1].uid if before else None, "at": rfc3339(at)})
    return marks


def tree_of(*, thread: ChatThread, generation: int) -> Tree:
    return Tree.of(ChatMessage.objects.filter(thread=thread, generation=generation))


def runs_of(*, thread: ChatThread, run_ids: Iterable[str]) -> dict[str, ChatRun]:
    ids = [r for r in set(run_ids) if r]
    return {r.run_id: r for r in ChatRun.objects.filter(thread=thread, run_id__in=ids)}


def live_runs(*, thread: ChatThread) -> list[ChatRun]:
    return list(ChatRun.objects.filter(thread=thread, state__in=LIVE_STATES))


def editable_uids(path: list[ChatMessage], runs: dict[str, ChatRun], generation: int) -> list[str]:
    """Owner text messages with a run in the live generation (Edit), and the last message when it is
    an answer whose run ended (Try again)."""
    if generation == 0:
        return []
    out = [
        m.uid
        for m in path
        if m.role == ChatMessage.Role.USER
        and m.kind == ChatMessage.Kind.TEXT
        and m.run_id
        and m.generation == generation
    ]
    if path:
        last = path[-1]
        run = runs.get(last.run_id)
        if last.role == ChatMessage.Role.ASSISTANT and run is not None and run.state in TERMINAL_STATES:
            out.append(last.uid)
        elif last.role == ChatMessage.Role.USER and run is not None and run.state in TERMINAL_STATES:
            out.append(last.uid)  # an unanswered question can be tried again
    return sorted(set(out), key=[m.uid for m in path].index)


def render_run(run: ChatRun) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "kind": run.kind,
        "state": run.state,
        "generation": run.generation,
        "user_message_id": run.user_message_uid,
        "reply_message_id": run.reply_message_uid,
        "parent_run_id": run.parent_run_id or None,
        "error": {"code": run.error_code, "message": run.error_message} if run.error_code else None,
        "created_at": rfc3339_or_none(run.created_at),
        "started_at": rfc3339_or_none(run.started_at),
        "finished_at": rfc3339_or_none(run.finished_at),
        "last_seq": run.last_seq,
    }


def render_run_snapshot(run: ChatRun) -> dict[str, Any]:
    """What `resume` answers with: the run plus its durable draft (text so far, steps, seq)."""
    return {**render_run(run), "seq": run.last_seq, "text": run.draft_text, "steps": list(run.draft_steps)}


def chat_history(*, workflow: Workflow, before: str | None = None, limit: int = 50) -> dict[str, Any]:
    """The active path of the live generation (newest `limit` entries before `before`, oldest first),
    each message's versions (siblings), the editable ids, the thread revision and the live runs."""
    generation = live_generation(workflow=workflow)
    thread = thread_of(workflow=workflow)
    if thread is None or generation == 0:
        return {
            "workflow_id": workflow.pk,
            "generation": generation,
            "revision": thread.revision if thread else 0,
            "path": [],
            "has_more": False,
            "editable": [],
            "active_runs": [],
            "marks": [],
        }
    tree = tree_of(thread=thread, generation=generation)
    path = tree.path_to(thread.active_leaf_uid)
    runs = runs_of(thread=thread, run_ids=[m.run_id for m in path])
    editable = editable_uids(path, runs, generation)
    end = len(path)
    if before:
        uids = [m.uid for m in path]
        end = uids.index(before) if before in uids else len(path)
    start = max(0, end - max(1, min(limit, 200)))
    page = path[start:end]
    feedback = dict(
        ChatFeedback.objects.filter(thread=thread, message_uid__in=[m.uid for m in page]).values_list(
            "message_uid", "value"
        )
    )
    return {
        "workflow_id": workflow.pk,
        "generation": generation,
        "revision": thread.revision,
        "path": [render_message(m, tree, runs, feedback, editable) for m in page],
        "has_more": start > 0,
        "editable": editable,
        "active_runs": [render_run(r) for r in live_runs(thread=thread)],
        "marks": [
            mark
            for mark in context_marks(workflow=workflow, thread=thread, generation=generation, path=path)
            if mark["after_id"] in {m.uid for m in page} or (mark["after_id"] is None and start == 0)
        ],
    }


def render_message(
    m: ChatMessage,
    tree: Tree,
    runs: dict[str, ChatRun],
    feedback: dict[str, str],
    editable: list[str],
) -> dict[str, Any]:
    siblings = tree.siblings(m)
    run = runs.get(m.run_id)
    return {
        "id": m.uid,
        "parent_id": m.parent_uid or None,
        "role": m.role,
        "kind": m.kind,
        "status": m.status,
        "text": m.text,
        "generation": m.generation,
        "run_id": m.run_id or None,
        "run_state": run.state if run else None,
        "error": {"code": m.error_code, "message": m.error_message} if m.error_code else None,
        "created_at": rfc3339(m.created_at),
        "client_message_id": m.client_message_id or None,
        "feedback": feedback.get(m.uid),
        "versions": {
            "index": [s.uid for s in siblings].index(m.uid) + 1,
            "count": len(siblings),
            "ids": [s.uid for s in siblings],
        },
        "editable": m.uid in editable,
    }


def message_rendered(*, message: ChatMessage) -> dict[str, Any]:
    """One message as the history renders it (versions, feedback, editable), for answers that return
    the message they admitted."""
    thread = message.thread
    tree = tree_of(thread=thread, generation=message.generation)
    path = tree.path_to(message.uid)
    runs = runs_of(thread=thread, run_ids=[m.run_id for m in path])
    live = live_generation(workflow=thread.home_workflow)
    editable = editable_uids(path, runs, live if live == message.generation else 0)
    feedback = dict(
        ChatFeedback.objects.filter(thread=thread, message_uid=message.uid).values_list(
            "message_uid", "value"
        )
    )
    return render_message(message, tree, runs, feedback, editable)


def provider_probe_fresh(*, base_url: str, model: str, max_age_s: float) -> CompatCapabilities | None:
    """The kept probe answer for `(base_url, model)` when younger than `max_age_s`, else None."""
    row = (
        ProviderProbe.objects.filter(
            base_url=base_url, model=model, probed_at__gte=timezone.now() - timedelta(seconds=max_age_s)
        )
        .only("capabilities")
        .first()
    )
    return CompatCapabilities.from_dict(row.capabilities) if row is not None else None


# --- the workflow's chats (current and archived) ------------------------------------------------------

TITLE_MAX_CHARS = 200
DERIVED_TITLE_CHARS = 80
UNTITLED = "New chat"


# Markdown a title leaves out: block markers at the start of the line (heading, quote, list, task box,
# fence) and emphasis or code marks.
_BLOCK_MARKERS = re.compile(r"^(?:#{1,6}\s+|>\s*|[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,9}[.)]\s+|`{3,}\S*)+")
_INLINE_MARKS = re.compile(r"\*\*|__|~~|`")


def derived_title(text: str | None) -> str:
    """A chat's title taken from its first message: the words of its first non-blank line without
    Markdown marks, cut short."""
    lines = (
        _INLINE_MARKS.sub("", _BLOCK_MARKERS.sub("", line.strip())) for line in (text or "").splitlines()
    )
    flat = " ".join(next((line for line in lines if line.strip()), "").split())
    if not flat:
        return UNTITLED
    return flat if len(flat) <= DERIVED_TITLE_CHARS else flat[: DERIVED_TITLE_CHARS - 1].rstrip() + "…"


def chats_of(*, workflow: Workflow) -> QuerySet[ChatThread]:
    """The workflow's chats, current and archived, each with its message count (every version counts)
    and the start of its first owner message (for the title)."""
    first_text = (
        ChatMessage.objects.filter(thread=OuterRef("pk"), role=ChatMessage.Role.USER)
        .order_by("id")
        .annotate(start=Substr("text", 1, 400))
        .values("start")[:1]
    )
    count = (
        ChatMessage.objects.filter(thread=OuterRef("pk"))
        .order_by()
        .values("thread")
        .annotate(n=Count("id"))
        .values("n")
    )
    return ChatThread.objects.filter(home_workflow=workflow).annotate(
        first_text=Subquery(first_text), message_count=Coalesce(Subquery(count), 0)
    )


CHAT_ID_MAX = 40  # ChatThread.uid's length


def chat_of(*, workflow: Workflow, chat_id: Any, for_update: bool = False) -> ChatThread:
    """One chat of the workflow, current or archived; `not_found` for an id of another workflow.
    `for_update` locks it (call inside a transaction)."""
    if not isinstance(chat_id, str) or len(chat_id) > CHAT_ID_MAX:
        raise not_found("chat")
    queryset = chats_of(workflow=workflow) if not for_update else ChatThread.objects.select_for_update()
    thread = queryset.filter(home_workflow=workflow, uid=chat_id).first()
    if thread is None:
        raise not_found("chat")
    return thread


def render_chat(thread: ChatThread) -> dict[str, Any]:
    """A chat as the list shows it (`thread` from `chats_of`, or any thread: counts are then read)."""
    first_text = getattr(thread, "first_text", None)
    count = getattr(thread, "message_count", None)
    if count is None:
        count = ChatMessage.objects.filter(thread=thread).count()
        first = (
            ChatMessage.objects.filter(thread=thread, role=ChatMessage.Role.USER)
            .order_by("id")
            .values_list("text", flat=True)
            .first()
        )
        first_text = first[:400] if first else None
    return {
        "id": thread.uid,
        "title": thread.title or derived_title(first_text),
        "titled": bool(thread.title),
        "current": thread.archived_at is None,
        "message_count": count,
        "created_at": rfc3339(thread.created_at),
        "updated_at": rfc3339(thread.updated_at),
        "archived_at": rfc3339_or_none(thread.archived_at),
    }


def chat_transcript(*, thread: ChatThread) -> dict[str, Any]:
    """A chat read-only: for each generation it spans (oldest first), the path to its shown leaf (the
    newest message for a generation the leaf is not in), with each message's versions and rating."""
    messages = list(ChatMessage.objects.filter(thread=thread))
    generations = sorted({m.generation for m in messages})
    path: list[ChatMessage] = []
    trees: dict[int, Tree] = {}
    for generation in generations:
        tree = Tree.of(m for m in messages if m.generation == generation)
        trees[generation] = tree
        path.extend(tree.path_to(thread.active_leaf_uid))
    runs = runs_of(thread=thread, run_ids=[m.run_id for m in path])
    feedback = dict(
        ChatFeedback.objects.filter(thread=thread, message_uid__in=[m.uid for m in path]).values_list(
            "message_uid", "value"
        )
    )
    return {
        "chat": render_chat(thread),
        "path": [render_message(m, trees[m.generation], runs, feedback, []) for m in path],
    }
