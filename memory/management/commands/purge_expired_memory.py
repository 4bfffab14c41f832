from typing import Any

from django.core.management.base import BaseCommand

from memory.services import memory_purge_expired, memory_stems_prune, memory_words_prune


class Command(BaseCommand):
    help = (
        "Delete Memory items whose expires_at has passed (their revisions keep an 'expire' tombstone), "
        "then the indexed stems and words no item holds any more."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"purged={memory_purge_expired()}")
        self.stdout.write(f"stems_pruned={memory_stems_prune()}")
        self.stdout.write(f"words_pruned={memory_words_prune()}")
