"""`manage.py create_owner <username>`: an owner who chats, not staff.

The demo owner `quickstart` creates is a superuser, so it also works the admin; this makes the kind of
account an owner normally has: it signs in to the chat and the API, never to `/admin/`. The password is
generated and shown once unless `--password` gives one; `--demo-workflow` gives the owner a deployed
copy of the demo workflow to chat with.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from chat.management.commands.quickstart import DEMO_WORKFLOW, demo_graph
from graphs import services as graph_services


class Command(BaseCommand):
    help = "Create an owner (an account that chats; not staff), optionally with the demo workflow."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--password", help="The owner's password (default: generated, shown once).")
        parser.add_argument(
            "--demo-workflow",
            action="store_true",
            help="Give the owner a deployed copy of the demo workflow.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        username = str(options["username"]).strip()
        if not username:
            raise CommandError("Give the new owner a username.")
        password = options["password"] or secrets.token_urlsafe(12)
        with transaction.atomic():
            if User.objects.filter(username=username).exists():
                raise CommandError(f"A user named {username!r} already exists.")
            user = User.objects.create_user(username=username, password=password)
            workflow = None
            if options["demo_workflow"]:
                workflow = graph_services.workflow_create(owner=user, name=DEMO_WORKFLOW, graph=demo_graph())
                graph_services.workflow_deploy(workflow=workflow, actor=user)
        self.stdout.write(self.style.SUCCESS(f"Created owner {username} (not staff: no admin access)."))
        if not options["password"]:
            self.stdout.write(f"  password:   {password}   (shown once)")
        if workflow is not None:
            self.stdout.write(f"  workflow:   {workflow.pk} ({workflow.name}, deployed)")
