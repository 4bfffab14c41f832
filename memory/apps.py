from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from graphs.hooks import (
            register_eraser,
            register_inventory,
            register_owner_change_hook,
            register_reset_hook,
        )
        from memory.inventory import memory_inventory
        from memory.search import backend_for_database, recall_backend_use
        from memory.services import memory_erase, memory_owner_change_hook
        from memory.stores import memory_store_use, store_for_database
        from memory.tools import MEMORY_TOOL, memory_reset_hook
        from opencompany.llm.tools import register_tool

        memory_store_use(store_for_database())
        recall_backend_use(backend_for_database())
        register_tool(MEMORY_TOOL)
        register_reset_hook("memory", memory_reset_hook)
        register_eraser("memory", memory_erase)
        register_owner_change_hook("memory", memory_owner_change_hook)
        register_inventory("memory", memory_inventory)
