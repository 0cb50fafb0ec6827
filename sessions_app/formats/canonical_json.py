"""Replay's own canonical events as JSON: what the ingest API accepts and an NDJSON file format.

One JSON object per event, validated by `CanonicalEventIn` (the same schema for API batches and
file lines, docs/ingest.md "Canonical events"):

    {"kind": "llm_call", "timestamp": "2026-02-08T10:30:00Z", "payload": {...},
     "tool": "gpt-4o", "pair_id": "c1", "tokens": 12, "cost_usd": 0.001, ...}

As a file: one event a line. A `session_start` event names the session in its payload (`task`,
`environment`, `model`, `session_id`, `run_id`, `agent_id`, `metadata`); a `session_start` that
follows other events begins the next session of the file. `session_end` may state `status`
("completed" | "failed"), `completed`, `final_answer` and `total_reward`; `final` may state
`answer`; `checkpoint` names a position (`name`, optional `note`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError, ValidationInfo, field_validator

from ..canonical import (
    ALL_KINDS,
    INT64_MAX,
    INT64_MIN,
    CanonicalEvent,
    CheckpointSpec,
    Kind,
    ParsedSession,
    Problems,
    SessionMeta,
    StateChange,
)
from . import Head, Source, read_records, source_stem
from .fields import iso_text, number, preview, utc_instant
from .step_state import STEP_DEFAULTS

NAME = "canonical"

# rlm-code's StepState fields (its variables and memory notes too, which state changes carry).
_STEP_FIELDS = frozenset({*STEP_DEFAULTS, "variables", "memory_notes"})
# The type each StepState field holds in rlm-code (its default's), and how a problem names it.
_STEP_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    name: ((bool,), "true or false") if isinstance(default, bool)
    else ((int,), "a whole number") if isinstance(default, int)
    else ((int, float), "a finite number") if isinstance(default, float)
    else ((str,), "text") if isinstance(default, str)
    else ((dict,), "an object")
    for name, default in STEP_DEFAULTS.items()
} | {"variables": ((dict,), "an object"), "memory_notes": ((list,), "a list")}  # fmt: skip


class StateChangeIn(BaseModel):
    """A change to the agent's variables and memory notes at this event."""

    model_config = ConfigDict(extra="forbid")

    memory: list[Any] | None = None
    variables: dict[str, Any] | None = None
    replace: bool = Field(False, strict=True)  # the variables become the whole variable state


