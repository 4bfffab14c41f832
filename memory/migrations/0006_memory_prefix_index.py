"""Type-ahead and compound prefixes are exact keys of their own index on PostgreSQL.

A prefix query on the `(namespace, search)` index reads the postings of every item of the namespace
before it can skip any, so its cost grows with the namespace. The stored column `prefixes` holds every
prefix of every stem of the item (three to twelve letters, `PREFIX_KEY_MAX`), and a GIN index over
`(namespace, prefixes)` finds a prefix the way it finds a word. A stored column rather than an
expression index: a plan that tests rows one by one reads the column instead of computing it. SQLite
keeps looking prefixes up among the indexed stems (`memory_item_terms`).
"""

from django.db import migrations

from memory.migration_ops import VendorRunSQL

# The words of title, category, tags and content, read as the `search` column reads them.
_STEMS = (
    "to_tsvector('memory_porter'::regconfig, regexp_replace("
    "coalesce(title, '') || ' ' || coalesce(category, '') || ' ' || replace(tag_index, chr(31), ' ') || ' ' "
    "|| content, '[[:punct:]]', ' ', 'g'))"
)

PG_FORWARD = [
    """
    CREATE FUNCTION memory_prefixes(stems tsvector) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
        SELECT array_to_tsvector(coalesce(array_agg(DISTINCT substr(stem, 1, size)), '{}'))
        FROM unnest(tsvector_to_array(stems)) AS stem, generate_series(3, least(length(stem), 12)) AS size
    $$
    """,
    f"ALTER TABLE memory_memoryitem ADD COLUMN prefixes tsvector GENERATED ALWAYS AS (memory_prefixes({_STEMS})) STORED",
    "CREATE INDEX memory_item_ns_prefix_gin ON memory_memoryitem USING gin (namespace, prefixes)",
]
PG_REVERSE = [
    "DROP INDEX IF EXISTS memory_item_ns_prefix_gin",
    "ALTER TABLE memory_memoryitem DROP COLUMN IF EXISTS prefixes",
    "DROP FUNCTION IF EXISTS memory_prefixes(tsvector)",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0005_memory_recall_scoped")]

    operations = [VendorRunSQL("postgresql", PG_FORWARD, PG_REVERSE)]
