from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"
    verbose_name = "Agent conversations (Context)"

    def ready(self) -> None:
        from conversations.inventory import conversations_inventory
        from conversations.services import (
            conversations_archive_for_reset,
            conversations_archive_for_workflow,
            conversations_erase,
            conversations_owner_change_hook,
        )
        from conversations.stores import conversation_store_use, store_for_database
        from conversations.tools import register_notes_tool
        from graphs.hooks import (
            register_context_archiver,
            register_eraser,
            register_inventory,
            register_owner_change_hook,
            register_reset_hook,
        )

        conversation_store_use(store_for_database())
        register_context_archiver("conversations", conversations_archive_for_workflow)
        register_reset_hook("conversations", conversations_archive_for_reset)
        register_eraser("conversations", conversations_erase)
        register_owner_change_hook("conversations", conversations_owner_change_hook)
        register_inventory("conversations", conversations_inventory)
        register_notes_tool()
