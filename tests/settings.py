"""The settings the test suite and the processes it starts run with: the product's settings, with a fast
password hasher (Django's documented advice for tests), since the default's work factor is what makes it
safe and would dominate the suite's CPU time, and, on PostgreSQL, a connection pool sized for a test
process: its main thread, the threads the concurrency tests race (up to 16) and the helper threads the
async tests use each hold a connection at once. Under pytest-xdist each worker has its own Redis prefix,
as it has its own test database, so no worker sees another's channel groups."""

import os
from typing import Any

from opencompany.settings import *  # noqa: F403
from opencompany.settings import CHANNEL_LAYERS, DATABASES, DB_POOL

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

if DB_POOL and not os.environ.get("DB_POOL_MAX_SIZE"):
    DATABASES["default"]["OPTIONS"]["pool"]["max_size"] = 24

_worker = os.environ.get("PYTEST_XDIST_WORKER")
_layer: dict[str, Any] = CHANNEL_LAYERS["default"]
if _worker and "CONFIG" in _layer:
    _layer["CONFIG"]["prefix"] = f"{_layer['CONFIG']['prefix']}-{_worker}"
