"""Compare two sessions: rlm-code's SessionComparison plus aligned step pairs."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from .. import access
from ..replay.compare import MAX_PAIRS, diff_sessions
from .responses import json_response
from .schemas import BAD, Id, Position, ReplaySessionOut

router = Router(tags=["sessions"])


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


class CompareQuery(Schema):
    a: Id
    b: Id
    offset: Position = 0
    limit: int = Field(100, ge=1, le=MAX_PAIRS)


@router.get("/compare", response={200: CompareOut, **BAD}, url_name="compare")
def compare(request: HttpRequest, query: Query[CompareQuery]):
    """rlm-code's SessionComparison of a and b (deltas b - a) and aligned step pairs."""
    a = access.session_for(request, query.a)
    b = access.session_for(request, query.b)
    return json_response(diff_sessions(a=a, b=b, offset=query.offset, limit=query.limit))
