"""The read side of the API: a thin ninja Router over replay (pages, compare, exports) and verification.

Every operation validates its query with an explicit schema, looks the session up (404) and
calls one workflow function. Replay pages, step pages and contexts are rendered here with orjson
straight from the workflow's dicts (stored payloads spliced in as `orjson.Fragment`s, never
decoded), so those responses bypass ninja's response validation; their schemas below still
document them in /api/openapi.json, and tests/test_api_schema.py checks real responses against
them. docs/api.md describes every endpoint.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Field, NinjaAPI, Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status
from ninja.security import HttpBearer, SessionAuth

from . import replay, verification
from .ingest.writer import set_checkpoint
from .models import ApiKey, Checkpoint, Session
from .replay import exports
from .replay.compare import MAX_PAIRS, diff_sessions


class ApiKeyAuth(HttpBearer):
    """`Authorization: Bearer <key>`; keys are stored hashed (models.ApiKey)."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        return ApiKey.authenticate(token)


class LoginCookieAuth(SessionAuth):
    """The dashboard's login cookie. Without a session cookie there is nothing to check, so a
    request with a wrong API key gets 401, not the 403 of a CSRF check it never needed."""

    def _get_key(self, request: HttpRequest) -> str | None:
        if settings.SESSION_COOKIE_NAME not in request.COOKIES:
            return None
        return super()._get_key(request)


# An API key, or the dashboard's own login cookie (so the player's scripts can call the API);
# anonymous requests get 401. The cookie path checks CSRF on unsafe methods.
API_AUTH = [ApiKeyAuth(), LoginCookieAuth()]

router = Router(auth=API_AUTH, tags=["sessions"])


def register(api: NinjaAPI) -> None:
    from .api_write import router as write_router

    api.add_router("", router)
    api.add_router("", write_router)


# --- schemas -------------------------------------------------------------------------------------


class DetailOut(Schema):
    detail: str


class SessionOut(Schema):
    id: int
    project: str
    sourceSessionId: str
    runId: str
    agentId: str
    format: str
    status: str
    completed: bool
    task: str
    environment: str
    model: str
    startedAt: str | None
    endedAt: str | None
    createdAt: str | None
    eventCount: int
    stepCount: int
    totalCost: float
    totalTokens: int
    totalReward: float
    errorEvents: int
    chainValid: bool | None


class SessionListOut(Schema):
    total: int
    sessions: list[SessionOut]
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
    totalEvents: int
    llmCalls: int
    toolCalls: int
    models: list[str]
    tools: list[str]
    errorEvents: int
    chainValid: bool | None
    status: str
    format: str


class CheckpointOut(Schema):
    name: str
    seq: int
    stepPos: int | None
    note: str
    createdBy: str
    createdAt: str | None


class SessionDetailOut(Schema):
    session: SessionOut
    summary: SummaryOut
    checkpoints: list[CheckpointOut]


class StepStateOut(Schema):
    """rlm-code's StepState, with the variables and memory notes as they were at that step."""

    step: int
    timestamp: str
    action_type: str
    action_code: str
    action_rationale: str
    success: bool
    output: Any
    error: Any
    reward: float
    cumulative_reward: float
    duration_ms: float
    tokens_used: int
    memory_notes: list[Any]
    variables: dict[str, Any]
    raw_action: dict[str, Any]
    raw_observation: dict[str, Any]


class StepsOut(Schema):
    total: int
    steps: list[StepStateOut]


class EventOut(Schema):
    seq: int
    kind: str
    eventType: str
    timestamp: str | None
    step: int | None
    stepPos: int | None
    depth: int
    agentId: str
    parentId: str
    childId: str
    tool: str
    pairId: str
    pairSeq: int | None
    pairDurationMs: float | None
    durationMs: float | None
    costUsd: float | None
    costUnpriced: bool
    tokens: int | None
    isError: bool
    payload: Any


class PairedEventOut(Schema):
    seq: int
    kind: str
    eventType: str
    timestamp: str | None
    isError: bool


