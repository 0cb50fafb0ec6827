"""Retention: delete each project's sessions older than its retention.

A project's `retention_days` (set by its admins on the project page) wins; a project without one
follows the server's REPLAY_RETENTION_DAYS, and with that unset too its sessions are kept
forever. Sessions somebody checkpointed are kept unless asked otherwise, and a live session that
is still receiving events is never deleted under its agent. Each run that deletes something
writes `retention.run` to the audit log of every project it deleted from. The originals of the
uploads whose sessions are all gone follow after a grace period (sessions_app/originals.py).
Called by the daily job (jobs.run_cleanup) and by `manage.py cleanup_sessions`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.db import models, transaction
from django.db.models import Exists, OuterRef, Q, Sum
from django.utils import timezone

from . import audit
from .deletion import hold_for_delete, note_shortened
from .models import Checkpoint, Project, Session
from .models.planning import planned_for_values
from .originals import jobs_holding, note_orphans

# Sessions deleted per transaction: the events go with them (DB_CASCADE), so a chunk can be
# millions of rows; small chunks keep each transaction and its locks short.
DELETE_CHUNK = 50

# The audit log's actor for what no person asked for in a request.
ACTOR = "retention"


@dataclass
class ProjectCleanup:
    """What one project's retention deleted (or, in a dry run, would delete)."""

    project: str  # slug
    days: float
    cutoff: datetime
    sessions: int = 0
    events: int = 0
    kept_checkpointed: int = 0
    tour_stops: dict[str, int] = field(default_factory=dict)  # stops lost, by tour id (as text)

    def to_dict(self) -> dict:
        return asdict(self) | {"cutoff": self.cutoff.isoformat()}


@dataclass
class CleanupResult:
    days: float | None  # the server's default, which projects without their own follow
    cutoff: datetime | None  # of that default
    dry_run: bool
    projects: list[ProjectCleanup] = field(default_factory=list)

    @property
    def sessions(self) -> int:
        return sum(p.sessions for p in self.projects)

    @property
    def events(self) -> int:
        return sum(p.events for p in self.projects)

    @property
    def kept_checkpointed(self) -> int:
        return sum(p.kept_checkpointed for p in self.projects)

    def to_dict(self) -> dict:
        return {
            "days": self.days, "cutoff": self.cutoff.isoformat() if self.cutoff else None, "dry_run": self.dry_run,
            "sessions": self.sessions, "events": self.events, "kept_checkpointed": self.kept_checkpointed,
            "projects": [p.to_dict() for p in self.projects if p.sessions or p.kept_checkpointed],
        }  # fmt: skip


def expired_sessions(*, project: Project, cutoff: datetime, include_checkpointed: bool) -> models.QuerySet:
    """The project's sessions created before `cutoff`, except live ones still receiving events
    (and, unless included, checkpointed ones). Uses the (project, -created_at) index."""
    candidates = Session.objects.filter(project=project, created_at__lt=cutoff).exclude(
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
    """Delete (or with dry_run, count) each project's sessions created more than its retention
    ago: its own `retention_days`, else `days` (the server's default; None keeps them)."""
    now = now or timezone.now()
    result = CleanupResult(days=days, cutoff=now - timedelta(days=days) if days else None, dry_run=dry_run)
    projects = Project.objects.order_by("pk").only("pk", "slug", "retention_days")
    if not days:
        projects = projects.filter(retention_days__isnull=False)
    for project in projects:
        project_days = project.retention_days or days
        if not project_days:
            continue
        outcome = ProjectCleanup(project=project.slug, days=project_days, cutoff=now - timedelta(days=project_days))
        # Planned for this cutoff: planned for any, the chunk's look-up may walk every session of
        # the table by id to find none expired, the usual outcome of a daily run
        # (models/planning.py).
        with planned_for_values():
            _clean_project(project, outcome, include_checkpointed=include_checkpointed, dry_run=dry_run)
        result.projects.append(outcome)
    return result


def _clean_project(project: Project, outcome: ProjectCleanup, *, include_checkpointed: bool, dry_run: bool) -> None:
    doomed = expired_sessions(project=project, cutoff=outcome.cutoff, include_checkpointed=include_checkpointed)
    if not include_checkpointed:
        every = expired_sessions(project=project, cutoff=outcome.cutoff, include_checkpointed=True)
        outcome.kept_checkpointed = every.count() - doomed.count()
    if dry_run:
        outcome.sessions = doomed.count()
        outcome.events = doomed.aggregate(events=Sum("event_count"))["events"] or 0
        return
    try:
        while ids := list(doomed.order_by("pk").values_list("pk", flat=True)[:DELETE_CHUNK]):
            with transaction.atomic():
                chunk = Session.objects.filter(pk__in=ids)
                shortened = hold_for_delete(project.pk, chunk)
                events = chunk.aggregate(events=Sum("event_count"))["events"] or 0
                jobs = jobs_holding(chunk)
                outcome.sessions += chunk.delete()[1].get(Session._meta.label, 0)
                outcome.events += events
                note_orphans(job_ids=jobs)  # their originals go after the grace period
                # A tour that stopped on them says so, as when one is deleted from its player.
                note_shortened(shortened, actor=ACTOR, by="retention")
                for tour, stops in shortened:
                    outcome.tour_stops[str(tour.pk)] = outcome.tour_stops.get(str(tour.pk), 0) + stops
    finally:
        # Each chunk commits on its own, so a run stopped half-way has still deleted what it
        # counted: the entry says so either way. Counts and the cutoff only, never contents.
        if outcome.sessions:
            audit.record(
                action="retention.run", actor=ACTOR, project=project, target=f"project:{project.slug}",
                detail={"days": outcome.days, "cutoff": outcome.cutoff.isoformat(), "sessions": outcome.sessions,
                        "events": outcome.events, "include_checkpointed": include_checkpointed,
                        **({"tour_stops": outcome.tour_stops} if outcome.tour_stops else {})},
            )  # fmt: skip
