"""`manage.py quickstart`: migrate, create a demo owner and a deployed demo workflow, serve.

The embedded default: SQLite, the in-memory channel layer, in-process runs and the offline model.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from chat.watchdog import start_in_process_watchdog
from graphs import services as graph_services
from graphs.drainer import start_in_process_outbox_drain
from graphs.models import Workflow

DEMO_USERNAME = "demo"
DEMO_WORKFLOW = "Demo assistant"


def demo_graph() -> dict[str, Any]:
    return {
        "graphVersion": 2,
        "nodes": [
            {"id": "trigger", "type": "chatTrigger", "position": {"x": 0, "y": 0}, "data": {"label": "Chat"}},
            {
                "id": "agent",
                "type": "aiAgent",
                "position": {"x": 320, "y": 0},
                "data": {
                    "label": "Assistant",
                    "parameters": {
                        "system_prompt": "You are a helpful assistant. Recall from Memory before saying you don't know.",
                        "provider": "offline",
                        "model": "offline-demo",
                    },
                },
            },
            {
                "id": "context",
                "type": "context",
                "position": {"x": -40, "y": 0},
                "data": {"label": "Context"},
            },
            {
                "id": "memory",
                "type": "simpleMemory",
                "position": {"x": 320, "y": 220},
                "data": {"label": "Memory", "parameters": {"reset_policy": "preserve"}},
            },
        ],
        "edges": [
            {
                "id": "e-main",
                "source": "trigger",
                "sourceHandle": "output-main",
                "target": "agent",
                "targetHandle": "input-main",
            },
            {
                "id": "e-ctx",
                "source": "context",
                "sourceHandle": "output-context",
                "target": "agent",
                "targetHandle": "input-context",
            },
            {
                "id": "e-mem",
                "source": "memory",
                "sourceHandle": "output-tool",
                "target": "agent",
                "targetHandle": "input-tools",
            },
        ],
    }


class Command(BaseCommand):
    help = "Migrate, create the demo owner and a deployed demo workflow, then serve on 127.0.0.1:8000."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addrport", default="127.0.0.1:8000")
        parser.add_argument("--no-serve", action="store_true", help="Set up only; do not start the server.")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        User = get_user_model()
        password = None
        with transaction.atomic():
            user = User.objects.filter(username=DEMO_USERNAME).first()
            if user is None:
                password = secrets.token_urlsafe(12)
                user = User.objects.create_user(
                    username=DEMO_USERNAME, password=password, is_staff=True, is_superuser=True
                )
        workflow = Workflow.objects.filter(owner=user, name=DEMO_WORKFLOW).first()
        if workflow is None:
            workflow = graph_services.workflow_create(owner=user, name=DEMO_WORKFLOW, graph=demo_graph())
            graph_services.workflow_deploy(workflow=workflow, actor=user)
        addr = options["addrport"]
        self.stdout.write(self.style.SUCCESS("OpenCompany Context & Memory is ready."))
        if password:
            self.stdout.write(f"  demo owner: {DEMO_USERNAME}")
            self.stdout.write(
                f"  password:   {password}   (shown once; change it with `manage.py changepassword demo`)"
            )
        else:
            self.stdout.write(
                f"  demo owner: {DEMO_USERNAME} (exists; its password was printed on first run)"
            )
        self.stdout.write(f"  workflow:   {workflow.pk}")
        self.stdout.write(
            f"  open:       http://{addr}/   admin: http://{addr}/admin/   API docs: http://{addr}/api/docs/"
        )
        if options["no_serve"]:
            return
        start_in_process_watchdog()  # the embedded default runs the chat watchdog in-process
        start_in_process_outbox_drain()  # and the periodic Context archive drain
        call_command("runserver", addr, use_reloader=False)
