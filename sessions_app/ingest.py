"""Writes: create sessions, append canonical events (seq, running totals, pairing, hash chain,
state keyframes), finish sessions, set checkpoints.

Everything a page later needs is computed here, once, as events stream in; see models.Event.
The rows go to the database through `_insert_rows`, the one place that uses each backend's raw
bulk path (SQLite `executemany`, PostgreSQL `COPY`): Django's `bulk_create` is ten times slower
for this (../shared/PERFORMANCE.md). The ORM is used everywhere else.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Callable, Iterable

import orjson
from django.db import connection, transaction
from django.utils import timezone

from .canonical import (
    CALL_FAMILY,
    RESPONSE_FAMILY,
    CanonicalEvent,
    CheckpointSpec,
    Kind,
    SessionMeta,
)
from .models import GENESIS_HASH, Checkpoint, Event, Project, Session, Snapshot

# Rows buffered before one bulk write; large enough to amortise each round trip.
BATCH_ROWS = 5000
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
_COL = {name: i for i, name in enumerate(EVENT_COLUMNS)}
_LLM_KINDS = frozenset({Kind.LLM_CALL, Kind.LLM_RESPONSE})
_NON_STR_KEYS = orjson.OPT_NON_STR_KEYS
_dumps = orjson.dumps
_sha256 = hashlib.sha256


def _json_text(value: Any) -> str:
    try:
        return _dumps(value).decode()
    except TypeError:
        # Non-string keys (a format's int-keyed dict): written as strings. Tried second
        # because the option makes every dump about twice as slow.
        return _dumps(value, option=_NON_STR_KEYS).decode()
_TABLE = Event._meta.db_table


@dataclass
class AppendResult:
    stored: int
    first_seq: int
    head_hash: str
    event_count: int


@dataclass
class _WriterState:
    """Everything the writer carries from one event to the next; saved on the session so a
    later append (live ingest) continues exactly where the last one stopped."""

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

    @classmethod
    def of_session(cls, session: Session) -> "_WriterState":
        saved = dict(session.ingest_state or {})
        state = cls(
            next_seq=session.event_count,
            head=session.head_hash,
            cost_total=session.cost_usd,
            tokens_total=session.tokens,
            errors_total=session.error_count,
            reward_total=session.reward,
            steps_total=session.step_count,
            step_errors=session.step_error_count,
            step_successes=session.step_success_count,
            elapsed_ms=session.elapsed_ms,
            models=list(session.models_used or []),
            tools=list(session.tools_used or []),
        )
        for name in (
            "first_ts_ms", "last_ts_ms", "kind_counts", "open_pairs", "fail_streaks",
            "variables", "memory", "state_dirty", "last_keyframe_seq", "format_state",
        ):  # fmt: skip
            if name in saved:
                setattr(state, name, saved[name])
        return state

    def save_to(self, session: Session) -> None:
        session.event_count = self.next_seq
        session.head_hash = self.head
        session.cost_usd = self.cost_total
        session.tokens = self.tokens_total
        session.error_count = self.errors_total
        session.reward = self.reward_total
        session.step_count = self.steps_total
        session.step_error_count = self.step_errors
        session.step_success_count = self.step_successes
        session.elapsed_ms = self.elapsed_ms
        session.llm_calls = self.kind_counts.get(Kind.LLM_CALL, 0)
        session.tool_calls = self.kind_counts.get(Kind.TOOL_CALL, 0)
        session.models_used = self.models
        session.tools_used = self.tools
        session.ingest_state = {
            "first_ts_ms": self.first_ts_ms,
            "last_ts_ms": self.last_ts_ms,
            "kind_counts": self.kind_counts,
            "open_pairs": self.open_pairs,
            "fail_streaks": self.fail_streaks,
            "variables": self.variables,
            "memory": self.memory,
            "state_dirty": self.state_dirty,
            "last_keyframe_seq": self.last_keyframe_seq,
            "format_state": self.format_state,
        }


def _db_timestamp(value: datetime | None) -> Any:
    if value is None:
        return None
    if connection.vendor == "sqlite":
        return _sqlite_timestamp(value)
    return _postgres_timestamp(value)


def _sqlite_timestamp(value: datetime | None) -> Any:
    # What Django's SQLite backend stores for an aware datetime with USE_TZ: naive UTC text.
    if value is None:
        return None
    if value.tzinfo is UTC:
        # The common case (ISO text with +00:00 / Z): drop the "+00:00" suffix, no conversion.
        return value.isoformat(" ")[:-6]
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(" ")


def _postgres_timestamp(value: datetime | None) -> Any:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _insert_rows(rows: list[list]) -> None:
    """The raw bulk path of each backend, inside the caller's transaction."""
    if not rows:
        return
    connection.ensure_connection()
    raw_connection = connection.connection
    if connection.vendor == "postgresql":
        columns = ", ".join(EVENT_COLUMNS)
        with raw_connection.cursor() as cursor:
            with cursor.copy(f"COPY {_TABLE} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
    else:
        placeholders = ", ".join("?" for _ in EVENT_COLUMNS)
        sql = f"INSERT INTO {_TABLE} ({', '.join(EVENT_COLUMNS)}) VALUES ({placeholders})"
        cursor = raw_connection.cursor()
        try:
            cursor.executemany(sql, rows)
        finally:
            cursor.close()


def _update_pairs(session_id: int, updates: list[tuple[int, float | None, int]]) -> None:
    """Point calls written in an earlier batch at the response that just arrived."""
    if not updates:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {_TABLE} SET pair_seq = %s, pair_duration_ms = %s "
            "WHERE session_id = %s AND seq = %s",
            [(pair_seq, duration, session_id, seq) for seq, duration, pair_seq in updates],
        )


