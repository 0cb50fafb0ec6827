"""Live sessions: create one, append batches of events, end it; watch it as Server-Sent Events at
its recorded pace (stream) or as events are appended (tail). docs/ingest.md describes them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest
from django.urls import reverse
from ninja import Query, Router, Schema, Status
from pydantic import BaseModel, Field, field_validator

from .. import access, audit, jobs, sse
from ..canonical import SessionMeta
from ..formats.fields import iso_text, utc_instant
from ..ingest import live as live_ingest
from ..ingest.live import IngestError
from ..ingest.quotas import QuotaExceeded, check_bytes
from ..models import Role, Session
from ..models.bounds import MAX_POSITION
from ..replay import streaming
from .bodies import declared_length, json_body, read_body
from .responses import BadRequest, error, not_found
from .schemas import ErrorOut, Id, ProblemOut
from .sessions import router as sessions_router

router = Router(tags=["ingest"])


class SessionCreateIn(BaseModel, extra="forbid"):
    project: str = Field("", description="project slug; may be left out by a caller with one project to write to")
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
    idempotency_key: str = Field("", max_length=200, description="a retry with the same key returns the same session")

    # Stored in UTC, as an event's timestamp: "0001-01-01T00:00+05:00" parses but has no UTC instant.
    _iso_text = field_validator("started_at", mode="before")(iso_text)
    _in_utc_range = field_validator("started_at")(utc_instant)


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
    redactions: dict[str, int] = Field(
        default_factory=dict, description="values the project's redaction rules replaced, by label"
    )


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


class StreamQuery(Schema):
    pacing: float = Field(1.0, ge=0, le=1000, description="0 instant, 1 recorded time, 0.5 twice as fast")
    after: int | None = Field(
        None, ge=-1, le=MAX_POSITION, description="start after this seq (default: the start, or Last-Event-ID)"
    )
    max_gap: float | None = Field(None, gt=0, description="compress recorded gaps longer than this (seconds)")


class TailQuery(Schema):
    after: int | None = Field(
        None, ge=-1, le=MAX_POSITION, description="start after this seq (default: Last-Event-ID, else the start)"
    )


def _session_links(session_id: int) -> dict:
    return {
        "events_url": reverse("api:append_session_events", kwargs={"session_id": session_id}),
        "end_url": reverse("api:end_session", kwargs={"session_id": session_id}),
        "stream_url": reverse("api:stream_session", kwargs={"session_id": session_id}),
        "tail_url": reverse("api:tail_session", kwargs={"session_id": session_id}),
    }


# On the sessions router: django-ninja builds one URL pattern per router and path, so
# POST /sessions on this router would be shadowed by the list's GET and answer 405.
@sessions_router.post(
    "/sessions",
    response={
        200: SessionCreatedOut,
        201: SessionCreatedOut,
        400: ErrorOut,
        403: ErrorOut,
        404: ErrorOut,
        409: ErrorOut,
        413: ErrorOut,
    },
    openapi_extra=json_body(SessionCreateIn),
    tags=["ingest"],
    url_name="create_session",
)
def create_session(request: HttpRequest):
    """Create a live session (201); a retry with the same idempotency_key returns it (200), the
    same key with a different request is a 409, as is a project holding its quota of sessions."""
    try:
        data = read_body(request, SessionCreateIn)
        project = _project(request, data.project)
        meta = SessionMeta(
            source_session_id=data.source_session_id, run_id=data.run_id, agent_id=data.agent_id,
            task=data.task, environment=data.environment, model=data.model,
            started_at=data.started_at, metadata=data.metadata,
        )  # fmt: skip
        # The session and its entry together: a session made and its entry failed was never
        # logged, since a retry (the same idempotency key) finds it made.
        with transaction.atomic():
            session, created = live_ingest.create_live_session(
                project=project, meta=meta, format=data.format, idempotency_key=data.idempotency_key
            )
            if created:
                audit.record_request(
                    request,
                    action="session.create_live",
                    project=project,
                    target=f"session:{session.pk}",
                    detail={"source_session_id": session.source_session_id},
                )
    except (BadRequest, IngestError, QuotaExceeded) as exc:
        return error(exc)
    return Status(201 if created else 200, {
        **{f: getattr(session, f) for f in ("id", "status", "source_format", "source_session_id",
                                            "run_id", "task", "environment", "model", "created_at")},
        "project": project.slug,
        **_session_links(session.pk),
    })  # fmt: skip


@router.post(
    "/sessions/{session_id}/events",
    response={200: AppendOut, 400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut},
    openapi_extra=json_body(EventBatchIn),
    url_name="append_session_events",
)
def append_session_events(request: HttpRequest, session_id: Id):
    """Append 1-5000 events to a live session in one transaction. A retry with the batch's
    idempotency_key answers as the first time (replayed); the same key with another batch is a
    409. A body larger than the project's storage quota has left is a 413, before it is read."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    try:
        check_bytes(project=session.project, size=declared_length(request), what="batch")
        batch = read_body(request, EventBatchIn)
        result = live_ingest.append_batch(
            session_id=session_id, records=batch.events, format=batch.format,
            idempotency_key=batch.idempotency_key or "",
        )  # fmt: skip
    except Session.DoesNotExist:
        return not_found("session", session_id)
    except (BadRequest, IngestError, QuotaExceeded) as exc:
        return error(exc)
    return Status(200, result)


