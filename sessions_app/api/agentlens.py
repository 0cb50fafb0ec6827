"""AgentLens-compatible ingest: `POST /api/events` takes the body, key header and answers of
AgentLens's own server, so an agent using an AgentLens SDK only changes its base URL and key.
docs/api.md describes it; ingest/agentlens_events.py does the work."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.db import transaction
from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import BaseModel, Field, ValidationInfo, field_validator

from .. import access, audit, jobs
from ..formats.fields import in_utc_range
from ..ingest import agentlens_events
from ..ingest.live import IngestError
from ..ingest.quotas import QuotaExceeded, check_bytes
from ..models import Project, Role
from .bodies import declared_length, json_body, read_body
from .responses import BadRequest
from .schemas import ErrorOut, ProblemOut

router = Router(tags=["ingest"])


class AgentLensEventIn(BaseModel):
    """One event as an AgentLens SDK sends it (AgentLens's ingestEventSchema). Members it does
    not know are ignored, as AgentLens ignores them."""

    sessionId: str = Field(min_length=1, max_length=200, description="the AgentLens session; one Replay session each")
    agentId: str = Field(min_length=1)
    eventType: str = Field(min_length=1, max_length=64, description="llm_call, tool_call, session_ended, ...")
    severity: Literal["debug", "info", "warn", "error", "critical"] = "info"
    payload: dict[str, Any]
    metadata: dict[str, Any] = Field(default_factory=dict)
    timestamp: str | None = Field(None, description="ISO 8601; the time of arrival when left out")
    id: str | None = Field(
        None, min_length=1, max_length=200, description="the event's own id: a retry naming it is not stored twice"
    )

    @field_validator("sessionId", "id")
    @classmethod
    def _storable(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and "\x00" in value:
            article = "an" if info.field_name == "id" else "a"
            raise ValueError(f"{article} {info.field_name} may not hold NUL characters")
        return value

    @field_validator("timestamp")
    @classmethod
    def _iso(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"not an ISO 8601 date-time: {value[:40]!r}") from None
        if moment.tzinfo is not None and not in_utc_range(moment):
            raise ValueError("outside the years 1-9999 in UTC")
        return value


class AgentLensBatchIn(BaseModel):
    events: list[AgentLensEventIn] = Field(min_length=1, max_length=agentlens_events.MAX_EVENTS)


class EventsQuery(Schema):
    project: str = Field(
        "", max_length=100, description="project slug; may be left out by a key limited to one project"
    )


class IngestedEventOut(Schema):
    id: str
    hash: str = Field(description="its hash in AgentLens's own chain (prevHash / hash)")


class IngestedSessionOut(Schema):
    sessionId: str
    id: int = Field(description="the Replay session")
    created: bool
    stored: int
    status: str


class IngestedOut(Schema):
    ingested: int = Field(description="events stored by this request (a retried event is not counted again)")
    events: list[IngestedEventOut] = Field(description="every event of the batch: by session, each in time order")
    sessions: list[IngestedSessionOut]
    warnings: list[ProblemOut] = []


class AgentLensDetailOut(Schema):
    path: str
    message: str


class AgentLensErrorOut(ErrorOut):
    """Replay's error, with the members AgentLens's SDKs read from AgentLens's own."""

    error: str = ""
    status: int | None = None
    details: list[AgentLensDetailOut] = []


@router.post(
    "/events",
    response={
        200: IngestedOut,
        201: IngestedOut,
        400: AgentLensErrorOut,
        403: ErrorOut,
        404: ErrorOut,
        409: AgentLensErrorOut,
        413: AgentLensErrorOut,
    },
    openapi_extra=json_body(AgentLensBatchIn),
    summary="AgentLens-compatible ingest",
    url_name="ingest_agentlens_events",
)
def ingest_agentlens_events(request: HttpRequest, query: Query[EventsQuery]):
    """AgentLens's `POST /api/events`: 1-1000 events of one or more AgentLens sessions, each
    session a live session of the project (201; 200 when every event was stored before). An
    id received before with other content is a 409 naming its index (agentlens_events._conflict
    says why not a 2xx). A body larger than the project's storage quota has left is a 413,
    before it is read."""
    try:
        project = access.project_to_write(request, query.project, need=Role.MAINTAINER)
    except ValueError as exc:
        return _refused(400, str(exc), [])
    try:
        check_bytes(project=project, size=declared_length(request), what="batch")
        batch = read_body(request, AgentLensBatchIn)
        result = _ingest_logged(request, project, [_record(event) for event in batch.events])
    except BadRequest as exc:
        return _refused(exc.status, exc.detail, exc.errors)
    except IngestError as exc:
        return _refused(exc.status, exc.message, exc.errors)
    except QuotaExceeded as exc:
        return _refused(exc.status, exc.message, [])
    ended = [outcome.session.pk for outcome in result.sessions if outcome.ended]
    if ended:
        jobs.enqueue_verify_after_commit(session_ids=ended)  # "verified when they end"
    return Status(201 if result.stored else 200, {
        "ingested": result.stored,
        "events": [{"id": posted.id, "hash": posted.hash} for posted in result.events],
        "sessions": [
            {"sessionId": o.session.source_session_id, "id": o.session.pk, "created": o.created,
             "stored": o.stored, "status": o.session.status}
            for o in result.sessions
        ],
        "warnings": result.warnings,
    })  # fmt: skip


@transaction.atomic
def _ingest_logged(
    request: HttpRequest, project: Project, events: list[dict[str, Any]]
) -> agentlens_events.EventsResult:
    """The batch and the entries of the sessions it made, together, as POST /api/sessions."""
    result = agentlens_events.ingest_agentlens_events(project=project, events=events)
    audit.record_request_many(request, action="session.create_live", project=project, entries=[
        (f"session:{outcome.session.pk}", {"source_session_id": outcome.session.source_session_id,
                                           "via": "POST /api/events"})
        for outcome in result.sessions if outcome.created
    ])  # fmt: skip
    return result


def _record(event: AgentLensEventIn) -> dict[str, Any]:
    """The event's members as sent (a payload's values untouched: its hash covers them)."""
    record = {name: getattr(event, name) for name in ("sessionId", "agentId", "eventType", "severity", "payload",
                                                      "metadata", "timestamp", "id")}  # fmt: skip
    return {name: value for name, value in record.items() if value is not None}


def _refused(status: int, detail: str, errors: list[dict[str, Any]]) -> Status:
    """Replay's error body (`detail`, `errors`) with AgentLens's (`error`, `status`, `details`
    with each bad member's path): an SDK shows AgentLens's, a Replay client reads its own."""
    details = [{"path": _path(problem), "message": problem["message"]} for problem in errors]
    body = {"detail": detail, "errors": errors, "error": detail, "status": status, "details": details}
    return Status(status, body)


def _path(problem: dict[str, Any]) -> str:
    field, index = problem["field"], problem.get("index")
    if field.startswith("events.") or index is None:
        return field
    return f"events.{index}.{field}"
