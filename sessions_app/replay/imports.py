"""The read side of import jobs: the imports page (every job, keyset pages), one job's problems
a page at a time, and the few problems the player shows of the import that stored a session.

A job keeps its first PROBLEMS_KEPT problems in full (`ImportJob.problems`) and counts them all
(`problem_count`); these pages show what was kept and say when more were counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTransform

from ..models import ImportJob, Project, Session

JOBS_PER_PAGE = 50
PROBLEMS_PER_PAGE = 100
# The problems the player shows of a session's import; the job's page has them all.
PLAYER_PROBLEMS = 3


@dataclass
class JobPage:
    jobs: list[ImportJob]
    next_cursor: str | None  # `after=` of the next (older) page
    previous_cursor: str | None  # `before=` of the previous (newer) page
    is_first: bool


def parse_job_cursor(value: str | None) -> tuple[datetime, int] | None:
    """`<created_at ISO>~<id>` of the job a page starts after (or ends before); None when malformed."""
    if not value or "~" not in value:
        return None
    raw, _, pk = value.rpartition("~")
    try:
        key = datetime.fromisoformat(raw)
        return (key, int(pk)) if key.tzinfo is not None else None
    except ValueError:
        return None


def _cursor(job: ImportJob) -> str:
    return f"{job.created_at.isoformat()}~{job.pk}"


def list_jobs(
    *,
    jobs: QuerySet[ImportJob],
    project: Project | str | None = None,
    status: str = "",
    after: tuple[datetime, int] | None = None,
    before: tuple[datetime, int] | None = None,
    per_page: int = JOBS_PER_PAGE,
) -> JobPage:
    """One page of `jobs` (the caller's, access.jobs_visible_to), newest first, in one project
    and/or of one status, after the cursor `after` or before `before` (keyset: a deep page costs
    what the first does, on the importjob_created index). The problems stay unread: a job's page
    shows them."""
    if project:
        jobs = jobs.filter(project=project) if isinstance(project, Project) else jobs.filter(project__slug=project)
    if status:
        jobs = jobs.filter(status=status)
    backwards = before is not None and after is None
    cursor = before if backwards else after
    if cursor is not None:
        created, pk = cursor
        op = "gt" if backwards else "lt"
        jobs = jobs.filter(Q(**{f"created_at__{op}": created}) | Q(created_at=created, **{f"id__{op}": pk}))
    order = ["created_at", "id"] if backwards else ["-created_at", "-id"]
    rows = list(jobs.select_related("project").defer("problems").order_by(*order)[: per_page + 1])
    more = len(rows) > per_page
    rows = rows[:per_page]
    if backwards:
        rows.reverse()
    has_next, has_previous = (True, more) if backwards else (more, cursor is not None)
    return JobPage(
        jobs=rows,
        next_cursor=_cursor(rows[-1]) if rows and has_next else None,
        previous_cursor=_cursor(rows[0]) if rows and has_previous else None,
        is_first=not has_previous,
    )


@dataclass
class ProblemPage:
    problems: list[dict[str, Any]]
    first: int  # 1-based number of the first shown
    page: int
    pages: int
    kept: int  # problems kept in full on the job
    counted: int  # all the import found


def job_problems(job: ImportJob, *, page: int = 1, per_page: int = PROBLEMS_PER_PAGE) -> ProblemPage:
    """One page (1-based) of a job's kept problems, as stored: in the file's line order
    (canonical.Problems.to_list)."""
    kept = job.problems if isinstance(job.problems, list) else []
    pages = max(1, -(-len(kept) // per_page))
    page = min(max(page, 1), pages)
    start = (page - 1) * per_page
    shown = [p for p in kept[start : start + per_page] if isinstance(p, dict)]
    return ProblemPage(problems=shown, first=start + 1, page=page, pages=pages, kept=len(kept),
                       counted=max(job.problem_count, len(kept)))  # fmt: skip


def session_import_problems(*, jobs: QuerySet[ImportJob], session: Session) -> dict[str, Any] | None:
    """The count and first few problems of the import that stored `session`, for the player:
    one small query (only those few are read out of the job's list), none for a session that no
    import stored; None when that import had no problem. `jobs`: access.jobs_visible_to."""
    if session.import_job_id is None:
        return None
    # Key transforms built here rather than named "problems__0": resolving such a name, Django
    # catches its own FieldError and keeps it, a reference cycle that held the whole request's
    # frames (the player's decoded step among them) until the next garbage collection.
    firsts = {f"problem_{n}": KeyTransform(str(n), "problems") for n in range(PLAYER_PROBLEMS)}
    found = jobs.filter(pk=session.import_job_id, problem_count__gt=0).values(
        "pk", "original_name", "problem_count", **firsts
    )
    row = found.first()
    if row is None:
        return None
    shown = [row[name] for name in firsts if isinstance(row[name], dict)]
    return {"job": row["pk"], "file": row["original_name"], "count": row["problem_count"], "first": shown}
