"""The production profile: `manage.py check --deploy` is clean with the environment docs/operations.md
documents, and DEBUG=0 alone already makes cookies Secure and turns HSTS on."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def documented_production_environment() -> dict[str, str]:
    """The `KEY=value` lines of the sh block under "Production environment" in docs/operations.md,
    each `<…>` placeholder replaced by a random value."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Production environment", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None
    env = {}
    for line in block.group(1).splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = re.sub(r"<[^>]*>", lambda _: secrets.token_urlsafe(50), value)
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "OPENCOMPANY_", "PYTEST_", "SECURE_"))
        and k
        not in {"DATABASE_URL", "REDIS_URL", "DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS"}
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_deploy_reports_nothing_with_the_documented_production_environment():
    env = documented_production_environment()
    assert env["DEBUG"] == "0"

    result = _run(env, "check", "--deploy", "--fail-level", "DEBUG")

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "System check identified no issues (0 silenced).\n"


def test_with_debug_off_cookies_are_secure_and_hsts_is_on():
    env = {"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "chat.example.com"}
    names = [
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_HSTS_SECONDS",
        "SECURE_PROXY_SSL_HEADER",
    ]
    script = f"from django.conf import settings; import json; print(json.dumps([getattr(settings, n) for n in {names!r}]))"

    plain = _run(env, "shell", "-c", script)
    proxied = _run({**env, "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https"}, "shell", "-c", script)

    # The shell may print a line of its own first; the answer is the last line.
    assert json.loads(plain.stdout.splitlines()[-1]) == [True, True, 31_536_000, None]
    assert json.loads(proxied.stdout.splitlines()[-1]) == [
        True,
        True,
        31_536_000,
        ["HTTP_X_FORWARDED_PROTO", "https"],
    ]
