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
]
