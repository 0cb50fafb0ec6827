"""The write side of the API: live ingest, uploads, paced streams and the live tail (issue 5).

Thin: each operation validates its input with an explicit schema and calls a workflow module
(live_ingest, uploads, streaming). JSON bodies are read with orjson and validated here, so a bad
event is answered 400 naming its index and field (a 1000-event batch would otherwise go through
the standard json module and come back as a generic 422).

POST /sessions and POST /sessions/{session_id}/events are registered on the read router of
api.py: django-ninja builds one URL pattern per router and path, so the same path on a second
router would be shadowed by the first router's GET and answer 405.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import reverse
from ninja import Query, Router, Schema, Status
from pydantic import BaseModel, Field, ValidationError

from . import jobs
from .api import API_AUTH
from .api import router as shared_router
from .canonical import SessionMeta
from .ingest import live as live_ingest
from .ingest.live import IngestError
from .ingest.uploads import UploadRejected, accept_upload, check_declared_size
from .models import ApiKey, ImportJob, Project, Session
from .replay import streaming

router = Router(auth=API_AUTH, tags=["ingest"])


# --- schemas -------------------------------------------------------------------------------------


class ProblemOut(Schema):
    index: int | None = None
    field: str
    message: str


class ErrorOut(Schema):
    detail: str
    errors: list[ProblemOut] = []


class SessionCreateIn(BaseModel, extra="forbid"):
    project: str = Field("", description="project slug; the default project when empty")
    format: Literal["", "canonical", "rlm_native", "agentlens"] = Field(
        "", description="the format of the events to come; detected from the first batch if empty"
    )
    source_session_id: str = Field("", max_length=200)
    run_id: str = Field("", max_length=200)
    agent_id: str = Field("", max_length=200)
    task: str = ""
    environment: str = Field("", max_length=200)
    model: str = Field("", max_length=200)
    metadata: dict[str, Any] = Field(default_factory=dict)
    started_at: datetime | None = None
    idempotency_key: str = Field(
        "", max_length=200, description="a retry with the same key returns the same session"
    )


class SessionCreatedOut(Schema):
    id: int
    project: str
    status: str
    source_format: str
    source_session_id: str
    run_id: str
    task: str
    environment: str
    model: str
    created_at: datetime
    events_url: str
    end_url: str
    stream_url: str
    tail_url: str


class EventBatchIn(BaseModel, extra="forbid"):
    events: list[Any] = Field(
        min_length=1,
        max_length=live_ingest.MAX_BATCH,
        description="canonical events (docs/ingest.md), rlm-code native records or AgentLens events",
    )
    format: Literal["canonical", "rlm_native", "agentlens"] | None = Field(
        None, description="detected from the first event when omitted"
    )
    idempotency_key: str | None = Field(
        None, min_length=1, max_length=200, description="a retried batch with this key is a no-op"
    )


class AppendOut(Schema):
    stored: int
    first_seq: int
    event_count: int
    head_hash: str
    format: str
    replayed: bool = Field(False, description="true when this key was already stored")
    warnings: list[ProblemOut] = []


class EndIn(BaseModel, extra="forbid"):
    status: Literal["completed", "failed"] = "completed"
    final_answer: str | None = None


class EndOut(Schema):
    id: int
    status: str
    event_count: int
    head_hash: str
    final_answer: str
    ended_at: datetime | None


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


class StreamQuery(Schema):
    pacing: float = Field(1.0, ge=0, le=1000, description="0 instant, 1 recorded time, 0.5 twice as fast")
    after: int | None = Field(None, ge=-1, description="start after this seq (default: the start, or Last-Event-ID)")
    max_gap: float | None = Field(None, gt=0, description="compress recorded gaps longer than this (seconds)")


class TailQuery(Schema):
    after: int | None = Field(None, ge=-1, description="start after this seq (default: Last-Event-ID, else the start)")


def _json_body(schema: type[BaseModel]) -> dict:
    """OpenAPI for a JSON body we read ourselves (see the module docstring)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema.model_json_schema()}},
        }
    }


class _BadRequest(Exception):
    def __init__(self, status: int, detail: str, errors: list[dict] | None = None) -> None:
        self.status, self.detail, self.errors = status, detail, errors or []


