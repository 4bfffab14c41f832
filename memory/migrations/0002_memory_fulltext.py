"""Full-text projections that the ORM does not model: PostgreSQL's stored generated tsvector with a
GIN index, SQLite's FTS5 table kept by triggers in the writing transaction."""

from django.db import migrations

from memory.migration_ops import VendorRunSQL

# Hyphens become spaces before parsing: PostgreSQL's parser would otherwise add compound lexemes
# ("coffee-shops" → coffee-shops, coffe, shop) that SQLite's unicode61 tokenizer never produces.
PG_FORWARD = [
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
]
PG_REVERSE = [
    "DROP INDEX IF EXISTS memory_item_search_gin",
    "ALTER TABLE memory_memoryitem DROP COLUMN IF EXISTS search",
]

_SQLITE_ROW = (
    "new.id, coalesce(new.title, ''), replace(new.tag_index, char(31), ' '), "
    "coalesce(new.category, ''), new.content"
)
SQLITE_FORWARD = [
    "CREATE VIRTUAL TABLE memory_item_fts USING fts5("
    "title, tags, category, content, tokenize = 'porter unicode61 remove_diacritics 0')",
    "CREATE TRIGGER memory_item_fts_insert AFTER INSERT ON memory_memoryitem BEGIN "
    f"INSERT INTO memory_item_fts(rowid, title, tags, category, content) VALUES ({_SQLITE_ROW}); END",
    "CREATE TRIGGER memory_item_fts_delete AFTER DELETE ON memory_memoryitem BEGIN "
    "DELETE FROM memory_item_fts WHERE rowid = old.id; END",
    "CREATE TRIGGER memory_item_fts_update AFTER UPDATE OF title, tag_index, category, content "
    "ON memory_memoryitem BEGIN "
    "DELETE FROM memory_item_fts WHERE rowid = old.id; "
    f"INSERT INTO memory_item_fts(rowid, title, tags, category, content) VALUES ({_SQLITE_ROW}); END",
]
SQLITE_REVERSE = [
    "DROP TRIGGER IF EXISTS memory_item_fts_update",
    "DROP TRIGGER IF EXISTS memory_item_fts_delete",
    "DROP TRIGGER IF EXISTS memory_item_fts_insert",
    "DROP TABLE IF EXISTS memory_item_fts",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_memory_initial")]

    operations = [
        VendorRunSQL("postgresql", PG_FORWARD, PG_REVERSE),
        VendorRunSQL("sqlite", SQLITE_FORWARD, SQLITE_REVERSE),
    ]
