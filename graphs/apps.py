from django.apps import AppConfig


class GraphsConfig(AppConfig):
    name = "graphs"
    verbose_name = "Workflow graphs"

    def ready(self) -> None:
        from graphs.specs import register_builtin_node_specs
        from opencompany.llm.registry import load_providers

        load_providers()  # a path in OPENCOMPANY_PROVIDERS that does not load fails the start
        register_builtin_node_specs()
