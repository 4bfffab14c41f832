"""`GET /healthz`: the database, the channel layer and the task workers' heartbeat."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from chat import services
from chat.models import ChatProcess

pytestmark = pytest.mark.django_db


def test_health_is_ok_with_the_embedded_default(client, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.OPENCOMPANY_RUN_EXECUTOR = "inprocess"

    response = client.get("/healthz")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"]["status"] == "ok"
    assert body["checks"]["channel_layer"] == {
        "status": "ok",
        "backend": "in_memory",
        "in_process_only": True,
    }
    assert body["checks"]["workers"] == {
        "status": "ok",
        "executor": "inprocess",
        "workers": 0,
        "servers": 0,
        "last_worker_beat_at": None,
    }


def test_health_is_degraded_when_runs_need_workers_and_none_is_beating(client, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "tasks"
    services.process_beat(name="host:1", role="worker", started_at=timezone.now())
    ChatProcess.objects.update(beat_at=timezone.now() - timedelta(minutes=5))

    body = client.get("/healthz").json()

    assert body["status"] == "degraded"
    assert (body["checks"]["workers"]["status"], body["checks"]["workers"]["workers"]) == ("down", 0)


def test_a_beating_worker_is_counted_with_its_last_beat(client, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "tasks"
    services.process_beat(name="host:1", role="worker", started_at=timezone.now())
    services.process_beat(name="host:2", role="server", started_at=timezone.now())

    workers = client.get("/healthz").json()["checks"]["workers"]

    assert (workers["status"], workers["workers"], workers["servers"]) == ("ok", 1, 1)
    assert workers["last_worker_beat_at"] == ChatProcess.objects.get(name="host:1").beat_at.isoformat()


def test_health_reports_an_unreachable_redis_as_a_degraded_channel_layer(client, settings):
    from channels.layers import channel_layers

    from tests.live import free_port

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "opencompany.core.layers.BatchPubSubChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"], "prefix": "oc-health"},
        }
    }
    channel_layers.backends.pop("default", None)
    try:
        response = client.get("/healthz")
    finally:
        channel_layers.backends.pop("default", None)

    assert response.status_code == 200
    assert response.json()["status"] == "degraded"
    assert response.json()["checks"]["channel_layer"] == {
        "status": "down",
        "backend": "redis",
        "in_process_only": True,
    }
