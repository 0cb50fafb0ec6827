from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from sessions_app.api.otlp import export_traces
from sessions_app.signin import FORM_METHODS, PasswordChangeView

from .api import api
from .health import healthz

urlpatterns = [
    # Django's form views take PUT as POST; a browser's form sends only GET and POST.
    path("accounts/login/", auth_views.LoginView.as_view(http_method_names=FORM_METHODS), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # A member's own password (accounts made by `manage.py create_user` start with a printed one).
    # Its current password is checked as a sign-in is, under the same lockout (signin.py).
    path("accounts/password/", PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    # The admin's own page would check the current password without that lockout: ours there too.
    path("admin/password_change/", PasswordChangeView.as_view()),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("api/", api.urls),
    # OpenTelemetry's OTLP/HTTP path, where exporters send traces (sessions_app/api/otlp.py).
    path("v1/traces", export_traces, name="otlp_traces"),
    path("", include("sessions_app.urls")),
]

# Unmatched URLs under /api/ answer JSON, as the API does (replay_site/errors.py).
handler400 = "replay_site.errors.bad_request_page"
handler403 = "replay_site.errors.forbidden_page"
handler404 = "replay_site.errors.not_found_page"
