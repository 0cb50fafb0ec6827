"""Writes: create sessions, append canonical events (seq, running totals, pairing, hash chain,
state keyframes), finish sessions, set checkpoints.

Everything a page later needs is computed once, as events stream in, by rows.EventRows
(see models.Event). The rows go to the database through `_row_writer`, each backend's raw
bulk path (SQLite `executemany`, PostgreSQL `COPY`): Django's `bulk_create` is ten times slower
for this (docs/benchmarks.md). `copy_rows` is the same COPY for OTLP's staged spans
(ingest/traces.py). The ORM is used everywhere else.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from copy import copy
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache, partial
from typing import Any

import orjson
from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from ..canonical import CanonicalEvent, CheckpointSpec, SessionMeta, json_without_nul, without_nul
from ..lookalikes import as_picked, shown_plainly
from ..models import Checkpoint, Event, Project, RedactionRules, Session, Snapshot
from ..redaction import Redactor
from .rows import (
    EVENT_COLUMNS,
    SAVED_FIELDS,
    SESSION_STATE,
    Batch,
    EventRows,
    Keyframe,
    WriterState,
)

__all__ = [
    "append_and_finish", "append_events", "bulk_write_cache", "collector_paused", "create_session", "create_sessions",
    "finish_session", "shared_writes",
]  # fmt: skip

# Rows buffered before one bulk write; large enough to amortise each round trip. Large records
# (up to REPLAY_MAX_RECORD_BYTES each) also flush a batch once they add up to BATCH_BYTES, so the
# batch in memory stays bounded in bytes.
BATCH_ROWS = 5000
BATCH_BYTES = 16 * 1024 * 1024
_TABLE = Event._meta.db_table


@dataclass
class AppendResult:
    stored: int
    first_seq: int
    head_hash: str
    event_count: int
    redactions: dict[str, int] = dataclasses.field(default_factory=dict)  # by label, in this append


def state_of_session(session: Session) -> WriterState:
    """Where the session's last append stopped: its totals, chain head and saved state."""
    saved = dict(session.ingest_state or {})
    state = WriterState(**{field: copy(getattr(session, column)) for column, field in SESSION_STATE.items()})
    for name in SAVED_FIELDS:
        if name in saved:
            setattr(state, name, saved[name])
    return state


def save_state_to(state: WriterState, session: Session) -> None:
    for column, field in SESSION_STATE.items():
        setattr(session, column, getattr(state, field))
    # The agent's variables and the converter's memory of the source, as JSON the database takes:
    # as orjson writes it (a NaN or infinity a live batch's variable held is null, as in the
    # stored events; written as Python's json writes it, the column refused it: a 500), without
    # the NUL character.
    dumped = orjson.dumps({name: getattr(state, name) for name in SAVED_FIELDS}, option=orjson.OPT_NON_STR_KEYS)
    saved = orjson.loads(dumped)
    if b"\\u0000" in dumped:
        saved = json_without_nul(saved)
    session.ingest_state = saved
    if session.started_at is None and state.first_ts_ms is not None:
        session.started_at = moment_of_ms(state.first_ts_ms)


def moment_of_ms(ms: float) -> datetime:
    """The UTC datetime of a session's time in milliseconds (its first or last event's), held
    within the years 1-9999 every stored event's own time is in: the rounding to milliseconds
    takes 9999-12-31T23:59:59.9995Z and later past the last datetime."""
    try:
        return datetime.fromtimestamp(ms / 1000.0, tz=UTC)
    except (OverflowError, ValueError, OSError):
        return (datetime.max if ms > 0 else datetime.min).replace(tzinfo=UTC)


def _db_types(model: type[Model], columns: Iterable[str]) -> list[str]:
    """The PostgreSQL type of each column of `model`'s, which a binary COPY must be told."""
    names = []
    for name in columns:
        field = next(f for f in model._meta.concrete_fields if f.column == name)
        db_type = field.rel_db_type(connection) if field.is_relation else field.db_type(connection)
        names.append(db_type.split("(")[0])
    return names


