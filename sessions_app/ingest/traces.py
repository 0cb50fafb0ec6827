"""OpenTelemetry ingest: spans are staged as they arrive and become a session's events once
their trace has settled.

Why staged: a span is exported when it *ends*, so children arrive before their parents, a
collector may split one trace over several requests and processes, and retries repeat spans.
A session, though, is an append-only chain with gapless seqs in time order: an event cannot be
slipped in before events already written. Appending each span as it came would put an agent's
own start after everything it did, and a late span out of order for good. So `stage_spans`
keeps each span once (unique per trace and span id) in OtlpSpan, and `settle_traces` writes a
session's waiting spans as events, sorted by time, when every one of its waiting traces has
settled: its root span (no parent, which ends last) has arrived and no span of it came for
settings.OTLP_SETTLE_SECONDS, or, when the root never comes (unsampled, another service's), for
OTLP_ORPHAN_SECONDS. Meanwhile the session exists and shows as live. A straggler arriving after
its trace settled is written in the next settling after the events already there, marked `late`
in its payload: the chain stays valid and the span is still stored once.

Settling runs in the export request itself for traces already due (so a steadily exporting
agent's earlier traces appear without a worker) and every minute from the job queue
(jobs.run_settle_traces) for the rest.

Sessions: a trace goes to the session of its conversation (gen_ai.conversation.id of its root
span, else of any of its spans, else the trace id itself); an invoke_agent span inside another
agent's span is a sub-agent, whose own spans go to a child session (Session.parent) and which
its parent's session shows as child_spawn / child_result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.db import connection, transaction
from django.db.models import Case, F, Max, OuterRef, Q, QuerySet, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce, Length
from django.utils import timezone
from django.utils.crypto import salted_hmac

from ..canonical import INT64_MAX, SessionMeta
from ..formats import otlp
from ..models import OtlpConversation, OtlpSpan, OtlpTrace, Project, RedactionRules, Session
from ..models.planning import planned_for_values
from ..redaction import Redactor
from .quotas import sessions_left
from .writer import (
    SharedWrites,
    append_and_finish,
    collector_paused,
    copy_rows,
    create_session,
    create_sessions,
    shared_writes,
)

logger = logging.getLogger("replay.otlp")

# A session's waiting spans are settled together; one request settles at most this many
# sessions, leaving the rest to the next request or the job, which settles this many in each
# transaction (written together; on a failure, each in a savepoint of its own: _settle_chunk).
SETTLE_PER_REQUEST = 20
SETTLE_PER_TRANSACTION = 50
# A session that failed to settle is settled one at a time, in a savepoint of its own, for this
# long: written together, it undid its whole transaction's work at every settling (each export
# request's too) while it kept failing. Per process: a new process tries together once again.
ONE_AT_A_TIME_SECONDS = 600
_failed_at: dict[int, float] = {}  # session id -> time.monotonic() of its last failure
_SPAN_TABLE = OtlpSpan._meta.db_table
_SPAN_COLUMNS = ("trace_id", "span_id", "parent_span_id", "operation", "start_ns", "record")
# A waiting span as the settling reads it, with its trace's due-ness; then as _Placement places it.
_SETTLING_FIELDS = ("trace_id", "pk", "span_id", "parent_span_id", "operation", "record", "session_id")
_IDS_A_STATEMENT = 2000  # well under SQLite's and PostgreSQL's limits on a statement's parameters
# Sub-agents get a child session each down to this many levels of sub-agents, and one settling
# of a session makes at most this many; deeper or further ones are spawned and answered inline
# in their parent's session, as past the sessions quota (nothing is lost). A hostile trace of
# 10,000 agents each inside the last made as many sessions, each inside the one before, in one
# transaction: the database was held for minutes, and Python's recursion limit was hit freeing
# the chain of rows.
MAX_SUB_AGENT_NESTING = 8
MAX_CHILD_SESSIONS_A_SETTLING = 100


def _chunked(values: list) -> Iterator[list]:
    """`values` in lists of at most _IDS_A_STATEMENT: an export request may hold any number of
    traces, and a lookup of all of them at once could pass SQLite's bound on a statement's
    parameters (32,766 by default; PostgreSQL's is 65,535 when values are bound on the server)."""
    for start in range(0, len(values), _IDS_A_STATEMENT):
        yield values[start : start + _IDS_A_STATEMENT]


@dataclass
class StageResult:
    received: int = 0
    stored: int = 0  # new spans (the rest were already stored: a retry, a duplicate)
    rejected: int = 0
    not_genai: int = 0  # spans of new traces with no GenAI span, not kept (_drop_not_genai)
    message: str = ""
    created: list[Session] = field(default_factory=list)  # the conversations' sessions made


@dataclass
class SettleResult:
    sessions: list[int] = field(default_factory=list)  # sessions that got events
    finished: list[int] = field(default_factory=list)  # sessions left with nothing waiting
    events: int = 0
    spans: int = 0


def stage_spans(*, project: Project, records: Iterable[dict[str, Any]]) -> StageResult:
    """Keep each new span of an export request (formats.otlp.span_records) until its trace
    settles; its trace's session is made (live) if it does not exist yet."""
    result = StageResult()
    by_trace: dict[str, dict[str, dict[str, Any]]] = {}
    for record in records:
        result.received += 1
        if not 0 < record["start"] <= INT64_MAX:  # unset, or past what a 64-bit column holds (year 2262)
            result.rejected += 1
            continue
        if record["end"] < record["start"]:
            record["end"] = record["start"]
        by_trace.setdefault(record["traceId"], {})[record["spanId"]] = record
    if result.rejected:
        result.message = f"{result.rejected} span(s) without a start time (or one past the year 2262) were rejected"
    if not by_trace:
        return result
    now = timezone.now()
    # No savepoint when the caller's transaction holds this (the export request's, with its
    # audit entries): a failure here undoes that whole transaction anyway.
    with transaction.atomic(savepoint=False):
        # One writer per project at a time: two requests racing would make its sessions twice.
        # The settling takes the same lock first, so neither waits on the other's rows.
        Project.lock(project.pk)
        with planned_for_values():
            traces = {
                t.trace_id: t
                for part in _chunked(list(by_trace))
                for t in OtlpTrace.objects.filter(project=project, trace_id__in=part)
            }
        _drop_stored(traces, by_trace)
        result.not_genai = _drop_not_genai(traces, by_trace)
        if not by_trace:
            return result
        # The project's rules read once for the request, not twice for every session it makes.
        with RedactionRules.pinned(project.pk) as redactor:
            refused = _place_traces(project, traces, by_trace, now, result)
        if refused:
            # Spans of conversations the project's sessions quota leaves no room for: refused
            # (OTLP's partial success), the rest of the request stored.
            result.rejected += refused
            note = f"{refused} span(s) rejected: project {project.slug}'s quota of sessions is reached"
            result.message = f"{result.message}; {note}" if result.message else note
        if not by_trace:
            return result
        # A staged span is stored too: the project's redaction rules apply to it now, not only to
        # the events it later becomes (docs/redaction.md).
        rows = []
        added: dict[int, int] = {}  # the characters staged of each trace (the quota counts them)
        for trace_id, spans in by_trace.items():
            trace = traces[trace_id]
            for record in spans.values():
                if trace.settled_at is not None:
                    record["late"] = True
                text = orjson.dumps(_staged(record, redactor)).decode()
                added[trace.pk] = added.get(trace.pk, 0) + len(text)
                rows.append((trace.pk, record["spanId"], record["parentSpanId"], otlp.operation_of(record),
                             record["start"], text))  # fmt: skip
        _insert_spans(rows)
        result.stored = len(rows)
        rooted = {traces[t].pk for t, spans in by_trace.items() if any(not r["parentSpanId"] for r in spans.values())}
        for part in _chunked([traces[t].pk for t in by_trace]):
            # Waiting again, received now, and its root seen when this request brought it: one
            # statement, not two.
            root_here = [pk for pk in part if pk in rooted]
            seen = (
                {"root_seen": Case(When(pk__in=root_here, then=Value(True)), default=F("root_seen"))}
                if root_here
                else {}
            )
            staged = F("staged_chars") + Case(*(When(pk=pk, then=Value(added[pk])) for pk in part), default=Value(0))
            OtlpTrace.objects.filter(pk__in=part).update(
                pending=True, last_received_at=now, staged_chars=staged, **seen
            )
        # A conversation that had finished goes on: live again until the new spans settle.
        for part in _chunked(list({traces[t].session_id for t in by_trace})):
            finished = Session.objects.filter(pk__in=part).exclude(status=Session.Status.LIVE)
            reopened = Session.objects.filter(pk__in=list(finished.values_list("pk", flat=True)))
            if reopened.update(status=Session.Status.LIVE, ended_at=None, completed=False):
                reopened.reseal(["status", "ended_at", "completed"])
    return result


def recount_staged(traces: QuerySet[OtlpTrace]) -> None:
    """Count again the characters of these traces' waiting spans (after their records changed:
    a redaction)."""
    waiting = (
        OtlpSpan.objects.filter(trace=OuterRef("pk"), record__isnull=False)
        .order_by()
        .values("trace")
        .annotate(n=Sum(Length("record")))
        .values("n")
    )
    traces.update(staged_chars=Coalesce(Subquery(waiting), 0))


# What a span says (its name, attributes, events, status and resource), as against the ids and
# times that place it, which stay as received.
_SPAN_CONTENT = ("name", "attributes", "events", "status", "resource", "scope")


def _staged(record: dict[str, Any], redactor: Redactor | None) -> dict[str, Any]:
    if redactor is None:
        return record
    return {**record, **{key: redactor.value(record[key]) for key in _SPAN_CONTENT if key in record}}


def _drop_stored(traces: dict[str, OtlpTrace], by_trace: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Leave out the spans already stored (only known traces can hold any)."""
    # The stored span ids of the known traces, a chunk of traces a statement (_chunked), with no
    # `span_id IN (...)` beside the `trace_id IN (...)`: with both, the database probed every pair
    # of the two lists (a retried request of 8,000 traces took seconds).
    for part in _chunked([t.pk for t in traces.values()]):
        stored = OtlpSpan.objects.filter(trace_id__in=part).values_list("trace__trace_id", "span_id")
        for trace_id, span_id in stored:
            spans = by_trace.get(trace_id)
            if spans is not None:
                spans.pop(span_id, None)
                if not spans:
                    del by_trace[trace_id]


def _drop_not_genai(traces: dict[str, OtlpTrace], by_trace: dict[str, dict[str, dict[str, Any]]]) -> int:
    """Leave out the spans of a trace not seen before when none of them is a GenAI operation (an
    HTTP server's, a database's: a collector may forward every trace): they would become no
    event, and the trace an empty session. Once a GenAI span made the trace known, such spans
    are kept, as they shape its tree; one ending before any GenAI span of its trace was exported
    (what is left out here) is no ancestor of one, as a span ends after everything inside it."""
    left_out = 0
    for trace_id in [t for t in by_trace if t not in traces]:
        if not any(otlp.operation_of(record) for record in by_trace[trace_id].values()):
            left_out += len(by_trace.pop(trace_id))
    return left_out


def _insert_spans(rows: list[tuple]) -> None:
    """The new spans of a request: on PostgreSQL one COPY (`copy_rows`), on SQLite one
    executemany (Django's bulk_create is several times slower, docs/benchmarks.md).

    No span here is stored already: the request holds the project's lock, under which every
    request of the project stages (so none stores a span of its traces meanwhile), and
    `_drop_stored` left out the ones stored before. A COPY cannot skip a conflicting row, and
    needs not; psycopg's pipelined executemany of 512 INSERTs cost the request 2.5 times the
    CPU of the COPY (bench/otlp_bench.py). SQLite keeps ON CONFLICT as a backstop, its
    executemany being as cheap either way."""
    if connection.vendor == "postgresql":
        copy_rows(OtlpSpan, _SPAN_COLUMNS, rows)
        return
    columns = ", ".join(_SPAN_COLUMNS)
    placeholders = ", ".join(["%s"] * len(_SPAN_COLUMNS))
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {_SPAN_TABLE} ({columns}) VALUES ({placeholders}) ON CONFLICT (trace_id, span_id) DO NOTHING",
            rows,
        )


def _place_traces(
    project: Project,
    traces: dict[str, OtlpTrace],
    by_trace: dict[str, dict[str, dict[str, Any]]],
    now: datetime,
    result: StageResult,
) -> int:
    """Give every trace of the request its session: a new trace its conversation's (made if
    needed), a known one a better conversation when this request first names it. A new trace
    whose conversation would need a session past the project's quota is taken out of `by_trace`;
    the number of its spans is returned (a known trace stays where it is)."""
    wanted: dict[str, str] = {}  # trace id -> the conversation key it should go to
    staged_under = _conversations_of([t.session_id for t in traces.values() if t.settled_at is None])
    for trace_id, spans in by_trace.items():
        trace = traces.get(trace_id)
        key = _conversation_key(spans.values())
        if trace is None:
            wanted[trace_id] = key or trace_id
        elif trace.settled_at is None and key and _better_key(trace, key, staged_under.get(trace.session_id), spans):
            wanted[trace_id] = key
    if not wanted:
        return 0
    sessions = _sessions_for(project, set(wanted.values()), by_trace, wanted, result)
    new_traces = []
    refused = 0
    for trace_id, key in wanted.items():
        trace = traces.get(trace_id)
        if key not in sessions:
            if trace is None:
                refused += len(by_trace.pop(trace_id))
            continue
        if trace is None:
            trace = OtlpTrace(project=project, trace_id=trace_id, session=sessions[key], last_received_at=now)
            new_traces.append(trace)
            traces[trace_id] = trace
        else:
            _move_trace(trace, sessions[key])
    OtlpTrace.objects.bulk_create(new_traces)
    return refused


def conversation_digest(key: str) -> str:
    """What finds a conversation's session again (OtlpConversation): keyed, as a plain hash of a
    low-entropy id that redaction hid (a mail address) could be reversed by guessing. Keyed by
    SECRET_KEY: after changing it, a conversation's next turns start a new session."""
    return salted_hmac("replay.otlp.conversation", key, algorithm="sha256").hexdigest()


def _conversations_of(session_ids: list[int]) -> dict[int, str]:
    """The conversation digest each of the sessions was made for, in one query a chunk."""
    found: dict[int, str] = {}
    for part in _chunked(list(set(session_ids))):
        found.update(OtlpConversation.objects.filter(session_id__in=part).values_list("session_id", "digest"))
    return found


def _conversation_key(records: Iterable[dict[str, Any]]) -> str:
    """The conversation of a trace's spans: its root span's, else the first one named."""
    first = ""
    for record in records:
        key = otlp.conversation_of(record)
        if key and not record["parentSpanId"]:
            return key
        first = first or key
    return first


def _better_key(trace: OtlpTrace, key: str, staged_under: str | None, spans: dict[str, dict[str, Any]]) -> bool:
    """Whether a trace staged under its own id (no conversation seen yet), or under a
    non-root span's conversation, moves to `key` now that its spans name it. `staged_under`:
    the digest of the key its session was made for."""
    if staged_under == conversation_digest(key):
        return False
    root_here = any(not r["parentSpanId"] and otlp.conversation_of(r) == key for r in spans.values())
    return root_here or staged_under == conversation_digest(trace.trace_id)


def _sessions_for(
    project: Project,
    keys: set[str],
    by_trace: dict[str, dict[str, dict[str, Any]]],
    wanted: dict[str, str],
    result: StageResult,
) -> dict[str, Session]:
    """The conversations' sessions, those not stored yet made while the project's sessions quota
    leaves room (a conversation past it has none in the answer). Under the project's lock."""
    by_digest = {conversation_digest(key): key for key in keys}
    found: dict[str, Session] = {}
    with planned_for_values():
        for part in _chunked(list(by_digest)):
            for conversation in OtlpConversation.objects.filter(project=project, digest__in=part).select_related(
                "session"
            ):
                found[by_digest[conversation.digest]] = conversation.session
    room = sessions_left(project) if any(key not in found for key in wanted.values()) else None
    new: dict[str, SessionMeta] = {}
    for trace_id, key in wanted.items():
        if key not in found and key not in new:
            if room is not None:
                if room == 0:
                    continue
                room -= 1
            record = next(iter(by_trace[trace_id].values()))
            new[key] = SessionMeta(
                source_session_id=key, run_id=trace_id,
                environment=str(record["resource"].get("service.name", ""))[:200],
                metadata={"otlp": {"conversation": key != trace_id}},
            )  # fmt: skip
    # The request's new sessions made with one INSERT, and their conversations with one more.
    made = create_sessions(project=project, source_format=otlp.NAME, metas=list(new.values()))
    OtlpConversation.objects.bulk_create(
        OtlpConversation(project=project, digest=conversation_digest(key), session=session)
        for key, session in zip(new, made, strict=True)
    )
    found.update(zip(new, made, strict=True))
    result.created.extend(made)
    return found


def _move_trace(trace: OtlpTrace, session: Session) -> None:
    """Move a not yet settled trace to its conversation's session; the session it leaves is
    deleted when nothing else was ever in it."""
    left = trace.session
    trace.session = session
    trace.save(update_fields=["session"])
    if left.event_count == 0 and not OtlpTrace.objects.filter(session=left).exists():
        left.delete()


# --- settling ------------------------------------------------------------------------------


def settle_traces(
    *,
    quiet_seconds: float,
    orphan_seconds: float,
    project: Project | None = None,
    now: datetime | None = None,
    limit: int | None = None,
) -> SettleResult:
    """Write the waiting spans of every session whose traces have all settled (see the module's
    docstring) as events, in time order; `limit` bounds how many sessions one call settles."""
    now = now or timezone.now()
    quiet_since = now - timedelta(seconds=quiet_seconds)
    orphaned_since = now - timedelta(seconds=orphan_seconds)
    # No session is due without a waiting trace quiet for long enough: the partial index on
    # last_received_at answers that at once, where the grouping below reads every waiting trace
    # (each export request settles: while an agent's traces are all still active, as during
    # any burst of requests shorter than the quiet period, this one query is all it costs).
    quiet = OtlpTrace.objects.filter(pending=True, last_received_at__lte=quiet_since)
    if not (quiet if project is None else quiet.filter(project=project)).exists():
        return SettleResult()
    # Sessions whose every waiting trace is quiet, and has its root or waited long enough.
    due = (
        OtlpTrace.objects.filter(pending=True)
        .values("session_id", "project_id")
        .annotate(last=Max("last_received_at"), rootless=Max("last_received_at", filter=Q(root_seen=False)))
        .filter(Q(rootless__isnull=True) | Q(rootless__lte=orphaned_since), last__lte=quiet_since)
        .order_by("last")
        .values_list("project_id", "session_id")
    )
    if project is not None:
        due = due.filter(project=project)
    by_project: dict[int, list[int]] = {}
    for project_id, session_id in due[:limit] if limit else due:
        by_project.setdefault(project_id, []).append(session_id)
    result = SettleResult()
    with collector_paused():
        _settle_due_sessions(by_project, quiet_since, orphaned_since, now, result)
    return result


def _settle_due_sessions(
    by_project: dict[int, list[int]],
    quiet_since: datetime,
    orphaned_since: datetime,
    now: datetime,
    result: SettleResult,
) -> None:
    """Settle the due sessions (by project), SETTLE_PER_TRANSACTION to a transaction.

    A transaction's sessions are written together first (`shared_writes`: one stream of rows,
    their other statements at its end). If anything fails, that transaction is undone and done
    again one session at a time, each in a savepoint of its own: a session whose spans cannot
    be written must not hold up the others; they stay waiting (and logged) for a fix.
    """
    recently = time.monotonic() - ONE_AT_A_TIME_SECONDS
    for session_id in [pk for pk, at in _failed_at.items() if at < recently]:
        del _failed_at[session_id]
    for project_id, session_ids in by_project.items():
        for start in range(0, len(session_ids), SETTLE_PER_TRANSACTION):
            chunk = session_ids[start : start + SETTLE_PER_TRANSACTION]
            done = SettleResult()
            together = not any(session_id in _failed_at for session_id in chunk)
            if together:
                try:
                    _settle_chunk(project_id, chunk, quiet_since, orphaned_since, now, done, together=True)
                except Exception:
                    logger.warning(
                        "settling sessions %s together failed; settling them one at a time", chunk, exc_info=True
                    )
                    done, together = SettleResult(), False
            if not together:
                _settle_chunk(project_id, chunk, quiet_since, orphaned_since, now, done, together=False)
            result.sessions += done.sessions
            result.finished += done.finished
            result.events += done.events
            result.spans += done.spans


def _settle_chunk(
    project_id: int,
    chunk: list[int],
    quiet_since: datetime,
    orphaned_since: datetime,
    now: datetime,
    result: SettleResult,
    *,
    together: bool,
) -> None:
    """Settle the sessions of `chunk` in one transaction: `together`, any failure undoes it all
    (and is raised); else each session in a savepoint, a failing one logged and left waiting."""
    with transaction.atomic():
        # The lock every export request of the project takes first: neither side then waits on
        # rows the other holds.
        Project.lock(project_id)
        # The transaction's sessions (whole rows, locked: the writer appends with them as they
        # are) and their waiting spans, each read in one query for all of them, not two for
        # every session: building an ORM query cost more than settling a small session's spans
        # (bench/otlp_bench.py). Under the project's lock nothing stages a span of them
        # meanwhile, so what is read here is what each session settles.
        tops = Session.objects.select_for_update(no_key=True).in_bulk(chunk)
        waiting = _waiting_spans(chunk, quiet_since, orphaned_since)
        # The rules read once for the transaction's sessions, not by each of the writer's calls
        # (some four look-ups a session).
        settled: list[int] = []
        with RedactionRules.pinned(project_id):
            if together:
                with shared_writes() as shared:
                    for session_id in chunk:
                        # (popped: a settled session's span records are not kept to the chunk's end)
                        top, spans = tops.get(session_id), waiting.pop(session_id, None)
                        if top is not None and spans is not None:  # else gone, or a trace of it is not due after all
                            _settle_session(_Placement(top, tops), spans, result, shared)
                            settled.append(session_id)
            else:
                for session_id in chunk:
                    top, spans = tops.get(session_id), waiting.pop(session_id, None)
                    if top is None or spans is None:
                        continue
                    placement = _Placement(top, tops)
                    try:
                        with transaction.atomic():
                            _settle_session(placement, spans, result)
                        settled.append(session_id)
                    except Exception:
                        # The rows it touched, as held here, may be ahead of what was rolled
                        # back: none of them settles again in this transaction.
                        for pk in placement.touched():
                            tops.pop(pk, None)
                        _failed_at[session_id] = time.monotonic()
                        logger.exception("settling the spans of session %s failed", session_id)
        # The settled sessions' traces wait no more: one statement for the transaction.
        # (Under the project's lock: no request has staged a span of them meanwhile.)
        if settled:
            OtlpTrace.objects.filter(session_id__in=settled, pending=True).update(
                pending=False, settled_at=now, staged_chars=0
            )


def _waiting_spans(
    session_ids: list[int], quiet_since: datetime, orphaned_since: datetime
) -> dict[int, dict[int, dict[str, tuple]]]:
    """The spans of the sessions' waiting traces (the ones written in an earlier settling too:
    they place a straggler), by session, trace pk and span id, of the sessions whose every
    waiting trace is still due (the `due` query ran before the transaction); two queries."""
    not_due: set[int] = set()
    waiting: dict[int, dict[int, dict[str, tuple]]] = {}
    trace_session: dict[int, int] = {}
    for trace_pk, session_id, received, root_seen in (
        OtlpTrace.objects.filter(session_id__in=session_ids, pending=True)
        .order_by("pk")
        .values_list("pk", "session_id", "last_received_at", "root_seen")
    ):
        if received > quiet_since or (not root_seen and received > orphaned_since):
            not_due.add(session_id)  # receiving spans again, or its root span may still come
        waiting.setdefault(session_id, {})
        trace_session[trace_pk] = session_id
    due_traces = [pk for pk, session_id in trace_session.items() if session_id not in not_due]
    for part in _chunked(due_traces):
        for row in OtlpSpan.objects.filter(trace_id__in=part).order_by("trace_id", "pk").values_list(*_SETTLING_FIELDS):
            trace_pk = row[0]
            waiting[trace_session[trace_pk]].setdefault(trace_pk, {})[row[2]] = row[1:]
    for session_id in not_due:
        del waiting[session_id]
    return waiting


def _settle_session(
    placement: _Placement, spans: dict[int, dict[str, tuple]], result: SettleResult, shared: SharedWrites | None = None
) -> None:
    """Write the waiting spans (by trace pk and span id) of the placement's session (its
    writes joining `shared` when given)."""
    placement.add_traces(spans)
    for session, placed in placement.by_session():
        events = otlp.timeline(placed, first_step=session.step_count)
        # Appended and finished in one writer call: the row locked, read and saved once.
        append_and_finish(
            session=session, events=events, meta=placement.meta(session), locked_by_caller=True, shared=shared,
            status=Session.Status.FAILED if placement.failed(session) else Session.Status.COMPLETED,
        )  # fmt: skip
        result.events += len(events)
        result.sessions.append(session.pk)
        result.finished.append(session.pk)
    placement.save_spans(shared)
    result.spans += placement.span_count


class _Placement:
    """Which session each waiting span's events go to, and in which role (formats.otlp.Placed).

    A span's context is (session, inside an agent): a trace's root (or a span whose parent
    never came) starts in the trace's session, outside any agent; an invoke_agent span outside
    any agent is that session's own agent; one inside an agent is a sub-agent, with a child
    session for its own spans. A span written in an earlier settling keeps the session inside
    it where the walk up the trace could not find it again (a sub-agent's own session, or the
    trace's for a span whose parent had not come), so a straggler under a sub-agent joins that
    sub-agent's session and one under a written span lands beside it.
    """

    def __init__(self, top: Session, locked: dict[int, Session]) -> None:
        """`top`: the session's row, locked; `locked`: the rows the transaction locked and holds
        (a span routed to one of them appends to that very object, never to a second copy read
        apart from it, which a later save would overwrite)."""
        self.top = top
        self._locked = locked
        self._sessions: dict[int, Session] = {top.pk: top}
        self._placed: dict[int, list[otlp.Placed]] = {}
        self._span_session: list[tuple[int, int | None]] = []  # (span row id, the session kept for it: _place)
        self._failed: set[int] = set()
        self._ended: dict[int, int] = {}
        self._described: dict[int, dict[str, Any]] = {}
        self._no_room = False  # the project's sessions quota is reached: no child session more
        self._inline_keys: dict[str, str] = {}  # a sub-agent left without a session: the key it would have had
        self._nesting: dict[int, int] = {top.pk: 0}  # how many sub-agents deep each session is
        self._made = 0  # child sessions this settling made
        self.span_count = 0

    def add_traces(self, by_trace: dict[int, dict[str, tuple]]) -> None:
        """Place the spans of the session's waiting traces: for each trace, its spans by span id
        as rows (pk, span_id, parent_span_id, operation, record, session_id)."""
        for rows in by_trace.values():
            context: dict[str, tuple[int, bool, int]] = {}  # span id -> (session pk, in an agent, depth)
            for span_id, row in rows.items():
                if row[4] is not None:
                    self._place(span_id, rows, context)

    def _context(self, span_id: str, rows: dict[str, tuple], context: dict) -> tuple[int, bool, int]:
        """The context *inside* a span (what its children start in), found walking up to the
        nearest span already placed: iteratively, as a hostile trace may be deep or name a
        cycle of parents (its first span then starts outside any agent)."""
        chain: list[str] = []
        seen: set[str] = set()
        current = span_id
        while current in rows and current not in context and current not in seen:
            seen.add(current)
            chain.append(current)
            current = rows[current][2]
        inside = context.get(current, (self.top.pk, False, -1))
        for name in reversed(chain):
            inside = context[name] = self._inside(name, rows[name], inside)
        return context[span_id]

    def _inside(self, span_id: str, row: tuple, outer: tuple[int, bool, int]) -> tuple[int, bool, int]:
        session_pk, in_agent, depth = outer
        _, _, _, operation, record, stored_session = row
        agent = operation == otlp.AGENT_OPERATION
        if record is None:  # written in an earlier settling: its descendants' session then
            return stored_session or session_pk, in_agent or agent, depth + 1
        if agent and in_agent:  # a sub-agent: its own spans go to a child session
            child = self._child_of(session_pk, span_id, orjson.loads(record))
            if child is not None:
                return child.pk, True, depth + 1
        return session_pk, in_agent or agent, depth + 1

    def _place(self, span_id: str, rows: dict[str, tuple], context: dict) -> None:
        row = rows[span_id]
        parent = row[2]
        outer = self._context(parent, rows, context) if parent in rows else (self.top.pk, False, -1)
        inner = self._context(span_id, rows, context)
        raw = row[4]
        record = orjson.loads(raw)
        operation = row[3]
        session_pk, in_agent, depth = outer
        # Kept only where a straggler's walk up the trace (_inside) would not find it again: a
        # sub-agent's own session, or the session of a span whose parent had not come (that
        # parent may come later, inside another session). For any other span it is the one
        # around it; setting it on every span made settling check 100,000 foreign keys more
        # (bench/otlp_bench.py).
        kept = inner[0] != outer[0] or (parent and parent not in rows)
        self._span_session.append((row[0], inner[0] if kept else None))
        self.span_count += 1
        if operation == otlp.AGENT_OPERATION and in_agent and inner[0] == session_pk:
            # A sub-agent the sessions quota left without a session of its own: spawned and
            # answered in its parent's session (no session named), its own spans inline there.
            self._add(session_pk, otlp.Placed(record, operation, raw, role="spawn", depth=depth + 1,
                                              late=bool(record.get("late")),
                                              child_key=self._inline_keys.get(span_id, span_id)))  # fmt: skip
            self._note(session_pk, record, agent=False)
            return
        if operation == otlp.AGENT_OPERATION and in_agent:
            child = self._sessions[inner[0]]
            self._add(session_pk, otlp.Placed(record, operation, raw, role="spawn", depth=depth + 1,
                                              late=bool(record.get("late")), child_key=child.source_session_id,
                                              child_session=child.pk))  # fmt: skip
            self._add(child.pk, otlp.Placed(record, operation, raw, role="agent", depth=depth + 1,
                                            late=bool(record.get("late"))))  # fmt: skip
            self._note(child.pk, record, agent=True)
            return
        role = "agent" if operation == otlp.AGENT_OPERATION else "span"
        self._add(
            session_pk, otlp.Placed(record, operation, raw, role=role, depth=depth + 1, late=bool(record.get("late")))
        )
        self._note(session_pk, record, agent=role == "agent" or not record["parentSpanId"])

    def _session(self, pk: int) -> Session:
        if pk not in self._sessions:
            found = self._locked.get(pk)
            self._sessions[pk] = (
                found if found is not None else Session.objects.select_for_update(no_key=True).get(pk=pk)
            )
        return self._sessions[pk]

    def touched(self) -> list[int]:
        return list(self._sessions)

    def _child_of(self, parent_pk: int, span_id: str, record: dict[str, Any]) -> Session | None:
        """The session of a sub-agent's run: its own conversation's when it names another,
        else its parent's key and span id. None when a new one would pass the project's sessions
        quota: the sub-agent is then spawned and answered in its parent's session, its own spans
        inline there (nothing is lost; the parent's metadata counts such sub-agents:
        otlp.sub_agents_inline), as an export request refuses only the conversations it cannot
        make a session for; and past MAX_SUB_AGENT_NESTING or MAX_CHILD_SESSIONS_A_SETTLING."""
        parent = self._session(parent_pk)
        conversation = otlp.conversation_of(record)
        # A staged span is redacted: a conversation id with a placeholder in it may read like
        # another sub-agent's, so it names no child session (its span id does).
        own = conversation and conversation != parent.source_session_id and "[REDACTED:" not in conversation
        key = (conversation if own else f"{parent.source_session_id}/{span_id}")[:200]  # as the row keeps it
        for session in self._sessions.values():
            if session.parent_id == parent.pk and session.source_session_id == key:
                return session
        nesting = self._nesting_of(parent) + 1
        if nesting > MAX_SUB_AGENT_NESTING or self._made >= MAX_CHILD_SESSIONS_A_SETTLING:
            return self._inline(parent, span_id, key)
        if self._no_room or sessions_left(parent.project) == 0:
            self._no_room = True  # nothing else makes a session under the project's lock
            return self._inline(parent, span_id, key)
        child = create_session(
            project=parent.project, source_format=otlp.NAME, meta=SessionMeta(
                source_session_id=key, run_id=record["traceId"], environment=parent.environment,
                metadata={"otlp": {"sub_agent_of": parent.pk, "span": span_id, "nesting": nesting}},
            ),
        )  # fmt: skip
        Session.objects.filter(pk=child.pk).update(parent=parent)
        Session.objects.filter(pk=child.pk).reseal(["parent_id"])
        child.parent_id = parent.pk  # the id, not the row: no chain of rows, however deep
        self._sessions[child.pk] = child
        self._nesting[child.pk] = nesting
        self._made += 1
        return child

    def _nesting_of(self, session: Session) -> int:
        """How many sub-agents deep a session is: known for the ones this settling met, else
        as its row noted it (a child session of an earlier settling)."""
        if session.pk in self._nesting:
            return self._nesting[session.pk]
        noted = session.metadata.get("otlp") if isinstance(session.metadata, dict) else None
        nesting = noted.get("nesting") if isinstance(noted, dict) else None
        if session.parent_id is None:
            return 0
        return nesting if isinstance(nesting, int) and nesting > 0 else 1

    def _inline(self, parent: Session, span_id: str, key: str) -> None:
        """A sub-agent left without a session of its own, counted in its parent's metadata."""
        self._inline_keys[span_id] = key
        metadata = parent.metadata if isinstance(parent.metadata, dict) else {}
        noted = metadata.get("otlp") if isinstance(metadata.get("otlp"), dict) else {}
        inline = noted.get("sub_agents_inline")
        # Saved with the parent's row, which the settling holds locked and saves.
        parent.metadata = {
            **metadata,
            "otlp": {**noted, "sub_agents_inline": (inline if isinstance(inline, int) else 0) + 1},
        }
        return None

    def _add(self, session_pk: int, placed: otlp.Placed) -> None:
        self._session(session_pk)
        self._placed.setdefault(session_pk, []).append(placed)

    def _note(self, session_pk: int, record: dict[str, Any], *, agent: bool) -> None:
        """What the session's row says of its run: its end, failure, agent, model and task."""
        self._ended[session_pk] = max(self._ended.get(session_pk, 0), record["end"])
        if agent and record["status"].get("code") == otlp.STATUS_ERROR:
            self._failed.add(session_pk)
        described = self._described.setdefault(session_pk, {})
        attributes = record["attributes"]
        if agent and "agent_id" not in described:
            name = attributes.get("gen_ai.agent.name") or attributes.get("gen_ai.agent.id")
            if isinstance(name, str) and name:
                described["agent_id"] = name[:200]
        model = attributes.get("gen_ai.request.model")
        if "model" not in described and isinstance(model, str) and model:
            described["model"] = model[:200]
        if agent and "task" not in described:
            task = next((m["content"] for m in otlp.input_messages(record) if m.get("role") == "user"), "")
            if task:
                described["task"] = task

    def by_session(self) -> list[tuple[Session, list[otlp.Placed]]]:
        return [(self._sessions[pk], placed) for pk, placed in self._placed.items()]

    def failed(self, session: Session) -> bool:
        return session.pk in self._failed

    def meta(self, session: Session) -> SessionMeta:
        """What the spans say of the session's run: its end, and its agent, model and task,
        which fill the session's fields left empty."""
        end = self._ended.get(session.pk)
        return SessionMeta(ended_at=otlp.time_of(end) if end else None, **self._described.get(session.pk, {}))

    def save_spans(self, shared: SharedWrites | None = None) -> None:
        """The written spans keep only what places a straggler: their record goes, and the
        session kept for a span (_place) is noted (at the end of `shared` when given)."""
        by_session: dict[int | None, list[int]] = {}
        for row_id, session_pk in self._span_session:
            by_session.setdefault(session_pk, []).append(row_id)
        # One statement for each session (most settlings: one, for spans with none), not one for
        # every span. On PostgreSQL the ids are one array: the statement's text is then the same
        # for every session, parsed and converted once, not once for each length of the list.
        with connection.cursor() as cursor:
            for session_pk, row_ids in by_session.items():
                for part in _chunked(row_ids):
                    if connection.vendor == "postgresql":
                        where, values = "id = ANY(%s)", [part]
                    else:
                        where, values = f"id IN ({', '.join(['%s'] * len(part))})", part
                    if session_pk is None:
                        sql, params = f"UPDATE {_SPAN_TABLE} SET record = NULL WHERE {where}", values
                    else:
                        sql = f"UPDATE {_SPAN_TABLE} SET record = NULL, session_id = %s WHERE {where}"
                        params = [session_pk, *values]
                    if shared is None:
                        cursor.execute(sql, params)
                    else:
                        shared.later(sql, params)
