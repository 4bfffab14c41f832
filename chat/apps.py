from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Owner chat"

    def ready(self) -> None:
        from chat.services import chat_reset_hook
        from graphs.hooks import register_reset_hook

        register_reset_hook("chat", chat_reset_hook)
