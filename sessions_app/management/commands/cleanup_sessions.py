"""`manage.py cleanup_sessions [--days N] [--dry-run] [--include-checkpointed]`: retention by hand.

Each project's own retention (its page's setting) wins; --days stands in for REPLAY_RETENTION_DAYS
for the projects without one. With neither, only projects with their own retention are cleaned.
Then, as the daily job does, the kept originals past their grace period (sessions_app/originals.py).
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from sessions_app.originals import delete_expired_originals
from sessions_app.retention import delete_expired_sessions


class Command(BaseCommand):
    help = (
        "Delete sessions older than their project's retention, or N days where a project has none "
        "(checkpointed sessions are kept unless asked)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--days", type=float, help="age in days for projects without their own (default REPLAY_RETENTION_DAYS)"
        )
        parser.add_argument("--dry-run", action="store_true", help="only count what would go")
        parser.add_argument("--include-checkpointed", action="store_true", help="delete checkpointed sessions too")

    def handle(self, *args, days: float | None, dry_run: bool, include_checkpointed: bool,
               **options) -> None:  # fmt: skip
        if days is not None and days <= 0:
            raise CommandError("--days must be a positive number of days")
        if days is None:
            days = settings.RETENTION_DAYS
            if days is None:
                self.stdout.write(
                    "REPLAY_RETENTION_DAYS is unset and no --days given: only projects with their own retention."
                )
        result = delete_expired_sessions(days=days, include_checkpointed=include_checkpointed, dry_run=dry_run)
        verb = "Would delete" if dry_run else "Deleted"
        for outcome in result.projects:
            if outcome.sessions or outcome.kept_checkpointed:
                self.stdout.write(
                    f"  {outcome.project}: {outcome.sessions} session(s) ({outcome.events} events) created before "
                    f"{outcome.cutoff:%Y-%m-%d %H:%M} UTC ({outcome.days:g} days); kept {outcome.kept_checkpointed} "
                    "checkpointed."
                )
        self.stdout.write(
            f"{verb} {result.sessions} session(s) ({result.events} events) in {len(result.projects)} project(s) "
            f"with a retention; kept {result.kept_checkpointed} checkpointed."
        )
        originals = delete_expired_originals(dry_run=dry_run)
        self.stdout.write(
            f"{verb} {originals.files} kept original(s) ({originals.bytes} bytes) of failed uploads or deleted "
            f"sessions, older than {originals.grace_days:g} days (REPLAY_ORIGINALS_GRACE_DAYS)."
        )
