"""`manage.py schedule_jobs`: create or repair the django-q2 schedules (the daily retention
clean-up; the import watchdog and the settling of OpenTelemetry traces, each minute).
Idempotent; `manage.py serve` does the same on every start, so this is for deployments that run
the workers without it."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from sessions_app.jobs import schedule_jobs


class Command(BaseCommand):
    help = "Create (or repair) the schedules: the daily retention clean-up, the import watchdog and the trace settling."

    def handle(self, *args, **options) -> None:
        for schedule in schedule_jobs():
            every = "daily" if schedule.schedule_type == schedule.DAILY else f"every {schedule.minutes} min"
            self.stdout.write(
                f"Scheduled {schedule.name}: {schedule.func} {every}, next run {schedule.next_run:%Y-%m-%d %H:%M} UTC"
            )
