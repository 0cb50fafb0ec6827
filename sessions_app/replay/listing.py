"""The sessions page's query: filters, sort and keyset pages (never OFFSET: a page deep in a
long list costs the same as the first, docs/benchmarks.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db import models
from django.db.models import F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..models import ImportJob, Project, Review, Session, SessionQuerySet
from .sign_offs import newest_broken

PER_PAGE = 50
# The review filter's value for a session without a sign-off (the others are verdicts).
UNREVIEWED = "unreviewed"

# Sort keys of the sessions page: URL value -> (column, descending). Every column is non-null,
# so keyset pagination on (column, id) is total: `start_time` is when a session ran, or, without
# any time of its own, when it was stored (SessionQuerySet.with_start_time).
SESSION_SORTS: dict[str, tuple[str, bool]] = {
    "-started": ("start_time", True),
    "started": ("start_time", False),
    "-created": ("created_at", True),
    "created": ("created_at", False),
    "-cost": ("cost_usd", True),
    "-tokens": ("tokens", True),
    "-steps": ("step_count", True),
    "-events": ("event_count", True),
    "-errors": ("error_count", True),
    "-duration": ("elapsed_ms", True),
    # The API's one order: its `before` cursor is a session id (the page offers SORT_LABELS only).
    "-id": ("id", True),
}


def parse_cursor(value: str | None, sort: str) -> tuple[Any, int] | None:
    """`<sort value>~<id>` of the row a page starts after (or ends before); None when malformed."""
    if not value or "~" not in value:
        return None
    raw, _, pk = value.rpartition("~")
    column, _ = SESSION_SORTS[sort]
    try:
        key: Any
        if column in {"created_at", "start_time"}:
            key = datetime.fromisoformat(raw)
            if key.tzinfo is None:
                return None
        elif column in {"cost_usd", "elapsed_ms"}:
            key = float(raw)
        else:
            key = int(raw)
        return key, int(pk)
    except ValueError:
        return None


def format_cursor(session: Session, sort: str) -> str:
    column, _ = SESSION_SORTS[sort]
    value = getattr(session, column)
    text = value.isoformat() if isinstance(value, datetime) else repr(value)
    return f"{text}~{session.pk}"


@dataclass
class SessionPage:
    sessions: list[Session]
    total: int
    next_cursor: str | None  # `after=` of the following page
    previous_cursor: str | None  # `before=` of the preceding page
    is_first: bool


def filter_sessions(
    sessions: SessionQuerySet,
    *,
    q: str = "",
    project: Project | str | None = None,
    format: str = "",
    status: str = "",
    model: str = "",
    start: date | None = None,
    end: date | None = None,
    errors: str = "",
    review: str = "",
) -> SessionQuerySet:
    """The sessions of `sessions` (the caller's, sessions_app/access.py) matching the filters,
    for the page and the API alike; `project` is a Project or a slug, `model` matches the
    session's model or any model it used, `review` the newest sign-off's verdict (or
    `unreviewed`). Each session comes with that verdict as `review_state` (None: unreviewed)."""
    sessions = sessions.in_project(project).matching(q).annotate(review_state=_newest_sign_off())
    if format:
        sessions = sessions.filter(source_format=format)
    if status:
        sessions = sessions.filter(status=status)
    if model:
        sessions = sessions.filter(Q(model__icontains=model) | Q(models_used__icontains=model))
    # A session's date is when it ran (its first event), not when it was imported.
    if start and (since := day_start(start)) is not None:
        sessions = sessions.filter(started_at__gte=since)
    if end and (until := day_start(end, days_after=1)) is not None:
        sessions = sessions.filter(started_at__lt=until)
    has_errors = Q(error_count__gt=0) | Q(step_error_count__gt=0)
    if errors == "yes":
        sessions = sessions.filter(has_errors)
    elif errors == "no":
        sessions = sessions.exclude(has_errors)
    if review == UNREVIEWED:
        sessions = sessions.filter(review_state__isnull=True)
    elif review in Review.Verdict.values:
        sessions = sessions.filter(review_state=review)
    return sessions


def _newest_sign_off(column: str = "verdict") -> Subquery:
    """A column of the session's newest sign-off made here (its verdict, the last seq it covers)."""
    # A correlated subquery, one probe of the review_session_created index per row: the list
    # stays one query however many rows it shows, and filters on it in the same query.
    # A sign-off restored from a bundle is another server's word: never the review state here.
    newest = Review.objects.filter(session=OuterRef("pk"), restored_from="").order_by("-created_at", "-id")
    return Subquery(newest.values(column)[:1])


def list_sessions(
    *,
    sessions: SessionQuerySet,
    filters: dict[str, Any],
    sort: str,
    after: tuple[Any, int] | None = None,
    before: tuple[Any, int] | None = None,
    per_page: int = PER_PAGE,
) -> SessionPage:
    """One page of the filtered sessions in `sort` order, starting after `after` or ending
    before `before` (a row's sort value and id). `sessions` are the caller's
    (access.sessions_visible_to). Each row comes with `source_file`, `uploader` and `import_problems` (its import
    job's file name and creator; None for a session made through the API)."""
    sessions = filter_sessions(sessions, **filters)
    total = sessions.count()
    column, descending = SESSION_SORTS[sort]
    if column == "start_time":
        sessions = sessions.with_start_time()
    order = [f"-{column}", "-id"] if descending else [column, "id"]
    backwards = before is not None and after is None
    cursor = before if backwards else after
    if cursor is not None:
        value, pk = cursor
        # Rows strictly past the cursor in the page's direction, id breaking ties.
        forward = descending != backwards
        op = "lt" if forward else "gt"
        sessions = sessions.filter(Q(**{f"{column}__{op}": value}) | Q(**{column: value, f"id__{op}": pk}))
    if backwards:
        order = [o[1:] if o.startswith("-") else f"-{o}" for o in order]
    # The file and the uploader of each row are its import job's, through the session's foreign
    # key: one job a session at most, so the join adds no row (a session re-imported keeps the
    # job that stored it; the jobs that found it already stored only name it in their result).
    sessions = sessions.annotate(source_file=F("import_job__original_name"), uploader=F("import_job__created_by"),
                                 import_problems=Coalesce(F("import_job__problem_count"), 0),
                                 review_last_seq=_newest_sign_off("last_seq"))  # fmt: skip
    rows = list(sessions.select_related("project").order_by(*order)[: per_page + 1])
    more = len(rows) > per_page
    rows = rows[:per_page]
    # An approval a later verification found broken is shown with its warning, as the player does.
    broken = newest_broken(rows)
    for row in rows:
        row.review_broken = row.pk in broken
        # A live session that grew after its newest sign-off: the events after it are unsigned.
        row.review_unsigned = (
            max(0, row.event_count - 1 - row.review_last_seq)
            if row.review_state and row.review_last_seq is not None
            else 0
        )
    if backwards:
        rows.reverse()
        has_next, has_previous = True, more
    else:
        has_next, has_previous = more, cursor is not None
    return SessionPage(
        sessions=rows,
        total=total,
        next_cursor=format_cursor(rows[-1], sort) if rows and has_next else None,
        previous_cursor=format_cursor(rows[0], sort) if rows and has_previous else None,
        is_first=not has_previous,
    )


def recent_jobs(*, jobs: models.QuerySet[ImportJob], created_by: str, limit: int = 10) -> list[ImportJob]:
    """The uploads a user started most recently in the projects they see (`jobs`, from
    access.jobs_visible_to), newest first: what the upload panel shows."""
    return list(jobs.filter(created_by=created_by).select_related("project")[:limit])


def day_start(day: date | None, *, days_after: int = 0) -> datetime | None:
    """Midnight (in the site's time zone) of the day, or of a day after it (an `end` or `until`
    includes its own day); None past the last day a date holds: "until 9999-12-31" bounds
    nothing (it was a 400 naming integers)."""
    if day is None:
        return None
    try:
        return datetime.combine(day + timedelta(days=days_after), time.min, tzinfo=timezone.get_current_timezone())
    except OverflowError:
        return None


def compare_candidates(*, sessions: SessionQuerySet, session: Session, q: str = "", limit: int = 20) -> list[Session]:
    """What the player's "compare with…" offers: the other sessions of `session`'s project,
    newest run first, matching `q` as the list's search does. `sessions` are the caller's
    (access.sessions_visible_to)."""
    found = sessions.filter(project_id=session.project_id).exclude(pk=session.pk).matching(q).with_start_time()
    shown = ("id", "source_session_id", "task", "source_format", "step_count", "started_at", "created_at")
    return list(found.only(*shown).order_by("-start_time", "-id")[:limit])
