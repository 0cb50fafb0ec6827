"""The imports pages: every import job the caller may see, and one job with all its problems.

The upload panel of the sessions page shows the caller's last few uploads; these pages keep every
job reachable (keyset pages, filters in the query string) and every kept problem readable.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from .. import access
from ..formats import known_formats
from ..forms import ImportFilterForm, ProblemPageForm
from ..ingest.importing import UNRECOGNISED
from ..models import ImportJob
from ..replay.imports import job_problems, list_jobs
from .pages import login_required, render_page


@login_required
@require_GET
def import_jobs(request: HttpRequest) -> HttpResponse:
    """Every import job of the caller's projects, newest first."""
    projects = access.projects_visible_to(request)
    form = ImportFilterForm(request.GET, projects=projects)
    values = form.values()
    page = list_jobs(jobs=access.jobs_visible_to(request), project=values["project"], status=values["status"],
                     after=values["after"], before=values["before"])  # fmt: skip
    return render_page(request, "sessions_app/imports.html", "import-table", {"form": form, "page": page})


@login_required
@require_GET
def import_job(request: HttpRequest, job_id: int) -> HttpResponse:
    """One import: what it read and stored, and every problem it kept, a page at a time."""
    job = access.job_for(request, job_id)
    page = ProblemPageForm(request.GET).values()["page"] or 1
    context = {"job": job, "problems": job_problems(job, page=page), "known_formats": _known_formats(job)}
    return render_page(request, "sessions_app/import_job.html", "job-problems", context)


def _known_formats(job: ImportJob) -> list[str]:
    """The formats Replay would have taken, for a job that failed because no format took its
    file (named from the format registry and the bundle importer, so the hint cannot drift);
    empty for any other job."""
    if job.status != ImportJob.Status.FAILED or UNRECOGNISED not in job.error:
        return []
    return known_formats()
