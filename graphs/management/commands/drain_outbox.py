from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from graphs.drainer import run_outbox_drain_forever
from graphs.services import outbox_drain_due
from graphs.tasks import outbox_drain_schedule


class Command(BaseCommand):
    help = (
        "Retry pending Context archives whose backoff has passed, of every workflow (deleted ones too): "
        "one pass (cron), --loop, or --schedule to start the periodic drain on the task worker."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="Drain every --interval seconds, forever.")
        parser.add_argument("--interval", type=float, default=None, help="Seconds between passes.")
        parser.add_argument(
            "--schedule", action="store_true", help="Enqueue the periodic drain task (idempotent)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        interval = float(options["interval"] or settings.OPENCOMPANY_OUTBOX_DRAIN_INTERVAL_S)
        if options["schedule"]:
            scheduled = outbox_drain_schedule(delay_s=0)
            self.stdout.write("scheduled" if scheduled else "already scheduled")
            return
        if options["loop"]:
            run_outbox_drain_forever(interval)
            return
        counts = outbox_drain_due()
        self.stdout.write(f"completed={counts['completed']} pending={counts['pending']}")
