from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memory.services import memory_receipts_prune


class Command(BaseCommand):
    help = "Delete Memory receipts older than OPENCOMPANY_MEMORY_RECEIPT_DAYS (or --days)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"pruned={memory_receipts_prune(older_than_days=options['days'])}")
