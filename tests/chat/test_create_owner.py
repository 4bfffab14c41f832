"""What the README says about accounts holds: the demo owner is a superuser, and `create_owner` makes a
normal owner (not staff) who can chat with a deployed demo workflow and cannot open the admin."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from chat.management.commands.quickstart import DEMO_USERNAME, Command
from graphs.models import Deployment, Workflow

pytestmark = pytest.mark.django_db

README = Path(settings.BASE_DIR) / "README.md"


def test_the_readme_says_the_demo_owner_is_a_superuser_and_how_to_make_a_normal_owner():
    text = README.read_text()

    assert "The demo owner `demo` is a **superuser**" in text
    assert ".venv/bin/python manage.py create_owner alice --demo-workflow" in text


def test_the_demo_owner_is_a_superuser_as_the_readme_says():
    Command()._demo()

    demo = get_user_model().objects.get(username=DEMO_USERNAME)
    assert (demo.is_staff, demo.is_superuser) == (True, True)


def test_create_owner_makes_a_normal_owner_with_a_deployed_demo_workflow():
    out = StringIO()

    call_command("create_owner", "alice", "--demo-workflow", stdout=out)

    alice = get_user_model().objects.get(username="alice")
    assert (alice.is_staff, alice.is_superuser, alice.is_active) == (False, False, True)
    printed = out.getvalue()
    password = re.search(r"password: +(\S+)", printed)
    assert password is not None
    assert alice.check_password(password.group(1)) is True
    workflow = Workflow.objects.get(owner=alice)
    assert Deployment.objects.get(workflow=workflow).state == "live"
    assert f"workflow:   {workflow.pk} (Demo assistant, deployed)" in printed
    browser = Client()
    assert browser.login(username="alice", password=password.group(1)) is True
    assert browser.get(f"/chat/{workflow.pk}/").status_code == 200
    assert browser.get("/admin/").status_code == 302  # to the admin's login: not staff


def test_create_owner_refuses_a_taken_username(owner):
    with pytest.raises(CommandError, match=r"A user named 'owner' already exists\."):
        call_command("create_owner", "owner", stdout=StringIO())