def _read_body(request: HttpRequest, schema: type[BaseModel]) -> Any:
    try:
        body = request.body
    except RequestDataTooBig:
        raise _BadRequest(413, f"The request body exceeds {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024 // 1024} MB; send smaller batches.")
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError as exc:
        # rlm-code's records may hold the bare NaN / Infinity Python's json module writes.
        try:
            data = json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise _BadRequest(400, f"The body is not valid JSON: {exc}") from None
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        errors = []
        for error in exc.errors(include_url=False):
            loc = error["loc"]
            index = loc[1] if len(loc) > 1 and loc[0] == "events" and isinstance(loc[1], int) else None
            errors.append({"index": index, "field": ".".join(map(str, loc)) or "body", "message": error["msg"]})
        first = errors[0]
        raise _BadRequest(400, f"{first['field']}: {first['message']}", errors)


def _error(exc: _BadRequest | IngestError | UploadRejected) -> Status:
    if isinstance(exc, _BadRequest):
        return Status(exc.status, {"detail": exc.detail, "errors": exc.errors})
    if isinstance(exc, IngestError):
        return Status(exc.status, {"detail": exc.message, "errors": exc.errors})
    return Status(exc.status, {"detail": exc.message, "errors": []})


def _not_found(what: str, pk: int) -> Status:
    return Status(404, {"detail": f"{what} {pk} not found", "errors": []})


def _who(request: HttpRequest) -> str:
    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiKey):
        return auth.user.get_username() if auth.user_id else f"api key {auth.name}"
    return getattr(auth, "get_username", lambda: "")()


def _session_links(session_id: int) -> dict:
    return {
        "events_url": reverse("api:append_session_events", kwargs={"session_id": session_id}),
        "end_url": reverse("api:end_session", kwargs={"session_id": session_id}),
        "stream_url": reverse("api:stream_session", kwargs={"session_id": session_id}),
        "tail_url": reverse("api:tail_session", kwargs={"session_id": session_id}),
    }


# --- live ingest ---------------------------------------------------------------------------------


@shared_router.post(
    "/sessions",
    response={200: SessionCreatedOut, 201: SessionCreatedOut, 400: ErrorOut, 413: ErrorOut},
    openapi_extra=_json_body(SessionCreateIn),
    tags=["ingest"],
    url_name="create_session",
)
def create_session(request: HttpRequest):
    """Create a live session (201); a retry with the same idempotency_key returns it (200)."""
    try:
        data = _read_body(request, SessionCreateIn)
        project = Project.get_default() if not data.project else Project.objects.filter(slug=data.project).first()
        if project is None:
            raise _BadRequest(400, f"project: no project with slug {data.project!r}")
        meta = SessionMeta(
            source_session_id=data.source_session_id, run_id=data.run_id, agent_id=data.agent_id,
            task=data.task, environment=data.environment, model=data.model,
            started_at=data.started_at, metadata=data.metadata,
        )  # fmt: skip
        session, created = live_ingest.create_live_session(
            project=project, meta=meta, format=data.format, idempotency_key=data.idempotency_key
        )
    except (_BadRequest, IngestError) as exc:
        return _error(exc)
    return Status(201 if created else 200, {
        **{f: getattr(session, f) for f in ("id", "status", "source_format", "source_session_id",
                                            "run_id", "task", "environment", "model", "created_at")},
        "project": project.slug,
        **_session_links(session.pk),
    })  # fmt: skip


@shared_router.post(
    "/sessions/{session_id}/events",
    response={200: AppendOut, 400: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut},
    openapi_extra=_json_body(EventBatchIn),
    tags=["ingest"],
    url_name="append_session_events",
)
def append_session_events(request: HttpRequest, session_id: int):
    """Append 1-5000 events to a live session in one transaction."""
    try:
        batch = _read_body(request, EventBatchIn)
        result = live_ingest.append_batch(
            session_id=session_id, records=batch.events, format=batch.format,
            idempotency_key=batch.idempotency_key or "",
        )  # fmt: skip
    except Session.DoesNotExist:
        return _not_found("session", session_id)
    except (_BadRequest, IngestError) as exc:
        return _error(exc)
    return Status(200, result)


