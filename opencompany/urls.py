from django.contrib import admin
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from opencompany.core import views as core_views

api_v1: list[URLPattern | URLResolver] = [
    path("auth/token", core_views.AuthTokenView.as_view(), name="auth-token"),
    path("", include("graphs.api.urls")),
    path("", include("conversations.api.urls")),
    path("", include("memory.api.urls")),
    path("", include("chat.api.urls")),
]

urlpatterns = [
    # Pages without an icon link of their own (the admin) get the product's icon, not a 404.
    path("favicon.ico", RedirectView.as_view(url=static("chat/icon.svg"), permanent=True)),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("", include("chat.urls")),
]

handler404 = "opencompany.core.views.not_found"
handler500 = "opencompany.core.views.server_error"
