"""Export a session (native JSONL, snapshot, the original records) and verify its stored events."""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest, StreamingHttpResponse
from django.utils.http import content_disposition_header
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from .. import access, audit, verification
from ..replay import exports
from .schemas import BAD, NOT_FOUND, DetailOut, Id

router = Router(tags=["sessions"])


class VerifyFindingOut(Schema):
    seq: int | None = Field(description="the event found changed (null: the session's totals)")
    field: str
    why: str


class VerifyRedactionOut(Schema):
    seq: int
    field: str = Field(description="the content field: payload, raw, step_state or state_change")
    label: str
    by: str = Field(description="who removed it (as its redaction recorded; the audit log's session.redact says too)")
    at: str


class VerifyOut(Schema):
    chainValid: bool
    firstBrokenSeq: int | None
    events: int
    brokenEvents: int = Field(
        description="events with at least one finding: an edited event once, and each later event whose stored "
        "running totals the edit no longer adds up to"
    )
    head: str
    checkedAt: str
    findings: list[VerifyFindingOut] = Field(description="the first 100 differences found")
    redactions: list[VerifyRedactionOut] = Field(
        description="values removed after the fact, checked by the commitments they left: the first 1000"
    )
    redactionCount: int = Field(description="removals in all (one per event, field and label)")


class ExportQuery(Schema):
    format: Literal["jsonl", "snapshot", "original"] = "jsonl"


@router.get("/sessions/{session_id}/export", response={200: None, **BAD}, url_name="export")
def export(request: HttpRequest, session_id: Id, query: Query[ExportQuery]):
    """Stream the session as rlm-code native JSONL, a rlm-code snapshot JSON, or the original
    records exactly as received."""
    session = access.session_for(request, session_id)
    try:
        stream, content_type, filename = exports.export_download(session=session, format=query.format)
    except exports.NothingToExport as nothing:
        raise HttpError(404, str(nothing)) from None
    audit.record_on_session(request, "session.export", session, format=query.format)
    response = StreamingHttpResponse(stream, content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


@router.get("/sessions/{session_id}/verify", response={200: VerifyOut, 409: DetailOut, **NOT_FOUND}, url_name="verify")
def verify(request: HttpRequest, session_id: Id):
    """Verify the stored events: every link of the hash chain over their recorded fields and
    content, and every derived value (pairing, running totals, keyframes) derived again. A read:
    nothing is stored (POST stores the result and records it in the audit log)."""
    session = access.session_for(request, session_id)
    try:
        return verification.verify_once(session=session, record=False).to_dict()
    except verification.VerificationRunning as running:
        raise HttpError(409, str(running)) from None


@router.post("/sessions/{session_id}/verify", response={200: VerifyOut, 409: DetailOut, **NOT_FOUND})
def verify_and_record(request: HttpRequest, session_id: Id):
    """Verify as GET does, then store the result on the session (the chain badge, the list's
    chainValid) and record a `session.verify` audit entry. Any member may."""
    session = access.session_for(request, session_id)
    try:
        result = verification.verify_once(session=session)
    except verification.VerificationRunning as running:
        raise HttpError(409, str(running)) from None
    audit.record_on_session(
        request, "session.verify", session, valid=result.valid, first_broken_seq=result.first_broken_seq
    )
    return result.to_dict()
