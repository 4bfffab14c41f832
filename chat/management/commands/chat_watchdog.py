from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chat.services import watchdog_pass
from chat.watchdog import run_watchdog_forever


class Command(BaseCommand):
    help = "End chat runs nobody claimed, stuck stopping, past their timeout, or whose worker died."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument("--interval", type=float, default=10.0, help="Seconds between passes.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["once"]:
            self.stdout.write(str(watchdog_pass()))
            return
        run_watchdog_forever(options["interval"])
