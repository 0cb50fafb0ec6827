"""Replay: pages of events with their context (AgentLens's ReplayState), StepStates, the context
at one event, search. docs/api.md describes the shapes."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from .. import access, replay
from .responses import json_response
from .schemas import (
    BAD,
    ContextOut,
    EventOut,
    Id,
    PairedEventOut,
    Position,
    ReplaySessionOut,
    StepStateOut,
    WarningOut,
)

router = Router(tags=["sessions"])


class StepsOut(Schema):
    total: int
    steps: list[StepStateOut]


class PageContextOut(Schema):
    """Context in a replay page: history entries are seqs (see docs/api.md, "Replay pages")."""

    eventIndex: int
    totalEvents: int
    cumulativeCostUsd: float
    elapsedMs: float
    eventCounts: dict[str, int]
    llmHistory: list[int]
    toolResults: list[int]
    pendingApprovals: list[int]
    errorCount: int
    warnings: list[WarningOut]
    tokens: int
    reward: float
    stepIndex: int | None


class ReplayStepOut(Schema):
    index: int
    event: EventOut
    # An AgentLens session's steps carry both only on the step that initiated the pair, as
    # AgentLens's own replay does; other sessions' steps always carry them.
    pairedEvent: PairedEventOut | None = None
    pairDurationMs: float | None = None
    context: PageContextOut | None


class PaginationOut(Schema):
    offset: int
    limit: int
    hasMore: bool


class ReplaySummaryOut(Schema):
    totalCost: float
    totalDurationMs: float
    totalLlmCalls: int
    totalToolCalls: int
    totalErrors: int
    models: list[str]
    tools: list[str]


class ReplayOut(Schema):
    """AgentLens's ReplayState, plus the page-level history maps (keys are seqs)."""

    session: ReplaySessionOut
    chainValid: bool
    totalSteps: int
    steps: list[ReplayStepOut]
    pagination: PaginationOut
    summary: ReplaySummaryOut
    llm: dict[int, EventOut] = {}
    tools: dict[int, EventOut] = {}
    approvals: dict[int, EventOut] = {}


class SearchHitOut(EventOut):
    stepIndex: int | None
    snippet: str | None = None


class SearchOut(Schema):
    q: str
    kind: str | None
    errors: bool
    results: list[SearchHitOut]
    nextFromSeq: int | None
    at: int | None = None
    nextError: int | None = None
    previousError: int | None = None


class ReplayQuery(Schema):
    offset: Position = 0
    limit: int = Field(1000, ge=1, le=replay.MAX_PAGE)
    eventTypes: str | None = Field(None, description="comma-separated kinds, e.g. llm_call,tool_call")
    includeContext: bool = True


class StepsQuery(Schema):
    offset: Position = 0
    limit: int = Field(100, ge=1, le=replay.MAX_PAGE)


class ContextQuery(Schema):
    seq: Position


class SearchQuery(Schema):
    q: str = Field("", max_length=500)
    kind: str | None = None
    errors: bool = False
    from_: Position | None = Field(None, alias="from", description="first seq to look at")
    limit: int = Field(50, ge=1, le=500)
    at: Position | None = Field(None, description="also give the next and previous error around this seq")


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part for part in (p.strip() for p in value.split(",")) if part] or None


@router.get("/sessions/{session_id}/replay", response={200: ReplayOut, **BAD}, url_name="replay")
def replay_page(request: HttpRequest, session_id: Id, query: Query[ReplayQuery]):
    """AgentLens's ReplayState for a page of events; a filter hides steps but every context is
    over all events; history entries are seqs into the page's steps or the page-level maps."""
    session = access.session_for(request, session_id)
    page = replay.replay_page(
        session=session, offset=query.offset, limit=query.limit,
        event_types=_split(query.eventTypes), include_context=query.includeContext, splice=True,
    )  # fmt: skip
    for name in ("llm", "tools", "approvals"):  # keyed by seq: JSON keys are text
        if name in page:
            page[name] = {str(seq): event for seq, event in page[name].items()}
    return json_response(page, str_keys=True)


@router.get("/sessions/{session_id}/steps", response={200: StepsOut, **BAD}, url_name="steps")
def steps_page(request: HttpRequest, session_id: Id, query: Query[StepsQuery]):
    """StepStates at positions offset..offset+limit-1, with their point-in-time state."""
    session = access.session_for(request, session_id)
    return json_response(replay.steps_page(session=session, offset=query.offset, limit=query.limit))


@router.get("/sessions/{session_id}/steps/{index}", response={200: StepStateOut, **BAD}, url_name="step")
def step_state(request: HttpRequest, session_id: Id, index: Position):
    """The StepState at a 0-based position (rlm-code's goto_step)."""
    session = access.session_for(request, session_id)
    step = replay.step_state_at(session=session, index=index)
    if step is None:
        span = f"its step indexes are 0 to {session.step_count - 1}" if session.step_count else "it has no steps"
        raise HttpError(404, f"session {session_id} has no step at index {index} ({span})")
    return json_response(step)


@router.get("/sessions/{session_id}/context", response={200: ContextOut, **BAD}, url_name="context")
def context(request: HttpRequest, session_id: Id, query: Query[ContextQuery]):
    """The full context at one event (history inlined), its state and its step."""
    session = access.session_for(request, session_id)
    found = replay.context_at(session=session, seq=query.seq)
    if found is None:
        span = f"its seqs are 0 to {session.event_count - 1}" if session.event_count else "it has no events"
        raise HttpError(404, f"session {session_id} has no event at seq {query.seq} ({span})")
    return json_response(found)


@router.get("/sessions/{session_id}/search", response={200: SearchOut, **BAD}, url_name="search")
def search(request: HttpRequest, session_id: Id, query: Query[SearchQuery]):
    """Events matching text, a kind and/or errors from a seq on; with `at`, the next and
    previous error around that seq."""
    session = access.session_for(request, session_id)
    found = replay.search(
        session=session, q=query.q, kind=query.kind or None, errors=query.errors,
        from_seq=query.from_, limit=query.limit,
    )  # fmt: skip
    if query.at is not None:
        found["at"] = query.at
        found["previousError"], found["nextError"] = replay.errors_around(session=session, seq=query.at)
    return json_response(found)
