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

# Two schemathesis runs over every operation: longer than the suite's default per-test limit.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "docs" / "schemathesis.toml"
# Throttles high enough that the fuzz reaches what is behind them (429 stays documented and tested).
LIVE: dict[str, Any] = {
    "OPENCOMPANY_RUN_EXECUTOR": "inprocess",
    "OPENCOMPANY_OFFLINE_PACING_MS": 1,
    "OPENCOMPANY_THROTTLE_CHAT_SEND": "100000/min",
    "OPENCOMPANY_THROTTLE_MEMORY_WRITE": "100000/min",
    "OPENCOMPANY_THROTTLE_AUTH_TOKEN": "100000/min",
}
# These end the credentials or the data the other operations run on: they run last, on their own.
LAST = ("auth_token_revoke", "account_erase")


def schemathesis_command(url: str, *, last: bool) -> list[str]:
    """`schemathesis run` as docs/operations.md shows it: every operation but `LAST`, or only those (no
    link joins them, so they have no stateful phase)."""
    binary = Path(sys.executable).with_name("schemathesis")
    flag = "--include-operation-id" if last else "--exclude-operation-id"
    selection = [arg for operation in LAST for arg in (flag, operation)]
    phases = ["--phases", "examples,coverage,fuzzing"] if last else []
    return [str(binary), "--config-file", str(CONFIG), "run", *selection, *phases, f"{url}/api/schema/"]


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
        runs = [
            subprocess.run(
                schemathesis_command(url, last=last),
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            for last in (False, True)
        ]

    for run in runs:
        output = run.stdout + run.stderr
        assert run.returncode == 0, output[-20000:]
        summary = output.strip().splitlines()[-1]
        assert "failure" not in summary, summary
        assert "error" not in summary, summary
        assert " passed" in output, output[-5000:]
