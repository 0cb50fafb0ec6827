"""`manage.py serve`: the production server (web processes + job workers), docs/deployment.md."""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from replay_site.serving import serve
from sessions_app.jobs import schedule_jobs


def whole(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high], refused by name before anything starts
    (a port of 99999 reached granian, which stopped with a traceback; 0 web processes too)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    return parse


def ip_address(text: str) -> str:
    """An argparse type: granian binds an IP address only ("localhost" and 999.1.1.1 stopped it
    with a traceback)."""
    try:
        if "%" in text:  # a scoped IPv6 address, which granian refuses
            raise ValueError(text)
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address (127.0.0.1, 0.0.0.0, ::1)") from None


class Command(BaseCommand):
    help = "Serve Replay with granian (several web processes) and run the job workers; Ctrl-C stops both."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", type=ip_address, default="127.0.0.1",
                            help="IP address to listen on: 0.0.0.0 for every one (default: %(default)s)")  # fmt: skip
        parser.add_argument("--port", type=whole(1, 65535), default=8000, help="port (default: %(default)s)")
        parser.add_argument("--web-processes", type=whole(1, settings.PROCESSES_MAX), default=settings.WEB_PROCESSES,
                            help="granian web processes (default: REPLAY_WEB_PROCESSES, here %(default)s)")  # fmt: skip
        parser.add_argument("--job-workers", type=whole(1, settings.PROCESSES_MAX), default=settings.Q_CLUSTER["workers"],
                            help="job worker processes (default: REPLAY_Q_WORKERS, here %(default)s)")  # fmt: skip

    def handle(self, *args, **options) -> None:
        # The schedules first (idempotent): without them no worker runs the watchdog, so /healthz
        # answers 503 for ever, and nothing is cleaned up or settled (docs/deployment.md).
        try:
            schedule_jobs()
        except DatabaseError as exc:
            raise CommandError(f"the database is not ready ({exc}): run `manage.py migrate` first") from None
        try:
            code = serve(host=options["host"], port=options["port"], web_processes=options["web_processes"],
                         job_workers=options["job_workers"])  # fmt: skip
        except ImproperlyConfigured as refused:  # a setting that cannot serve: said, not a traceback
            raise CommandError(str(refused)) from None
        if code:
            raise CommandError(f"a server process stopped on its own (exit status {code})", returncode=code)
