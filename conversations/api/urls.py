from django.urls import path

from conversations.api import views

urlpatterns = [
    path(
        "workflows/<str:workflow_id>/conversations",
        views.ConversationListView.as_view(),
        name="workflow-conversations",
    ),
    path(
        "workflows/<str:workflow_id>/conversations/<str:agent_node_id>",
        views.ConversationDetailView.as_view(),
        name="workflow-conversation",
    ),
    path(
        "workflows/<str:workflow_id>/conversations/<str:agent_node_id>/requests",
        views.RequestListView.as_view(),
        name="workflow-conversation-requests",
    ),
    path(
        "workflows/<str:workflow_id>/conversations/<str:agent_node_id>/requests/<int:request_id>",
        views.RequestDetailView.as_view(),
        name="workflow-conversation-request",
    ),
    path("workflows/<str:workflow_id>/usage", views.UsageView.as_view(), name="workflow-usage"),
]
