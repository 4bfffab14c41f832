from __future__ import annotations

from collections.abc import Iterator

import pytest

from .loopback import LoopbackServer


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    server = LoopbackServer().start()
    try:
        yield server
    finally:
        server.stop()
