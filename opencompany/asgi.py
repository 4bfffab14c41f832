"""The ASGI application: HTTP through Django, websockets through the project's routes.

Starting it starts the chat watchdog loop in this process: at import (servers such as daphne load the
application once, at start) and on the `lifespan` startup event for servers that send one."""

import asyncio
import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opencompany.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chat.watchdog import start_in_process_watchdog  # noqa: E402
from opencompany.core.bodylimit import BodyLimitMiddleware  # noqa: E402
from opencompany.core.events import remember_serving_loop  # noqa: E402
from opencompany.core.origins import SameOriginValidator  # noqa: E402
from opencompany.core.unavailable import WebsocketUnavailableClose  # noqa: E402
from opencompany.routing import websocket_urlpatterns  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": BodyLimitMiddleware(django_asgi_app),
        "websocket": SameOriginValidator(
            WebsocketUnavailableClose(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)


async def _lifespan(receive, send):  # type: ignore[no-untyped-def]
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            start_in_process_watchdog(role="server")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    """The ASGI entry point; remembers the serving loop so events and in-process runs start on it."""
    if scope["type"] == "lifespan":
        return await _lifespan(receive, send)
    remember_serving_loop(asyncio.get_running_loop())
    return await router(scope, receive, send)


start_in_process_watchdog(role="server")

# What is loaded by now lives as long as the process: the collector's full passes, which stop every
# thread (the serving loop and the runs alike), then leave it out instead of walking it each time.
gc.freeze()
