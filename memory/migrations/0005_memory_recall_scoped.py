"""Recall finds candidates within one namespace and looks prefixes up among the indexed stems.

PostgreSQL: the full-text GIN index covers `(namespace, search)` (through `btree_gin`), so a word's
matches are intersected with the namespace inside the index instead of being fetched from every
namespace and filtered row by row. SQLite: an `fts5vocab` table over the FTS5 index lists every
indexed stem with its item and column, where a prefix is looked up without being stemmed again.
"""

from django.db import migrations

from memory.migration_ops import VendorRunSQL

PG_FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
    "CREATE INDEX memory_item_ns_search_gin ON memory_memoryitem USING gin (namespace, search)",
    "DROP INDEX IF EXISTS memory_item_search_gin",
]
PG_REVERSE = [
    "CREATE INDEX memory_item_search_gin ON memory_memoryitem USING gin (search)",
    "DROP INDEX IF EXISTS memory_item_ns_search_gin",
]

SQLITE_FORWARD = ["CREATE VIRTUAL TABLE memory_item_terms USING fts5vocab(memory_item_fts, instance)"]
SQLITE_REVERSE = ["DROP TABLE IF EXISTS memory_item_terms"]


class Migration(migrations.Migration):
    dependencies = [("memory", "0004_memory_recall")]

    operations = [
        VendorRunSQL("postgresql", PG_FORWARD, PG_REVERSE),
        VendorRunSQL("sqlite", SQLITE_FORWARD, SQLITE_REVERSE),
    ]
