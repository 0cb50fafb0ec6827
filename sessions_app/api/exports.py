"""Export a session (native JSONL, snapshot, the original records) and verify its stored events."""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Query, Router, Schema

from .. import access, audit, verification
from ..replay import exports
from .schemas import BAD, NOT_FOUND

router = Router(tags=["sessions"])


class VerifyFindingOut(Schema):
    seq: int | None = Field(description="the event found changed (null: the session's totals)")
    field: str
    why: str


class VerifyOut(Schema):
    chainValid: bool
    firstBrokenSeq: int | None
    events: int
    brokenEvents: int
    head: str
    checkedAt: str
    findings: list[VerifyFindingOut] = Field(description="the first 100 differences found")


class ExportQuery(Schema):
    format: Literal["jsonl", "snapshot", "original"] = "jsonl"


_EXPORTS = {
    "jsonl": (exports.export_native_jsonl, "application/x-ndjson", "jsonl"),
    "snapshot": (exports.export_snapshot, "application/json", "json"),
    "original": (exports.export_original, "application/octet-stream", "original.jsonl"),  # or its own name
}


@router.get("/sessions/{session_id}/export", response={200: None, **BAD}, url_name="export")
def export(request: HttpRequest, session_id: int, query: Query[ExportQuery]):
    """Stream the session as rlm-code native JSONL, a rlm-code snapshot JSON, or the original
    records exactly as received."""
    session = access.session_for(request, session_id)
    audit.record_on_session(request, "session.export", session, format=query.format)
    generate, content_type, extension = _EXPORTS[query.format]
    stem = "".join(
        c if c.isalnum() or c in "-_." else "_" for c in (session.source_session_id or f"session-{session.pk}")
    )[:100]
    response = StreamingHttpResponse(generate(session=session), content_type=content_type)
    filename = (query.format == "original" and exports.original_name(session)) or f"{stem}.{extension}"
    filename = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)[:200]
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@router.get("/sessions/{session_id}/verify", response={200: VerifyOut, **NOT_FOUND}, url_name="verify")
def verify(request: HttpRequest, session_id: int):
    """Verify the stored events: every link of the hash chain over their recorded fields and
    content, and every derived value (pairing, running totals, keyframes) derived again; the
    result is stored on the session."""
    session = access.session_for(request, session_id)
    result = verification.verify_session(session=session)
    audit.record_on_session(
        request, "session.verify", session, valid=result.valid, first_broken_seq=result.first_broken_seq
    )
    return result.to_dict()
