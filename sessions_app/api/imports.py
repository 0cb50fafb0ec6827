"""Uploads: POST a file to import in the background, then poll its status."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Router, Schema, Status

from .. import access, audit, jobs
from ..ingest.quotas import QuotaExceeded, check_upload
from ..ingest.uploads import UploadRejected, accept_upload, check_declared_size
from ..models import Project
from .auth import who
from .responses import BadRequest, error
from .schemas import ErrorOut, Id

router = Router(tags=["ingest"])

# What a multipart upload holds besides the file, at most: boundaries, part headers, the format
# and project fields.
FORM_FIELDS = 4 * 1024


class ImportAcceptedOut(Schema):
    job: int
    status: str
    status_url: str


class LineProblemOut(Schema):
    line: int | None = None
    field: str
    message: str


class ImportedSessionOut(Schema):
    session: int | None = None
    format: str = ""
    events: int = 0
    steps: int = 0
    duplicate: bool = False
    error: str | None = None
    redactions: dict[str, int] | None = Field(
        None, description="values the project's redaction rules replaced, by label; null when no rule is on"
    )


class ImportStatusOut(Schema):
    id: int
    status: str
    original_name: str
    project: str
    requested_format: str
    detected_format: str
    bytes_total: int
    bytes_done: int
    events_done: int
    sessions_done: int
    sessions: list[ImportedSessionOut]
    problem_count: int
    problems: list[LineProblemOut]
    error: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


_UPLOAD_BODY = {
    "parameters": [
        {
            "name": "project",
            "in": "query",
            "required": False,
            "schema": {"type": "string", "maxLength": 100},
            "description": "project slug, as the form field: named here, the project's quotas are checked "
            "before the body is read",
        }
    ],
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "format": {"type": "string", "description": "skip detection: a format name"},
                        "project": {
                            "type": "string",
                            "description": "project slug (may be left out by a caller with one project to write to)",
                        },
                    },
                }
            }
        },
    },
}


@router.post(
    "/imports",
    response={202: ImportAcceptedOut, 400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut},
    openapi_extra=_UPLOAD_BODY,
    url_name="create_import",
)
def create_import(request: HttpRequest):
    """Upload a file to import in the background; poll `status_url` for progress. 413: past the
    upload limit or the project's storage quota; 409: the project holds its quota of sessions.
    Both come before the body is read when the project is known from the URL (or is the
    caller's only one), else before anything is stored."""
    try:
        # Before touching request.FILES, so an oversized body is refused unread.
        length = check_declared_size(request.META.get("CONTENT_LENGTH"))
        project = _project_known_before_the_body(request)
        if project is not None:
            # The body less its boundaries and small fields: a file that would fit is not refused.
            check_upload(project=project, size=max(0, length - FORM_FIELDS))
        files = request.FILES.getlist("file")
        if not files:
            # Django takes no part for a file without a usable name (none, "..", not UTF-8), and
            # reads a body cut off before a part's end as holding none.
            raise BadRequest(400, "file: a multipart field named 'file' is required, holding a file with a name "
                                  "(none came: no such field, a file name empty or '..', or a body cut off)")  # fmt: skip
        if len(files) > 1:
            # One upload is one job: a second file was silently dropped.
            raise BadRequest(400, f"file: one file per upload, {len(files)} were sent (send each on its own)")
        uploaded = files[0]
        project = _project_of_the_body(request, project)
        with accept_upload(uploaded_file=uploaded, project=project, format=request.POST.get("format", ""),
                           created_by=who(request)) as job:  # fmt: skip
            jobs.enqueue_import(job_id=job.pk)
            audit.record_upload(request, job)
    except (BadRequest, UploadRejected, QuotaExceeded) as exc:
        return error(exc)
    status_url = reverse("api:import_status", kwargs={"job_id": job.pk})
    return Status(202, {"job": job.pk, "status": job.status, "status_url": status_url})


def _project_known_before_the_body(request: HttpRequest) -> Project | None:
    """The project named in the query string (404/403 as for the form field), else the caller's
    only project to write to; None when the body must say which."""
    slug = request.GET.get("project", "")
    if slug:
        return access.project_to_write(request, slug)
    try:
        return access.project_to_write(request, "")
    except (ValueError, PermissionDenied):  # several to choose from, or none: the body's field decides
        return None


def _project_of_the_body(request: HttpRequest, known: Project | None) -> Project:
    named = request.POST.get("project", "")
    if known is not None and (not named or named == known.slug):
        return known
    if request.GET.get("project") and named != request.GET["project"]:
        raise BadRequest(400, "project: named in the query string and the form differently")
    try:
        return access.project_to_write(request, named)
    except ValueError as exc:
        raise BadRequest(400, str(exc))


@router.get(
    "/imports/{job_id}",
    response={200: ImportStatusOut, 404: ErrorOut},
    url_name="import_status",
)
def import_status(request: HttpRequest, job_id: Id):
    """An import's status (queued, running, done, failed), progress, sessions and problems."""
    job = access.job_for(request, job_id)
    return Status(200, {
        **{f: getattr(job, f) for f in (
            "id", "status", "original_name", "requested_format", "detected_format", "bytes_total",
            "bytes_done", "events_done", "sessions_done", "problem_count", "problems", "error",
            "created_at", "started_at", "finished_at")},
        "project": job.project.slug,
        "sessions": [entry for entry in job.result if isinstance(entry, dict)],
    })  # fmt: skip