class WarningOut(Schema):
    type: Literal["cost", "unpriced", "latency", "unanswered", "repeated_failure"]
    message: str
    value: float | None
    threshold: float | None


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


class SourceChainOut(Schema):
    """The source's own hash chain (AgentLens's prevHash/hash) as the importer checked it."""

    valid: bool
    chained: bool | None = Field(
        None, description="false: every prevHash was null, only each event's own hash was checked"
    )
    broken_at: int | None = Field(None, description="seq of the first event that breaks it")
    event_id: str | None = None
    line: int | None = None
    field: str | None = None
    reason: str | None = None


class ReplaySessionOut(Schema):
    id: int
    projectId: int
    sourceSessionId: str
    runId: str
    agentId: str
    format: str
    status: str
    completed: bool
    task: str
    environment: str
    model: str
    startedAt: str | None
    endedAt: str | None
    createdAt: str | None
    eventCount: int
    stepCount: int
    sourceChain: SourceChainOut | None = None


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


class LlmHistoryEntryOut(EventOut):
    response: EventOut | None = Field(
        None, description="AgentLens sessions: the llm_response that completed this call by this event"
    )


class ContextOut(Schema):
    """The context at one event with every history entry inlined, its state and its step."""

    eventIndex: int
    totalEvents: int
    cumulativeCostUsd: float
    elapsedMs: float
    eventCounts: dict[str, int]
    llmHistory: list[LlmHistoryEntryOut]
    toolResults: list[EventOut]
    pendingApprovals: list[EventOut]
    errorCount: int
    warnings: list[WarningOut]
    tokens: int
    reward: float
    stepIndex: int | None
    memoryNotes: list[Any]
    variables: dict[str, Any]
    event: EventOut
    pairedEvent: PairedEventOut | None
    pairDurationMs: float | None
    step: StepStateOut | None
    stepSeq: int | None


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


class StepSummaryOut(Schema):
    step: int | None
    actionType: str
    actionCode: str
    success: bool
    reward: float
    cumulativeReward: float
    tokensUsed: int
    output: str
    error: str


class StepPairOut(Schema):
    index: int
    a: StepSummaryOut | None
    b: StepSummaryOut | None
    same: bool
    differs: dict[str, bool]
    divergence: bool


class ComparePaginationOut(Schema):
    offset: int
    limit: int | None
    total: int
    hasMore: bool


class CompareOut(Schema):
    """rlm-code's SessionComparison fields plus the aligned step pairs."""

    session_a_id: str
    session_b_id: str
    a_completed: bool
    b_completed: bool
    a_steps: int
    b_steps: int
    a_reward: float
    b_reward: float
    a_tokens: int
    b_tokens: int
    step_delta: int
    reward_delta: float
    token_delta: int
    a_efficiency: float
    b_efficiency: float
    efficiency_delta: float
    first_divergence_step: int | None
    divergence_reason: str
    a: ReplaySessionOut
    b: ReplaySessionOut
    pairs: list[StepPairOut]
    pagination: ComparePaginationOut


class CheckpointIn(Schema):
    name: str = Field(..., min_length=1, max_length=200)
    seq: int | None = Field(None, ge=0, description="the event to name; or give `step`")
    step: int | None = Field(None, ge=0, description="0-based step position; its closing event is named")
    note: str = Field("", max_length=2000)


class CheckpointStateOut(Schema):
    checkpoint: CheckpointOut
    stepState: StepStateOut | None
    context: ContextOut


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


# --- query schemas -------------------------------------------------------------------------------


class SessionListQuery(Schema):
    project: str | None = Field(None, description="project slug")
    format: str | None = None
    status: Literal["live", "completed", "failed", "interrupted"] | None = None
    model: str | None = None
    q: str | None = Field(None, max_length=200, description="text in task, ids, agent, model, answer")
    limit: int = Field(50, ge=1, le=500)
    before: int | None = Field(None, ge=1, description="keyset cursor: sessions with a smaller id")