class CanonicalEventIn(BaseModel):
    """One canonical event. Unknown fields are refused so a typo never passes silently, and
    numbers, booleans and times are taken only as themselves (strict): `true` is no token count,
    `"1.5"` no cost and `"yes"` no error flag."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="canonical kind, docs/formats.md (e.g. llm_call, step_end)")
    source_type: str = Field("", max_length=64, description="the source's own type name")
    timestamp: datetime | None = Field(None, description="ISO 8601; without a zone it is UTC")
    payload: dict[str, Any] = Field(default_factory=dict)
    # Numbers are stored in 64-bit columns (as from every other format).
    step: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX, strict=True)
    depth: int = Field(0, ge=0, le=INT64_MAX, strict=True)
    agent_id: str = Field("", max_length=200)
    parent_id: str = Field("", max_length=200)
    child_id: str = Field("", max_length=200)
    tool: str = Field("", max_length=200, description="tool name, or the model of an LLM event")
    pair_id: str = Field("", max_length=200, description="pairs a call with its response")
    duration_ms: FiniteFloat | None = Field(None, ge=0, strict=True)
    cost_usd: FiniteFloat | None = Field(None, ge=0, strict=True)
    cost_unpriced: bool = Field(False, strict=True)
    tokens: int | None = Field(None, ge=0, le=INT64_MAX, strict=True)
    reward: FiniteFloat | None = Field(None, strict=True)
    cumulative_reward: FiniteFloat | None = Field(None, strict=True)
    is_error: bool = Field(False, strict=True)
    failed: bool | None = Field(None, strict=True)
    step_state: dict[str, Any] | None = Field(
        None, description="set when this event closes a step (rlm-code StepState fields)"
    )
    state_change: StateChangeIn | None = None

    _iso_text = field_validator("timestamp", mode="before")(iso_text)
    # Stored in UTC: "0001-01-01T00:00+14:00" parses but has no UTC instant.
    _in_utc_range = field_validator("timestamp")(utc_instant)

    @field_validator("step_state")
    @classmethod
    def _known_step_fields(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # As the event's own fields: a misspelt StepState field ("action_typ") was dropped
        # without a word, and the step showed empty.
        unknown = sorted(set(value or ()) - _STEP_FIELDS)
        if unknown:
            raise ValueError(
                f"unknown StepState field {unknown[0]!r}; the fields are {', '.join(sorted(_STEP_FIELDS))}"
            )
        # And of its type, as the event's own numbers and flags: `"success": "no"` counted as a
        # success, `"reward": "high"` showed as the step's reward.
        wrong = []
        for name, given in (value or {}).items():
            wanted, what = _STEP_TYPES[name]
            if given is not None and not (
                isinstance(given, wanted) and not (isinstance(given, bool) and bool not in wanted)
                and not (isinstance(given, float) and not math.isfinite(given))
            ):  # fmt: skip
                wrong.append(f"StepState field {name!r} should be {what}, not {preview(given)}")
        if wrong:  # each one named, not only the first
            raise ValueError("; ".join(wrong))
        return value

    @field_validator("state_change")
    @classmethod
    def _one_state_each(cls, change: StateChangeIn | None, info: ValidationInfo) -> StateChangeIn | None:
        # A step state's variables or notes set the state at this event too: one was dropped
        # without a word. (step_state is validated first: it is declared before.)
        step = info.data.get("step_state") or {}
        if change is not None and step.get("variables") is not None and change.variables is not None:
            raise ValueError("step_state.variables also sets the variables: send one of the two")
        if change is not None and step.get("memory_notes") is not None and change.memory is not None:
            raise ValueError("step_state.memory_notes also sets the memory: send one of the two")
        return change

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in ALL_KINDS:
            raise ValueError(f"{value!r} is not a canonical kind")
        return value


def event_from_record(record: dict[str, Any], raw: str, line: int | None) -> CanonicalEvent:
    """Validate one record and build its CanonicalEvent; raises pydantic's ValidationError."""
    item = CanonicalEventIn.model_validate(record)
    timestamp = item.timestamp
    if timestamp is not None and timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=UTC)
    step_state, change = _step_and_state(item, timestamp)
    return CanonicalEvent(
        kind=item.kind,
        source_type=item.source_type or item.kind,
        raw=raw,
        payload=item.payload,
        timestamp=timestamp,
        line=line,
        step=item.step,
        depth=item.depth,
        agent_id=item.agent_id,
        parent_id=item.parent_id,
        child_id=item.child_id,
        tool=item.tool,
        pair_id=item.pair_id,
        duration_ms=item.duration_ms,
        cost_usd=item.cost_usd,
        cost_unpriced=item.cost_unpriced,
        tokens=item.tokens,
        reward=item.reward,
        cumulative_reward=item.cumulative_reward,
        is_error=item.is_error,
        failed=item.failed,
        step_state=step_state,
        state_change=change,
    )


# A StepState field the event left out, taken from the event's own field of the same meaning.
_FROM_THE_EVENT = {"step": "step", "reward": "reward", "cumulative_reward": "cumulative_reward",
                   "duration_ms": "duration_ms", "tokens_used": "tokens"}  # fmt: skip


