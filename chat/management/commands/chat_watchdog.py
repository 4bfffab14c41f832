from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chat.services import watchdog_sweep
from chat.watchdog import run_watchdog_forever


class Command(BaseCommand):
    help = (
        "End chat runs nobody claimed, stuck stopping, past their timeout, or whose worker died. Servers "
        "and task workers run this loop themselves; the command is for cron."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument(
            "--interval", type=float, default=None, help="Seconds between passes (default: the setting)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["once"]:
            counts = watchdog_sweep()
            self.stdout.write(str(counts) if counts is not None else "another process is sweeping")
            return
        run_watchdog_forever(options["interval"], role="command")
