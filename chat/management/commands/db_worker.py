"""`manage.py db_worker`: the task worker, which also runs the chat watchdog loop, so a deployment of
servers and workers frees stuck lanes with no extra process."""

from typing import Any

from django_tasks_db.management.commands.db_worker import Command as DBWorkerCommand

from chat.watchdog import start_in_process_watchdog


class Command(DBWorkerCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        start_in_process_watchdog(role="worker")
        super().handle(*args, **options)
