"""PostgreSQL: `memory_word`, every word (lower-cased, as written) some item holds, with a trigram
index, so the typo pass looks for near words in a small table rather than in every item's text.

Kept by the same row triggers as `memory_stem` (new words only, no unique constraint, so concurrent
writers never wait on each other); `purge_expired_memory` prunes the words whose stem no item holds
any more, and `rebuild_memory_index` adds back whatever is missing. SQLite keeps its trigram table.
"""

from django.db import migrations

from memory.migration_ops import VendorRunSQL, pg_item_words

_NOTE_STEMS = """
CREATE OR REPLACE FUNCTION memory_stem_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_stem (stem)
    SELECT s COLLATE "C" FROM unnest(tsvector_to_array(NEW.search)) AS s
    WHERE NOT EXISTS (SELECT 1 FROM memory_stem m WHERE m.stem = s COLLATE "C");
    RETURN NULL;
END
$$
"""

# The new stems and words of a written row; an update fires it only when `search` changed.
_NOTE_STEMS_AND_WORDS = f"""
CREATE OR REPLACE FUNCTION memory_stem_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_stem (stem)
    SELECT s COLLATE "C" FROM unnest(tsvector_to_array(NEW.search)) AS s
    WHERE NOT EXISTS (SELECT 1 FROM memory_stem m WHERE m.stem = s COLLATE "C");
    INSERT INTO memory_word (word)
    SELECT w COLLATE "C" FROM unnest({pg_item_words("NEW")}) AS w
    WHERE NOT EXISTS (SELECT 1 FROM memory_word m WHERE m.word = w COLLATE "C");
    RETURN NULL;
END
$$
"""

PG_FORWARD = [
    'CREATE TABLE memory_word (word text COLLATE "C" NOT NULL)',
    "CREATE INDEX memory_word_word ON memory_word (word)",
    "CREATE INDEX memory_word_trigram ON memory_word USING gin (word gin_trgm_ops)",
    f"INSERT INTO memory_word (word) SELECT DISTINCT unnest({pg_item_words('i')}) FROM memory_memoryitem i",
    _NOTE_STEMS_AND_WORDS,
]
PG_REVERSE = [_NOTE_STEMS, "DROP TABLE IF EXISTS memory_word"]


class Migration(migrations.Migration):
    dependencies = [("memory", "0006_memory_stems")]

    operations = [VendorRunSQL("postgresql", PG_FORWARD, PG_REVERSE)]
