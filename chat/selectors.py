"""Reads for the owner chat: the message tree, the active path, versions, editable ids, history."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chat.models import LIVE_STATES, TERMINAL_STATES, ChatFeedback, ChatMessage, ChatRun, ChatThread
from graphs.models import Workflow
from graphs.selectors import live_deployment
from opencompany.core import gate
from opencompany.core.errors import not_found


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
        "created_at": run.created_at.isoformat() if run.created_at else None,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
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
        "created_at": m.created_at.isoformat(),
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
    live = live_generation(workflow=thread.workflow)
    editable = editable_uids(path, runs, live if live == message.generation else 0)
    feedback = dict(
        ChatFeedback.objects.filter(thread=thread, message_uid=message.uid).values_list(
            "message_uid", "value"
        )
    )
    return render_message(message, tree, runs, feedback, editable)
