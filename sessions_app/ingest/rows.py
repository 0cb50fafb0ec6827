"""Canonical events -> Event table rows, with everything a page later needs computed once.

For each event: its seq, the running totals after it, its pairing with the call it answers, its
fail streak, its hash-chain link, and a state keyframe every few hundred events while the
agent's variables or memory change (see models.Event). This is pure computation: it reads and
writes no database (writer.py writes the rows), and takes only a constant from the models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

import orjson

from ..canonical import (
    CALL_FAMILY,
    INT64_MAX,
    INT64_MIN,
    RESPONSE_FAMILY,
    CanonicalEvent,
    Kind,
    StateChange,
    json_without_nul,
    without_nul,
)
from ..chain import (
    CONTENT_FIELDS,
    GENESIS_HASH,
    RECORDED_FIELDS,
    commitments,
    link_hash,
    new_salts,
    recorded_values,
    redact_field,
    stored_commitments,
    with_text_digests,
)
from ..models import KEYFRAME_EVERY
from ..redaction import Redactor

_NO_OFFSET = timedelta(0)

# Every stored column of an event, in the order the writer builds a row (models.Event).
EVENT_COLUMNS = (
    "session_id", "seq", "kind", "source_type", "ts", "line", "step", "step_pos", "depth",
    "agent_id", "parent_id", "child_id", "tool", "pair_id", "pair_seq", "pair_duration_ms",
    "duration_ms", "cost_usd", "cost_unpriced", "tokens", "reward", "cumulative_reward",
    "is_error", "failed", "fail_streak", "payload", "raw", "step_state", "state_change", "salt",
    "redacted", "hash", "prev_hash", "cost_total", "tokens_total", "errors_total", "elapsed_ms",
    "reward_total", "steps_total", "kind_counts",
)  # fmt: skip
# The columns the writer derives from the others in seq order: verification derives them again.
DERIVED_COLUMNS = (
    "step_pos", "pair_seq", "pair_duration_ms", "fail_streak", "hash", "prev_hash", "cost_total",
    "tokens_total", "errors_total", "elapsed_ms", "reward_total", "steps_total", "kind_counts",
)  # fmt: skip
_INDEX = {name: i for i, name in enumerate(EVENT_COLUMNS)}
_SEQ = _INDEX["seq"]
_PAIR_SEQ, _PAIR_DURATION = _INDEX["pair_seq"], _INDEX["pair_duration_ms"]
_STEP_POS = _INDEX["step_pos"]
_TOOL = _INDEX["tool"]
_PAIR_ID = _INDEX["pair_id"]
_DURATION = _INDEX["duration_ms"]
_COST = _INDEX["cost_usd"]
_UNPRICED = _INDEX["cost_unpriced"]
_TOKENS = _INDEX["tokens"]
_REWARD = _INDEX["reward"]
_CUMULATIVE = _INDEX["cumulative_reward"]
_IS_ERROR = _INDEX["is_error"]
_FAILED = _INDEX["failed"]
_FAIL_STREAK = _INDEX["fail_streak"]
_COST_TOTAL = _INDEX["cost_total"]
_TOKENS_TOTAL = _INDEX["tokens_total"]
_ERRORS_TOTAL = _INDEX["errors_total"]
_ELAPSED = _INDEX["elapsed_ms"]
_REWARD_TOTAL = _INDEX["reward_total"]
_STEPS_TOTAL = _INDEX["steps_total"]
_KIND = _INDEX["kind"]
_PAIR_SEQ = _INDEX["pair_seq"]
_PAIR_DURATION = _INDEX["pair_duration_ms"]
_SALT = _INDEX["salt"]
_REDACTED = _INDEX["redacted"]
_PAYLOAD = _INDEX["payload"]
_RAW = _INDEX["raw"]
_STEP_STATE = _INDEX["step_state"]
_HASH = _INDEX["hash"]
_PREV_HASH = _INDEX["prev_hash"]
_KIND_COUNTS = _INDEX["kind_counts"]
_recorded_of = itemgetter(*(_INDEX[name] for name in RECORDED_FIELDS))
_contents_of = itemgetter(*(_INDEX[name] for name in CONTENT_FIELDS))
_LLM_KINDS = frozenset({Kind.LLM_CALL, Kind.LLM_RESPONSE})
_NON_STR_KEYS = orjson.OPT_NON_STR_KEYS
_dumps = orjson.dumps

# The session's columns that hold the writer's running state (column -> WriterState field): a
# later append starts from them (writer.state_of_session), verification compares them.
SESSION_STATE = {
    "event_count": "next_seq", "head_hash": "head", "cost_usd": "cost_total", "priced_events": "priced_events",
    "unpriced_events": "unpriced_events", "tokens": "tokens_total",
    "error_count": "errors_total", "reward": "reward_total", "step_count": "steps_total",
    "step_error_count": "step_errors", "step_success_count": "step_successes", "elapsed_ms": "elapsed_ms",
    "kind_counts": "kind_counts", "models_used": "models", "tools_used": "tools",
}  # fmt: skip

# Saved between appends (Session.ingest_state): what neither the session's own columns nor its
# last event hold.
SAVED_FIELDS = (
    "first_ts_ms", "last_ts_ms", "open_pairs", "early_answers", "fail_streaks", "variables",
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
    priced_events: int = 0  # events with a known cost
    unpriced_events: int = 0  # events that used tokens with no known price
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
    # Answers recorded before their call (clocks and writers reorder): "family|id" ->
    # [seq, ts_ms, duration_ms], paired when the call arrives.
    early_answers: dict[str, list] = field(default_factory=dict)
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
    """What one bulk write stores: new rows, rows of earlier batches that got their pair
    (row seq, pair duration, paired seq), and keyframes."""

    rows: list[list]
    pair_updates: list[tuple[int, float | None, int]]
    keyframes: list[Keyframe]


def seal_rows(rows: list[list], state: WriterState) -> None:
    """Fill in the counts by kind and the hash chain of rows in seq order, continuing from
    `state` (its head and kind_counts move on); chain.py says what is hashed."""
    head = state.head
    counts = state.kind_counts
    dumps = _dumps
    recorded, contents = _recorded_of, _contents_of
    for row in rows:
        kind = row[_KIND]
        counts[kind] = counts.get(kind, 0) + 1
        row[_KIND_COUNTS] = dumps(counts).decode()
        row[_PREV_HASH] = head
        redacted = row[_REDACTED]
        if redacted is None:
            commits = commitments(row[_SALT], contents(row))
        else:
            try:
                commits = stored_commitments(row[_SALT], redacted, contents(row))
            except ValueError:  # a damaged stored row, being verified: its link is checked there
                commits = [None] * len(CONTENT_FIELDS)
        head = link_hash(head, row[_SEQ], recorded_values(recorded(row)), commits)
        row[_HASH] = head
    state.head = head


class EventRows:
    """Turns canonical events into rows, keeping the running totals, pairs and chain.

    `add` takes an event as a format gives it; `add_stored` takes an event as it was stored
    (verification builds the rows again from what was recorded and compares).
    """

    def __init__(
        self,
        *,
        session_pk: int,
        state: WriterState,
        vendor: str,
        keep_raw: bool = True,
        redactor: Redactor | None = None,
        redacted_by: str = "",
    ) -> None:
        self.state = state
        # The project's redaction rules (sessions_app/redaction.py), applied to every content
        # field before it is hashed; with rules on and originals not kept, no source record
        # is stored at all.
        self.redactor = redactor
        self.redacted_by = redacted_by
        # An import whose file is kept (its original, exported byte for byte) need not store each
        # record's text again: half the bytes written, hashed and later redacted.
        self.keep_raw = keep_raw and (redactor is None or redactor.keep_originals)
        self.session_pk = session_pk
        self.rows: list[list] = []
        self.rows_first_seq = state.next_seq
        self.pair_updates: list[tuple[int, float | None, int]] = []
        self.keyframes: list[Keyframe] = []
        self.db_timestamp = sqlite_timestamp if vendor == "sqlite" else postgres_timestamp
        # SQLite stores a timestamp as the text a format may already hold (timestamp_text).
        self.text_timestamps = vendor == "sqlite"
        self._salts: list[str] = []
        self._salt_draw = 16

    def take(self) -> Batch:
        """The rows built since the last take, and everything else their write needs."""
        if self.redactor is not None and self.rows:
            redact_rows(self.rows, self.redactor)
        seal_rows(self.rows, self.state)
        batch = Batch(self.rows, self.pair_updates, self.keyframes)
        self.rows = []
        self.rows_first_seq = self.state.next_seq
        self.pair_updates = []
        self.keyframes = []
        return batch

    def skip_to(self, seq: int) -> None:
        """Go on at `seq`, after taking every row so far (verification, past missing events)."""
        assert not self.rows, "take() the rows built so far first"
        self.state.next_seq = self.rows_first_seq = seq

    def _salt(self) -> str:
        if not self._salts:
            # Drawn from the system's random source a batch at a time: few at first, as most
            # appends are small (a live batch; an OTLP session's ~200 events, where drawing 1,024
            # for each session was 1.7 % of the settling), up to 1,024 a draw for an import.
            self._salt_draw = min(self._salt_draw * 4, 1024)
            self._salts = new_salts(self._salt_draw)
        return self._salts.pop()

    def add(self, event: CanonicalEvent) -> None:
        # The hot path of every import: one call per event (bench/import_bench.py).
        stored_ts = event.timestamp_text if self.text_timestamps else None
        if stored_ts is None:
            stored_ts = self.db_timestamp(event.timestamp)
        source_type, agent_id, parent_id = event.source_type, event.agent_id, event.parent_id
        child_id, tool, pair_id = event.child_id, event.tool, event.pair_id
        # One search of the six joined (one C step) instead of six, on every event.
        if "\x00" in f"{source_type}{agent_id}{parent_id}{child_id}{tool}{pair_id}":
            source_type, agent_id, parent_id, child_id, tool, pair_id = map(
                without_nul, (source_type, agent_id, parent_id, child_id, tool, pair_id)
            )
        tokens = event.tokens
        # Saturated at the 64-bit column's limits: absurd counts (hostile input) must not make a
        # whole import fail on the write.
        if tokens is not None and not INT64_MIN <= tokens <= INT64_MAX:
            tokens = _saturated(tokens)
        step_state = event.step_state
        change = event.state_change
        if change is not None and self.redactor is not None:
            # Now, not with the batch: the change moves the variables and memory that keyframes
            # and the session's saved state hold.
            change = _redacted_change(change, self.redactor)
        self._append(
            [
                self.session_pk, None, event.kind, source_type[:64], stored_ts, event.line,
                event.step, None, event.depth, agent_id[:200], parent_id[:200], child_id[:200],
                tool[:200], pair_id[:200], None, None, event.duration_ms, event.cost_usd,
                event.cost_unpriced, tokens, event.reward, event.cumulative_reward,
                event.is_error, event.failed, 0, json_text(event.payload),
                event.raw if self.keep_raw else None,
                None if step_state is None else json_text(step_state),
                None if change is None else json_text(change.to_dict()), self._salt(), None,
                None, None, None, None, None, None, None, None, None,
            ],
            None if event.timestamp is None else event.timestamp.timestamp() * 1000.0,
            step_state,
            change,
        )  # fmt: skip

    def add_stored(self, values: dict[str, Any]) -> None:
        """An event as stored: every column but the derived ones (DERIVED_COLUMNS)."""
        ts = values["ts"]
        if isinstance(ts, str):
            ts = datetime.fromisoformat(ts.removesuffix("Z"))
        if ts is not None and ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        if self.redactor is not None:
            values = self._redact_stored(values)
        step_state = values["step_state"]
        change = values["state_change"]
        if change is not None:
            loaded = orjson.loads(change)
            change = StateChange(
                memory=loaded.get("memory"),
                variables=loaded.get("variables"),
                replace_variables=bool(loaded.get("replace")),
            )
        row = [values.get(name) for name in EVENT_COLUMNS]
        row[0] = self.session_pk
        # The pairing too is derived again, not carried: `_append` sets it only where it finds a
        # pair, so a stored pair_seq or pair_duration_ms on an event with none (forged on a note,
        # on a call never answered) was kept, and verification compared it with itself.
        row[_PAIR_SEQ] = row[_PAIR_DURATION] = None
        self._append(
            row,
            None if ts is None else ts.timestamp() * 1000.0,
            None if step_state is None else orjson.loads(step_state),
            change,
        )

    def _redact_stored(self, values: dict[str, Any]) -> dict[str, Any]:
        """An event as another Replay stored it (an evidence bundle's line), with each content
        field the rules change replaced by its commitment (chain.redact_field): its link, and
        so the bundle's chain, stays as it was."""
        redactor = self.redactor
        original = [values.get(name) for name in CONTENT_FIELDS]
        salt, redacted = values.get("salt") or "", values.get("redacted")
        changed = dict(values)
        for name, text in zip(CONTENT_FIELDS, original):
            if text is None:
                continue
            before = redactor.counts.copy()
            new_text = redactor.content_text(name, text)
            if new_text == text:
                continue
            labels = sorted((redactor.counts - before).keys())
            salt, redacted = redact_field(
                event_salt=salt, redacted=redacted, contents=original, field=name, labels=labels,
                by=self.redacted_by, at=datetime.now(UTC).isoformat(),
            )  # fmt: skip
            changed[name] = new_text
        if redacted is not None and redacted != values.get("redacted"):
            # What the redaction left in each field, so a later edit of it is found too.
            redacted = with_text_digests(
                redacted, {name: changed[name] for name in CONTENT_FIELDS if changed[name] != values.get(name)}
            )
        changed["salt"], changed["redacted"] = salt, redacted
        return changed

    def _append(
        self, row: list, ts_ms: float | None, step_state: dict[str, Any] | None, change: StateChange | None
    ) -> None:
        """Derive the row's running totals, pairing and fail streak (the columns left None),
        and keep the state a keyframe needs."""
        state = self.state
        seq = state.next_seq
        state.next_seq = seq + 1
        row[_SEQ] = seq
        kind = row[_KIND]
        if ts_ms is not None:
            first_ts = state.first_ts_ms
            if first_ts is None:
                state.first_ts_ms = first_ts = ts_ms
            state.last_ts_ms = ts_ms
            if ts_ms - first_ts > state.elapsed_ms:
                state.elapsed_ms = ts_ms - first_ts

        cost = row[_COST]
        if cost is not None:
            state.cost_total += cost
            state.priced_events += 1
        if row[_UNPRICED]:
            state.unpriced_events += 1
        tokens = row[_TOKENS]
        if tokens is not None:
            state.tokens_total = _saturated(state.tokens_total + tokens)
        if row[_IS_ERROR]:
            state.errors_total += 1
        cumulative = row[_CUMULATIVE]
        reward = row[_REWARD]
        if cumulative is not None:
            state.reward_total = cumulative
        elif reward is not None:
            total = state.reward_total + reward
            # Integers past 64 bits (no column holds them) go on as a float.
            state.reward_total = float(total) if type(total) is int and not INT64_MIN <= total <= INT64_MAX else total

        step_pos = None
        if step_state is not None:
            step_pos = state.steps_total
            state.steps_total = step_pos + 1
            if step_state.get("error"):
                state.step_errors += 1
            if step_state.get("success"):
                state.step_successes += 1
        row[_STEP_POS] = step_pos

        tool = row[_TOOL]
        fail_streak = 0
        if tool:
            bucket = state.models if kind in _LLM_KINDS else state.tools
            if tool not in bucket:
                bucket.append(tool)
            failed = row[_FAILED]
            if failed is not None:
                fail_streak = state.fail_streaks.get(tool, 0) + 1 if failed else 0
                state.fail_streaks[tool] = fail_streak
        row[_FAIL_STREAK] = fail_streak

        pair_id = row[_PAIR_ID]
        if pair_id:
            self._pair(row, kind, pair_id, seq, ts_ms)

        if change is not None:
            if change.memory is not None:
                state.memory = list(change.memory)
            if change.variables is not None:
                if change.replace_variables:
                    state.variables = dict(change.variables)
                else:
                    state.variables.update(change.variables)
            state.state_dirty = True

        row[_COST_TOTAL] = state.cost_total
        row[_TOKENS_TOTAL] = state.tokens_total
        row[_ERRORS_TOTAL] = state.errors_total
        row[_ELAPSED] = state.elapsed_ms
        row[_REWARD_TOTAL] = state.reward_total
        row[_STEPS_TOTAL] = state.steps_total
        self.rows.append(row)  # hash, prev_hash and kind_counts are filled in by seal_rows

        if state.state_dirty and seq - state.last_keyframe_seq >= KEYFRAME_EVERY:
            self._keyframe(seq, step_pos)

    def _pair(self, row: list, kind: str, pair_id: str, seq: int, ts_ms: float | None) -> None:
        """Pair a call and its answer by id, in whichever order they were recorded."""
        state = self.state
        if kind in CALL_FAMILY:
            key = f"{CALL_FAMILY[kind]}|{pair_id}"
            early = state.early_answers.pop(key, None)
            if early is None:
                state.open_pairs[key] = [seq, ts_ms]
                return
            answer_seq, answer_ts, answer_duration = early
            duration = _pair_duration(answer_duration, ts_ms, answer_ts)
            row[_PAIR_SEQ], row[_PAIR_DURATION] = answer_seq, duration
            self._link(answer_seq, duration, seq)
        elif kind in RESPONSE_FAMILY:
            key = f"{RESPONSE_FAMILY[kind]}|{pair_id}"
            opened = state.open_pairs.pop(key, None)
            if opened is None:
                state.early_answers[key] = [seq, ts_ms, row[_DURATION]]
                return
            call_seq, call_ts = opened
            duration = _pair_duration(row[_DURATION], call_ts, ts_ms)
            row[_PAIR_SEQ], row[_PAIR_DURATION] = call_seq, duration
            self._link(call_seq, duration, seq)

    def _link(self, target_seq: int, duration: float | None, other_seq: int) -> None:
        if target_seq >= self.rows_first_seq:
            row = self.rows[target_seq - self.rows_first_seq]
            row[_PAIR_SEQ] = other_seq
            row[_PAIR_DURATION] = duration
        else:
            self.pair_updates.append((target_seq, duration, other_seq))

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


def redact_rows(rows: list[list], redactor: Redactor) -> None:
    """Redact the content of a batch of new rows in place, before they are sealed. Without
    custom rules one scan reads the whole batch's JSON texts (redaction.Redactor.scans_json):
    a batch with nothing to redact, nearly every one, costs that scan alone."""
    if redactor.scans_json:
        texts = [row[_PAYLOAD] for row in rows]
        texts.extend(row[_STEP_STATE] for row in rows if row[_STEP_STATE] is not None)
        texts.extend(row[_RAW] for row in rows if row[_RAW] is not None)
        if not redactor.scan("\n".join(texts)):
            return
    json_text, record_text = redactor.json_text, redactor.record_text
    for row in rows:
        row[_PAYLOAD] = json_text(row[_PAYLOAD])
        if row[_STEP_STATE] is not None:
            row[_STEP_STATE] = json_text(row[_STEP_STATE])
        if row[_RAW] is not None:
            row[_RAW] = record_text(row[_RAW])


def _redacted_change(change: StateChange, redactor: Redactor) -> StateChange:
    memory = change.memory if change.memory is None else redactor.value(change.memory)
    variables = change.variables if change.variables is None else redactor.value(change.variables)
    if memory is change.memory and variables is change.variables:
        return change
    return StateChange(memory=memory, variables=variables, replace_variables=change.replace_variables)


def _pair_duration(recorded: float | None, call_ts: float | None, answer_ts: float | None) -> float | None:
    """The answer's own recorded duration, else the time between the two events."""
    if recorded is not None:
        return recorded
    if call_ts is not None and answer_ts is not None:
        return max(0.0, answer_ts - call_ts)
    return None
