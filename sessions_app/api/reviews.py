"""Sign-offs: a session's reviews with their coverage now, and signing one off."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from .. import access, audit
from ..models import Review, Role
from ..replay.sign_offs import SignOff, sign_offs_of
from ..reviews import MAX_NOTE, SignOffRefused, sign_off
from .responses import json_response
from .schemas import NOT_FOUND, BodyIn, DetailOut, Id, Text

router = Router(tags=["reviews"])


class CoversOut(Schema):
    # "from" is a Python keyword: the field is `first` with `from` as its JSON name.
    first: int = Field(..., alias="from", description="the first event covered, counted from 1")
    to: int = Field(..., description="the last event covered, counted from 1 (0: the session had none)")
    of: int = Field(..., description="the events the session has now")


class RedactedAfterOut(Schema):
    by: str
    at: datetime
    events: int = Field(description="the events whose values it removed")
    session_fields: list[str] = Field(description="the session's own fields it changed")


class ReviewOut(Schema):
    id: int
    verdict: Review.Verdict
    note: str
    reviewer: str
    created_at: datetime
    chain_head: str = Field(description="the chain head the verification before the sign-off ended at")
    chain_valid: bool = Field(description="whether the chain held (false only for a rejection)")
    first_seq: int
    last_seq: int = Field(description="-1 for a session without events")
    covers: CoversOut
    current: bool = Field(
        description="the session's newest sign-off made here: the review state the session list shows"
    )
    restored_from: str = Field(
        description="restored from an evidence bundle: the fingerprint of the key that signed it (what it says of "
        "reviewer and time is the bundle's word; never `current`); empty for a sign-off made here"
    )
    redacted_at: datetime | None = Field(
        description="when a redaction last replaced words in the note (null: never); the reviewer signed the words before"
    )
    redacted_by: str = Field(description="who ran that redaction (empty: none)")
    unchanged: bool = Field(
        description="the covered events still end in `chain_head`, and no verification since found one of them broken"
    )
    broken_seq: int | None = Field(
        description="the first covered event (a seq) a verification after the sign-off found broken; -1: the "
        "session's stored totals were; null: none"
    )
    fields_changed: list[str] = Field(
        description="the session's own fields (task, final_answer, status, ...) changed since the sign-off, by a "
        "writer or an edit (not by a redaction: `fields_redacted`; not the appended events': `fields_grown`); empty for a restored sign-off"
    )
    fields_grown: list[str] = Field(
        description="the session's own fields that events appended after the sign-off moved (reward; at a live "
        "session's end status, completed, ended_at, final_answer): the session grew, not an edit"
    )
    fields_redacted: list[str] = Field(
        description="the session's own fields a redaction after the sign-off changed (a value removed, as the "
        "audit log's session.redact entry says)"
    )
    record_differs: list[str] = Field(
        description="what the stored sign-off says (verdict, first_seq, last_seq, chain_head, chain_valid, "
        "header_seal) that its review.create audit entry does not: its row was rewritten; empty: as recorded"
    )
    redacted_after: list[RedactedAfterOut] = Field(
        description="the redactions of the session after the sign-off, oldest first: values removed, the chain "
        "it signed still holding (docs/redaction.md)"
    )


class ReviewIn(BodyIn):
    verdict: Review.Verdict
    note: Text = Field("", max_length=MAX_NOTE)


def review_row(found: SignOff) -> dict[str, Any]:
    """A sign-off as `ReviewOut`."""
    review = found.review
    return {
        "id": review.pk,
        "verdict": review.verdict,
        "note": review.note,
        "reviewer": review.reviewer_name,
        "created_at": review.created_at.isoformat(),
        "chain_head": review.chain_head,
        "chain_valid": review.chain_valid,
        "first_seq": review.first_seq,
        "last_seq": review.last_seq,
        "covers": found.coverage.to_dict(),
        "current": found.current,
        "restored_from": review.restored_from,
        "redacted_at": review.redacted_at.isoformat() if review.redacted_at else None,
        "redacted_by": review.redacted_by,
        "unchanged": found.coverage.unchanged,
        "fields_changed": list(found.coverage.fields_changed),
        "fields_grown": list(found.coverage.fields_grown),
        "fields_redacted": list(found.coverage.fields_redacted),
        "record_differs": list(found.coverage.record_differs),
        "redacted_after": [
            {"by": r.by, "at": r.at.isoformat(), "events": r.events, "session_fields": list(r.session_fields)}
            for r in found.coverage.redacted_after
        ],
        "broken_seq": found.coverage.broken_seq,
    }


# by_alias: the schema names CoversOut's `first` as it is sent, `from`.
@router.get(
    "/sessions/{session_id}/reviews", response={200: list[ReviewOut], **NOT_FOUND}, by_alias=True, url_name="reviews"
)
def list_reviews(request: HttpRequest, session_id: Id):
    """The session's sign-offs, newest first, each with what it covers of the session now."""
    session = access.session_for(request, session_id)
    return json_response([review_row(found) for found in sign_offs_of(session=session)])


@router.post(
    "/sessions/{session_id}/reviews",
    response={201: ReviewOut, 400: DetailOut, 403: DetailOut, 404: DetailOut, 409: DetailOut},
    by_alias=True,
    url_name="create_review",
)
def create_review(request: HttpRequest, session_id: Id, body: ReviewIn):
    """Verify the session and sign it off with a verdict. A broken chain can only be rejected:
    any other verdict is refused with 409 naming the broken seq."""
    session = access.session_for(request, session_id, need=Role.REVIEWER)
    try:
        review = sign_off(session=session, reviewer=access.actor_of(request), verdict=body.verdict,
                          note=body.note, ip=audit.client_ip(request))  # fmt: skip
    except SignOffRefused as exc:
        raise HttpError(409, str(exc))
    created = next(found for found in sign_offs_of(session=session) if found.review.pk == review.pk)
    return json_response(review_row(created), status=201)