@router.post(
    "/sessions/{session_id}/end",
    response={200: EndOut, 400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut},
    openapi_extra=json_body(EndIn),
    url_name="end_session",
)
def end_session(request: HttpRequest, session_id: Id):
    """Close a live session as completed or failed (a repeat with the same status is a no-op)."""
    access.session_for(request, session_id, need=Role.MAINTAINER)
    try:
        data = read_body(request, EndIn)
        # The end and its audit entry in one transaction: a retry of an end that was stored is a
        # no-op, so an entry written after it could be missed for good.
        with transaction.atomic():
            session, ended = live_ingest.end_live_session(
                session_id=session_id, status=data.status, final_answer=data.final_answer
            )
            if ended:
                # Who closed it, and how: its final answer is content (never in the log, which
                # no redaction rewrites), so only whether one was given.
                audit.record_request(request, action="session.end", project=session.project_id,
                                     target=f"session:{session.pk}",
                                     detail={"status": session.status, "final_answer": bool(data.final_answer)})  # fmt: skip
    except Session.DoesNotExist:
        return not_found("session", session_id)
    except (BadRequest, IngestError) as exc:
        return error(exc)
    jobs.enqueue_verify_after_commit(session_ids=[session.pk])  # "verified when they end"
    return Status(200, session)


def _project(request: HttpRequest, slug: str):
    """The project a new live session goes to (the caller must be one of its maintainers)."""
    try:
        return access.project_to_write(request, slug)
    except ValueError as exc:
        raise BadRequest(400, str(exc))


def _start_after(request: HttpRequest, after: int | None) -> int:
    try:
        return sse.resume_after(request, after)
    except ValueError as exc:
        raise BadRequest(400, str(exc)) from None


# The 200 of a stream: Server-Sent Events, each frame an `event` name, the seq as its `id`, a
# JSON `data` line (docs/ingest.md), and `retry` (ms) on the frame that ends a stream at its limit.
_FRAME = {
    "type": "object",
    "properties": {
        "event": {"type": "string"},
        "id": {"type": "string"},
        "data": {"type": "string", "description": "a JSON object"},
        "retry": {"type": "integer"},
    },
}
_EVENT_STREAM = {
    "responses": {
        "200": {
            "description": "Server-Sent Events (docs/ingest.md)",
            "content": {"text/event-stream": {"schema": _FRAME}},
        }
    }
}


@router.get(
    "/sessions/{session_id}/stream",
    response={404: ErrorOut},
    openapi_extra=_EVENT_STREAM,
    url_name="stream_session",
)
def stream_session(request: HttpRequest, session_id: Id, query: Query[StreamQuery]):
    """Server-Sent Events of the session at its recorded pace, one turn at a time."""
    session = access.session_for(request, session_id)
    stream = streaming.paced_stream_async if sse.under_asgi(request) else streaming.paced_stream
    return sse.response(
        stream(
            session=session,
            after=_start_after(request, query.after),
            pacing=query.pacing,
            max_gap=query.max_gap,
            max_seconds=settings.TAIL_MAX_SECONDS,
            may_go_on=lambda: access.still_reads(request, session.pk),
        )  # fmt: skip
    )


@router.get(
    "/sessions/{session_id}/tail",
    response={404: ErrorOut},
    openapi_extra=_EVENT_STREAM,
    url_name="tail_session",
)
def tail_session(request: HttpRequest, session_id: Id, query: Query[TailQuery]):
    """Server-Sent Events of a live session's events as they are appended."""
    session = access.session_for(request, session_id)
    return sse.tail(request, session, _start_after(request, query.after))
