from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Recorded sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.servers.basehttp import WSGIRequestHandler

        # Django's own server (`make run`, and `runserver --insecure` for a small team,
        # docs/deployment.md) leaves Nagle's algorithm on: a response's body then waits for the
        # client to acknowledge its headers, up to 40 ms a request on Linux. That was a quarter
        # of the ingest API's time for batches of 1,000 events (bench/ingest_bench.py). This is
        # socketserver's own switch for it.
        WSGIRequestHandler.disable_nagle_algorithm = True