class _EventWriter:
    """Turns canonical events into rows, keeping the running totals, pairs and chain."""

    def __init__(self, session: Session, state: _WriterState) -> None:
        self.session = session
        self.state = state
        self.buffer: list[list] = []
        self.buffer_first_seq = state.next_seq
        self.pair_updates: list[tuple[int, float | None, int]] = []
        self.keyframes: list[Snapshot] = []
        self.stored = 0
        self.session_pk = session.pk
        # Resolved once: `connection.vendor` goes through Django's per-thread connection proxy,
        # which costs more than the rest of a row's timestamp handling.
        self.db_timestamp = _sqlite_timestamp if connection.vendor == "sqlite" else _postgres_timestamp

    def add(self, event: CanonicalEvent) -> None:
        # The hot path of every import: one call per event. Attribute reads are hoisted into
        # locals because at 100k events each one shows up in the profile (bench/import_bench.py).
        state = self.state
        seq = state.next_seq
        state.next_seq = seq + 1
        kind = event.kind
        timestamp = event.timestamp

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
            state.tokens_total += tokens
        is_error = event.is_error
        if is_error:
            state.errors_total += 1
        reward = event.reward
        if event.cumulative_reward is not None:
            state.reward_total = event.cumulative_reward
        elif reward is not None:
            state.reward_total += reward
        counts = state.kind_counts
        counts[kind] = counts.get(kind, 0) + 1

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
            step_state_json = _json_text(step_state)

        tool = event.tool
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
        pair_id = event.pair_id
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
            state_change_json = _json_text(change.to_dict())

        raw = event.raw
        prev = state.head
        digest = _sha256(prev.encode("ascii") + raw.encode("utf-8", "surrogatepass")).hexdigest()
        state.head = digest

        self.buffer.append(
            [
                self.session_pk, seq, kind, event.source_type[:64], self.db_timestamp(timestamp),
                event.line, event.step, step_pos, event.depth, event.agent_id[:200],
                event.parent_id[:200], event.child_id[:200], tool[:200], pair_id[:200],
                pair_seq, pair_duration, event.duration_ms, cost, event.cost_unpriced,
                tokens, reward, is_error, fail_streak,
                _json_text(event.payload), raw,
                step_state_json, state_change_json, digest, prev, state.cost_total,
                state.tokens_total, state.errors_total, state.elapsed_ms, state.reward_total,
                state.steps_total, _dumps(counts).decode(),
            ]
        )  # fmt: skip

        if state.state_dirty and seq - state.last_keyframe_seq >= KEYFRAME_EVERY:
            self._keyframe(seq, step_pos)
        if len(self.buffer) >= BATCH_ROWS:
            self.flush()

    def _link_call(self, call_seq: int, duration: float | None, response_seq: int) -> None:
        if call_seq >= self.buffer_first_seq:
            row = self.buffer[call_seq - self.buffer_first_seq]
            row[_COL["pair_seq"]] = response_seq
            row[_COL["pair_duration_ms"]] = duration
        else:
            self.pair_updates.append((call_seq, duration, response_seq))

    def _keyframe(self, seq: int, step_pos: int | None) -> None:
        state = self.state
        self.keyframes.append(
            Snapshot(
                session=self.session,
                seq=seq,
                step_pos=step_pos,
                kind=Snapshot.Kind.KEYFRAME,
                variables=orjson.loads(orjson.dumps(state.variables, option=orjson.OPT_NON_STR_KEYS)),
                memory_notes=list(state.memory),
                stats={"steps": state.steps_total, "reward": state.reward_total},
            )
        )
        state.last_keyframe_seq = seq
        state.state_dirty = False

    def flush(self) -> None:
        _insert_rows(self.buffer)
        self.stored += len(self.buffer)
        self.buffer = []
        self.buffer_first_seq = self.state.next_seq
        _update_pairs(self.session.pk, self.pair_updates)
        self.pair_updates = []
        if self.keyframes:
            Snapshot.objects.bulk_create(self.keyframes)
            self.keyframes = []


def create_session(
    *,
    project: Project,
    source_format: str,
    meta: SessionMeta,
    status: str = Session.Status.LIVE,
    import_job=None,
) -> Session:
    return Session.objects.create(
        project=project,
        source_format=source_format,
        source_session_id=meta.source_session_id[:200],
        run_id=meta.run_id[:200],
        agent_id=meta.agent_id[:200],
        task=meta.task,
        environment=meta.environment[:200],
        model=meta.model[:200],
        status=status,
        started_at=meta.started_at,
        metadata=meta.metadata,
        import_job=import_job,
    )


