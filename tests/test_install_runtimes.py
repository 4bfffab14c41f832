"""Where the agent programs cannot be installed, the install says why and fails, and CI's tests of them
fail rather than skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

from tests.chat import runtime_support

ROOT = Path(settings.BASE_DIR)


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_an_unreachable_registry_fails_the_install_with_the_reason(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "runtimes").mkdir()
    shutil.copy(ROOT / "bin" / "install-runtimes", tmp_path / "bin")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(ROOT / "runtimes" / name, tmp_path / "runtimes")
    env = {
        **os.environ,
        "npm_config_registry": "http://127.0.0.1:9/",
        "npm_config_fetch_retries": "0",
        "npm_config_cache": str(tmp_path / "npm-cache"),
    }

    done = subprocess.run(
        ["bash", "bin/install-runtimes"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "install-runtimes: npm could not install the agent runtimes (see npm's output above): "
        "is the npm registry reachable?"
    )
    assert (tmp_path / "runtimes" / "node_modules" / ".bin" / "claude").exists() is False


def test_a_missing_program_fails_the_runtime_tests_under_ci(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime_support, "CI", True)

    with pytest.raises(pytest.fail.Exception) as failed:
        runtime_support.require_programs(str(tmp_path))

    assert str(failed.value) == f"claude, codex not installed in {tmp_path}: run bin/install-runtimes"
