"""A frontend's view of the API: openapi-python-client generates a client from the running server's
`/api/schema/`, and a whole flow goes through that client only — a token, a workflow created and
deployed, a chat message sent over HTTP and its run read, Memory remembered, recalled and updated with a
stale version (a typed 409), and a list paged with its cursor."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from tests import live
from tests.conftest import demo_graph

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LIVE: dict[str, Any] = {"OPENCOMPANY_RUN_EXECUTOR": "inprocess", "OPENCOMPANY_OFFLINE_PACING_MS": 1}
PACKAGE = "oc_generated_client"
PASSWORD = "client-pass-123"


def generate_client(url: str, into: Path) -> None:
    """`openapi-python-client generate` from the server's schema; any warning fails the test."""
    config = into / "config.yaml"
    config.write_text(f"post_hooks: []\npackage_name_override: {PACKAGE}\nproject_name_override: {PACKAGE}\n")
    binary = Path(sys.executable).with_name("openapi-python-client")
    result = subprocess.run(
        [
            str(binary),
            "generate",
            "--url",
            f"{url}/api/schema/",
            "--meta",
            "none",
            "--config",
            str(config),
            "--output-path",
            str(into / PACKAGE),
        ],
        cwd=into,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Warning" not in output, output


def load(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_a_whole_flow_through_the_generated_client(tmp_path: Path) -> None:
    get_user_model().objects.create_user(username="frontend", password=PASSWORD)
    with live.asgi_server(**LIVE) as url:
        generate_client(url, tmp_path)
        sys.path.insert(0, str(tmp_path))
        try:
            _flow(url)
        finally:
            sys.path.remove(str(tmp_path))
            for module in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
                del sys.modules[module]


def _flow(url: str) -> None:
    client_module, models = load("client"), load("models")
    api = {name: load(f"api.{group}.{name}") for group, names in _OPERATIONS.items() for name in names}

    # a token
    anonymous = client_module.Client(base_url=url)
    issued = api["auth_token_create"].sync_detailed(
        client=anonymous, body=models.AuthTokenInputRequest(username="frontend", password=PASSWORD)
    )
    assert issued.status_code == 200, issued.content
    client = client_module.AuthenticatedClient(base_url=url, token=issued.parsed.token, prefix="Token")
    refused = api["auth_token_create"].sync_detailed(
        client=anonymous, body=models.AuthTokenInputRequest(username="frontend", password="wrong")
    )
    assert refused.status_code == 401
    assert refused.parsed.code.value == "invalid_credentials"

    # create and deploy a workflow
    created = api["workflows_create"].sync_detailed(
        client=client,
        body=models.WorkflowCreateInputRequest.from_dict({"name": "Generated", "graph": demo_graph()}),
    )
    assert created.status_code == 201, created.content
    workflow_id = created.parsed.id
    deployed = api["workflow_deploy"].sync_detailed(workflow_id, client=client)
    assert (deployed.status_code, deployed.parsed.generation, deployed.parsed.state) == (200, 1, "live")

    # send a chat message over HTTP and read its run
    sent = api["chat_send"].sync_detailed(
        workflow_id, client=client, body=models.SendInputRequest(text="Hello from a generated client")
    )
    assert sent.status_code == 202, sent.content
    run_id = sent.parsed.run.run_id
    deadline = time.monotonic() + 60
    run = api["chat_run"].sync_detailed(workflow_id, run_id, client=client)
    while run.parsed.state not in ("finished", "failed", "stopped"):
        assert time.monotonic() < deadline, run.parsed.state
        time.sleep(0.1)
        run = api["chat_run"].sync_detailed(workflow_id, run_id, client=client)
    assert (run.status_code, run.parsed.state) == (200, "finished")
    assert run.parsed.text != ""
    missing = api["chat_run"].sync_detailed(workflow_id, "run_nothing", client=client)
    assert (missing.status_code, missing.parsed.code.value) == (404, "not_found")

    # remember, recall, update with a stale version → a typed 409
    memory_node_id = f"{workflow_id}:simpleMemory:1"
    remembered = api["memory_items_create"].sync_detailed(
        workflow_id, memory_node_id, client=client, body=models.RememberInputRequest(content="Likes espresso")
    )
    assert remembered.status_code == 201, remembered.content
    item = remembered.parsed.memory
    recalled = api["memory_items_list"].sync_detailed(
        workflow_id, memory_node_id, client=client, query="espresso"
    )
    assert recalled.status_code == 200
    assert [r.id for r in recalled.parsed.results] == [item.id]
    assert recalled.parsed.has_more is False
    stale = api["memory_item_update"].sync_detailed(
        workflow_id,
        memory_node_id,
        item.id,
        client=client,
        body=models.UpdateInputRequest(expected_version=item.version + 1, content="Likes tea"),
    )
    assert stale.status_code == 409
    assert isinstance(stale.parsed, models.MemoryItemUpdateResponse409)
    assert stale.parsed.code == models.MemoryItemUpdateResponse409Code.VERSION_CONFLICT
    assert stale.parsed.extra["current_version"] == item.version

    # page through the workflows with the cursor
    for name in ("Second", "Third"):
        more = api["workflows_create"].sync_detailed(
            client=client, body=models.WorkflowCreateInputRequest(name=name)
        )
        assert more.status_code == 201
    first = api["workflows_list"].sync_detailed(client=client, limit=2)
    second = api["workflows_list"].sync_detailed(client=client, limit=2, cursor=first.parsed.next_cursor)
    assert [w.name for w in first.parsed.results] == ["Third", "Second"]
    assert first.parsed.has_more is True
    assert [w.name for w in second.parsed.results] == ["Generated"]
    assert (second.parsed.has_more, second.parsed.next_cursor) == (False, None)
    forged = api["workflows_list"].sync_detailed(client=client, cursor=first.parsed.next_cursor + "x")
    assert (forged.status_code, forged.parsed.code.value) == (400, "invalid_cursor")


_OPERATIONS = {
    "v1": [
        "auth_token_create",
        "workflows_create",
        "workflow_deploy",
        "workflows_list",
        "memory_items_create",
        "memory_items_list",
        "memory_item_update",
    ],
    "chat": ["chat_send", "chat_run"],
}