@contextmanager
def _binary_copy(model: type[Model], columns: Iterable[str]) -> Iterator[Callable[[Iterable[Any]], None]]:
    """A binary COPY into `model`'s table (PostgreSQL), open for the block: its write_row.
    Binary: the server takes each value as it is stored, instead of parsing the text of every
    number and timestamp (an import 17 % faster, bench/import_bench.py).

    Past Django's cursor, so its errors are made Django's here (`wrap_database_errors`), as any
    statement's are: a lock held too long is then an OperationalError, a 503 to retry, not a 500.
    """
    columns = tuple(columns)
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.cursor() as cursor:
        with cursor.copy(f"COPY {model._meta.db_table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_db_types(model, columns))
            yield copy.write_row


def copy_rows(model: type[Model], columns: tuple[str, ...], rows: Iterable[Iterable[Any]]) -> None:
    """Rows into `model`'s table by one binary COPY (PostgreSQL only; OTLP's staged spans)."""
    with _binary_copy(model, columns) as write_row:
        for row in rows:
            write_row(row)


@contextmanager
def _row_writer() -> Iterator[Callable[[list[list]], None]]:
    """The raw bulk path of each backend, open for as long as a session's append lasts, inside
    the caller's transaction.

    On PostgreSQL it is one COPY that stays open: the server inserts and indexes rows while we
    build (or receive) the next ones, instead of each batch's COPY waiting for the server to
    finish before the next batch is read. On SQLite each batch is one executemany.
    """
    if connection.vendor == "postgresql":
        with _binary_copy(Event, EVENT_COLUMNS) as write_row:

            def write_rows(rows: list[list]) -> None:
                for row in rows:
                    write_row(row)

            yield write_rows
        return
    connection.ensure_connection()
    raw_connection = connection.connection
    columns = ", ".join(EVENT_COLUMNS)
    placeholders = ", ".join("?" for _ in EVENT_COLUMNS)
    sql = f"INSERT INTO {_TABLE} ({columns}) VALUES ({placeholders})"
    cursor = raw_connection.cursor()
    try:
        # In the caller's thread: a second thread inserting while this one built the next rows
        # made imports ~10 % slower, not faster (bench/import_bench.py; docs/benchmarks.md,
        # issue 16): sqlite3 gives up the GIL for each row it steps and waits to win it back
        # from the builder, and multi-row statements cost in binding what they won in overlap.
        # The driver's errors made Django's, as in _binary_copy.
        with connection.wrap_database_errors:
            yield partial(cursor.executemany, sql)
    finally:
        cursor.close()


@contextmanager
def _batch_writer(session: Session) -> Iterator[Callable[[Batch], None]]:
    """A function that writes one batch, for as long as a session's append lasts.

    Calls answered in a later batch and the state keyframes are written once the rows are: no
    other statement can run on a PostgreSQL connection during its COPY.
    """
    pair_updates: list[tuple[int, float | None, int, int]] = []
    keyframes: list[Keyframe] = []
    with _row_writer() as write_rows:

        def write(batch: Batch) -> None:
            write_rows(batch.rows)
            pair_updates.extend(_pair_updates_of(session.pk, batch))
            keyframes.extend(batch.keyframes)

        yield write
    _update_pairs(pair_updates)
    _write_keyframes(session, keyframes)


class SharedWrites:
    """The writes of several sessions' appends in one transaction, sent as one stream (OTLP
    settling: fifty sessions of ~200 events each a transaction).

    Their rows go to one COPY that stays open while the next session's rows are built, so the
    PostgreSQL server inserts and indexes them meanwhile, on the other core. A COPY of its own
    for each small session was waited for in turn, its start and its end, and so were the
    session's other statements: about 40 % of a settling's wall time went on waiting
    (bench/otlp_bench.py, docs/benchmarks.md). What else the appends write (the sessions' rows,
    calls answered in a later batch, keyframes, and the caller's own statements, `later`) waits
    for `flush`, one executemany for each statement, which psycopg sends as a pipeline.

    No other statement can run on the connection during a COPY: any statement sent through
    Django meanwhile (a sub-agent's new session, a checkpoint) first closes the COPY
    (`before_statement`, an execute wrapper), so it sees every row written so far; the next
    rows open another. On SQLite each batch is one executemany at once, as `_row_writer` does.
    """

    def __init__(self) -> None:
        self._copy: ExitStack | None = None
        self._write_rows: Callable[[list[list]], None] | None = None
        self._sessions: dict[int, Session] = {}  # saved at the end, as they are then
        self._pair_updates: list[tuple[int, float | None, int, int]] = []
        self._keyframes: list[Snapshot] = []
        self._later: dict[str, list[list[Any]]] = {}  # a statement -> the parameters of each run

    def write_rows(self, rows: list[list]) -> None:
        if self._write_rows is None:
            self._copy = ExitStack()
            self._write_rows = self._copy.enter_context(_row_writer())
        self._write_rows(rows)

    @contextmanager
    def batch_writer(self, session: Session) -> Iterator[Callable[[Batch], None]]:
        """`_batch_writer` for one session's append, into the shared stream."""

        def write(batch: Batch) -> None:
            self.write_rows(batch.rows)
            self._pair_updates.extend(_pair_updates_of(session.pk, batch))
            self._keyframes.extend(_snapshot(session, keyframe) for keyframe in batch.keyframes)

        yield write

    def save(self, session: Session) -> None:
        """Save the locked session's row at `flush` (`_save_locked`), with what it holds then."""
        self._sessions[session.pk] = session

    def later(self, sql: str, params: list[Any]) -> None:
        """Run a statement of the caller's at `flush`, after every row is written."""
        self._later.setdefault(sql, []).append(params)

    def before_statement(self, execute, sql, params, many, context):  # noqa: ANN001 (Django's wrapper signature)
        self.close_rows()
        return execute(sql, params, many, context)

    def close_rows(self, error: BaseException | None = None) -> None:
        """End the open COPY, if any: the server has then stored every row sent."""
        if self._copy is not None:
            stack, self._copy, self._write_rows = self._copy, None, None
            stack.__exit__(type(error) if error else None, error, error.__traceback__ if error else None)

    def flush(self) -> None:
        _update_pairs(self._pair_updates)
        with connection.cursor() as cursor:
            for sql, runs in self._later.items():
                cursor.executemany(sql, runs)
        if self._keyframes:
            Snapshot.objects.bulk_create(self._keyframes)
        _save_all_locked(list(self._sessions.values()))


@contextmanager
def shared_writes() -> Iterator[SharedWrites]:
    """A `SharedWrites` for appends in the caller's transaction (each with `shared=`), written
    out when the block ends. If the block raises, the COPY is abandoned with the error and
    nothing deferred runs: the caller's transaction is to be rolled back."""
    shared = SharedWrites()
    with connection.execute_wrapper(shared.before_statement):
        try:
            yield shared
        except BaseException as error:
            shared.close_rows(error)
            raise
        shared.close_rows()
        shared.flush()


def _write_keyframes(session: Session, keyframes: list[Keyframe]) -> None:
    if keyframes:
        Snapshot.objects.bulk_create([_snapshot(session, keyframe) for keyframe in keyframes])


def _pair_updates_of(session_id: int, batch: Batch) -> Iterator[tuple[int, float | None, int, int]]:
    """A batch's calls answered in it, written in an earlier batch, as `_update_pairs` takes them."""
    return ((pair_seq, duration, session_id, seq) for seq, duration, pair_seq in batch.pair_updates)


def _update_pairs(updates: list[tuple[int, float | None, int, int]]) -> None:
    """Point calls written in an earlier batch at the response that arrived in a later one:
    (pair seq, pair duration, session id, seq) each."""
    if not updates:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {_TABLE} SET pair_seq = %s, pair_duration_ms = %s WHERE session_id = %s AND seq = %s", updates
        )


