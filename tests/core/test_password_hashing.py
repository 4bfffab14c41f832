"""Passwords hash fast under the test suite only: the product's settings keep Django's default hasher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.contrib.auth.hashers import get_hasher

ROOT = Path(__file__).resolve().parents[2]

PRINT_HASHER = "from django.contrib.auth.hashers import get_hasher; print(get_hasher().algorithm)"


def test_the_test_suite_hashes_passwords_with_the_fast_hasher() -> None:
    assert settings.PASSWORD_HASHERS == ["django.contrib.auth.hashers.MD5PasswordHasher"]
    assert get_hasher().algorithm == "md5"


def test_manage_py_without_a_settings_module_uses_djangos_default_hasher() -> None:
    # What a server, a worker or a command gets: manage.py, asgi.py and wsgi.py name the product's settings.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST"))}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", PRINT_HASHER],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert done.stdout.strip().splitlines()[-1] == "pbkdf2_sha256"


def test_the_servers_entry_points_name_the_products_settings() -> None:
    for entry in ("manage.py", "opencompany/asgi.py", "opencompany/wsgi.py"):
        text = (ROOT / entry).read_text()
        assert 'os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opencompany.settings")' in text, entry
        assert "tests.settings" not in text, entry
