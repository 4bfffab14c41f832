from django.apps import AppConfig


class GraphsConfig(AppConfig):
    name = "graphs"
    verbose_name = "Workflow graphs"

    def ready(self) -> None:
        from graphs.specs import register_builtin_node_specs

        register_builtin_node_specs()
