from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, path

from chat import views
from opencompany.core.logins import login_throttled

app_name = "chat"

urlpatterns: list[URLPattern | URLResolver] = [
    path(
        "accounts/login/",
        login_throttled(
            auth_views.LoginView.as_view(template_name="chat/login.html", redirect_authenticated_user=True)
        ),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.workflow_list, name="workflows"),
    path("chat/<str:workflow_id>/", views.chat_page, name="chat"),
]
