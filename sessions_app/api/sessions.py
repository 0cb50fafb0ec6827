"""Sessions: the list (the dashboard's query), one session, its summary, deleting it."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import Status

from .. import access, audit, deletion, replay
from ..models import Role, Session
from ..replay.listing import list_sessions as list_session_page
from .checkpoints import checkpoint_row
from .schemas import DENIED, NOT_FOUND, CheckpointOut, DetailOut, Id, SessionIdentityOut

router = Router(tags=["sessions"])


class SessionOut(SessionIdentityOut):
    project: str
    totalCost: float = Field(description="USD over the events with a known price; 0 and costKnown false: unpriced")
    costKnown: bool = Field(description="some event had a known price; false: totalCost is a sum of nothing, not $0")
    unpricedEvents: int = Field(description="events that used tokens with no known price: not in totalCost")
    totalTokens: int
    totalReward: float
    errorEvents: int
    chainValid: bool | None


class SessionListRowOut(SessionOut):
    reviewState: str | None = Field(
        description="the newest sign-off's verdict (made here, not restored from a bundle); null: unreviewed"
    )
    reviewBroken: bool = Field(description="a verification after the newest sign-off found an event it covered changed")
    reviewUnsigned: int = Field(
        description="the events after the newest sign-off's range (a live session that grew since): 0 when none"
    )
    importProblems: int = Field(
        description="problems (lines skipped or repaired) its import counted in the whole file: 0 when none"
    )


class SessionListOut(Schema):
    total: int
    sessions: list[SessionListRowOut]
    next: int | None = Field(None, description="pass as `before` for the next page; null at the end")


class SummaryOut(Schema):
    session_id: str
    run_id: str
    task: str
    environment: str
    model: str
    completed: bool
    total_steps: int
    total_reward: float
    total_tokens: int
    duration_seconds: float
    success_rate: float
    error_count: int
    totalCost: float
    costKnown: bool = Field(description="some event had a known price; false: totalCost is a sum of nothing, not $0")
    unpricedEvents: int
    totalEvents: int
    llmCalls: int
    toolCalls: int
    models: list[str]
    tools: list[str]
    errorEvents: int
    chainValid: bool | None
    status: str
    format: str


class SessionDetailOut(Schema):
    session: SessionOut
    summary: SummaryOut
    checkpoints: list[CheckpointOut]


class SessionListQuery(Schema):
    project: str | None = Field(None, description="project slug")
    format: str | None = None
    status: Literal["live", "completed", "failed", "interrupted"] | None = None
    model: str | None = None
    q: str | None = Field(None, max_length=200, description="text in task, ids, agent, model, answer")
    review: Literal["approved", "changes_requested", "rejected", "unreviewed"] | None = Field(
        None, description="the newest sign-off's verdict (made here, not restored from a bundle), or `unreviewed`"
    )
    limit: int = Field(50, ge=1, le=500)
    before: Id | None = Field(None, description="keyset cursor: sessions with a smaller id")


def _session_row(session: Session) -> dict[str, Any]:
    info = replay.session_info(session)
    info.pop("projectId")
    return {
        **info,
        "project": session.project.slug,
        "totalCost": session.cost_usd,
        "costKnown": session.cost_known,
        "unpricedEvents": session.unpriced_events,
        "totalTokens": session.tokens,
        "totalReward": session.reward,
        "errorEvents": session.error_count,
        "chainValid": session.chain_valid,
    }


@router.get("/sessions", response={200: SessionListOut, 400: DetailOut}, url_name="list_sessions")
def list_sessions(request: HttpRequest, query: Query[SessionListQuery]):
    """Sessions, newest first, filtered by project, format, status, model and text; keyset
    pagination: pass `next` back as `before`."""
    filters = {name: getattr(query, name) or "" for name in ("project", "format", "status", "model", "q", "review")}
    # In id order the cursor's sort value is the id itself.
    after = None if query.before is None else (query.before, query.before)
    page = list_session_page(
        sessions=access.sessions_visible_to(request), filters=filters, sort="-id", after=after, per_page=query.limit
    )
    return {
        "total": page.total,
        "sessions": [
            _session_row(s)
            | {
                "reviewState": s.review_state,
                "reviewBroken": s.review_broken,
                "reviewUnsigned": s.review_unsigned,
                "importProblems": s.import_problems,
            }
            for s in page.sessions
        ],
        "next": page.sessions[-1].pk if page.next_cursor else None,
    }


@router.get("/sessions/{session_id}", response={200: SessionDetailOut, **NOT_FOUND}, url_name="get_session")
def get_session(request: HttpRequest, session_id: Id):
    """One session: its row, its summary and its checkpoints."""
    session = access.session_for(request, session_id)
    return {
        "session": _session_row(session),
        "summary": replay.get_summary(session=session),
        "checkpoints": [checkpoint_row(c) for c in session.checkpoints.order_by("seq", "name")],
    }


@router.delete("/sessions/{session_id}", response={204: None, **NOT_FOUND, **DENIED}, url_name="delete_session")
def delete_session(request: HttpRequest, session_id: Id):
    """Delete a session with its events, snapshots and checkpoints (the database cascades)."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    deletion.delete_session(actor=access.actor_of(request), session=session, ip=audit.client_ip(request))
    return Status(204, None)


@router.get("/sessions/{session_id}/summary", response={200: SummaryOut, **NOT_FOUND}, url_name="summary")
def session_summary(request: HttpRequest, session_id: Id):
    """rlm-code's get_summary() keys plus totals for cost, events, calls, models and tools."""
    return replay.get_summary(session=access.session_for(request, session_id))
