"""`manage.py quickstart` (what `bin/run` runs): migrate, create a demo owner and a deployed demo
workflow, serve with daphne.

The embedded default: SQLite, the in-memory channel layer, in-process runs and the offline model.
"""

from __future__ import annotations

import secrets
import socket
from functools import partial
from typing import Any

from daphne.endpoints import build_endpoint_description_strings
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils.module_loading import import_string

from chat.watchdog import start_in_process_watchdog
from graphs import services as graph_services
from graphs.drainer import start_in_process_outbox_drain
from graphs.models import Workflow
from opencompany.server import Server  # the body limit and the access log of the production server

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


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could listen on `host:port` now. SO_REUSEADDR, as the server sets it, so a
    closing connection's TIME_WAIT does not count as busy; a listening socket does."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def busy_port_error(host: str, port: int) -> CommandError:
    return CommandError(
        f"Port {port} on {host} is already in use (is another server running there?). "
        f"Stop it, or choose another port: bin/run --port {port + 1 if port < 65535 else 8001}"
    )


class Command(BaseCommand):
    help = (
        "Migrate, create the demo owner and a deployed demo workflow, then serve on 127.0.0.1:8000 "
        "(--port N for another port). The sign-in details and addresses are printed last, once the "
        "server listens; a busy port exits with status 1."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addrport", default="127.0.0.1:8000", help="host:port to serve on")
        parser.add_argument(
            "--port", type=int, default=None, help="port to serve on (overrides --addrport's)"
        )
        parser.add_argument("--no-serve", action="store_true", help="Set up only; do not start the server.")

    def handle(self, *args: Any, **options: Any) -> None:
        host, _, port_text = str(options["addrport"]).rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        try:
            port = int(options["port"] if options["port"] is not None else port_text)
        except ValueError:
            raise CommandError(f"Not a port number: {port_text!r}.") from None
        if not 0 < port < 65536:
            raise CommandError(f"A port is a number from 1 to 65535, not {port}.")
        serve = not options["no_serve"]
        # Checked first so a busy port costs no migration and never prints "ready".
        if serve and not port_is_free(host, port):
            raise busy_port_error(host, port)
        call_command("migrate", interactive=False, verbosity=0)
        password, workflow = self._demo()
        shown = f"[{host}]" if ":" in host else host
        banner = partial(self._banner, base=f"http://{shown}:{port}", password=password, workflow=workflow)
        if not serve:
            banner()
            return
        start_in_process_watchdog()  # the embedded default runs the chat watchdog in-process
        start_in_process_outbox_drain()  # and the periodic Context archive drain
        server = Server(
            application=import_string(settings.ASGI_APPLICATION),
            endpoints=build_endpoint_description_strings(host=host, port=port),
            ready_callable=banner,  # once listening: the details are the last thing printed
        )
        server.run()
        if not server.listening_addresses:
            raise busy_port_error(host, port)

    def _demo(self) -> tuple[str | None, Workflow]:
        """The demo owner (with the password when just created) and its deployed demo workflow."""
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
        return password, workflow

    def _banner(self, *, base: str, password: str | None, workflow: Workflow) -> None:
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS("OpenCompany Context & Memory is ready."))
        self.stdout.write(f"  open:       {base}/")
        self.stdout.write(f"  admin:      {base}/admin/")
        self.stdout.write(f"  API docs:   {base}/api/docs/")
        self.stdout.write(f"  workflow:   {workflow.pk}")
        if password:
            self.stdout.write(f"  demo owner: {DEMO_USERNAME}")
            self.stdout.write(
                f"  password:   {password}   (shown once; change it with `manage.py changepassword demo`)"
            )
        else:
            self.stdout.write(
                f"  demo owner: {DEMO_USERNAME} (exists; its password was printed on first run)"
            )
        self.stdout.flush()
