"""Plain value types the conversation services take and return (JSON-safe, no model instances)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opencompany.core.errors import invalid


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """One conversation: `(workflow_id, generation, agent_node_id)`; generation ≥ 1."""

    workflow_id: str
    generation: int
    agent_node_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.workflow_id, str) or not self.workflow_id or len(self.workflow_id) > 40:
            raise invalid("workflow_id must be a non-empty string of at most 40 characters.")
        if isinstance(self.generation, bool) or not isinstance(self.generation, int) or self.generation < 1:
            raise invalid("generation must be an integer ≥ 1.")
        if not isinstance(self.agent_node_id, str) or not self.agent_node_id or len(self.agent_node_id) > 255:
            raise invalid("agent_node_id must be a non-empty string of at most 255 characters.")

    def filter_kwargs(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "generation": self.generation,
            "agent_node_id": self.agent_node_id,
        }


@dataclass(frozen=True, slots=True)
class ConversationCursor:
    """A recorded prefix: its length and chained digest, plus the notes and context pressure at that
    moment.

    `notes is None` means the cursor does not speak for notes (a rewind then leaves them alone); the
    same for `pressure`.
    """

    generation: int
    length: int
    digest: str
    notes: list[dict[str, Any]] | None = None
    pressure: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"generation": self.generation, "length": self.length, "digest": self.digest}
        if self.notes is not None:
            out["notes"] = [dict(n) for n in self.notes]
        if self.pressure is not None:
            out["pressure"] = dict(self.pressure)
        return out

    @classmethod
    def from_value(cls, value: ConversationCursor | Mapping[str, Any]) -> ConversationCursor:
        if isinstance(value, ConversationCursor):
            return value
        if not isinstance(value, Mapping):
            raise invalid("A cursor is an object {generation, length, digest, notes?}.")
        generation, length, digest = value.get("generation"), value.get("length"), value.get("digest")
        if isinstance(generation, bool) or not isinstance(generation, int):
            raise invalid("cursor.generation must be an integer.")
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise invalid("cursor.length must be an integer ≥ 0.")
        if not isinstance(digest, str):
            raise invalid("cursor.digest must be a string.")
        notes = value.get("notes")
        if notes is not None and not isinstance(notes, list):
            raise invalid("cursor.notes must be a list when present.")
        pressure = value.get("pressure")
        if pressure is not None and not isinstance(pressure, Mapping):
            raise invalid("cursor.pressure must be an object when present.")
        return cls(
            generation=generation,
            length=length,
            digest=digest,
            notes=notes,
            pressure=dict(pressure) if pressure is not None else None,
        )


@dataclass(frozen=True, slots=True)
class ConversationWrite:
    """What a write left behind. `applied` is False for a no-op (nothing written, no event)."""

    applied: bool
    length: int
    revision: int
    bytes: int
    digest: str
    notes_revision: int = 0
    rewritten_from: int | None = None


@dataclass(frozen=True, slots=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @classmethod
    def from_value(cls, value: TokenUsage | Mapping[str, Any] | None) -> TokenUsage | None:
        if value is None or isinstance(value, TokenUsage):
            return value
        counts = {}
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            raw = value.get(name, 0) or 0
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                raise invalid(f"usage.{name} must be an integer ≥ 0.")
            counts[name] = raw
        return cls(**counts)


@dataclass(frozen=True, slots=True)
class NotesState:
    entries: list[dict[str, Any]] = field(default_factory=list)
    notes_revision: int = 0
    entry_id: str | None = None
    revision: int = 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "notes": [dict(e) for e in self.entries],
            "notes_revision": self.notes_revision,
        }
        if self.entry_id is not None:
            out["id"] = self.entry_id
        return out


@dataclass(frozen=True, slots=True)
class ClearResult:
    cleared: bool
    archive_id: int | None
    length: int
    revision: int
