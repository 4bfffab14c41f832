"""Migration operations for the database-specific full-text projections."""

from __future__ import annotations

from typing import Any

from django.db import migrations


class VendorRunSQL(migrations.RunSQL):
    """`RunSQL` applied only on one database vendor (`postgresql`, `sqlite`); a no-op elsewhere."""

    def __init__(self, vendor: str, sql: Any, reverse_sql: Any, **kwargs: Any) -> None:
        self.vendor = vendor
        super().__init__(sql, reverse_sql, **kwargs)

    def deconstruct(self) -> tuple[str, Any, dict[str, Any]]:
        _name, args, kwargs = super().deconstruct()
        kwargs["vendor"] = self.vendor
        return (self.__class__.__qualname__, args, kwargs)

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == self.vendor:
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == self.vendor:
            super().database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"Raw SQL on {self.vendor} only"


# The item text the trigram projections cover: title, category, tags and content. PostgreSQL indexes
# this expression (queries repeat it so the planner uses the index); pg_trgm splits words itself.
PG_TRIGRAM_TEXT = (
    "(coalesce(i.title, '') || ' ' || coalesce(i.category, '') || ' ' || i.tag_index || ' ' || i.content)"
)


def pg_item_words(row: str) -> str:
    """SQL for the words of one item row (`NEW` in a trigger, a table alias elsewhere) as a text
    array: lower-cased as written, punctuation read as spaces, as `search` reads the text."""
    text = (
        f"coalesce({row}.title, '') || ' ' || coalesce({row}.category, '') || ' ' || "
        f"replace({row}.tag_index, chr(31), ' ') || ' ' || {row}.content"
    )
    return f"tsvector_to_array(to_tsvector('simple', regexp_replace({text}, '[[:punct:]]', ' ', 'g')))"


# SQLite's trigram tokenizer keeps every character, so punctuation becomes a space and the text is
# padded: then " word " trigrams exist for every word, as pg_trgm pads its words.
_TRIGRAM_PUNCTUATION = ".,;:!?()[]{}\"'/\\-_"
_CONTROL = {"\n": 10, "\r": 13, "\t": 9}


def sqlite_trigram_text(row: str) -> str:
    """SQL for the trigram projection of one item row (`new` in a trigger, a table alias elsewhere)."""
    text = (
        f"' ' || coalesce({row}.title, '') || ' ' || coalesce({row}.category, '') || ' ' || "
        f"replace({row}.tag_index, char(31), ' ') || ' ' || {row}.content || ' '"
    )
    for ch in _TRIGRAM_PUNCTUATION:
        text = f"replace({text}, '{ch.replace(chr(39), chr(39) * 2)}', ' ')"
    for code in _CONTROL.values():
        text = f"replace({text}, char({code}), ' ')"
    return text
