"""Uploads: POST a file to import in the background, then poll its status."""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest
from django.urls import reverse
from ninja import Router, Schema, Status

from .. import access, audit, jobs
from ..ingest.uploads import UploadRejected, accept_upload, check_declared_size
from .auth import who
from .responses import BadRequest, error
from .schemas import ErrorOut, Id

router = Router(tags=["ingest"])


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
    }
}


@router.post(
    "/imports",
    response={202: ImportAcceptedOut, 400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 413: ErrorOut},
    openapi_extra=_UPLOAD_BODY,
    url_name="create_import",
)
def create_import(request: HttpRequest):
    """Upload a file to import in the background; poll `status_url` for progress."""
    try:
        # Before touching request.FILES, so an oversized body is refused unread.
        check_declared_size(request.META.get("CONTENT_LENGTH"))
        uploaded = request.FILES.get("file")
        if uploaded is None:
            raise BadRequest(400, "file: a multipart field named 'file' is required")
        try:
            project = access.project_to_write(request, request.POST.get("project", ""))
        except ValueError as exc:
            raise BadRequest(400, str(exc))
        job = accept_upload(
            uploaded_file=uploaded, project=project, format=request.POST.get("format", ""),
            created_by=who(request),
        )  # fmt: skip
        jobs.enqueue_import_after_commit(job_id=job.pk)
        audit.record_upload(request, job)
    except (BadRequest, UploadRejected) as exc:
        return error(exc)
    status_url = reverse("api:import_status", kwargs={"job_id": job.pk})
    return Status(202, {"job": job.pk, "status": job.status, "status_url": status_url})


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
