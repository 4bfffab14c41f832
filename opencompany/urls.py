from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from opencompany.core import views as core_views
from opencompany.core.health import healthz

api_v1: list[URLPattern | URLResolver] = [
    path("auth/token", core_views.AuthTokenView.as_view(), name="auth-token"),
    path("", include("graphs.api.urls")),
    path("", include("conversations.api.urls")),
    path("", include("memory.api.urls")),
    path("", include("chat.api.urls")),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("", include("chat.urls")),
]

handler404 = "opencompany.core.views.not_found"
handler500 = "opencompany.core.views.server_error"