def append_events(
    *,
    session: Session,
    events: Iterable[CanonicalEvent],
    on_progress: Callable[[int], None] | None = None,
    format_state: dict[str, Any] | None = None,
) -> AppendResult:
    """Append events after the session's last one, in one transaction.

    The session row is locked first, so two writers appending to one session take turns and
    seqs stay unique and gap-free (the unique (session, seq) constraint backs this up).
    `format_state` (live ingest) replaces the format converter's saved state in the same
    transaction, so the next batch continues exactly where this one stopped.
    """
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(pk=session.pk)
        state = _WriterState.of_session(locked)
        writer = _EventWriter(locked, state)
        first_seq = state.next_seq
        for event in events:
            writer.add(event)
            if on_progress is not None and len(writer.buffer) == 0:
                on_progress(writer.stored)
        writer.flush()
        if format_state is not None:
            state.format_state = format_state
        if locked.started_at is None and state.first_ts_ms is not None:
            locked.started_at = datetime.fromtimestamp(state.first_ts_ms / 1000.0, tz=UTC)
        state.save_to(locked)
        locked.save()
    _copy_fields(locked, session)
    return AppendResult(
        stored=writer.stored, first_seq=first_seq, head_hash=state.head, event_count=state.next_seq
    )


def finish_session(
    *,
    session: Session,
    meta: SessionMeta | None = None,
    status: str | None = None,
    final_answer: str | None = None,
) -> Session:
    """Close a session: status, end time, final answer and the totals the source states."""
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(pk=session.pk)
        if meta is not None:
            _apply_meta(locked, meta)
        if final_answer is not None:
            locked.final_answer = final_answer
        if status is not None:
            locked.status = status
            locked.completed = status == Session.Status.COMPLETED or locked.completed
        elif locked.status == Session.Status.LIVE:
            failed = meta is not None and meta.failed
            locked.status = Session.Status.FAILED if failed else Session.Status.COMPLETED
        if locked.ended_at is None:
            last_ts = (locked.ingest_state or {}).get("last_ts_ms")
            locked.ended_at = (
                datetime.fromtimestamp(last_ts / 1000.0, tz=UTC) if last_ts else timezone.now()
            )
        # Nothing was tampered with since we wrote it: the chain is valid by construction.
        if locked.chain_valid is None:
            locked.chain_valid = True
            locked.chain_checked_at = timezone.now()
        locked.save()
        if meta is not None:
            _write_checkpoints(locked, meta.checkpoints)
    _copy_fields(locked, session)
    return session


def _apply_meta(session: Session, meta: SessionMeta) -> None:
    for name in ("source_session_id", "run_id", "agent_id", "environment", "model"):
        value = getattr(meta, name)
        if value and not getattr(session, name):
            setattr(session, name, value[:200])
    if meta.task and not session.task:
        session.task = meta.task
    if meta.started_at and session.started_at is None:
        session.started_at = meta.started_at
    if meta.ended_at:
        session.ended_at = meta.ended_at
    if meta.completed is not None:
        session.completed = meta.completed
    if meta.final_answer:
        session.final_answer = meta.final_answer
    if meta.total_reward is not None:
        session.reward = meta.total_reward
    if meta.metadata:
        session.metadata = {**(session.metadata or {}), **meta.metadata}


def _write_checkpoints(session: Session, specs: list[CheckpointSpec]) -> None:
    for spec in specs:
        seq = spec.seq
        if seq is None and spec.step_pos is not None:
            seq = (
                Event.objects.filter(session=session, step_pos=spec.step_pos)
                .values_list("seq", flat=True)
                .first()
            )
        if seq is None:
            seq = max(session.event_count - 1, 0)
        Checkpoint.objects.update_or_create(
            session=session,
            name=spec.name[:200],
            defaults={
                "seq": seq,
                "step_pos": spec.step_pos,
                "note": spec.note,
                "created_by": spec.created_by[:150],
                "created_at": spec.created_at or timezone.now(),
            },
        )


def _copy_fields(source: Session, target: Session) -> None:
    if source is target:
        return
    for f in Session._meta.concrete_fields:
        setattr(target, f.attname, getattr(source, f.attname))


def set_checkpoint(
    *, session: Session, name: str, seq: int, created_by: str = "", note: str = ""
) -> Checkpoint:
    """Name a position of a session (a user's checkpoint); an existing name moves."""
    step_pos = (
        Event.objects.filter(session=session, seq__lte=seq)
        .order_by("-seq")
        .values_list("steps_total", flat=True)
        .first()
    )
    checkpoint, _ = Checkpoint.objects.update_or_create(
        session=session,
        name=name,
        defaults={
            "seq": seq,
            "step_pos": (step_pos - 1) if step_pos else None,
            "note": note,
            "created_by": created_by,
            "created_at": timezone.now(),
        },
    )
    return checkpoint
