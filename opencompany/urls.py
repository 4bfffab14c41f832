from django.contrib import admin
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from opencompany.core import views as core_views
from opencompany.core.health import healthz
from opencompany.core.logins import login_throttled

api_v1: list[URLPattern | URLResolver] = [
    path("auth/token", core_views.AuthTokenView.as_view(), name="auth-token"),
    path("auth/token/revoke", core_views.RevokeTokenView.as_view(), name="auth-token-revoke"),
    path("", include("graphs.api.urls")),
    path("", include("conversations.api.urls")),
    path("", include("memory.api.urls")),
    path("", include("chat.api.urls")),
]

urlpatterns = [
    # The admin's sign-in shares the throttle of the login form and the token endpoint.
    path("admin/login/", login_throttled(admin.site.login), name="admin-login"),
    path("healthz", healthz, name="healthz"),
    # Pages without an icon link of their own (the admin) get the product's icon, not a 404.
    path("favicon.ico", RedirectView.as_view(url=static("chat/icon.svg"), permanent=True)),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", core_views.api_docs, name="api-docs"),
    path("", include("chat.urls")),
]

handler404 = "opencompany.core.views.not_found"
handler500 = "opencompany.core.views.server_error"