def _step_and_state(
    item: CanonicalEventIn, timestamp: datetime | None
) -> tuple[dict[str, Any] | None, StateChange | None]:
    """The step state as stored, and the state change. A step state's `variables` and
    `memory_notes` are the agent's state at that step (as in an rlm snapshot), so they become
    the state change (the whole variable state); they were accepted and then dropped. A field it
    leaves out comes from the event (`"reward": 2` beside a step state without one showed the
    step's reward as 0), and its time is the event's, as rlm-code times a step."""
    given = item.state_change
    change = (
        None if given is None else StateChange(memory=given.memory, variables=given.variables,
                                               replace_variables=given.replace)
    )  # fmt: skip
    if item.step_state is None:
        return None, change
    step = dict(item.step_state)
    variables, notes = step.pop("variables", None), step.pop("memory_notes", None)
    for name, own in _FROM_THE_EVENT.items():
        if step.get(name) is None and getattr(item, own) is not None:
            step[name] = getattr(item, own)
    if step.get("timestamp") is None and timestamp is not None:
        step["timestamp"] = timestamp.isoformat()
    if variables is not None or notes is not None:
        change = change or StateChange()
        if variables is not None:
            change.variables, change.replace_variables = variables, True
        if notes is not None:
            change.memory = notes
    return step, change


def validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """(field path, message) for each error, e.g. ("state_change.memory", "Input should be ...")."""
    out = []
    for error in exc.errors(include_url=False):
        path = ".".join(str(part) for part in error["loc"]) or "event"
        message = error["msg"]
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        out.append((path, message))
    return out


class Converter:
    """The live-ingest contract (formats/__init__.py): canonical events need no state across
    batches, but session_start / session_end / final fill `meta` as they pass."""

    def __init__(self, state: dict | None = None) -> None:
        self.meta = SessionMeta()
        self.emitted = int((state or {}).get("emitted", 0))  # events so far: a checkpoint's seq

    def convert(self, record: dict[str, Any], raw: str, line: int | None, problems: Problems) -> list[CanonicalEvent]:
        try:
            event = event_from_record(record, raw, line)
        except ValidationError as exc:
            for path, message in validation_problems(exc):
                problems.add(line, path, message)
            return []
        _note_meta(self.meta, event, problems)
        if event.kind == Kind.CHECKPOINT:
            name = event.payload.get("name") or event.payload.get("checkpoint_name")
            self.meta.checkpoints.append(
                CheckpointSpec(
                    name=str(name or f"checkpoint_{self.emitted}"), seq=self.emitted,
                    created_at=event.timestamp, note=str(event.payload.get("note") or ""),
                )
            )  # fmt: skip
        self.emitted += 1
        return [event]

    def state(self) -> dict:
        return {"emitted": self.emitted}


# session_start's payload keys naming the session, by the SessionMeta field each fills.
_START_TEXTS = (
    ("task", ("task",)), ("environment", ("environment",)), ("model", ("model",)),
    ("source_session_id", ("session_id", "source_session_id")), ("run_id", ("run_id",)),
    ("agent_id", ("agent_id",)),
)  # fmt: skip


