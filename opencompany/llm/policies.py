"""Transcript policies: pure functions over lists of wire messages.

They never modify their input. Each returns the input list object itself when it has nothing to change,
so callers can cheaply tell (``result is messages``) whether a save is needed.

``conversations.policies`` re-exports these; they live here because the runtime may not import apps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from opencompany.core.json import canonical_json

from .wire import Message, make_tool_result, make_user, text_of, tool_calls_of, tool_result_of

INTERRUPTED_RESULT_TEXT = "Tool call did not finish; its result is unknown."
CLEARED_RESULT_TEXT = (
    "[Earlier tool result cleared to keep the conversation small. Call the tool again if you need it.]"
)
SUMMARY_PREFIX = "[Summary of the earlier conversation]"
SUMMARIZE_INSTRUCTION = (
    "You compress conversations. Write a concise summary of the conversation you are given: the owner's "
    "requests, the facts and decisions established, tool outcomes that still matter, and any open "
    "questions. Write plain prose or short bullet points; do not address the owner; do not invent facts."
)

DEFAULT_TOOL_RESULT_MAX_CHARS = 100_000
DEFAULT_TRANSCRIPT_BUDGET_BYTES = 393_216


def _size(value: Any) -> int:
    return len(canonical_json(value).encode("utf-8"))


def latest_turn_start(messages: Sequence[Message]) -> int:
    """Index of the last user message (the latest turn runs from there to the end); 0 when none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return 0


# --- close unanswered tool calls -----------------------------------------------------------------------


def close_unanswered_tool_calls(messages: list[Message]) -> list[Message]:
    """Answer each call of the LAST assistant turn that has no result with an ``interrupted`` result.

    The closing results go after the results already directly following that turn. Earlier turns are
    assumed consistent. When nothing is open the input list object itself is returned.
    """
    last = -1
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            last = i
            break
    if last < 0:
        return messages
    answered: set[str] = set()
    for m in messages[last + 1 :]:
        if m.get("role") == "tool":
            block = tool_result_of(m)
            if block is not None:
                answered.add(block.get("tool_call_id", ""))
    open_calls = [c for c in tool_calls_of(messages[last]) if c.get("id") and c["id"] not in answered]
    if not open_calls:
        return messages
    end = last + 1
    while end < len(messages) and messages[end].get("role") == "tool":
        end += 1
    closing = [
        make_tool_result(c["id"], c.get("name", ""), INTERRUPTED_RESULT_TEXT, "interrupted")
        for c in open_calls
    ]
    return [*messages[:end], *closing, *messages[end:]]


# --- caps ------------------------------------------------------------------------------------------------


def _truncation_note(shown: int, total: int) -> str:
    return (
        f"\n\n[Result truncated: showing the first {shown:,} of {total:,} characters. "
        "Call the tool again with narrower parameters to get the part you need.]"
    )


def cap_tool_results(
    messages: list[Message], max_chars: int = DEFAULT_TOOL_RESULT_MAX_CHARS
) -> list[Message]:
    """Cut every tool result longer than ``max_chars`` and append a note asking for a narrower call.

    ``0`` disables the cap. Cutting an already cut result again keeps the original total length (kept in
    the message's ``metadata.truncated``). Unchanged messages are shared, not copied.
    """
    if max_chars <= 0:
        return messages
    out: list[Message] | None = None
    for i, m in enumerate(messages):
        if m.get("role") != "tool":
            continue
        capped = _cap_message(m, max_chars)
        if capped is not m:
            if out is None:
                out = list(messages)
            out[i] = capped
    return messages if out is None else out


def _cap_message(m: Message, max_chars: int) -> Message:
    block = tool_result_of(m)
    if block is None:
        return m
    content = block.get("content", "")
    info = (m.get("metadata") or {}).get("truncated")
    if isinstance(info, dict) and isinstance(info.get("shown"), int) and isinstance(info.get("total"), int):
        body, total = content[: info["shown"]], info["total"]
        if content != body + _truncation_note(info["shown"], total):
            body, total = content, len(content)
    else:
        body, total = content, len(content)
    if len(body) <= max_chars:
        return m
    new_block = {**block, "content": body[:max_chars] + _truncation_note(max_chars, total)}
    metadata = {**(m.get("metadata") or {}), "truncated": {"shown": max_chars, "total": total}}
    return {
        **m,
        "content": [new_block if b is block else b for b in m["content"]],
        "metadata": metadata,
    }


