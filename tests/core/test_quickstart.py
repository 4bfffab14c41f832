"""`manage.py quickstart`: the demo owner (password printed once) and a deployed demo workflow; the
printed credentials open the admin and get an API token that lists the workflow."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from graphs.models import Deployment, Workflow

pytestmark = pytest.mark.django_db(transaction=True)


def test_quickstart_creates_the_demo_owner_and_a_deployed_workflow_once(client):
    first, second = io.StringIO(), io.StringIO()

    call_command("quickstart", "--no-serve", stdout=first)
    call_command("quickstart", "--no-serve", stdout=second)

    password = re.search(r"password:\s+(\S+)", first.getvalue())
    assert password is not None
    assert "password:" not in second.getvalue()  # printed once
    workflow = Workflow.objects.get(owner__username="demo")
    assert sorted(n["type"] for n in workflow.graph["nodes"]) == [
        "aiAgent",
        "chatTrigger",
        "context",
        "simpleMemory",
    ]
    assert Deployment.objects.get(workflow=workflow).state == "live"

    assert client.login(username="demo", password=password.group(1))
    assert client.get("/admin/").status_code == 200
    api = APIClient()
    token = api.post("/api/v1/auth/token", {"username": "demo", "password": password.group(1)}, format="json")
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.json()['token']}")
    listed = api.get("/api/v1/workflows").json()["results"]
    assert [(w["id"], w["generation"], w["state"]) for w in listed] == [(workflow.pk, 1, "live")]
