from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "opencompany.core"
    label = "core"
    verbose_name = "OpenCompany core"