def _snapshot(session: Session, keyframe: Keyframe) -> Snapshot:
    return Snapshot(
        session=session,
        seq=keyframe.seq,
        step_pos=keyframe.step_pos,
        kind=Snapshot.Kind.KEYFRAME,
        variables=keyframe.variables,
        memory_notes=keyframe.memory_notes,
        stats=keyframe.stats,
    )


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for a bulk write (an import, an OTLP settling):
    they allocate millions of short-lived, acyclic objects (records, events, rows) that the
    collector would keep rescanning (10-15 % of bench/import_bench.py's time, ~4 % of
    bench/otlp_bench.py's CPU) while reference counting frees them anyway. Collection resumes,
    and catches up, when the block ends, however it ends (if it was on when the block began)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def redactor_of(project_id: int, redactor: Redactor | None) -> Redactor | None:
    """The redactor a write uses: the caller's (an import's, counting over the whole file) or
    else the project's own rules. Every write below goes through this, so no ingest path (file,
    live batch, OTLP, AgentLens, bundle) stores anything the project's rules would redact."""
    return redactor if redactor is not None else RedactionRules.redactor_for(project_id)


def create_session(
    *,
    project: Project,
    source_format: str,
    meta: SessionMeta,
    status: str = Session.Status.LIVE,
    import_job=None,
    redactor: Redactor | None = None,
) -> Session:
    session = _new_session(project, source_format, meta, status, import_job, redactor_of(project.pk, redactor))
    session.save(force_insert=True)
    return session


def create_sessions(*, project: Project, source_format: str, metas: list[SessionMeta]) -> list[Session]:
    """`create_session` (live) for several sessions, with one INSERT: an OTLP export request
    makes one for each new conversation, and an ORM create each cost it more than staging the
    conversation's spans (bench/otlp_bench.py)."""
    redactor = redactor_of(project.pk, None)
    return Session.objects.bulk_create(
        [_new_session(project, source_format, meta, Session.Status.LIVE, None, redactor) for meta in metas]
    )


def _new_session(
    project: Project, source_format: str, meta: SessionMeta, status: str, import_job, redactor: Redactor | None
) -> Session:
    text = text_redactor(redactor)
    session = Session(
        project=project,
        source_format=source_format,
        source_session_id=short_text(text, meta.source_session_id),
        run_id=short_text(text, meta.run_id),
        agent_id=short_text(text, meta.agent_id),
        task=text(without_nul(meta.task)),
        environment=short_text(text, meta.environment),
        model=short_text(text, meta.model),
        status=status,
        started_at=meta.started_at,
        metadata=_redacted_value(redactor, json_without_nul(meta.metadata)),
        import_job=import_job,
    )
    session.seal_header()
    return session


def text_redactor(redactor: Redactor | None) -> Callable[[str], str]:
    return (lambda text: text) if redactor is None else redactor.text


def short_text(redact: Callable[[str], str], value: str, limit: int = 200) -> str:
    """A session's short text (its ids, environment, model: 200-character columns) redacted,
    then cut: cut first, a secret across the cut would keep its first part unredacted, and a
    placeholder longer than what it replaced could pass the column's size."""
    return redact(without_nul(value))[:limit]


def _redacted_value(redactor: Redactor | None, value: Any) -> Any:
    return value if redactor is None else redactor.value(value)


def append_events(
    *,
    session: Session,
    events: Iterable[CanonicalEvent],
    on_progress: Callable[[int], None] | None = None,
    format_state: dict[str, Any] | None = None,
    keep_raw: bool = True,
    redactor: Redactor | None = None,
) -> AppendResult:
    """Append events after the session's last one, in one transaction.

    The session row is locked first, so two writers appending to one session take turns and
    seqs stay unique and gap-free (the unique (session, seq) constraint backs this up).
    `format_state` (live ingest) replaces the format converter's saved state in the same
    transaction, so the next batch continues exactly where this one stopped. `keep_raw=False`
    leaves each record's text out where the source file itself is kept (an import's job).
    The project's redaction rules apply to every content field (`redactor_of`); the result
    counts the redactions of this append by label.
    """
    return _append(session, events, EventRows.add, on_progress, format_state, keep_raw, redactor)


def append_stored_events(
    *,
    session: Session,
    events: Iterable[dict[str, Any]],
    on_progress: Callable[[int], None] | None = None,
    redactor: Redactor | None = None,
    redacted_by: str = "",
) -> AppendResult:
    """Append events as another Replay stored them (an evidence bundle's events.jsonl: every
    recorded and content column with its salt), in one transaction. The rows are built by the
    same code as any import's, so the same salts give the same links: the chain comes out as
    it was, its head the bundle's. A content field the project's rules redact keeps its
    commitment in its place (chain.redact_field), so the chain still holds."""
    return _append(session, events, EventRows.add_stored, on_progress, None, True, redactor, redacted_by)


def _append(
    session: Session,
    events: Iterable[Any],
    add: Callable[[EventRows, Any], None],
    on_progress: Callable[[int], None] | None,
    format_state: dict[str, Any] | None,
    keep_raw: bool,
    redactor: Redactor | None = None,
    redacted_by: str = "",
    close: Callable[[Session, Redactor | None], None] | None = None,
    locked_by_caller: bool = False,
    shared: SharedWrites | None = None,
) -> AppendResult:
    redactor = redactor_of(session.project_id, redactor)
    counted = redactor.counts.copy() if redactor is not None else None
    # A caller that locked the row holds a transaction (OTLP settling: its whole transaction, or
    # a savepoint for each session) that already undoes this append if it fails: no savepoint
    # of its own then.
    with transaction.atomic(savepoint=not locked_by_caller):
        locked = session if locked_by_caller else Session.objects.select_for_update(no_key=True).get(pk=session.pk)
        state = state_of_session(locked)
        first_seq = state.next_seq
        rows = EventRows(
            session_pk=locked.pk, state=state, vendor=connection.vendor, keep_raw=keep_raw, redactor=redactor,
            redacted_by=redacted_by,
        )  # fmt: skip
        stored = size = flushed = 0
        with _batch_writer(locked) if shared is None else shared.batch_writer(locked) as write:
            for event in events:
                size += len(event.raw or "") if type(event) is not dict else _stored_size(event)
                add(rows, event)
                if len(rows.rows) >= BATCH_ROWS or size - flushed > BATCH_BYTES:
                    flushed = size
                    batch = rows.take()
                    write(batch)
                    stored += len(batch.rows)
                    if on_progress is not None:
                        on_progress(stored)
            batch = rows.take()
            write(batch)
            stored += len(batch.rows)
        if format_state is not None:
            # A converter's memory of the stream (its open step, the variables) is stored too.
            state.format_state = _redacted_value(redactor, format_state)
        save_state_to(state, locked)
        locked.record_bytes += size
        if close is not None:
            close(locked, redactor)
        if shared is None:
            _save_locked(locked)
        else:
            shared.save(locked)
    _copy_fields(locked, session)
    redactions = {} if redactor is None else dict(redactor.counts - counted)
    return AppendResult(
        stored=stored, first_seq=first_seq, head_hash=state.head, event_count=state.next_seq, redactions=redactions
    )


def _save_locked(session: Session) -> None:
    """`session.save()` for the row this transaction locked: every column as save() writes it
    (auto_now included), by one UPDATE statement made once, not a query built for every save
    (about 1 ms, more than appending a small session's events: OTLP settling saves hundreds of
    sessions a minute, bench/otlp_bench.py)."""
    _save_all_locked([session])


def _save_all_locked(sessions: list[Session]) -> None:
    """`_save_locked` for several rows, one executemany."""
    if not sessions:
        return
    db = transaction.get_connection()  # the connection itself: each use of the proxy is a look-up
    for session in sessions:
        session.seal_header()  # the whole row is written as this instance holds it
    runs = [
        [*(field.get_db_prep_save(field.pre_save(session, False), db) for field in _session_columns()), session.pk]
        for session in sessions
    ]
    with db.cursor() as cursor:
        cursor.executemany(_session_update_sql(db.vendor), runs)
        if cursor.rowcount != len(sessions):  # save() would insert; a locked row cannot have gone
            found = "" if len(sessions) > 1 else f"session {sessions[0].pk}: "
            raise Session.DoesNotExist(f"{found}a locked session's row was not found to save")


@cache
def _session_columns() -> tuple[Any, ...]:
    # As save() picks them: a generated column is the database's to compute. (Made once: the
    # model's fields do not change while the process runs.)
    return tuple(field for field in Session._meta.concrete_fields if not field.primary_key and not field.generated)


@cache
def _session_update_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(f"{quote(field.column)} = %s" for field in _session_columns())
    return f"UPDATE {quote(Session._meta.db_table)} SET {columns} WHERE {quote(Session._meta.pk.column)} = %s"


def _stored_size(values: dict[str, Any]) -> int:
    """What a stored event (an evidence bundle's) counts for its session's record_bytes."""
    return len(values.get("raw") or values.get("payload") or "")


@contextmanager
def bulk_write_cache() -> Iterator[None]:
    """A 64 MiB page cache for SQLite while a file is imported (default 2 MiB): the indexes'
    pages stay in memory instead of being spilled and read back (bench/import_bench.py). Only
    for the import's own connection and only meanwhile; PostgreSQL sizes its own buffers."""
    if connection.vendor != "sqlite":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        (before,) = cursor.fetchone()
        cursor.execute("PRAGMA cache_size = -65536")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA cache_size = {int(before)}")


def finish_session(
    *,
    session: Session,
    meta: SessionMeta | None = None,
    status: str | None = None,
    final_answer: str | None = None,
    redactor: Redactor | None = None,
) -> Session:
    """Close a session: status, end time, final answer and the totals the source states."""
    redactor = redactor_of(session.project_id, redactor)
    with transaction.atomic():
        locked = Session.objects.select_for_update(no_key=True).get(pk=session.pk)
        _close(locked, redactor, meta=meta, status=status, final_answer=final_answer)
        locked.seal_header()
        locked.save()
        if meta is not None:
            _write_checkpoints(locked, meta.checkpoints, redactor)
    _copy_fields(locked, session)
    return session


def append_and_finish(
    *,
    session: Session,
    events: Iterable[CanonicalEvent],
    meta: SessionMeta | None = None,
    status: str | None = None,
    redactor: Redactor | None = None,
    locked_by_caller: bool = False,
    shared: SharedWrites | None = None,
) -> AppendResult:
    """`append_events` then `finish_session`, with the session's row locked, read and saved once
    (a settled OTLP trace's session: each of the two calls costs some queries, which hundreds of
    small sessions a minute add up to). `locked_by_caller`: `session` is the whole row as the
    caller read it with select_for_update in the transaction this runs in, used as it is;
    `shared` (only then): its writes join the caller's `shared_writes`."""
    assert shared is None or locked_by_caller, "shared writes are the caller's transaction's"

    def close(locked: Session, redactor: Redactor | None) -> None:
        _close(locked, redactor, meta=meta, status=status, final_answer=None)

    # The checkpoints with the events, as finish_session writes them (in the caller's savepoint
    # when it locked the row: see _append).
    with transaction.atomic(savepoint=not locked_by_caller):
        result = _append(
            session, events, EventRows.add, None, None, True, redactor, close=close, locked_by_caller=locked_by_caller,
            shared=shared,
        )  # fmt: skip
        if meta is not None and meta.checkpoints:
            _write_checkpoints(session, meta.checkpoints, redactor_of(session.project_id, redactor))
    return result


def _close(
    locked: Session,
    redactor: Redactor | None,
    *,
    meta: SessionMeta | None,
    status: str | None,
    final_answer: str | None,
) -> None:
    """The fields of the locked row that closing it sets (saved by the caller)."""
    if meta is not None:
        _apply_meta(locked, meta, redactor)
    if final_answer is not None:
        locked.final_answer = text_redactor(redactor)(without_nul(final_answer))
    if status is not None:
        locked.status = status
        locked.completed = status == Session.Status.COMPLETED or locked.completed
    elif locked.status == Session.Status.LIVE:
        if meta is not None and meta.failed:
            locked.status = Session.Status.FAILED
        elif meta is not None and meta.interrupted:
            locked.status = Session.Status.INTERRUPTED
        else:
            locked.status = Session.Status.COMPLETED
    if locked.ended_at is None:
        last_ts = locked.ingest_state.get("last_ts_ms")
        locked.ended_at = moment_of_ms(last_ts) if last_ts else timezone.now()


def _apply_meta(session: Session, meta: SessionMeta, redactor: Redactor | None) -> None:
    text = text_redactor(redactor)
    for name in ("source_session_id", "run_id", "agent_id", "environment", "model"):
        value = getattr(meta, name)
        if value and not getattr(session, name):
            setattr(session, name, short_text(text, value))
    if meta.task and not session.task:
        session.task = text(without_nul(meta.task))
    if meta.started_at and session.started_at is None:
        session.started_at = meta.started_at
    if meta.ended_at:
        session.ended_at = meta.ended_at
    if meta.completed is not None:
        session.completed = meta.completed
    if meta.final_answer:
        session.final_answer = text(without_nul(meta.final_answer))
    if meta.total_reward is not None:
        session.reward = meta.total_reward
    if meta.metadata:
        session.metadata = {**(session.metadata or {}), **_redacted_value(redactor, json_without_nul(meta.metadata))}


def merge_session_metadata(*, session: Session, metadata: dict[str, Any]) -> None:
    """Add to a session's metadata what a later batch says of it, redacted as every write is."""
    redacted = _redacted_value(redactor_of(session.project_id, None), json_without_nul(metadata))
    session.metadata = {**(session.metadata or {}), **redacted}
    session.save(update_fields=["metadata"])
    Session.objects.filter(pk=session.pk).reseal(["metadata"])


def _write_checkpoints(session: Session, specs: list[CheckpointSpec], redactor: Redactor | None) -> None:
    text = text_redactor(redactor)
    for spec in specs:
        seq = spec.seq
        if seq is None and spec.step_pos is not None:
            seq = Event.objects.filter(session=session, step_pos=spec.step_pos).values_list("seq", flat=True).first()
        if seq is None:
            seq = max(session.event_count - 1, 0)
        Checkpoint.objects.update_or_create(
            session=session,
            name=text(recorded_name(spec.name))[:200],
            defaults={
                "seq": seq,
                "step_pos": spec.step_pos,
                "note": text(without_nul(spec.note)),
                "created_by": text(recorded_name(spec.created_by))[:150],
                "created_at": spec.created_at or timezone.now(),
            },
        )


def _copy_fields(source: Session, target: Session) -> None:
    if source is target:
        return
    for f in Session._meta.concrete_fields:
        setattr(target, f.attname, getattr(source, f.attname))


def recorded_name(name: str) -> str:
    """A checkpoint's name (or maker) as a recording gave it, shown as the panel will list it: a
    name a person types is refused invisible and direction-changing characters (lookalikes.py),
    one an agent wrote is not refused (the import goes on) but has them written out ("\\u202e"),
    and is composed (NFC), so that it cannot read as another checkpoint of the list."""
    return as_picked(shown_plainly(without_nul(name)))


def set_checkpoint(
    *, session: Session, name: str, seq: int, created_by: str = "", note: str = "", name_redacted: bool = False
) -> Checkpoint:
    """Name a position of a session (a user's checkpoint); an existing name moves. The name goes
    through the project's rules unless the caller already did so (`name_redacted`: the
    workflow compares the stored form before saving, checkpoints._clean_name), and is cut to
    the column's 200 characters after them (a placeholder may be longer than what it replaced)."""
    step_pos = (
        Event.objects.filter(session=session, seq__lte=seq)
        .order_by("-seq")
        .values_list("steps_total", flat=True)
        .first()
    )
    text = text_redactor(redactor_of(session.project_id, None))
    checkpoint, _ = Checkpoint.objects.update_or_create(
        session=session,
        name=(name if name_redacted else text(recorded_name(name)))[:200],
        defaults={
            "seq": seq,
            "step_pos": (step_pos - 1) if step_pos else None,
            "note": text(without_nul(note)),
            "created_by": created_by,
            "created_at": timezone.now(),
        },
    )
    return checkpoint
