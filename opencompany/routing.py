"""Websocket URL routes of the project: each app's routes, mounted here."""

from django.urls import URLPattern, URLResolver

from chat.routing import websocket_urlpatterns as chat_routes

websocket_urlpatterns: list[URLPattern | URLResolver] = [*chat_routes]
