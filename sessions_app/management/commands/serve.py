"""`manage.py serve`: the production server (web processes + job workers), docs/deployment.md."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from replay_site.serving import serve
from sessions_app.jobs import schedule_jobs


class Command(BaseCommand):
    help = "Serve Replay with granian (several web processes) and run the job workers; Ctrl-C stops both."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--web-processes", type=int, default=settings.WEB_PROCESSES)
        parser.add_argument("--job-workers", type=int, default=settings.Q_CLUSTER["workers"])

    def handle(self, *args, **options) -> None:
        # The schedules first (idempotent): without them no worker runs the watchdog, so /healthz
        # answers 503 for ever, and nothing is cleaned up or settled (docs/deployment.md).
        try:
            schedule_jobs()
        except DatabaseError as exc:
            raise CommandError(f"the database is not ready ({exc}): run `manage.py migrate` first") from None
        code = serve(host=options["host"], port=options["port"], web_processes=options["web_processes"],
                     job_workers=options["job_workers"])  # fmt: skip
        if code:
            raise CommandError(f"a server process stopped on its own (exit status {code})", returncode=code)
