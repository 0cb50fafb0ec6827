"""The canonical event vocabulary every input format is turned into (docs/formats.md).

A format module yields `ParsedSession`s whose `events` are `CanonicalEvent`s; `ingest/writer.py` writes
them. Nothing here touches the database.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class Kind:
    """Canonical kinds. The source's own type name is kept beside it as `source_type`."""

    SESSION_START = "session_start"
    SESSION_END = "session_end"
    STEP_START = "step_start"
    ACTION = "action"
    RESULT = "result"
    STEP_END = "step_end"
    MEMORY_UPDATE = "memory_update"
    VARIABLE_UPDATE = "variable_update"
    STATE = "state"
    LLM_CALL = "llm_call"
    LLM_RESPONSE = "llm_response"
    TOOL_CALL = "tool_call"
    TOOL_RESPONSE = "tool_response"
    TOOL_ERROR = "tool_error"
    CHILD_SPAWN = "child_spawn"
    CHILD_RESULT = "child_result"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_GRANTED = "approval_granted"
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_EXPIRED = "approval_expired"
    COST = "cost"
    FINAL = "final"
    CHECKPOINT = "checkpoint"
    ERROR = "error"
    USER_MESSAGE = "user_message"
    AGENT_MESSAGE = "agent_message"
    CHUNK = "chunk"
    STATUS = "status"
    CONTEXT = "context"
    NOTE = "note"
    CUSTOM = "custom"


ALL_KINDS: frozenset[str] = frozenset(
    value for name, value in vars(Kind).items() if name.isupper() and isinstance(value, str)
)

# Pairing families: a call kind and the kinds that answer it, matched on `pair_id`.
PAIR_FAMILIES: dict[str, tuple[str, frozenset[str]]] = {
    Kind.LLM_CALL: ("llm", frozenset({Kind.LLM_RESPONSE})),
    Kind.TOOL_CALL: ("tool", frozenset({Kind.TOOL_RESPONSE, Kind.TOOL_ERROR})),
    Kind.APPROVAL_REQUESTED: (
        "approval",
        frozenset({Kind.APPROVAL_GRANTED, Kind.APPROVAL_DENIED, Kind.APPROVAL_EXPIRED}),
    ),
    Kind.CHILD_SPAWN: ("child", frozenset({Kind.CHILD_RESULT})),
}
RESPONSE_FAMILY: dict[str, str] = {
    response: family for family, responses in PAIR_FAMILIES.values() for response in responses
}
CALL_FAMILY: dict[str, str] = {call: family for call, (family, _) in PAIR_FAMILIES.items()}


@dataclass(slots=True)
class StateChange:
    """A change to the agent's point-in-time state (REPL variables and memory notes).

    `memory` replaces the notes when not None; `variables` are set (or, with `replace`, become
    the whole variable state).
    """

    memory: list[Any] | None = None
    variables: dict[str, Any] | None = None
    replace_variables: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.memory is not None:
            out["memory"] = self.memory
        if self.variables is not None:
            out["variables"] = self.variables
        if self.replace_variables:
            out["replace"] = True
        return out


@dataclass(slots=True)
class CanonicalEvent:
    kind: str
    source_type: str
    raw: str  # the original record exactly as received (its text)
    payload: dict[str, Any]
    timestamp: datetime | None = None
    # The same instant as naive UTC text "YYYY-MM-DD HH:MM:SS[.ffffff]" when the format has it
    # at hand (formatting an aware datetime is one of the dearest steps of an import).
    timestamp_text: str | None = None
    line: int | None = None
    step: int | None = None
    depth: int = 0
    agent_id: str = ""
    parent_id: str = ""
    child_id: str = ""
    tool: str = ""
    pair_id: str = ""
    duration_ms: float | None = None
    cost_usd: float | None = None
    cost_unpriced: bool = False
    tokens: int | None = None
    reward: float | None = None
    cumulative_reward: float | None = None  # when the source states it, it wins over the sum
    is_error: bool = False
    failed: bool | None = None  # for tool/step outcomes: True failed, False succeeded
    step_state: dict[str, Any] | None = None  # set when this event closes a step
    state_change: StateChange | None = None


