from typing import Any

from django.core.management.base import BaseCommand

from memory.services import memory_purge_expired


class Command(BaseCommand):
    help = "Delete Memory items whose expires_at has passed (their revisions keep an 'expire' tombstone)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"purged={memory_purge_expired()}")
