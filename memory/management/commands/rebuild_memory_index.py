from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memory.services import memory_index_rebuild


class Command(BaseCommand):
    help = "Rebuild Memory's projections from the items: FTS rows, namespace counters and (with an embedder) vectors."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--workflow", dest="workflow_id", default=None, help="Only this workflow's items."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        outcome = memory_index_rebuild(workflow_id=options["workflow_id"])
        self.stdout.write(
            f"items={outcome['items']} embedded={outcome['embedded']} failed={outcome['failed']}"
        )
