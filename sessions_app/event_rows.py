"""Canonical events -> Event table rows, with everything a page later needs computed once.

For each event: its seq, the running totals after it, its pairing with the call it answers, its
fail streak, its hash-chain link, and a state keyframe every few hundred events while the
agent's variables or memory change (see models.Event). This is pure computation, free of Django
and of the database (ingest.py writes the rows).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from .canonical import (
    CALL_FAMILY,
    INT64_MAX,
    INT64_MIN,
    RESPONSE_FAMILY,
    CanonicalEvent,
    Kind,
    json_without_nul,
    without_nul,
)

GENESIS_HASH = "0" * 64
_NO_OFFSET = timedelta(0)
# A state keyframe (full variables + memory) at most every this many events while the state
# changes, so the state at any event is one keyframe plus at most this many rows away.
KEYFRAME_EVERY = 256

EVENT_COLUMNS = (
    "session_id", "seq", "kind", "source_type", "ts", "line", "step", "step_pos", "depth",
    "agent_id", "parent_id", "child_id", "tool", "pair_id", "pair_seq", "pair_duration_ms",
    "duration_ms", "cost_usd", "cost_unpriced", "tokens", "reward", "is_error", "fail_streak",
    "payload", "raw", "step_state", "state_change", "hash", "prev_hash", "cost_total",
    "tokens_total", "errors_total", "elapsed_ms", "reward_total", "steps_total", "kind_counts",
)  # fmt: skip
_KIND = EVENT_COLUMNS.index("kind")
_PAIR_SEQ = EVENT_COLUMNS.index("pair_seq")
_PAIR_DURATION = EVENT_COLUMNS.index("pair_duration_ms")
_RAW = EVENT_COLUMNS.index("raw")
_HASH = EVENT_COLUMNS.index("hash")
_PREV_HASH = EVENT_COLUMNS.index("prev_hash")
_KIND_COUNTS = EVENT_COLUMNS.index("kind_counts")
_LLM_KINDS = frozenset({Kind.LLM_CALL, Kind.LLM_RESPONSE})
_NON_STR_KEYS = orjson.OPT_NON_STR_KEYS
_dumps = orjson.dumps
_sha256 = hashlib.sha256

# Saved between appends (Session.ingest_state) besides what the session's own columns hold.
SAVED_FIELDS = (
    "first_ts_ms", "last_ts_ms", "kind_counts", "open_pairs", "fail_streaks", "variables",
    "memory", "state_dirty", "last_keyframe_seq", "format_state",
)  # fmt: skip


def _saturated(value: int) -> int:
    return INT64_MAX if value > INT64_MAX else INT64_MIN if value < INT64_MIN else value


def json_text(value: Any) -> str:
    try:
        return _dumps(value).decode()
    except TypeError:
        # Non-string keys (a format's int-keyed dict): written as strings. Tried second
        # because the option makes every dump about twice as slow.
        return _dumps(value, option=_NON_STR_KEYS).decode()


def sqlite_timestamp(value: datetime | None) -> Any:
    # What Django's SQLite backend stores for an aware datetime with USE_TZ: naive UTC text.
    if value is None:
        return None
    tz = value.tzinfo
    if tz is UTC or (tz is not None and value.utcoffset() == _NO_OFFSET):
        # The common case, UTC by any tzinfo (pydantic's for "Z" is its own): drop the
        # "+00:00" suffix, no conversion.
        return value.isoformat(" ")[:-6]
    if tz is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(" ")


def postgres_timestamp(value: datetime | None) -> Any:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


@dataclass(slots=True)
class WriterState:
    """Everything the row builder carries from one event to the next; saved on the session so
    a later append (live ingest) continues exactly where the last one stopped."""

    next_seq: int = 0
    head: str = GENESIS_HASH
    cost_total: float = 0.0
    tokens_total: int = 0
    errors_total: int = 0
    reward_total: float = 0.0
    steps_total: int = 0
    step_errors: int = 0
    step_successes: int = 0
    first_ts_ms: float | None = None
    last_ts_ms: float | None = None
    elapsed_ms: float = 0.0
    kind_counts: dict[str, int] = field(default_factory=dict)
    open_pairs: dict[str, list] = field(default_factory=dict)  # "family|id" -> [seq, ts_ms]
    fail_streaks: dict[str, int] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    memory: list[Any] = field(default_factory=list)
    state_dirty: bool = False
    last_keyframe_seq: int = -1
    models: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    format_state: dict[str, Any] = field(default_factory=dict)


@dataclass
class Keyframe:
    """The full point-in-time state at `seq` (becomes a Snapshot row of kind keyframe)."""

    seq: int
    step_pos: int | None
    variables: dict[str, Any]
    memory_notes: list[Any]
    stats: dict[str, Any]


@dataclass
class Batch:
    """What one bulk write stores: new rows, calls of earlier batches that got their answer
    (call seq, pair duration, response seq), and keyframes."""

    rows: list[list]
    pair_updates: list[tuple[int, float | None, int]]
    keyframes: list[Keyframe]


def seal_rows(rows: list[list], state: WriterState) -> None:
    """Fill in the hash chain and the counts by kind of rows in seq order, continuing from
    `state` (its head and kind_counts move on)."""
    head = state.head
    counts = state.kind_counts
    dumps = _dumps
    sha256 = _sha256
    for row in rows:
        kind = row[_KIND]
        counts[kind] = counts.get(kind, 0) + 1
        row[_KIND_COUNTS] = dumps(counts).decode()
        row[_PREV_HASH] = head
        head = sha256(head.encode("ascii") + row[_RAW].encode("utf-8", "surrogatepass")).hexdigest()
        row[_HASH] = head
    state.head = head


class EventRows:
    """Turns canonical events into rows, keeping the running totals, pairs and chain."""

    def __init__(self, *, session_pk: int, state: WriterState, vendor: str) -> None:
        self.state = state
        self.session_pk = session_pk
        self.rows: list[list] = []
        self.rows_first_seq = state.next_seq
        self.pair_updates: list[tuple[int, float | None, int]] = []
        self.keyframes: list[Keyframe] = []
        self.db_timestamp = sqlite_timestamp if vendor == "sqlite" else postgres_timestamp
        # SQLite stores a timestamp as the text a format may already hold (timestamp_text).
        self.text_timestamps = vendor == "sqlite"

    def take(self) -> Batch:
        """The rows built since the last take, and everything else their write needs."""
        seal_rows(self.rows, self.state)
        batch = Batch(self.rows, self.pair_updates, self.keyframes)
        self.rows = []
        self.rows_first_seq = self.state.next_seq
        self.pair_updates = []
        self.keyframes = []
        return batch

    def add(self, event: CanonicalEvent) -> None:
        # The hot path of every import: one call per event. Attribute reads are hoisted into
        # locals because at 100k events each one shows up in the profile (bench/import_bench.py).
        state = self.state
        seq = state.next_seq
        state.next_seq = seq + 1
        kind = event.kind
        timestamp = event.timestamp
        stored_ts = event.timestamp_text if self.text_timestamps else None
        if stored_ts is None:
            stored_ts = self.db_timestamp(timestamp)
        source_type, agent_id, parent_id = event.source_type, event.agent_id, event.parent_id
        child_id, tool, pair_id = event.child_id, event.tool, event.pair_id
        # One search of the six joined (one C step) instead of six, on every event.
        if "\x00" in f"{source_type}{agent_id}{parent_id}{child_id}{tool}{pair_id}":
            source_type, agent_id, parent_id, child_id, tool, pair_id = map(
                without_nul, (source_type, agent_id, parent_id, child_id, tool, pair_id)
            )

        if timestamp is not None:
            ts_ms = timestamp.timestamp() * 1000.0
            first_ts = state.first_ts_ms
            if first_ts is None:
                state.first_ts_ms = first_ts = ts_ms
            state.last_ts_ms = ts_ms
            if ts_ms - first_ts > state.elapsed_ms:
                state.elapsed_ms = ts_ms - first_ts
        else:
            ts_ms = None

        cost = event.cost_usd
        if cost is not None:
            state.cost_total += cost
        tokens = event.tokens
        if tokens is not None:
            # Both saturate at the 64-bit columns' limits: a format's sum of two counts, or
            # absurd counts (hostile input), must not make a whole import fail on the write.
            if not INT64_MIN <= tokens <= INT64_MAX:
                tokens = _saturated(tokens)
            state.tokens_total = _saturated(state.tokens_total + tokens)
        is_error = event.is_error
        if is_error:
            state.errors_total += 1
        reward = event.reward
        if event.cumulative_reward is not None:
            state.reward_total = event.cumulative_reward
        elif reward is not None:
            total = state.reward_total + reward
            # Integers past 64 bits (no column holds them) go on as a float.
            state.reward_total = float(total) if type(total) is int and not INT64_MIN <= total <= INT64_MAX else total

        step_pos = None
        step_state_json = None
        step_state = event.step_state
        if step_state is not None:
            step_pos = state.steps_total
            state.steps_total = step_pos + 1
            if step_state.get("error"):
                state.step_errors += 1
            if step_state.get("success"):
                state.step_successes += 1
            step_state_json = json_text(step_state)

        fail_streak = 0
        if tool:
            bucket = state.models if kind in _LLM_KINDS else state.tools
            if tool not in bucket:
                bucket.append(tool)
            if event.failed is not None:
                fail_streak = state.fail_streaks.get(tool, 0) + 1 if event.failed else 0
                state.fail_streaks[tool] = fail_streak

        pair_seq = None
        pair_duration = None
        if pair_id:
            if kind in CALL_FAMILY:
                state.open_pairs[f"{CALL_FAMILY[kind]}|{pair_id}"] = [seq, ts_ms]
            elif kind in RESPONSE_FAMILY:
                opened = state.open_pairs.pop(f"{RESPONSE_FAMILY[kind]}|{pair_id}", None)
                if opened is not None:
                    pair_seq, call_ts = opened
                    if event.duration_ms is not None:
                        pair_duration = event.duration_ms
                    elif call_ts is not None and ts_ms is not None:
                        pair_duration = max(0.0, ts_ms - call_ts)
                    self._link_call(pair_seq, pair_duration, seq)

        state_change_json = None
        change = event.state_change
        if change is not None:
            if change.memory is not None:
                state.memory = list(change.memory)
            if change.variables is not None:
                if change.replace_variables:
                    state.variables = dict(change.variables)
                else:
                    state.variables.update(change.variables)
            state.state_dirty = True
            state_change_json = json_text(change.to_dict())

        # hash, prev_hash and kind_counts (None here) are filled in by seal_rows.
        self.rows.append(
            [
                self.session_pk, seq, kind, source_type[:64], stored_ts,
                event.line, event.step, step_pos, event.depth, agent_id[:200],
                parent_id[:200], child_id[:200], tool[:200], pair_id[:200],
                pair_seq, pair_duration, event.duration_ms, cost, event.cost_unpriced,
                tokens, reward, is_error, fail_streak,
                json_text(event.payload), event.raw,
                step_state_json, state_change_json, None, None, state.cost_total,
                state.tokens_total, state.errors_total, state.elapsed_ms, state.reward_total,
                state.steps_total, None,
            ]
        )  # fmt: skip

        if state.state_dirty and seq - state.last_keyframe_seq >= KEYFRAME_EVERY:
            self._keyframe(seq, step_pos)

    def _link_call(self, call_seq: int, duration: float | None, response_seq: int) -> None:
        if call_seq >= self.rows_first_seq:
            row = self.rows[call_seq - self.rows_first_seq]
            row[_PAIR_SEQ] = response_seq
            row[_PAIR_DURATION] = duration
        else:
            self.pair_updates.append((call_seq, duration, response_seq))

    def _keyframe(self, seq: int, step_pos: int | None) -> None:
        state = self.state
        # A copy through JSON: the state keeps changing after this, and the snapshot must hold
        # what JSON can store (non-string keys become strings, no U+0000).
        dumped = _dumps([state.variables, state.memory], option=_NON_STR_KEYS)
        variables, memory = orjson.loads(dumped)
        if b"\\u0000" in dumped:
            variables, memory = json_without_nul([variables, memory])
        self.keyframes.append(
            Keyframe(
                seq=seq,
                step_pos=step_pos,
                variables=variables,
                memory_notes=memory,
                stats={"steps": state.steps_total, "reward": state.reward_total},
            )
        )
        state.last_keyframe_seq = seq
        state.state_dirty = False