class ReplayQuery(Schema):
    offset: int = Field(0, ge=0)
    limit: int = Field(1000, ge=1, le=replay.MAX_PAGE)
    eventTypes: str | None = Field(None, description="comma-separated kinds, e.g. llm_call,tool_call")
    includeContext: bool = True


class StepsQuery(Schema):
    offset: int = Field(0, ge=0)
    limit: int = Field(100, ge=1, le=replay.MAX_PAGE)


class ContextQuery(Schema):
    seq: int = Field(..., ge=0)


class SearchQuery(Schema):
    q: str = Field("", max_length=500)
    kind: str | None = None
    errors: bool = False
    from_: int | None = Field(None, ge=0, alias="from", description="first seq to look at")
    limit: int = Field(50, ge=1, le=500)
    at: int | None = Field(None, ge=0, description="also give the next and previous error around this seq")


class CompareQuery(Schema):
    a: int
    b: int
    offset: int = Field(0, ge=0)
    limit: int = Field(100, ge=1, le=MAX_PAIRS)


class ExportQuery(Schema):
    format: Literal["jsonl", "snapshot", "original"] = "jsonl"


# --- helpers -------------------------------------------------------------------------------------


def _json(data: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(
        orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), status=status, content_type="application/json"
    )


def _session_or_404(session_id: int) -> Session:
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        raise HttpError(404, f"session {session_id} not found")
    return session


def _checkpoint_dict(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "name": checkpoint.name,
        "seq": checkpoint.seq,
        "stepPos": checkpoint.step_pos,
        "note": checkpoint.note,
        "createdBy": checkpoint.created_by,
        "createdAt": checkpoint.created_at.isoformat() if checkpoint.created_at else None,
    }


def _session_row(session: Session) -> dict[str, Any]:
    info = replay.session_info(session)
    info.pop("projectId")
    return {
        **info,
        "project": session.project.slug,
        "totalCost": session.cost_usd,
        "totalTokens": session.tokens,
        "totalReward": session.reward,
        "errorEvents": session.error_count,
        "chainValid": session.chain_valid,
    }


def _who(request: HttpRequest) -> str:
    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiKey):
        return f"key:{auth.name}"[:150]
    if isinstance(auth, AbstractBaseUser):
        return auth.get_username()[:150]
    return ""


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part for part in (p.strip() for p in value.split(",")) if part] or None


_NOT_FOUND = {404: DetailOut}
_BAD = {400: DetailOut, 404: DetailOut}


# --- sessions ------------------------------------------------------------------------------------


@router.get("/sessions", response={200: SessionListOut, 400: DetailOut}, url_name="list_sessions")
def list_sessions(request: HttpRequest, query: Query[SessionListQuery]):
    """Sessions, newest first, filtered by project, format, status, model and text; keyset
    pagination: pass `next` back as `before`."""
    sessions = Session.objects.select_related("project").in_project(query.project).matching(query.q or "")
    if query.format:
        sessions = sessions.filter(source_format=query.format)
    if query.status:
        sessions = sessions.filter(status=query.status)
    if query.model:
        sessions = sessions.filter(Q(model__icontains=query.model) | Q(models_used__icontains=query.model))
    total = sessions.count()
    if query.before is not None:
        sessions = sessions.filter(pk__lt=query.before)
    page = list(sessions.order_by("-id")[: query.limit + 1])
    more = len(page) > query.limit
    page = page[: query.limit]
    return {
        "total": total,
        "sessions": [_session_row(s) for s in page],
        "next": page[-1].pk if more else None,
    }


@router.get("/sessions/{session_id}", response={200: SessionDetailOut, **_NOT_FOUND}, url_name="get_session")
def get_session(request: HttpRequest, session_id: int):
    """One session: its row, its summary and its checkpoints."""
    session = _session_or_404(session_id)
    return {
        "session": _session_row(session),
        "summary": replay.get_summary(session=session),
        "checkpoints": [_checkpoint_dict(c) for c in session.checkpoints.order_by("seq", "name")],
    }


