from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "opencompany.core"
    label = "core"
    verbose_name = "OpenCompany core"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed

        from opencompany.core import logins, tokens

        user_login_failed.connect(logins.on_user_login_failed, dispatch_uid="core.login_failed")
        user_logged_in.connect(logins.on_user_logged_in, dispatch_uid="core.logged_in")
        user_logged_out.connect(tokens.on_user_logged_out, dispatch_uid="core.logged_out")
