from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Recorded sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import signals as auth_signals
        from django.core.servers.basehttp import WSGIRequestHandler

        from . import signin

        # Django's only hook for sign-ins made by any view (ours, the admin's): sessions_app/signin.py.
        auth_signals.user_logged_in.connect(signin.record_login, dispatch_uid="replay-audit-login")
        auth_signals.user_login_failed.connect(signin.record_login_failed, dispatch_uid="replay-audit-login-failed")
        auth_signals.user_logged_out.connect(signin.record_logout, dispatch_uid="replay-audit-logout")

        # Django's own server (`make run`, and `runserver --insecure` for a small team,
        # docs/deployment.md) leaves Nagle's algorithm on: a response's body then waits for the
        # client to acknowledge its headers, up to 40 ms a request on Linux. That was a quarter
        # of the ingest API's time for batches of 1,000 events (bench/ingest_bench.py). This is
        # socketserver's own switch for it.
        WSGIRequestHandler.disable_nagle_algorithm = True