def clear_old_results(
    messages: list[Message], budget_bytes: int = DEFAULT_TRANSCRIPT_BUDGET_BYTES, *, size: int | None = None
) -> list[Message]:
    """Past ``budget_bytes`` (canonical JSON size), turn older tool results into placeholders.

    Oldest first, until the transcript is at or under half the budget (or nothing older is left).
    Placeholders keep ``tool_call_id``, ``name`` and ``status``. The latest turn — from the last user
    message on — is never cleared. ``budget_bytes <= 0`` disables the policy. ``size`` is the
    transcript's canonical JSON size when the caller already knows it.
    """
    if budget_bytes <= 0:
        return messages
    if size is None:
        size = _size(messages)
    if size <= budget_bytes:
        return messages
    target = budget_bytes // 2
    limit = latest_turn_start(messages)
    out = list(messages)
    changed = False
    for i in range(limit):
        if size <= target:
            break
        m = out[i]
        if m.get("role") != "tool" or (m.get("metadata") or {}).get("cleared"):
            continue
        block = tool_result_of(m)
        if block is None:
            continue
        placeholder = make_tool_result(
            block.get("tool_call_id", ""),
            block.get("name", ""),
            CLEARED_RESULT_TEXT,
            block.get("status", "ok"),
            metadata={"cleared": True},
        )
        size -= _size(m) - _size(placeholder)
        out[i] = placeholder
        changed = True
    return out if changed else messages


# --- compaction ------------------------------------------------------------------------------------------


class Summarizer(Protocol):
    """Turns the head of a conversation into summary text. Raises on failure."""

    async def summarize(self, messages: list[Message]) -> str: ...


@dataclass(frozen=True)
class CompactionPlan:
    """Summarize ``messages[:boundary]`` (``head``); keep ``messages[boundary:]`` verbatim."""

    boundary: int
    head: list[Message]
    tail: list[Message]


class CompactionRefused(ValueError):
    """The plan does not fit the transcript (it changed since the plan was made)."""


def _safe_boundary(messages: Sequence[Message], boundary: int) -> int:
    """Move ``boundary`` back until no tool call in the head has its result in the tail."""
    while boundary > 0:
        tail_results = set()
        for m in messages[boundary:]:
            if m.get("role") == "tool":
                block = tool_result_of(m)
                if block is not None:
                    tail_results.add(block.get("tool_call_id"))
        if not tail_results:
            return boundary
        split = -1
        for i in range(boundary):
            if any(c.get("id") in tail_results for c in tool_calls_of(messages[i])):
                split = i
                break
        if split < 0:
            return boundary
        boundary = split
    return boundary


def plan_compaction(messages: list[Message], *, keep_latest_turn: bool = True) -> CompactionPlan | None:
    """Choose what to summarize: the turns before the latest (or everything, without the exemption).

    Returns None when there is nothing to summarize. The boundary never separates an assistant tool
    call from its result.
    """
    boundary = latest_turn_start(messages) if keep_latest_turn else len(messages)
    boundary = _safe_boundary(messages, boundary)
    if boundary <= 0:
        return None
    return CompactionPlan(boundary=boundary, head=list(messages[:boundary]), tail=list(messages[boundary:]))


def summary_message(summary_text: str) -> Message:
    return make_user(f"{SUMMARY_PREFIX}\n{summary_text.strip()}", metadata={"summary": True})


def apply_compaction(
    messages: list[Message], plan: CompactionPlan, summary_text: str
) -> list[Message] | None:
    """``[one user message carrying the summary] + tail``; None when that would not shrink the transcript.

    Raises :class:`CompactionRefused` when ``messages`` no longer starts with the plan's head.
    """
    if len(messages) < plan.boundary or canonical_json(messages[: plan.boundary]) != canonical_json(
        plan.head
    ):
        raise CompactionRefused("the conversation changed since the compaction was planned")
    if not summary_text.strip():
        return None
    tail = messages[plan.boundary :]
    new = [summary_message(summary_text), *tail]
    if _size(new) >= _size(messages):
        return None
    return new


def render_for_summary(messages: Sequence[Message]) -> str:
    """A plain-text transcript of ``messages`` for a summarizer (provider-neutral, no tool schemas)."""
    lines: list[str] = []
    for m in messages:
        role = m.get("role")
        if role == "user":
            lines.append(f"Owner: {text_of(m)}")
        elif role == "assistant":
            text = text_of(m)
            if text:
                lines.append(f"Assistant: {text}")
            for call in tool_calls_of(m):
                args = call.get("arguments", call.get("raw_arguments"))
                lines.append(f"Assistant called tool {call.get('name')} with {canonical_json(args)}")
        elif role == "tool":
            block = tool_result_of(m) or {}
            lines.append(
                f"Tool {block.get('name')} result ({block.get('status')}): {block.get('content', '')}"
            )
    return "\n".join(lines)