@router.post(
    "/sessions/{session_id}/end",
    response={200: EndOut, 400: ErrorOut, 404: ErrorOut, 409: ErrorOut},
    openapi_extra=_json_body(EndIn),
    url_name="end_session",
)
def end_session(request: HttpRequest, session_id: int):
    """Close a live session as completed or failed (a repeat with the same status is a no-op)."""
    try:
        data = _read_body(request, EndIn)
        session = live_ingest.end_live_session(
            session_id=session_id, status=data.status, final_answer=data.final_answer
        )
    except Session.DoesNotExist:
        return _not_found("session", session_id)
    except (_BadRequest, IngestError) as exc:
        return _error(exc)
    jobs.enqueue_verify_after_commit(session_ids=[session.pk])  # "verified when they end"
    return Status(200, session)


# --- uploads -------------------------------------------------------------------------------------

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
                        "project": {"type": "string", "description": "project slug (default project)"},
                    },
                }
            }
        },
    }
}


@router.post(
    "/imports",
    response={202: ImportAcceptedOut, 400: ErrorOut, 413: ErrorOut},
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
            raise _BadRequest(400, "file: a multipart field named 'file' is required")
        slug = request.POST.get("project", "")
        project = Project.objects.filter(slug=slug).first() if slug else Project.get_default()
        if project is None:
            raise _BadRequest(400, f"project: no project with slug {slug!r}")
        job = accept_upload(
            uploaded_file=uploaded, project=project, format=request.POST.get("format", ""),
            created_by=_who(request),
        )  # fmt: skip
        jobs.enqueue_import_after_commit(job_id=job.pk)
    except (_BadRequest, UploadRejected) as exc:
        return _error(exc)
    status_url = reverse("api:import_status", kwargs={"job_id": job.pk})
    return Status(202, {"job": job.pk, "status": job.status, "status_url": status_url})


@router.get(
    "/imports/{job_id}",
    response={200: ImportStatusOut, 404: ErrorOut},
    url_name="import_status",
)
def import_status(request: HttpRequest, job_id: int):
    """An import's status (queued, running, done, failed), progress, sessions and problems."""
    job = ImportJob.objects.select_related("project").filter(pk=job_id).first()
    if job is None:
        return _not_found("import job", job_id)
    return Status(200, {
        **{f: getattr(job, f) for f in (
            "id", "status", "original_name", "requested_format", "detected_format", "bytes_total",
            "bytes_done", "events_done", "sessions_done", "problem_count", "problems", "error",
            "created_at", "started_at", "finished_at")},
        "project": job.project.slug,
        "sessions": [entry for entry in job.result if isinstance(entry, dict)],
    })  # fmt: skip


# --- streams -------------------------------------------------------------------------------------


def _sse(frames) -> StreamingHttpResponse:
    response = StreamingHttpResponse(frames, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass frames through as they come
    return response


def _start_after(request: HttpRequest, after: int | None) -> int:
    if after is not None:
        return after
    # EventSource reconnects with the id of the last frame it received.
    last = request.headers.get("Last-Event-ID", "")
    return int(last) if last.lstrip("-").isdigit() else -1


@router.get(
    "/sessions/{session_id}/stream",
    response={404: ErrorOut},
    url_name="stream_session",
)
def stream_session(request: HttpRequest, session_id: int, query: Query[StreamQuery]):
    """Server-Sent Events of the session at its recorded pace, one turn at a time."""
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        return _not_found("session", session_id)
    return _sse(
        streaming.paced_stream(
            session=session, after=_start_after(request, query.after), pacing=query.pacing,
            max_gap=query.max_gap,
        )  # fmt: skip
    )


@router.get(
    "/sessions/{session_id}/tail",
    response={404: ErrorOut},
    url_name="tail_session",
)
def tail_session(request: HttpRequest, session_id: int, query: Query[TailQuery]):
    """Server-Sent Events of a live session's events as they are appended."""
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        return _not_found("session", session_id)
    return _sse(
        streaming.tail_stream(
            session=session, after=_start_after(request, query.after),
            poll_interval=settings.TAIL_POLL_SECONDS, max_seconds=settings.TAIL_MAX_SECONDS,
        )  # fmt: skip
    )

