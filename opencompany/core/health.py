"""The health endpoint, `GET /healthz`: the database, the channel layer, and what the apps register
(`register_health_check`), e.g. the chat app's task-worker heartbeat.

Each check answers `{"status": "ok" | "down", ...}` with counts and names only. The answer is
`ok`, `degraded` (something other than the database is down: the app still serves, with less) or
`down` (the database is unreachable, or no pooled connection came free in time; HTTP 503). The database
check also reports the process's connection pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from opencompany.core.layers import BatchPubSubChannelLayer

logger = logging.getLogger(__name__)

type HealthCheck = Callable[[], dict[str, Any]]

_checks: dict[str, HealthCheck] = {}


def register_health_check(name: str, check: HealthCheck) -> None:
    """Add (or replace) a check the health endpoint runs; call from `AppConfig.ready()`."""
    _checks[name] = check


def pool_usage() -> dict[str, int] | None:
    """This process's database connections when they are pooled (None otherwise): the most it may hold
    (`max`), how many it holds (`size`), in use by a request, websocket call or run step (`in_use`),
    waiting for one now (`waiting`), and how many callers gave up waiting since the process started
    (`timeouts`)."""
    pool = getattr(connection, "pool", None)
    if pool is None:
        return None
    stats = pool.get_stats()
    return {
        "max": stats["pool_max"],
        "size": stats["pool_size"],
        "in_use": stats["pool_size"] - stats["pool_available"],
        "waiting": stats["requests_waiting"],
        "timeouts": stats.get("requests_errors", 0),
    }


def database_health() -> dict[str, Any]:
    """`SELECT 1`, with the pool's use as it was before this check took a connection."""
    pool = pool_usage()
    health: dict[str, Any] = {"status": "ok", "vendor": connection.vendor}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        logger.warning("health check database failed", exc_info=True)
        health["status"] = "down"
    if pool is not None:
        health["pool"] = pool
    return health


def channel_layer_health() -> dict[str, Any]:
    layer = get_channel_layer()
    if isinstance(layer, BatchPubSubChannelLayer):
        reachable = layer.reachable()
        # Down: chat still works, but events reach only sockets served by the process that made them.
        return {"status": "ok" if reachable else "down", "backend": "redis", "in_process_only": not reachable}
    if isinstance(layer, InMemoryChannelLayer):
        return {"status": "ok", "backend": "in_memory", "in_process_only": True}
    return {"status": "down" if layer is None else "ok", "backend": type(layer).__name__}


def _run(name: str, check: HealthCheck) -> dict[str, Any]:
    try:
        return check()
    except Exception:
        logger.warning("health check %s failed", name, exc_info=True)
        return {"status": "down"}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": database_health()}
    checks["channel_layer"] = _run("channel_layer", channel_layer_health)
    for name, check in list(_checks.items()):
        checks[name] = _run(name, check)
    if checks["database"]["status"] != "ok":
        status, code = "down", 503
    elif any(check.get("status") != "ok" for check in checks.values()):
        status, code = "degraded", 200
    else:
        status, code = "ok", 200
    return JsonResponse({"status": status, "checks": checks}, status=code)
