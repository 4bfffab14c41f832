"""PostgreSQL: the full-text GIN index stays fast right after bursts of writes.

By default a GIN index queues new entries in a pending list (up to `gin_pending_list_limit`, 4 MB) that
every scan reads in full until a vacuum, or an insert past the limit, merges it into the index. The
`(namespace, search)` index, which every recall and every full-text query scans, now takes each item's
entries directly (`fastupdate = off`: an item adds a few dozen lexemes). The trigram indexes keep their
pending lists: an item adds hundreds of trigrams there, and recall reads them only for a typo.
"""

from django.db import migrations

from memory.migration_ops import VendorRunSQL

PG_FORWARD = [
    "ALTER INDEX memory_item_ns_search_gin SET (fastupdate = off)",
    # Turning the list off does not merge what it already holds.
    "SELECT gin_clean_pending_list('memory_item_ns_search_gin'::regclass)",
]
PG_REVERSE = ["ALTER INDEX memory_item_ns_search_gin RESET (fastupdate)"]


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_memory_near_words")]

    operations = [VendorRunSQL("postgresql", PG_FORWARD, PG_REVERSE)]