@dataclass
class SessionMeta:
    """What a format knows about a session; filled in while its events stream."""

    source_session_id: str = ""
    run_id: str = ""
    agent_id: str = ""
    task: str = ""
    environment: str = ""
    model: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    completed: bool | None = None
    failed: bool | None = None
    interrupted: bool = False  # the recording stops mid-action (session status "interrupted")
    final_answer: str = ""
    total_reward: float | None = None  # session_end / final total_reward overrides the sum
    metadata: dict[str, Any] = field(default_factory=dict)
    # Named positions: (name, step position or None, seq or None, created_at, created_by)
    checkpoints: list[CheckpointSpec] = field(default_factory=list)


@dataclass
class CheckpointSpec:
    name: str
    step_pos: int | None = None
    seq: int | None = None
    created_at: datetime | None = None
    created_by: str = ""
    note: str = ""


@dataclass
class ParsedSession:
    meta: SessionMeta
    events: Iterator[CanonicalEvent]


@dataclass(slots=True, frozen=True)
class Problem:
    """A line the importer could not use as it was: reported, never silently dropped."""

    line: int | None
    field: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "field": self.field, "message": self.message}


# Every number is stored in a 64-bit column: the formats refuse a count, step or duration beyond
# these (no real figure is), which would otherwise stop the write.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _line_order(line: int | None) -> tuple[int, int]:
    # A problem's place in the file's order: the file's own (no line) first.
    return (0, 0) if line is None else (1, line)


def without_nul(text: str) -> str:
    """Text as stored: U+0000 becomes U+FFFD. PostgreSQL's text and jsonb refuse the character
    (SQLite keeps it); both databases store the same text. The original record, hashed and
    exported, keeps it (as JSON's `\\u0000`)."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def json_without_nul(value: Any) -> Any:
    """A JSON value with `without_nul` applied to every string in it, keys included."""
    kind = type(value)
    if kind is str:
        return without_nul(value)
    if kind is dict:
        return {json_without_nul(k) if type(k) is str else k: json_without_nul(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [json_without_nul(item) for item in value]
    return value


def _problem(line: int | None, field: str, message: str) -> Problem:
    # Messages quote the file's own text, and the job stores them as JSON.
    return Problem(line, without_nul(field), without_nul(message))


def _negated(line: int | None) -> tuple[int, int]:
    # `_line_order` negated, for the min-heap to hold the problem coming last on top.
    first, number = _line_order(line)
    return (-first, -number)


class Problems:
    """Collects problems of one file: keeps `limit` in full, those that come first in the file
    (its own problems, with no line, before any line's), and counts the rest.

    A format finds problems in passes (unreadable lines as it reads, what records mean as it
    converts) and the file's own last ("could not read further"): keeping the first found would
    drop those of the lowest lines and the file's own once a file has more than `limit`.
    """

    def __init__(self, limit: int = 1000) -> None:
        self.limit = limit
        self.items: list[Problem] = []
        self._found_at: list[int] = []  # each kept problem's number in the order found
        self.count = 0
        # Once full: (negated line order, negated found number, place in `items`) of each kept
        # problem, the one coming last in the file (of a line's, the last found) on top of this
        # min-heap, so a problem coming before it replaces it.
        self._last_kept: list[tuple[tuple[int, int], int, int]] | None = None

    def add(self, line: int | None, field: str, message: str) -> None:
        found = self.count
        self.count += 1
        if len(self.items) < self.limit:
            self.items.append(_problem(line, field, message))
            self._found_at.append(found)
            return
        if self.limit <= 0:
            return
        if self._last_kept is None:
            self._last_kept = [(_negated(p.line), -self._found_at[place], place) for place, p in enumerate(self.items)]
            heapq.heapify(self._last_kept)
        order = _negated(line)
        if order > self._last_kept[0][0]:  # comes before the last kept (the same line: kept as found)
            place = self._last_kept[0][2]
            self.items[place], self._found_at[place] = _problem(line, field, message), found
            heapq.heapreplace(self._last_kept, (order, -found, place))

    def __len__(self) -> int:
        return self.count

    def in_line_order(self) -> list[Problem]:
        """The kept problems in the file's line order, the file's own (no line) first: the order
        found is no order a reader of the file can follow."""
        ranked = sorted(zip(self.items, self._found_at), key=lambda kept: (_line_order(kept[0].line), kept[1]))
        return [problem for problem, _ in ranked]

    def to_list(self) -> list[dict[str, Any]]:
        """What a job stores and shows: the kept problems, in line order."""
        return [p.to_dict() for p in self.in_line_order()]
