"""The schemas several routers answer with; a schema one router uses lives in that router."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, ClassVar, Literal

from ninja import Field, Schema
from pydantic import AfterValidator, ValidationInfo, field_validator, model_validator
from pydantic import Field as Bounds

from ..formats.fields import json_kind
from ..models.bounds import MAX_ID, MAX_POSITION


def _without_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


# Text a client sends that is stored as text: PostgreSQL refuses NUL in text columns, so it is a
# 400 naming the field here rather than a 500 there.
Text = Annotated[str, AfterValidator(_without_nul)]

# Numbers a client names, bounded by what the 64-bit columns hold (models/bounds.py): a larger
# one is a 400 naming the parameter, not an OverflowError inside the database driver.
Id = Annotated[int, Bounds(ge=1, le=MAX_ID)]
Position = Annotated[int, Bounds(ge=0, le=MAX_POSITION)]


class BodyIn(Schema, extra="forbid"):
    """A request body of the team API: a field it does not know is refused, naming it, rather
    than left out unseen (a misspelt `detecters` turned every redaction detector off). The
    fields a GET of the same thing answers with and the body does not take (`read_only`) are
    dropped, so what was read can be sent back changed."""

    read_only: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _without_read_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.read_only:
            return {name: value for name, value in data.items() if name not in cls.read_only}
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _json_types_as_declared(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic's lax mode reads true as 1 for a number: `{"expires_in_days": true}` made a
        # link of one day, `{"seq": true}` would name event #2; "7" as 7 and 3.0
        # as 3, which a client then believes the API takes; and "yes" or 1 as true
        # (`{"allow_export": "yes"}` allowed exports).
        annotation = cls.model_fields[info.field_name].annotation
        if typing.get_origin(annotation) is dict and isinstance(value, dict):
            # A map of switches ({"email": true}): each value as its field would be.
            values = _kinds(typing.get_args(annotation)[1])
            for key, item in value.items():
                if values == {bool} and not isinstance(item, bool):
                    raise ValueError(f"{key}: expected true or false, got {_json_name(item)}")
            return value
        kinds = _kinds(annotation)
        if value is None or not kinds:
            return value
        if kinds <= {int, float} and isinstance(value, bool | str):
            raise ValueError(f"expected a number, got {_json_name(value)}")
        if kinds == {int} and isinstance(value, float):
            raise ValueError(f"expected an integer, got {value!r}")
        if kinds == {bool} and not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_json_name(value)}")
        return value


def _kinds(annotation: Any) -> frozenset[type]:
    """The scalar types a field takes (int, float, bool; optional or bounded), or none when it
    takes anything else too (a text, a list, a model)."""
    if typing.get_origin(annotation) is Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [_kinds(arg) for arg in typing.get_args(annotation) if arg is not type(None)]
        return frozenset().union(*found) if found and all(found) else frozenset()
    return frozenset({annotation}) if annotation in (int, float, bool) else frozenset()


def _json_name(value: Any) -> str:
    """The value as a body's reader names it: true or false and numbers as written, the rest by
    their JSON kind (formats.fields.json_kind, as a file's problems name them)."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, int | float) else json_kind(value)


class DetailOut(Schema):
    detail: str


NOT_FOUND = {404: DetailOut}
DENIED = {403: DetailOut}  # a role too low (access.py), on an operation above the viewer's
BAD = {400: DetailOut, 404: DetailOut}


class ProblemOut(Schema):
    index: int | None = None
    field: str
    message: str


# The write side's errors: `detail` plus one entry per bad event or field.
class ErrorOut(Schema):
    detail: str
    errors: list[ProblemOut] = []


class CheckpointOut(Schema):
    name: str
    seq: int
    stepPos: int | None
    note: str
    createdBy: str
    createdAt: str | None


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


class SessionIdentityOut(Schema):
    """What every description of a session says of it (the list adds totals, a page the chain)."""

    id: int
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
    parentId: int | None = Field(None, description="the session that ran this one as a sub-agent, else null")


class ChainStatusOut(Schema):
    state: str = Field(description="verified | broken | unverified (no verification has run yet)")
    checkedAt: str | None
    brokenSeq: int | None = Field(description="the first event found changed (null: none, or the session's totals)")
    checkedEvents: int | None


class ReplaySessionOut(SessionIdentityOut):
    projectId: int
    chain: ChainStatusOut
    sourceChain: SourceChainOut | None = None


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