@router.delete("/sessions/{session_id}", response={204: None, **_NOT_FOUND}, url_name="delete_session")
def delete_session(request: HttpRequest, session_id: int):
    """Delete a session with its events, snapshots and checkpoints (the database cascades)."""
    session = _session_or_404(session_id)
    session.delete()
    return Status(204, None)


# --- replay --------------------------------------------------------------------------------------


@router.get("/sessions/{session_id}/replay", response={200: ReplayOut, **_BAD}, url_name="replay")
def replay_page(request: HttpRequest, session_id: int, query: Query[ReplayQuery]):
    """AgentLens's ReplayState for a page of events; a filter hides steps but every context is
    over all events; history entries are seqs into the page's steps or the page-level maps."""
    session = _session_or_404(session_id)
    page = replay.replay_page(
        session=session, offset=query.offset, limit=query.limit,
        event_types=_split(query.eventTypes), include_context=query.includeContext, splice=True,
    )  # fmt: skip
    return _json(page)


@router.get("/sessions/{session_id}/summary", response={200: SummaryOut, **_NOT_FOUND}, url_name="summary")
def session_summary(request: HttpRequest, session_id: int):
    """rlm-code's get_summary() keys plus totals for cost, events, calls, models and tools."""
    return replay.get_summary(session=_session_or_404(session_id))


@router.get("/sessions/{session_id}/steps", response={200: StepsOut, **_BAD}, url_name="steps")
def steps_page(request: HttpRequest, session_id: int, query: Query[StepsQuery]):
    """StepStates at positions offset..offset+limit-1, with their point-in-time state."""
    session = _session_or_404(session_id)
    return _json(replay.steps_page(session=session, offset=query.offset, limit=query.limit))


@router.get("/sessions/{session_id}/steps/{index}", response={200: StepStateOut, **_BAD}, url_name="step")
def step_state(request: HttpRequest, session_id: int, index: int):
    """The StepState at a 0-based position (rlm-code's goto_step)."""
    session = _session_or_404(session_id)
    step = replay.step_state_at(session=session, index=index)
    if step is None:
        raise HttpError(404, f"session {session_id} has no step {index} (it has {session.step_count})")
    return _json(step)


@router.get("/sessions/{session_id}/context", response={200: ContextOut, **_BAD}, url_name="context")
def context(request: HttpRequest, session_id: int, query: Query[ContextQuery]):
    """The full context at one event (history inlined), its state and its step."""
    session = _session_or_404(session_id)
    found = replay.context_at(session=session, seq=query.seq)
    if found is None:
        raise HttpError(404, f"session {session_id} has no event {query.seq} (it has {session.event_count})")
    return _json(found)


@router.get("/sessions/{session_id}/search", response={200: SearchOut, **_BAD}, url_name="search")
def search(request: HttpRequest, session_id: int, query: Query[SearchQuery]):
    """Events matching text, a kind and/or errors from a seq on; with `at`, the next and
    previous error around that seq."""
    session = _session_or_404(session_id)
    found = replay.search(
        session=session, q=query.q, kind=query.kind or None, errors=query.errors,
        from_seq=query.from_, limit=query.limit,
    )  # fmt: skip
    if query.at is not None:
        found["at"] = query.at
        found["previousError"], found["nextError"] = replay.errors_around(session=session, seq=query.at)
    return _json(found)


@router.get("/compare", response={200: CompareOut, **_BAD}, url_name="compare")
def compare(request: HttpRequest, query: Query[CompareQuery]):
    """rlm-code's SessionComparison of a and b (deltas b - a) and aligned step pairs."""
    a = _session_or_404(query.a)
    b = _session_or_404(query.b)
    return _json(diff_sessions(a=a, b=b, offset=query.offset, limit=query.limit))


# --- checkpoints ---------------------------------------------------------------------------------


@router.get("/sessions/{session_id}/checkpoints", response={200: list[CheckpointOut], **_NOT_FOUND}, url_name="checkpoints")
def list_checkpoints(request: HttpRequest, session_id: int):
    """The session's named positions, in seq order."""
    session = _session_or_404(session_id)
    return [_checkpoint_dict(c) for c in session.checkpoints.order_by("seq", "name")]


