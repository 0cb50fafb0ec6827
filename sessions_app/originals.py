"""The kept originals of uploads (under REPLAY_DATA_DIR), deleted once nothing needs them.

An original is kept while its import may still read it and while every session it gave exists
(the original export and evidence bundles give its bytes). It is deleted REPLAY_ORIGINALS_GRACE_DAYS
after its job failed (`finished_at`) or lost a session (`orphaned_at`: set by the session
deletions, `note_orphans`, and by the clean-up itself for a job it finds without sessions), so a
failed upload can still be looked at and a deletion regretted for that long. An original that
lost one of several sessions holds that session's records too: from then on it is given to no
one (replay/exports.original_file), its other sessions keep their events. A job keeps its row
(the imports page lists it) with `original_deleted_at` set. Called by the daily clean-up job
(jobs.run_cleanup) and by `manage.py cleanup_sessions`, after retention has run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from .models import ImportJob, Session

logger = logging.getLogger(__name__)

_FINISHED = (ImportJob.Status.DONE, ImportJob.Status.FAILED)


@dataclass
class OriginalsCleanup:
    """What a clean-up deleted (or, in a dry run, would delete)."""

    grace_days: float
    cutoff: datetime
    files: int = 0
    bytes: int = 0

    def to_dict(self) -> dict:
        return {"grace_days": self.grace_days, "cutoff": self.cutoff.isoformat(), "files": self.files,
                "bytes": self.bytes}  # fmt: skip


def _without_sessions(jobs: QuerySet) -> QuerySet:
    return jobs.exclude(Exists(Session.objects.filter(import_job=OuterRef("pk"))))


def jobs_holding(sessions: QuerySet) -> set[int]:
    """The uploads whose files hold these sessions' records, read before they are deleted: each
    one's own, and every other upload of its project that recognised it as a duplicate (the same
    records in another file: a deleted session's could be read there)."""
    rows = list(sessions.order_by().values_list("pk", "import_job_id", "project_id"))
    held = {job for _, job, _ in rows if job is not None}
    pks = {pk for pk, _, _ in rows}
    for job, result in (
        ImportJob.objects.filter(project__in={project for _, _, project in rows}, original_deleted_at__isnull=True)
        .exclude(pk__in=held)
        .values_list("pk", "result")
        .iterator()
    ):
        if isinstance(result, list) and any(isinstance(e, dict) and e.get("session") in pks for e in result):
            held.add(job)
    return held


def note_orphans(*, job_ids: Iterable[int | None], now: datetime | None = None) -> int:
    """After sessions were deleted: mark the jobs among `job_ids` (each held a deleted session's
    records: `jobs_holding`), so their originals are given no more and go after the grace period,
    whether or not other sessions of theirs remain, and whether or not their import still runs."""
    ids = {pk for pk in job_ids if pk is not None}
    if not ids:
        return 0
    return ImportJob.objects.filter(pk__in=ids, orphaned_at__isnull=True).update(orphaned_at=now or timezone.now())


def expired_originals(*, cutoff: datetime) -> QuerySet:
    """The jobs whose kept original is due: finished, and orphaned (it lost a session) before
    `cutoff`, or failed before it with no session of theirs left."""
    # A folder's job keeps no copy (stored_path ""): nothing of it is ever due.
    kept = ImportJob.objects.filter(status__in=_FINISHED, original_deleted_at__isnull=True).exclude(stored_path="")
    failed = _without_sessions(
        kept.filter(orphaned_at__isnull=True, status=ImportJob.Status.FAILED, finished_at__lt=cutoff)
    )
    return kept.filter(Q(orphaned_at__lt=cutoff) | Q(pk__in=failed.values("pk")))


def delete_expired_originals(
    *, grace_days: float | None = None, dry_run: bool = False, now: datetime | None = None
) -> OriginalsCleanup:
    """Delete (or with dry_run, count) the originals due (`expired_originals`), marking each
    job; a job found without sessions and not yet marked is marked now (its grace starts)."""
    now = now or timezone.now()
    grace_days = settings.ORIGINALS_GRACE_DAYS if grace_days is None else grace_days
    result = OriginalsCleanup(grace_days=grace_days, cutoff=now - timedelta(days=grace_days))
    if not dry_run:
        # A deletion that did not say so (or a job whose every session was a duplicate of one
        # stored before): its grace starts now rather than from some earlier moment.
        unmarked = ImportJob.objects.filter(status=ImportJob.Status.DONE, orphaned_at__isnull=True,
                                            original_deleted_at__isnull=True)  # fmt: skip
        _without_sessions(unmarked).update(orphaned_at=now)
    for job in expired_originals(cutoff=result.cutoff).only("pk", "stored_path", "bytes_total").iterator():
        result.files += 1
        result.bytes += job.bytes_total
        if not dry_run:
            _delete_file(job.stored_path)
            ImportJob.objects.filter(pk=job.pk).update(original_deleted_at=now)
    return result


def _delete_file(stored_path: str) -> None:
    """Delete a kept original; only ever a file under REPLAY_DATA_DIR."""
    if not stored_path:
        return
    path = Path(stored_path)
    try:
        inside = path.resolve().is_relative_to(Path(settings.DATA_DIR).resolve())
    except OSError:
        inside = False
    if not inside:
        logger.warning("not deleting %s: outside REPLAY_DATA_DIR", stored_path)
        return
    path.unlink(missing_ok=True)
