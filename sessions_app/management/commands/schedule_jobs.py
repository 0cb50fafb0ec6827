"""`manage.py schedule_jobs`: create or repair the django-q2 schedules (the daily retention
clean-up, the import watchdog each minute). Idempotent; `make run` calls it before starting the
worker."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from sessions_app.jobs import schedule_jobs


class Command(BaseCommand):
    help = "Create (or repair) the daily retention clean-up and the import watchdog schedules."

    def handle(self, *args, **options) -> None:
        for schedule in schedule_jobs():
            every = "daily" if schedule.schedule_type == schedule.DAILY else f"every {schedule.minutes} min"
            self.stdout.write(
                f"Scheduled {schedule.name}: {schedule.func} {every}, next run {schedule.next_run:%Y-%m-%d %H:%M} UTC"
            )
