"""Working notes — bounds, optimistic revision, rendering, lifecycle — and the notes tool."""

from __future__ import annotations

import pytest

from conversations.models import AgentConversation
from conversations.services import (
    conversation_append,
    conversation_clear,
    notes_add,
    notes_read,
    notes_remove,
    notes_replace,
    render_notes_block,
)
from conversations.tools import NOTES_TOOL
from opencompany.core.errors import ApplicationError
from opencompany.llm.tools import ToolContext, get_tool, validate_arguments
from tests.conversations.conftest import turns

pytestmark = pytest.mark.django_db


def test_add_replace_remove_keep_ids_and_bump_both_revisions(key):
    notes_add(key=key, text="one")
    notes_add(key=key, text="two")
    notes_replace(key=key, entry_id="n1", text="one, condensed")
    state = notes_remove(key=key, entry_id="n2")

    assert state.entries == [{"id": "n1", "text": "one, condensed"}]
    assert state.notes_revision == 4
    assert AgentConversation.objects.get().revision == 4


def test_ids_are_never_reused_after_a_remove(key):
    notes_add(key=key, text="one")
    notes_remove(key=key, entry_id="n1")

    assert notes_add(key=key, text="two").entry_id == "n3"


@pytest.mark.parametrize(
    ("setting", "value", "writes"),
    [
        ("OPENCOMPANY_NOTES_MAX_ENTRIES", 2, ["a", "b", "c"]),
        ("OPENCOMPANY_NOTES_MAX_CHARS", 10, ["12345", "123456"]),
        ("OPENCOMPANY_NOTES_ENTRY_MAX_CHARS", 5, ["123456"]),
    ],
)
def test_add_past_a_bound_is_refused_with_notes_full(key, settings, setting, value, writes):
    setattr(settings, setting, value)
    for text in writes[:-1]:
        notes_add(key=key, text=text)
    before = notes_read(key=key)

    with pytest.raises(ApplicationError) as exc:
        notes_add(key=key, text=writes[-1])

    assert exc.value.code == "notes_full"
    assert "condense" in exc.value.message
    assert notes_read(key=key) == before


def test_replace_past_a_bound_is_refused_with_notes_full(key, settings):
    settings.OPENCOMPANY_NOTES_MAX_CHARS = 10
    notes_add(key=key, text="12345")
    notes_add(key=key, text="abc")

    with pytest.raises(ApplicationError) as exc:
        notes_replace(key=key, entry_id="n2", text="abcdefgh")

    assert exc.value.code == "notes_full"
    assert exc.value.extra["chars"] == 13
    assert [e["text"] for e in notes_read(key=key).entries] == ["12345", "abc"]


def test_default_bounds_are_4000_chars_50_entries_500_each(key):
    for _ in range(8):
        notes_add(key=key, text="x" * 500)

    with pytest.raises(ApplicationError) as exc:
        notes_add(key=key, text="y")
    assert exc.value.extra["max_chars"] == 4000
    assert exc.value.extra["max_entries"] == 50
    assert exc.value.extra["entry_max_chars"] == 500


def test_stale_notes_revision_is_refused_and_writes_nothing(key, events, django_capture_on_commit_callbacks):
    notes_add(key=key, text="one")
    events.subscribe(f"owner.{AgentConversation.objects.get().owner_id}")

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ApplicationError) as exc:
        notes_add(key=key, text="two", expected_notes_revision=0)

    assert exc.value.code == "notes_conflict"
    assert exc.value.extra["notes_revision"] == 1
    assert notes_read(key=key).entries == [{"id": "n1", "text": "one"}]
    assert events.drain() == []


def test_current_notes_revision_is_accepted(key):
    notes_add(key=key, text="one")

    state = notes_replace(key=key, entry_id="n1", text="uno", expected_notes_revision=1)

    assert state.notes_revision == 2


def test_unknown_entry_is_note_not_found(key):
    with pytest.raises(ApplicationError) as exc:
        notes_remove(key=key, entry_id="n9")

    assert exc.value.code == "note_not_found"


def test_render_notes_block_is_byte_stable():
    notes = [{"id": "n1", "text": "we decided X"}, {"id": "n2", "text": "two\nlines"}]

    first = render_notes_block(notes)

    assert first == render_notes_block([dict(n) for n in notes])
    assert first == (
        "Working notes (written by you with the `notes` tool; they stay with this conversation and edits "
        "show on your next run):\n- [n1] we decided X\n- [n2] two\n  lines"
    )
    assert render_notes_block([]) == ""


def test_notes_are_wiped_after_clear(key):
    conversation_append(key=key, messages=turns(1), expected_length=0)
    notes_add(key=key, text="finding")

    conversation_clear(key=key)

    assert notes_read(key=key).entries == []


def test_notes_writes_publish_context_updated(key, events, django_capture_on_commit_callbacks):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    events.subscribe(f"owner.{AgentConversation.objects.get().owner_id}")

    with django_capture_on_commit_callbacks(execute=True):
        notes_add(key=key, text="private finding")

    published = events.drain()
    assert [e["data"]["revision"] for e in published] == [2]
    assert "private finding" not in repr(published)


def _context(key):
    return ToolContext(
        run_id="run_1",
        workflow_id=key.workflow_id,
        generation=key.generation,
        agent_node_id=key.agent_node_id,
    )


def test_notes_tool_is_registered_with_a_closed_schema():
    spec = get_tool("notes")

    assert spec is NOTES_TOOL
    assert spec.input_schema["additionalProperties"] is False
    assert validate_arguments(spec, {"operation": "add", "text": "x", "workflow_id": "wf_x"}) != []
    assert validate_arguments(spec, {"operation": "replace", "text": "x"}) != []
    assert validate_arguments(spec, {"operation": "read"}) == []


def test_notes_tool_writes_in_the_scope_of_the_server_context(key):
    result = NOTES_TOOL.execute(_context(key), {"operation": "add", "text": "the bug is in Y"})

    assert result == {"notes": [{"id": "n1", "text": "the bug is in Y"}], "notes_revision": 1, "id": "n1"}
    assert NOTES_TOOL.execute(_context(key), {"operation": "read"}) == {
        "notes": [{"id": "n1", "text": "the bug is in Y"}],
        "notes_revision": 1,
    }


def test_notes_tool_returns_notes_full_to_the_model(key, settings):
    settings.OPENCOMPANY_NOTES_MAX_ENTRIES = 1
    NOTES_TOOL.execute(_context(key), {"operation": "add", "text": "one"})

    result = NOTES_TOOL.execute(_context(key), {"operation": "add", "text": "two"})

    assert result["error"]["code"] == "notes_full"


def test_notes_tool_without_a_context_scope_is_an_error_result():
    result = NOTES_TOOL.execute(ToolContext(run_id="r"), {"operation": "read"})

    assert result["error"]["code"] == "notes_unavailable"
