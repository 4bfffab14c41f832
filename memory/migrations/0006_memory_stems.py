"""PostgreSQL: `memory_stem`, every stem the items' `search` holds, so recall knows when a prefix
begins no stem beyond the query's own words and can skip the prefix scan.

Kept by row triggers in the writing transaction (new stems only, no unique constraint, so
concurrent writers never wait on each other); `purge_expired_memory` prunes the stems no item holds
any more, and `rebuild_memory_index` adds back whatever is missing. SQLite looks prefixes up in its `fts5vocab` table instead.
"""

from django.db import migrations

from memory.migration_ops import VendorRunSQL

# The new stems of a written row; an update fires it only when `search` changed.
_NOTE_STEMS = """
CREATE FUNCTION memory_stem_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_stem (stem)
    SELECT s COLLATE "C" FROM unnest(tsvector_to_array(NEW.search)) AS s
    WHERE NOT EXISTS (SELECT 1 FROM memory_stem m WHERE m.stem = s COLLATE "C");
    RETURN NULL;
END
$$
"""

PG_FORWARD = [
    'CREATE TABLE memory_stem (stem text COLLATE "C" NOT NULL)',
    "CREATE INDEX memory_stem_stem ON memory_stem (stem)",
    "INSERT INTO memory_stem (stem) SELECT DISTINCT unnest(tsvector_to_array(search)) FROM memory_memoryitem",
    _NOTE_STEMS,
    "CREATE TRIGGER memory_stem_insert AFTER INSERT ON memory_memoryitem "
    "FOR EACH ROW EXECUTE FUNCTION memory_stem_note()",
    "CREATE TRIGGER memory_stem_update AFTER UPDATE ON memory_memoryitem "
    "FOR EACH ROW WHEN (OLD.search IS DISTINCT FROM NEW.search) EXECUTE FUNCTION memory_stem_note()",
]
PG_REVERSE = [
    "DROP TRIGGER IF EXISTS memory_stem_update ON memory_memoryitem",
    "DROP TRIGGER IF EXISTS memory_stem_insert ON memory_memoryitem",
    "DROP FUNCTION IF EXISTS memory_stem_note()",
    "DROP TABLE IF EXISTS memory_stem",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0005_memory_recall_scoped")]

    operations = [VendorRunSQL("postgresql", PG_FORWARD, PG_REVERSE)]
