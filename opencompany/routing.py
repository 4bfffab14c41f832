"""Websocket URL routes; apps contribute theirs."""

from django.urls import URLPattern, URLResolver


def websocket_urlpatterns() -> list[URLPattern | URLResolver]:
    try:
        from chat.routing import websocket_urlpatterns as chat_routes
    except ImportError:  # the chat app adds its consumer with its issue
        return []
    return list(chat_routes)
