"""`manage.py schedule_jobs`: create or repair the django-q2 schedules (the daily retention
clean-up). Idempotent; `make run` calls it before starting the worker."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from sessions_app.jobs import schedule_jobs


class Command(BaseCommand):
    help = "Create (or repair) the daily retention clean-up schedule."

    def handle(self, *args, **options) -> None:
        schedule = schedule_jobs()
        self.stdout.write(
            f"Scheduled {schedule.name}: {schedule.func} daily, next run {schedule.next_run:%Y-%m-%d %H:%M} UTC"
        )
