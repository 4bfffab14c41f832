from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from conversations.services import archive_purge


class Command(BaseCommand):
    help = "Delete conversation archives older than OPENCOMPANY_CONTEXT_ARCHIVE_DAYS (default 30)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=None, help="Override the retention window (days).")

    def handle(self, *args: Any, **options: Any) -> None:
        deleted = archive_purge(older_than_days=options["days"])
        self.stdout.write(f"purged {deleted} conversation archive(s)")
