"""The Redis layer through an outage: in-process delivery while Redis is unreachable, one warning,
and delivery across processes again once it answers."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import time
import uuid

import pytest

from opencompany.core.layers import BatchPubSubChannelLayer
from tests.live import free_port


def _layer(url: str, prefix: str) -> BatchPubSubChannelLayer:
    return BatchPubSubChannelLayer(hosts=[url], prefix=prefix)


async def test_without_redis_channels_groups_and_batches_deliver_inside_the_process(caplog):
    here = _layer(f"redis://127.0.0.1:{free_port()}/0", f"oc-out-{uuid.uuid4().hex[:8]}")
    caplog.set_level(logging.WARNING, logger="opencompany.core.layers")

    channel = await here.new_channel()
    await here.group_add("chat.wf", channel)
    await here.group_send("chat.wf", {"type": "app.event", "n": 1})
    await here.group_send_many([("chat.wf", {"type": "app.event", "n": 2}), ("chat.other", {"n": 0})])
    await here.send(channel, {"type": "app.event", "n": 3})
    received = [await asyncio.wait_for(here.receive(channel), 1) for _ in range(3)]

    assert [m["n"] for m in received] == [1, 2, 3]
    assert here.outage.active is True
    assert [r.getMessage() for r in caplog.records] == [
        "channel layer unreachable: events are delivered within this process until it returns"
    ]
    await here.group_discard("chat.wf", channel)
    await here.flush()


async def test_a_loop_that_only_publishes_keeps_the_outage_until_redis_answers(caplog, monkeypatch):
    """A run loop subscribes nothing: trying to subscribe again must not pass for Redis answering."""
    monkeypatch.setattr("opencompany.core.layers.RESUBSCRIBE_EVERY_S", 0.05)
    layer = _layer(f"redis://127.0.0.1:{free_port()}/0", f"oc-pub-{uuid.uuid4().hex[:8]}")
    caplog.set_level(logging.WARNING, logger="opencompany.core.layers")

    await layer.group_send("chat.wf", {"type": "app.event", "n": 1})
    await asyncio.sleep(0.3)  # several rounds of the resubscriber
    await layer.group_send("chat.wf", {"type": "app.event", "n": 2})
    await layer.group_send_many([("chat.wf", {"type": "app.event", "n": 3})])

    assert layer.outage.active is True
    assert [r.getMessage() for r in caplog.records] == [
        "channel layer unreachable: events are delivered within this process until it returns"
    ]
    await layer.flush()


@pytest.mark.redis
async def test_delivery_across_processes_resumes_when_redis_returns():
    port = free_port()
    url, prefix = f"redis://127.0.0.1:{port}/0", f"oc-back-{uuid.uuid4().hex[:8]}"
    here = _layer(url, prefix)
    channel = await here.new_channel()
    await here.group_add("chat.wf", channel)
    assert here.outage.active is True

    server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    elsewhere = _layer(url, prefix)  # another process's layer: it reaches `here` only through Redis
    try:
        async with asyncio.timeout(20):
            while here.outage.active:
                await asyncio.sleep(0.1)
        await elsewhere.group_send_many([("chat.wf", {"type": "app.event", "n": 7})])
        message = await asyncio.wait_for(here.receive(channel), 5)
    finally:
        await here.flush()
        await elsewhere.flush()
        server.terminate()
        server.wait(timeout=10)

    assert message == {"type": "app.event", "n": 7}


@pytest.mark.redis
async def test_a_redis_that_stops_answering_delays_an_event_about_a_second_and_it_is_delivered_here():
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    layer = _layer(f"redis://127.0.0.1:{port}/0", f"oc-hung-{uuid.uuid4().hex[:8]}")
    try:
        async with asyncio.timeout(10):
            while True:  # the server is up and the channel subscribed through it
                try:
                    channel = await layer.new_channel()
                    await layer.group_add("chat.wf", channel)
                    if not layer.outage.active:
                        break
                except Exception:  # noqa: S110 - not listening yet
                    pass
                await asyncio.sleep(0.1)
        server.send_signal(signal.SIGSTOP)  # Redis hangs: connections stay open, nothing answers
        started = time.monotonic()
        await layer.group_send_many([("chat.wf", {"type": "app.event", "n": 1})])
        await layer.group_send_many([("chat.wf", {"type": "app.event", "n": 2})])
        received = [await asyncio.wait_for(layer.receive(channel), 3) for _ in range(2)]
        took = time.monotonic() - started
    finally:
        server.send_signal(signal.SIGCONT)
        await layer.flush()
        server.terminate()
        server.wait(timeout=10)

    assert [m["n"] for m in received] == [1, 2]
    assert took < 2  # one wait for Redis's answer, then in-process delivery at once
    assert layer.outage.active is True
