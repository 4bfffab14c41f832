from django.urls import path

from chat.api import views

_CHAT = "workflows/<str:workflow_id>/chat"
_CHATS = "workflows/<str:workflow_id>/chats"

urlpatterns = [
    path(_CHAT, views.ChatThreadView.as_view(), name="chat-thread"),
    path(f"{_CHAT}/archive", views.ChatArchiveView.as_view(), name="chat-archive"),
    path(_CHATS, views.ChatListView.as_view(), name="chats"),
    path(f"{_CHATS}/<str:chat_id>", views.ChatDetailView.as_view(), name="chats-detail"),
    path(f"{_CHATS}/<str:chat_id>/purge", views.ChatPurgeView.as_view(), name="chats-purge"),
    path(f"{_CHAT}/messages", views.ChatSendView.as_view(), name="chat-send"),
    path(f"{_CHAT}/messages/<str:message_id>/edit", views.ChatEditView.as_view(), name="chat-edit"),
    path(f"{_CHAT}/messages/<str:message_id>/retry", views.ChatRetryView.as_view(), name="chat-retry"),
    path(
        f"{_CHAT}/messages/<str:message_id>/feedback", views.ChatFeedbackView.as_view(), name="chat-feedback"
    ),
    path(f"{_CHAT}/switch", views.ChatSwitchView.as_view(), name="chat-switch"),
    path(f"{_CHAT}/runs/<str:run_id>", views.ChatRunView.as_view(), name="chat-run"),
    path(f"{_CHAT}/runs/<str:run_id>/stop", views.ChatStopView.as_view(), name="chat-stop"),
]
