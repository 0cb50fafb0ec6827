"""`GET /healthz`: what a load balancer or process manager asks. 200 when the database answers
and a job worker ran the watchdog (sessions_app/jobs.py, every minute) within WORKERS_STALE;
otherwise 503, saying which part is down. It names no project data and needs no sign-in."""

from __future__ import annotations

from datetime import timedelta

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from sessions_app.jobs import last_watchdog_run

WORKERS_STALE = timedelta(minutes=3)  # the watchdog runs every minute


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        last = last_watchdog_run()
    except DatabaseError as exc:
        return JsonResponse({"database": f"error: {type(exc).__name__}", "workers": {"ok": False}}, status=503)
    age = (timezone.now() - last).total_seconds() if last else None
    workers_ok = age is not None and age <= WORKERS_STALE.total_seconds()
    body = {
        "database": "ok",
        "workers": {"ok": workers_ok, "last_heartbeat": last.isoformat() if last else None, "age_seconds": age},
    }
    return JsonResponse(body, status=200 if workers_ok else 503)
