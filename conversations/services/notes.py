"""Working notes: a small, agent-authored block of findings owned by the conversation key.

Bounded by `OPENCOMPANY_NOTES_MAX_CHARS` in total, `OPENCOMPANY_NOTES_MAX_ENTRIES` entries and
`OPENCOMPANY_NOTES_ENTRY_MAX_CHARS` per entry (read at call time). Every write checks the bounds, bumps
`notes_revision` and the conversation's `revision`, and publishes `context.updated` after commit.
A Clear, a new generation and a Reset wipe them (after archiving); compaction keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from conversations import errors
from conversations.models import AgentConversation
from conversations.selectors import notes_read
from conversations.services._common import _error, _lock_head, _lock_or_create_head, _publish
from conversations.types import ConversationKey, NotesState
from opencompany.core.errors import invalid

__all__ = ["notes_add", "notes_read", "notes_remove", "notes_replace", "render_notes_block"]

NOTES_BLOCK_HEADER = (
    "Working notes (written by you with the `notes` tool; they stay with this conversation "
    "and edits show on your next run):"
)


def _limits() -> dict[str, int]:
    return {
        "max_chars": int(settings.OPENCOMPANY_NOTES_MAX_CHARS),
        "max_entries": int(settings.OPENCOMPANY_NOTES_MAX_ENTRIES),
        "entry_max_chars": int(settings.OPENCOMPANY_NOTES_ENTRY_MAX_CHARS),
    }


def _clean_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise invalid("A note needs non-empty text.", {"text": ["This field may not be blank."]})
    if "\x00" in text:
        raise invalid("A note cannot contain NUL characters.", {"text": ["NUL characters are not allowed."]})
    return text.strip()


def _check_bounds(entries: list[dict[str, Any]]) -> None:
    limits = _limits()
    chars = sum(len(e["text"]) for e in entries)
    longest = max((len(e["text"]) for e in entries), default=0)
    if (
        len(entries) > limits["max_entries"]
        or chars > limits["max_chars"]
        or longest > limits["entry_max_chars"]
    ):
        raise _error(
            errors.NOTES_FULL,
            "Working notes are full: condense related entries with `replace` or `remove` ones you no longer "
            f"need (at most {limits['max_entries']} entries, {limits['entry_max_chars']} characters each, "
            f"{limits['max_chars']} characters in total).",
            {**limits, "entries": len(entries), "chars": chars, "longest_entry": longest},
        )


def _check_revision(head: AgentConversation | None, expected: int | None) -> None:
    current = head.notes_revision if head is not None else 0
    if expected is not None and expected != current:
        raise _error(
            errors.NOTES_CONFLICT,
            "The notes changed since they were read; read them again and retry.",
            {"notes_revision": current, "expected_notes_revision": expected},
        )


def _write(head: AgentConversation, entries: list[dict[str, Any]], entry_id: str | None) -> NotesState:
    _check_bounds(entries)
    AgentConversation.objects.filter(pk=head.pk).update(
        notes=entries,
        notes_revision=F("notes_revision") + 1,
        revision=F("revision") + 1,
        updated_at=timezone.now(),
    )
    revision = head.revision + 1
    _publish(head, length=head.length, revision=revision)
    return NotesState(
        entries=entries, notes_revision=head.notes_revision + 1, entry_id=entry_id, revision=revision
    )


def _find(head: AgentConversation | None, entry_id: Any) -> tuple[AgentConversation, int]:
    """The head and the index of entry `entry_id` in its notes; `note_not_found` when there is none."""
    if head is not None:
        for index, entry in enumerate(head.notes):
            if entry.get("id") == entry_id:
                return head, index
    raise _error(errors.NOTE_NOT_FOUND, f"No note with id {entry_id!r}.", {"id": str(entry_id)[:64]})


@transaction.atomic
def notes_add(*, key: ConversationKey, text: str, expected_notes_revision: int | None = None) -> NotesState:
    """Add one entry (id `n<k>`, unique for the conversation); `notes_full` past the bounds."""
    clean = _clean_text(text)
    head = _lock_or_create_head(key)
    _check_revision(head, expected_notes_revision)
    entry_id = f"n{head.notes_revision + 1}"
    return _write(head, [*head.notes, {"id": entry_id, "text": clean}], entry_id)


@transaction.atomic
def notes_replace(
    *, key: ConversationKey, entry_id: str, text: str, expected_notes_revision: int | None = None
) -> NotesState:
    """Replace the text of entry `entry_id` (keeps its id and place); `note_not_found`, `notes_full`."""
    clean = _clean_text(text)
    found = _lock_head(key, create=False)
    _check_revision(found, expected_notes_revision)
    head, index = _find(found, entry_id)
    entries = [dict(e) for e in head.notes]
    entries[index] = {"id": entries[index]["id"], "text": clean}
    return _write(head, entries, entries[index]["id"])


@transaction.atomic
def notes_remove(
    *, key: ConversationKey, entry_id: str, expected_notes_revision: int | None = None
) -> NotesState:
    """Remove entry `entry_id`; `note_not_found` when there is none."""
    found = _lock_head(key, create=False)
    _check_revision(found, expected_notes_revision)
    head, index = _find(found, entry_id)
    entries = [dict(e) for i, e in enumerate(head.notes) if i != index]
    return _write(head, entries, str(entry_id))


def render_notes_block(notes: NotesState | Sequence[Mapping[str, Any]] | None) -> str:
    """The text the runtime places after the system prompt: the same notes give the same bytes.

    No notes → `""` (no block). Continuation lines of a multi-line entry are indented, so an entry
    can never pass for another one.
    """
    entries = notes.entries if isinstance(notes, NotesState) else list(notes or [])
    if not entries:
        return ""
    lines = [NOTES_BLOCK_HEADER]
    for entry in entries:
        body = str(entry.get("text", "")).replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\n  ")
        lines.append(f"- [{entry.get('id', '')}] {body}")
    return "\n".join(lines)