@router.post("/sessions/{session_id}/checkpoints", response={201: CheckpointStateOut, **_BAD}, url_name="create_checkpoint")
def create_checkpoint(request: HttpRequest, session_id: int, body: CheckpointIn):
    """Name an event (`seq`) or a step (`step`); an existing name moves. Returns the full state."""
    session = _session_or_404(session_id)
    if (body.seq is None) == (body.step is None):
        raise HttpError(400, "give exactly one of seq or step")
    seq = body.seq
    if body.step is not None:
        seq = replay.step_seq(session=session, index=body.step)
        if seq is None:
            raise HttpError(400, f"step: session {session_id} has no step {body.step} (it has {session.step_count})")
    if seq >= session.event_count:
        raise HttpError(400, f"seq: session {session_id} has no event {seq} (it has {session.event_count})")
    checkpoint = set_checkpoint(session=session, name=body.name, seq=seq, created_by=_who(request), note=body.note)
    return _json(_checkpoint_state(session, checkpoint), status=201)


def _checkpoint_state(session: Session, checkpoint: Checkpoint) -> dict[str, Any]:
    step = None
    if checkpoint.step_pos is not None:
        step = replay.step_state_at(session=session, index=checkpoint.step_pos)
    return {
        "checkpoint": _checkpoint_dict(checkpoint),
        "stepState": step,
        "context": replay.context_at(session=session, seq=checkpoint.seq),
    }


@router.get("/sessions/{session_id}/checkpoints/{name}", response={200: CheckpointStateOut, **_NOT_FOUND}, url_name="checkpoint")
def get_checkpoint(request: HttpRequest, session_id: int, name: str):
    """A checkpoint with the full state at its position."""
    session = _session_or_404(session_id)
    checkpoint = session.checkpoints.filter(name=name).first()
    if checkpoint is None:
        raise HttpError(404, f"session {session_id} has no checkpoint named {name!r}")
    return _json(_checkpoint_state(session, checkpoint))


@router.delete("/sessions/{session_id}/checkpoints/{name}", response={204: None, **_NOT_FOUND}, url_name="delete_checkpoint")
def delete_checkpoint(request: HttpRequest, session_id: int, name: str):
    session = _session_or_404(session_id)
    deleted, _ = session.checkpoints.filter(name=name).delete()
    if not deleted:
        raise HttpError(404, f"session {session_id} has no checkpoint named {name!r}")
    return Status(204, None)


# --- export and verification ---------------------------------------------------------------------

_EXPORTS = {
    "jsonl": (exports.export_native_jsonl, "application/x-ndjson", "jsonl"),
    "snapshot": (exports.export_snapshot, "application/json", "json"),
    "original": (exports.export_original, "application/octet-stream", "original.jsonl"),  # or its own name
}


@router.get("/sessions/{session_id}/export", response={200: None, **_BAD}, url_name="export")
def export(request: HttpRequest, session_id: int, query: Query[ExportQuery]):
    """Stream the session as rlm-code native JSONL, a rlm-code snapshot JSON, or the original
    records exactly as received."""
    session = _session_or_404(session_id)
    generate, content_type, extension = _EXPORTS[query.format]
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in (session.source_session_id or f"session-{session.pk}"))[:100]
    response = StreamingHttpResponse(generate(session=session), content_type=content_type)
    filename = (query.format == "original" and exports.original_name(session)) or f"{stem}.{extension}"
    filename = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)[:200]
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@router.get("/sessions/{session_id}/verify", response={200: VerifyOut, **_NOT_FOUND}, url_name="verify")
def verify(request: HttpRequest, session_id: int):
    """Verify the stored events: every link of the hash chain over their recorded fields and
    content, and every derived value (pairing, running totals, keyframes) derived again; the
    result is stored on the session."""
    return verification.verify_session(session=_session_or_404(session_id)).to_dict()
