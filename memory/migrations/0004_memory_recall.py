"""Recall's projections: Porter stems on both databases, trigram indexes for typo tolerance, and the
index behind "most recently updated" answers.

PostgreSQL: the `memory_porter` text search configuration (Snowball's Porter stemmer, the one
SQLite's FTS5 uses, keeping every word as SQLite does), the `search` column regenerated with it
(punctuation read as spaces, as SQLite's tokenizer reads it), and a `pg_trgm` GIN index over (namespace, item text)
through `btree_gin`. SQLite: an FTS5 table with the trigram tokenizer, kept by triggers.
"""

from django.db import migrations, models

from memory.migration_ops import PG_TRIGRAM_TEXT, VendorRunSQL, sqlite_trigram_text


def _pg_search(config):
    def part(expr, weight):
        return (
            f"setweight(to_tsvector('{config}'::regconfig, regexp_replace({expr}, '[[:punct:]]', ' ', 'g')), "
            f"'{weight}')"
        )

    return (
        "ALTER TABLE memory_memoryitem ADD COLUMN search tsvector GENERATED ALWAYS AS ("
        + part("coalesce(title, '')", "A")
        + " || "
        + part("coalesce(category, '') || ' ' || replace(tag_index, chr(31), ' ')", "B")
        + " || "
        + part("content", "C")
        + ") STORED"
    )


PG_FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
    # No stop-word list: SQLite indexes every word, so both indexes hold the same words.
    "CREATE TEXT SEARCH DICTIONARY memory_porter_stem (TEMPLATE = snowball, Language = porter)",
    "CREATE TEXT SEARCH CONFIGURATION memory_porter (COPY = english)",
    "ALTER TEXT SEARCH CONFIGURATION memory_porter ALTER MAPPING REPLACE english_stem WITH memory_porter_stem",
    "DROP INDEX IF EXISTS memory_item_search_gin",
    "ALTER TABLE memory_memoryitem DROP COLUMN IF EXISTS search",
    _pg_search("memory_porter"),
    "CREATE INDEX memory_item_search_gin ON memory_memoryitem USING gin (search)",
    "CREATE INDEX memory_item_trigram_gin ON memory_memoryitem USING gin "
    f"(namespace, {PG_TRIGRAM_TEXT.replace('i.', '')} gin_trgm_ops)",
]
# The state 0002 left: the english configuration, hyphens read as spaces.
PG_REVERSE = [
    "DROP INDEX IF EXISTS memory_item_trigram_gin",
    "DROP INDEX IF EXISTS memory_item_search_gin",
    "ALTER TABLE memory_memoryitem DROP COLUMN IF EXISTS search",
    """
    ALTER TABLE memory_memoryitem ADD COLUMN search tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, translate(coalesce(title, ''), '-', ' ')), 'A')
        || setweight(
            to_tsvector(
                'english'::regconfig,
                translate(coalesce(category, '') || ' ' || replace(tag_index, chr(31), ' '), '-', ' ')
            ),
            'B'
        )
        || setweight(to_tsvector('english'::regconfig, translate(content, '-', ' ')), 'C')
    ) STORED
    """,
    "CREATE INDEX memory_item_search_gin ON memory_memoryitem USING gin (search)",
    "DROP TEXT SEARCH CONFIGURATION IF EXISTS memory_porter",
    "DROP TEXT SEARCH DICTIONARY IF EXISTS memory_porter_stem",
]

SQLITE_FORWARD = [
    "CREATE VIRTUAL TABLE memory_item_trigram USING fts5(text, tokenize = 'trigram')",
    "CREATE TRIGGER memory_item_trigram_insert AFTER INSERT ON memory_memoryitem BEGIN "
    f"INSERT INTO memory_item_trigram(rowid, text) VALUES (new.id, {sqlite_trigram_text('new')}); END",
    "CREATE TRIGGER memory_item_trigram_delete AFTER DELETE ON memory_memoryitem BEGIN "
    "DELETE FROM memory_item_trigram WHERE rowid = old.id; END",
    "CREATE TRIGGER memory_item_trigram_update AFTER UPDATE OF title, tag_index, category, content "
    "ON memory_memoryitem BEGIN "
    "DELETE FROM memory_item_trigram WHERE rowid = old.id; "
    f"INSERT INTO memory_item_trigram(rowid, text) VALUES (new.id, {sqlite_trigram_text('new')}); END",
    f"INSERT INTO memory_item_trigram(rowid, text) SELECT i.id, {sqlite_trigram_text('i')} FROM memory_memoryitem i",
]
SQLITE_REVERSE = [
    "DROP TRIGGER IF EXISTS memory_item_trigram_update",
    "DROP TRIGGER IF EXISTS memory_item_trigram_delete",
    "DROP TRIGGER IF EXISTS memory_item_trigram_insert",
    "DROP TABLE IF EXISTS memory_item_trigram",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_revision_content_erasable")]

    operations = [
        migrations.AddIndex(
            model_name="memoryitem",
            index=models.Index(fields=["namespace", "-updated_at", "-id"], name="memory_item_ns_updated"),
        ),
        VendorRunSQL("postgresql", PG_FORWARD, PG_REVERSE),
        VendorRunSQL("sqlite", SQLITE_FORWARD, SQLITE_REVERSE),
    ]
