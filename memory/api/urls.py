from django.urls import URLPattern, URLResolver, path

from memory.api import views

_BASE = "workflows/<str:workflow_id>/memory/<str:memory_node_id>"

urlpatterns: list[URLPattern | URLResolver] = [
    path(f"{_BASE}/items", views.MemoryItemsView.as_view(), name="memory-items"),
    path(f"{_BASE}/items/<str:memory_id>", views.MemoryItemView.as_view(), name="memory-item"),
    path(
        f"{_BASE}/items/<str:memory_id>/revisions",
        views.MemoryRevisionsView.as_view(),
        name="memory-revisions",
    ),
    path(f"{_BASE}/clear", views.MemoryClearView.as_view(), name="memory-clear"),
]
