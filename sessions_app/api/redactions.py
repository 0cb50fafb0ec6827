"""Redacting a stored session after the fact: a value, or the project's current rules as a job
(sessions_app/stored_redaction.py, docs/redaction.md); and the list of what was removed."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from .. import access, audit, jobs, stored_redaction
from ..models import RedactionJob, Role
from ..stored_redaction import MANUAL_LABEL, MAX_TEXT, RedactionRefused
from .schemas import BodyIn, DetailOut, Id, Position, Text

router = Router(tags=["redaction"])

DENIED = {400: DetailOut, 403: DetailOut, 404: DetailOut}
JOBS_LISTED = 10


class RedactIn(BodyIn):
    text: Text = Field(..., max_length=MAX_TEXT, description="the value to remove, as shown (e.g. selected)")
    seq: Position = Field(..., description="the event it was selected at")
    label: str = Field(MANUAL_LABEL, max_length=40, description="it becomes [REDACTED:<label>]")


class RedactionOut(Schema):
    events: int = Field(description="events whose content changed")
    seqs: list[list[int]] = Field(description="those events, as [first, last] runs of seqs")
    values: int = Field(description="values removed from the events")
    byLabel: dict[str, int]
    fields: dict[str, int] = Field(description="event content fields changed, by field")
    elsewhere: dict[str, int] = Field(description="other stored copies changed: session, snapshots, comments, ...")
    original: str | None = Field(description="the kept upload: rewritten, deleted, unchanged, or null (none kept)")


class RemovalOut(Schema):
    seq: int
    field: str
    label: str
    by: str
    at: str


class RedactionJobOut(Schema):
    id: int
    status: str
    requestedBy: str
    eventsTotal: int
    eventsDone: int
    eventsRedacted: int
    byLabel: dict[str, int]
    error: str
    createdAt: str
    finishedAt: str | None


class RedactionsOut(Schema):
    redactions: list[RemovalOut] = Field(description="the first 1000, in seq order")
    count: int = Field(description="removals in all (one per event, field and label)")
    jobs: list[RedactionJobOut] = Field(description="the newest runs of the project's rules")


@router.get("/sessions/{session_id}/redactions", response={200: RedactionsOut, **DENIED}, url_name="redactions")
def list_redactions(request: HttpRequest, session_id: Id):
    """What was removed from the session after the fact (seq, field, label, who, when: never the
    values), and the newest runs of the project's rules on it."""
    session = access.session_for(request, session_id)
    entries, count = stored_redaction.list_redactions(session=session)
    runs = RedactionJob.objects.filter(session=session)[:JOBS_LISTED]
    return {"redactions": entries, "count": count, "jobs": [stored_redaction.job_row(job) for job in runs]}


@router.post("/sessions/{session_id}/redactions", response={200: RedactionOut, **DENIED}, url_name="redact")
def redact(request: HttpRequest, session_id: Id, body: RedactIn):
    """Remove a value from every stored copy of the session (events, snapshots, the session's
    fields, comments, checkpoints, the kept original, the database file): each occurrence
    becomes `[REDACTED:<label>]`, the chain still verifies and lists it. Maintainers."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    try:
        result = stored_redaction.redact_text(session=session, seq=body.seq, text=body.text, label=body.label,
                                              actor=access.actor_of(request), ip=audit.client_ip(request))  # fmt: skip
    except RedactionRefused as exc:
        raise HttpError(400, str(exc)) from None
    jobs.enqueue_after_redaction(session_id=session.pk)
    return result.to_dict()


@router.post(
    "/sessions/{session_id}/redactions/apply-rules",
    response={202: RedactionJobOut, **DENIED},
    url_name="redact_with_rules",
)
def apply_rules(request: HttpRequest, session_id: Id):
    """Queue a job applying the project's current redaction rules to the whole session; follow
    it in `GET .../redactions` (its `jobs`). 400 when the project has no rule on. Maintainers."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    try:
        job = stored_redaction.start_rules_job(session=session, actor=access.actor_of(request),
                                               ip=audit.client_ip(request))  # fmt: skip
    except RedactionRefused as exc:
        raise HttpError(400, str(exc)) from None
    jobs.enqueue_redaction_after_commit(job_id=job.pk)
    return Status(202, stored_redaction.job_row(job))
