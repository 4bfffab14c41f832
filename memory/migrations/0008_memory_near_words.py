"""PostgreSQL: `memory_near_words(typed, edits, typed_last)`, the words of `memory_word` a typo pass
may mean by `typed`, so the candidate statement can look them up itself when nothing in scope holds
the word as written.

The function carries its own word-similarity threshold (`SET` on the function), so no session has to
set it first; it must equal `memory.search.postgres.TRIGRAM_THRESHOLD` (a test holds them equal).
PL/pgSQL keeps the lookup's plan for the session.
"""

from django.db import migrations

from memory.migration_ops import VendorRunSQL

PG_FORWARD = [
    """
CREATE FUNCTION memory_near_words(typed text, edits integer, typed_last boolean) RETURNS text[]
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET pg_trgm.word_similarity_threshold = '0.3'
AS $$
BEGIN
    RETURN ARRAY(
        SELECT w.word FROM memory_word w
        WHERE typed <% w.word
          AND (length(w.word) BETWEEN length(typed) - edits AND length(typed) + edits
               OR (typed_last AND starts_with(w.word, typed)))
    );
END
$$
"""
]
PG_REVERSE = ["DROP FUNCTION IF EXISTS memory_near_words(text, integer, boolean)"]


class Migration(migrations.Migration):
    dependencies = [("memory", "0007_memory_words")]

    operations = [VendorRunSQL("postgresql", PG_FORWARD, PG_REVERSE)]
