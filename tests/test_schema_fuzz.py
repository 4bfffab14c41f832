"""schemathesis against the production server: every operation of `/api/schema/`, every check (server
errors, status codes, response schemas and headers, positive data accepted, negative data refused,
authentication, stateful links), with the configuration of docs/schemathesis.toml. Any failure fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opencompany.core.tokens import token_issue
from tests import live
from tests.conftest import make_workflow, node_id

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "docs" / "schemathesis.toml"
LIVE: dict[str, Any] = {"OPENCOMPANY_RUN_EXECUTOR": "inprocess", "OPENCOMPANY_OFFLINE_PACING_MS": 1}


def schemathesis_command(url: str) -> list[str]:
    """`schemathesis run` as docs/operations.md shows it."""
    binary = Path(sys.executable).with_name("schemathesis")
    return [str(binary), "--config-file", str(CONFIG), "run", f"{url}/api/schema/"]


def test_schemathesis_finds_no_failure_and_no_server_error(owner: Any, tmp_path: Path) -> None:
    workflow = make_workflow(owner)
    token, _ = token_issue(user=owner)
    with live.asgi_server(**LIVE) as url:
        env = {
            **os.environ,
            "OC_API_URL": url,
            "OC_API_TOKEN": token,
            "OC_WORKFLOW_ID": workflow.pk,
            "OC_AGENT_NODE_ID": node_id(workflow, "aiAgent"),
            "OC_MEMORY_NODE_ID": node_id(workflow, "simpleMemory"),
            "NO_COLOR": "1",
        }
        result = subprocess.run(
            schemathesis_command(url), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )

    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    assert "No issues found" in output or " 0 failures" in output or "failures" not in output.lower(), output
