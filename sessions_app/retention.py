"""Retention: delete sessions older than REPLAY_RETENTION_DAYS (unset = keep forever).

Sessions somebody checkpointed are kept unless asked otherwise, and a live session that is still
receiving events is never deleted under its agent. Called by the daily job (jobs.run_cleanup)
and by `manage.py cleanup_sessions`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import models, transaction
from django.db.models import Exists, OuterRef, Q, Sum
from django.utils import timezone

from .models import Checkpoint, Session

# Sessions deleted per transaction: the events go with them (DB_CASCADE), so a chunk can be
# millions of rows; small chunks keep each transaction and its locks short.
DELETE_CHUNK = 50


@dataclass
class CleanupResult:
    days: float | None
    cutoff: datetime | None
    dry_run: bool
    sessions: int = 0
    events: int = 0
    kept_checkpointed: int = 0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["cutoff"] = self.cutoff.isoformat() if self.cutoff else None
        return out


def expired_sessions(*, cutoff: datetime, include_checkpointed: bool) -> models.QuerySet:
    candidates = Session.objects.filter(created_at__lt=cutoff).exclude(
        Q(status=Session.Status.LIVE) & Q(updated_at__gte=cutoff)
    )
    if include_checkpointed:
        return candidates
    return candidates.exclude(Exists(Checkpoint.objects.filter(session=OuterRef("pk"))))


def delete_expired_sessions(
    *,
    days: float | None,
    include_checkpointed: bool = False,
    dry_run: bool = False,
    now: datetime | None = None,
) -> CleanupResult:
    """Delete (or with dry_run, count) sessions created more than `days` days ago."""
    if days is None:
        return CleanupResult(days=None, cutoff=None, dry_run=dry_run)
    cutoff = (now or timezone.now()) - timedelta(days=days)
    result = CleanupResult(days=days, cutoff=cutoff, dry_run=dry_run)
    doomed = expired_sessions(cutoff=cutoff, include_checkpointed=include_checkpointed)
    if not include_checkpointed:
        result.kept_checkpointed = expired_sessions(cutoff=cutoff, include_checkpointed=True).count() - doomed.count()
    if dry_run:
        totals = doomed.aggregate(events=Sum("event_count"))
        result.sessions = doomed.count()
        result.events = totals["events"] or 0
        return result
    while True:
        ids = list(doomed.order_by("pk").values_list("pk", flat=True)[:DELETE_CHUNK])
        if not ids:
            return result
        with transaction.atomic():
            chunk = Session.objects.filter(pk__in=ids)
            result.events += chunk.aggregate(events=Sum("event_count"))["events"] or 0
            result.sessions += chunk.delete()[1].get(Session._meta.label, 0)