def _note_meta(meta: SessionMeta, event: CanonicalEvent, problems: Problems) -> None:
    """What session_start, session_end and final say of the session. A value of the wrong type
    is a problem on its payload field, and the session goes without it: the event itself is kept
    as recorded (a file's line; a live batch holding one is refused, as any canonical problem)."""
    payload, line = event.payload, event.line

    def text(key: str) -> str | None:
        value = payload.get(key)
        if value is None or isinstance(value, str):
            return value
        problems.add(line, f"payload.{key}", f"not text: {preview(value)} (ignored)")
        return None

    if event.kind == Kind.SESSION_START:
        for name, keys in _START_TEXTS:
            for key in keys:
                value = text(key)
                if value and not getattr(meta, name):
                    setattr(meta, name, value)
        metadata = payload.get("metadata")
        if isinstance(metadata, dict):
            meta.metadata.update(metadata)
        elif metadata is not None:
            problems.add(line, "payload.metadata", f"not an object: {preview(metadata)} (ignored)")
        if meta.started_at is None:
            meta.started_at = event.timestamp
    elif event.kind == Kind.SESSION_END:
        status = payload.get("status")
        completed = payload.get("completed")
        if status in ("completed", "failed"):
            meta.completed = status == "completed"
            meta.failed = status == "failed"
        elif status is not None:
            problems.add(line, "payload.status", f'neither "completed" nor "failed": {preview(status)} (ignored)')
        if completed is not None and not isinstance(completed, bool):
            problems.add(line, "payload.completed", f"not true or false: {preview(completed)} (ignored)")
        elif completed is not None and status not in ("completed", "failed"):
            meta.completed = completed
        answer = text("final_answer")
        if answer:
            meta.final_answer = answer
        total = number(payload, "total_reward", "payload.total_reward", line, problems)
        if total is not None:
            meta.total_reward = float(total)
        meta.ended_at = event.timestamp or meta.ended_at
    elif event.kind == Kind.FINAL:
        answer = text("answer")
        if answer:
            meta.final_answer = answer
        meta.completed = True if meta.completed is None else meta.completed
    if not meta.run_id and event.agent_id and not meta.agent_id:
        meta.agent_id = event.agent_id


# The keys a canonical event may have (unknown ones are refused: CanonicalEventIn), and those of
# other formats' records that no canonical event has.
_EVENT_FIELDS = frozenset(CanonicalEventIn.model_fields)
_FOREIGN_KEYS = frozenset({"event_type", "eventType", "recording_id", "offset", "type", "at"})


def looks_like_an_event(record: dict[str, Any]) -> bool:
    """A record shaped as a canonical event, whatever its kind: the one key every event has,
    `kind`, as text; `payload`, when there, an object; none of another format's own keys."""
    return (
        isinstance(record.get("kind"), str)
        and isinstance(record.get("payload", {}), dict)
        and not (_FOREIGN_KEYS & record.keys())
    )


def _is_an_event(record: dict[str, Any]) -> bool:
    """A record that is a canonical event: of a known kind, with no key an event does not have."""
    return record["kind"] in ALL_KINDS and record.keys() <= _EVENT_FIELDS


def sniff(head: Head) -> bool:
    """Every parsed head record is shaped as a canonical event and one at least is one, of a
    known kind and with no key an event does not have. (`payload` is optional, so a live
    session's events as received may have none; a kind unknown here, or a typo of a key, is a
    problem on its line, not a file of no format; another log whose records have a `kind` and
    keys of their own is none. flux0 records also carry `kind` and `payload`, but with
    `recording_id` and `offset`.)"""
    return (
        bool(head.records)
        and all(looks_like_an_event(record) for record in head.records)
        and any(_is_an_event(record) for record in head.records)
    )


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    records = read_records(source, problems)
    pending: list[tuple[int, dict[str, Any], str]] = []
    while True:
        session = _next_session(records, pending, problems, source)
        if session is None:
            return
        yield session
        # The caller drains the events before asking for the next session; make sure the
        # iterator really reached the boundary even if it stopped early.
        for _ in session.events:
            pass


def _next_session(
    records: Iterator[tuple[int, dict[str, Any], str]],
    pending: list[tuple[int, dict[str, Any], str]],
    problems: Problems,
    source: Source,
) -> ParsedSession | None:
    first = pending.pop() if pending else next(records, None)
    if first is None:
        return None
    converter = Converter()

    def events() -> Iterator[CanonicalEvent]:
        yielded = False
        item: tuple[int, dict[str, Any], str] | None = first
        while item is not None:
            number, record, raw = item
            if yielded and record.get("kind") == Kind.SESSION_START:
                pending.append(item)  # the next session begins here
                break
            for event in converter.convert(record, raw, number, problems):
                yielded = True
                yield event
            item = next(records, None)
        if not converter.meta.source_session_id:
            converter.meta.source_session_id = converter.meta.run_id or source_stem(source.display_name)

    return ParsedSession(meta=converter.meta, events=events())
