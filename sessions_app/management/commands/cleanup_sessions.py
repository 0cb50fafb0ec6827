"""`manage.py cleanup_sessions --days N [--dry-run] [--include-checkpointed]`: retention by hand.

Without --days it uses REPLAY_RETENTION_DAYS, and does nothing when that is unset.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from sessions_app.retention import delete_expired_sessions


class Command(BaseCommand):
    help = "Delete sessions older than N days (checkpointed sessions are kept unless asked)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--days", type=float, help="age in days (default REPLAY_RETENTION_DAYS)")
        parser.add_argument("--dry-run", action="store_true", help="only count what would go")
        parser.add_argument("--include-checkpointed", action="store_true", help="delete checkpointed sessions too")

    def handle(self, *args, days: float | None, dry_run: bool, include_checkpointed: bool,
               **options) -> None:  # fmt: skip
        if days is None:
            days = settings.RETENTION_DAYS
            if days is None:
                self.stdout.write("REPLAY_RETENTION_DAYS is unset and no --days given: keeping every session.")
                return
        if days <= 0:
            raise CommandError("--days must be a positive number of days")
        result = delete_expired_sessions(days=days, include_checkpointed=include_checkpointed, dry_run=dry_run)
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(
            f"{verb} {result.sessions} session(s) ({result.events} events) created before "
            f"{result.cutoff:%Y-%m-%d %H:%M} UTC; kept {result.kept_checkpointed} checkpointed."
        )
