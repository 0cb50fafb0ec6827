from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from .api import api
from .health import healthz

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("api/", api.urls),
    path("", include("sessions_app.urls")),
]

# Unmatched URLs under /api/ answer JSON, as the API does (replay_site/errors.py).
handler400 = "replay_site.errors.bad_request_page"
handler404 = "replay_site.errors.not_found_page"
