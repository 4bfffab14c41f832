"""The ASGI application: HTTP through Django, websockets through the project's routes."""

import asyncio
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opencompany.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from opencompany.core.bodylimit import BodyLimitMiddleware  # noqa: E402
from opencompany.core.events import remember_serving_loop  # noqa: E402
from opencompany.core.origins import SameOriginValidator  # noqa: E402
from opencompany.routing import websocket_urlpatterns  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": BodyLimitMiddleware(django_asgi_app),
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    """The ASGI entry point; remembers the serving loop so events and in-process runs start on it."""
    remember_serving_loop(asyncio.get_running_loop())
    return await router(scope, receive, send)
