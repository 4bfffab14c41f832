from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Owner chat"

    def ready(self) -> None:
        # Imported here, not at module level: they import models, which need the app registry.
        from chat.consumers import sockets_close_for_restart
        from chat.executor import dispatch_run, runtime_problem
        from chat.executor.live import live_runs_drain
        from chat.inventory import chat_inventory
        from chat.services import chat_owner_change_hook, chat_reset_hook, run_dispatcher_register
        from chat.stores import chat_store_for_default_database, chat_store_install
        from chat.watchdog import workers_health
        from graphs.hooks import (
            register_inventory,
            register_owner_change_hook,
            register_reset_hook,
            register_runtime_check,
        )
        from opencompany.core.health import register_health_check
        from opencompany.core.lifecycle import register_shutdown_step

        chat_store_install(chat_store_for_default_database())
        run_dispatcher_register(dispatch=dispatch_run)
        register_reset_hook("chat", chat_reset_hook)
        register_health_check("workers", workers_health)
        register_owner_change_hook("chat", chat_owner_change_hook)
        register_runtime_check("chat", runtime_problem)
        register_inventory("chat", chat_inventory)
        # On SIGTERM: the live answers first (their sockets still open), then the sockets.
        register_shutdown_step("chat.runs", live_runs_drain, order=10)
        register_shutdown_step("chat.sockets", sockets_close_for_restart, order=20)
