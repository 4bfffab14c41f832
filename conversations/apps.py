from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"
    verbose_name = "Agent conversations (Context)"

    def ready(self) -> None:
        from conversations.services import conversations_archive_for_reset, conversations_archive_for_workflow
        from conversations.tools import register_notes_tool
        from graphs.hooks import register_context_archiver, register_reset_hook

        register_context_archiver("conversations", conversations_archive_for_workflow)
        register_reset_hook("conversations", conversations_archive_for_reset)
        register_notes_tool()
