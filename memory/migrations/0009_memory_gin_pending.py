"""PostgreSQL: the full-text GIN index stays fast right after bursts of writes.

A GIN index queues new entries in a pending list that every scan reads in full until a vacuum, or an
insert that takes the list past `gin_pending_list_limit` (4 MB by default), merges it into the index.
The `(namespace, search)` index, which every recall and every full-text query scans, gets the smallest
limit (64 kB): a scan reads at most a few pages of it, and the writer that passes the limit merges a
small list. The trigram indexes keep the default: recall reads them only for a typo.
"""

from django.db import migrations

from memory.migration_ops import VendorRunSQL

PG_FORWARD = [
    "ALTER INDEX memory_item_ns_search_gin SET (gin_pending_list_limit = 64)",
    # A lower limit does not merge what the list already holds.
    "SELECT gin_clean_pending_list('memory_item_ns_search_gin'::regclass)",
]
PG_REVERSE = ["ALTER INDEX memory_item_ns_search_gin RESET (gin_pending_list_limit)"]


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_memory_near_words")]

    operations = [VendorRunSQL("postgresql", PG_FORWARD, PG_REVERSE)]
