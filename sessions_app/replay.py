"""Reads: step state at N, context at N, pages of steps and events, search.

Every function here answers from a bounded number of indexed reads, whatever the session's
length or the position asked for (../shared/PERFORMANCE.md):

- a page of events is one keyset range read on `(session, seq)` (a filtered page finds its first
  and last seq by a k-ary search over the running `kind_counts` stored on each event);
- a page of steps is one range read on `(session, step_pos)`;
- the context at an event is that event's own row (running totals computed at ingest) plus the
  last 50 LLM / tool events before it, read backwards on `(session, kind, seq)`;
- the variables and memory at an event are the latest keyframe Snapshot at or before it plus the
  state changes after it, which ingest guarantees are at most `KEYFRAME_EVERY` rows away.

Rows are read with raw SQL on Django's connection (the ORM's per-row cost is most of a page's
time), and payloads can be spliced into responses as `orjson.Fragment`s without being decoded
(`splice=True`, what the API uses; the dashboard gets plain dicts).
"""

from __future__ import annotations

import bisect
import json
from collections import namedtuple
from datetime import UTC, datetime, timedelta
from typing import Any, Iterable, Sequence

import orjson
from django.conf import settings
from django.db import connection
from django.utils.dateparse import parse_datetime

from .canonical import ALL_KINDS, Kind
from .formats import agentlens
from .ingest import KEYFRAME_EVERY
from .models import Event, Session, Snapshot

EVENT_TABLE = Event._meta.db_table
HISTORY_LIMIT = 50  # llmHistory / toolResults / pendingApprovals, as AgentLens caps them
MAX_PAGE = 5000
SEARCH_FANOUT = 32  # probes per query of the filtered-offset search
LLM_KINDS = (Kind.LLM_CALL, Kind.LLM_RESPONSE)
TOOL_RESULT_KINDS = (Kind.TOOL_RESPONSE, Kind.TOOL_ERROR)
# Calls that should get an answer; a missing one is a warning.
ANSWERED_CALLS = frozenset({Kind.LLM_CALL, Kind.TOOL_CALL, Kind.CHILD_SPAWN})
# Events that complete a call: where a slow call is noticed.
CALL_ANSWERS = frozenset({Kind.LLM_RESPONSE, Kind.TOOL_RESPONSE, Kind.TOOL_ERROR})

# AgentLens's own event type names, accepted in `eventTypes` beside the canonical kinds.
KIND_ALIASES = {
    "session_started": Kind.SESSION_START,
    "session_ended": Kind.SESSION_END,
    "cost_tracked": Kind.COST,
}

# An AgentLens session's replay says things the way AgentLens's replay builder says them
# (agentkitai/agentlens packages/server/src/lib/replay/builder.ts): the pair only on the step
# that initiated it (buildPairMap keys it by the initiator), ...
AGENTLENS_INITIATORS = frozenset({Kind.LLM_CALL, Kind.TOOL_CALL, Kind.APPROVAL_REQUESTED})
# ... and eventCounts by AgentLens's own type names: the kinds standing for one type each.
_AGENTLENS_NAMES = {
    kind: types[0]
    for kind, types in (
        (kind, [name for name, mapped in agentlens.KINDS.items() if mapped == kind])
        for kind in set(agentlens.KINDS.values())
    )
    if len(types) == 1
}

# rlm-code StepState fields and their defaults, in its field order.
STEP_FIELDS: tuple[tuple[str, Any], ...] = (
    ("step", 0),
    ("timestamp", ""),
    ("action_type", ""),
    ("action_code", ""),
    ("action_rationale", ""),
    ("success", False),
    ("output", ""),
    ("error", ""),
    ("reward", 0.0),
    ("cumulative_reward", 0.0),
    ("duration_ms", 0.0),
    ("tokens_used", 0),
)

_COLUMNS = (
    "seq", "kind", "source_type", "ts", "step", "step_pos", "depth", "agent_id", "parent_id",
    "child_id", "tool", "pair_id", "pair_seq", "pair_duration_ms", "duration_ms", "cost_usd",
    "cost_unpriced", "tokens", "is_error", "fail_streak", "payload", "cost_total", "tokens_total",
    "errors_total", "elapsed_ms", "reward_total", "steps_total", "kind_counts", "raw",
)  # fmt: skip
Row = namedtuple("Row", _COLUMNS)

# On SQLite, Django's connection converts declared datetime and bool columns with a Python
# function per value (a fifth of a page's read time); the same columns as expressions come back
# as text and integers: the timestamp is already ISO 8601 (ingest stores naive UTC).
_SQLITE_EXPRESSIONS = {
    "ts": "replace(ts, ' ', 'T') || 'Z' AS ts",
    "is_error": "(is_error = 1) AS is_error",
    "cost_unpriced": "(cost_unpriced = 1) AS cost_unpriced",
}


def _columns(names: Sequence[str]) -> str:
    if connection.vendor == "sqlite":
        return ", ".join(_SQLITE_EXPRESSIONS.get(name, name) for name in names)
    return ", ".join(names)


_PAIRED = ("seq", "kind", "source_type", "ts", "is_error")


class ReplayParameterError(ValueError):
    """A parameter a caller got wrong (the API answers 400 with the message)."""


# --------------------------------------------------------------------------------------------
# Reading rows


def _fetch(sql: str, params: Sequence[Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _rows(where: str, params: Sequence[Any], *, order: str = "seq", limit: int | None = None) -> list[Row]:
    sql = f"SELECT {_columns(_COLUMNS)} FROM {EVENT_TABLE} WHERE session_id = %s AND {where} ORDER BY {order}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return [Row._make(r) for r in _fetch(sql, params)]


def _union_rows(arms: list[tuple[str, list[Any]]], *, columns: str | None = None) -> list[tuple]:
    """One statement of several `(WHERE ..., ORDER BY ... LIMIT ...)` arms.

    Each arm reads one kind on the `(session, kind, seq)` index; a single `kind IN (...)` with
    `ORDER BY seq` would make the database sort every matching event of the session instead.
    """
    if not arms:
        return []
    columns = columns or _columns(_COLUMNS)
    parts = []
    params: list[Any] = []
    for i, (tail, arm_params) in enumerate(arms):
        parts.append(f"SELECT * FROM (SELECT {columns} FROM {EVENT_TABLE} WHERE session_id = %s AND {tail}) AS arm{i}")
        params.extend(arm_params)
    return _fetch(" UNION ALL ".join(parts), params)


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        if value.endswith("Z"):
            return value
        value = parse_datetime(value)
        if value is None:
            return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat() + "Z"


def _json(text: str | None, *, splice: bool, default: Any = None) -> Any:
    if text is None:
        return default
    return orjson.Fragment(text) if splice else orjson.loads(text)


def event_dict(row: Row, *, splice: bool = False) -> dict[str, Any]:
    """The API's event shape (docs/api.md, "Events")."""
    return {
        "seq": row.seq,
        "kind": row.kind,
        "eventType": row.source_type,
        "timestamp": _iso(row.ts),
        "step": row.step,
        "stepPos": row.step_pos,
        "depth": row.depth,
        "agentId": row.agent_id,
        "parentId": row.parent_id,
        "childId": row.child_id,
        "tool": row.tool,
        "pairId": row.pair_id,
        "pairSeq": row.pair_seq,
        "pairDurationMs": row.pair_duration_ms,
        "durationMs": row.duration_ms,
        "costUsd": row.cost_usd,
        "costUnpriced": bool(row.cost_unpriced),
        "tokens": row.tokens,
        "isError": bool(row.is_error),
        "payload": _json(row.payload, splice=splice, default={}),
    }


def _paired_dict(seq: int, kind: str, source_type: str, ts: Any, is_error: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "kind": kind,
        "eventType": source_type,
        "timestamp": _iso(ts),
        "isError": bool(is_error),
    }


def session_info(session: Session) -> dict[str, Any]:
    return {
        "id": session.pk,
        "projectId": session.project_id,
        "sourceSessionId": session.source_session_id,
        "runId": session.run_id,
        "agentId": session.agent_id,
        "format": session.source_format,
        "status": str(session.status),
        "completed": session.completed,
        "task": session.task,
        "environment": session.environment,
        "model": session.model,
        "startedAt": _iso(session.started_at),
        "endedAt": _iso(session.ended_at),
        "createdAt": _iso(session.created_at),
        "eventCount": session.event_count,
        "stepCount": session.step_count,
        "chain": chain_status(session),
        # The source's own hash chain as the importer found it (AgentLens's prevHash/hash);
        # null when the source carries no hashes.
        "sourceChain": (session.metadata or {}).get("source_chain"),
    }


def chain_status(session: Session) -> dict[str, Any]:
    """What the last verification found (the badge's text, for the API)."""
    return {
        "state": session.chain_state,
        "checkedAt": _iso(session.chain_checked_at),
        "brokenSeq": session.chain_broken_seq,
        "checkedEvents": session.chain_checked_count,
    }


def replay_summary(session: Session) -> dict[str, Any]:
    """The AgentLens `summary` block of a replay page."""
    return {
        "totalCost": session.cost_usd,
        "totalDurationMs": session.duration_seconds * 1000.0,
        "totalLlmCalls": session.llm_calls,
        "totalToolCalls": session.tool_calls,
        "totalErrors": session.error_count,
        "models": list(session.models_used or []),
        "tools": list(session.tools_used or []),
    }


# --------------------------------------------------------------------------------------------
# Summary


def get_summary(*, session: Session) -> dict[str, Any]:
    """rlm-code's `SessionReplayer.get_summary()` keys, plus totals rlm-code does not keep.

    No query: every figure is a running total kept on the session row by ingest.
    """
    return {
        "session_id": session.source_session_id or str(session.pk),
        "run_id": session.run_id or session.source_session_id or str(session.pk),
        "task": (session.task or "")[:100],
        "environment": session.environment,
        "model": session.model,
        "completed": session.completed,
        "total_steps": session.step_count,
        "total_reward": session.reward,
        "total_tokens": session.tokens,
        "duration_seconds": session.duration_seconds,
        "success_rate": session.success_rate,
        "error_count": session.step_error_count,
        "totalCost": session.cost_usd,
        "totalEvents": session.event_count,
        "llmCalls": session.llm_calls,
        "toolCalls": session.tool_calls,
        "models": list(session.models_used or []),
        "tools": list(session.tools_used or []),
        "errorEvents": session.error_count,
        "chainValid": session.chain_valid,
        "status": str(session.status),
        "format": session.source_format,
    }


# --------------------------------------------------------------------------------------------
# Point-in-time state (variables and memory notes)


class _State:
    """Variables and memory while changes are applied in seq order.

    Copy-on-write: a dict handed out for one step is shared with the next steps until a change
    touches it, so a page of steps does not copy the variables once per step.
    """

    __slots__ = ("variables", "memory", "_shared")

    def __init__(self, variables: dict[str, Any], memory: list[Any]) -> None:
        self.variables = variables
        self.memory = memory
        self._shared = False

    def apply(self, change_text: str) -> None:
        change = orjson.loads(change_text)
        if not isinstance(change, dict):
            return
        if change.get("memory") is not None:
            self.memory = list(change["memory"])
        new_vars = change.get("variables")
        if isinstance(new_vars, dict):
            if change.get("replace"):
                self.variables = dict(new_vars)
            else:
                if self._shared:
                    self.variables = dict(self.variables)
                self.variables.update(new_vars)
            self._shared = False

    def handout(self) -> tuple[dict[str, Any], list[Any]]:
        self._shared = True
        return self.variables, self.memory


SNAPSHOT_TABLE = Snapshot._meta.db_table


def _state_union(session_id: int, target_sql: str, target_params: list[Any]) -> tuple[str, list[Any]]:
    """One statement giving the state at the seq `target_sql` evaluates to: the latest keyframe
    at or before it (part 1) and the changes to apply on top (part 2, see _change_window).

    One round trip instead of two; the target and the keyframe are common table expressions so
    each is looked up (and planned) once. The JSON is decoded by orjson, not by JSONField.
    """
    cast = "::text" if connection.vendor == "postgresql" else ""
    sql = (
        f"WITH target AS (SELECT {target_sql} AS seq), "
        f"keyframe AS (SELECT seq, variables, memory_notes FROM {SNAPSHOT_TABLE} "
        "WHERE session_id = %s AND kind = %s AND seq <= (SELECT seq FROM target) "
        "ORDER BY seq DESC LIMIT 1) "
        f"SELECT 1 AS part, seq, variables{cast} AS a, memory_notes{cast} AS b FROM keyframe "
        f"UNION ALL SELECT 2, seq, state_change, NULL FROM {EVENT_TABLE} WHERE session_id = %s "
        "AND state_change IS NOT NULL AND seq <= (SELECT seq FROM target) "
        "AND seq > COALESCE((SELECT seq FROM keyframe), -1) "
        f"AND seq <= COALESCE((SELECT seq FROM keyframe), -1) + {KEYFRAME_EVERY}"
    )
    return sql, [*target_params, session_id, Snapshot.Kind.KEYFRAME.value, session_id]


def _state_from(rows: Iterable[tuple]) -> _State:
    """The state from _state_union rows sorted by (part, seq)."""
    state = _State({}, [])
    for part, _seq, a, b in rows:
        if part == 1:
            state = _State(_decoded(a, {}), _decoded(b, []))
        elif part == 2:
            state.apply(a)
    return state


def _decoded(value: Any, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, (str, bytes)):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            # JSONField writes with the json module, which may write a bare NaN.
            value = json.loads(value)
    return value if isinstance(value, type(default)) else default


def _change_window(keyframe_seq: int, seq: int) -> int:
    """Last seq that can hold a change to apply on top of `keyframe_seq` to get the state at `seq`.

    Ingest writes a keyframe at the first event at least KEYFRAME_EVERY after the previous one
    once the state has changed (event_rows.EventRows.add), so when the latest keyframe at or
    before `seq` is K, any change after K lies before K + KEYFRAME_EVERY. Reading the changes
    over that window only is what keeps the cost flat even where the state never changes.
    """
    return min(seq, keyframe_seq + KEYFRAME_EVERY)


def _state_at(session: Session, seq: int) -> _State:
    sql, params = _state_union(session.pk, "CAST(%s AS BIGINT)", [seq])
    return _state_from(_fetch(sql + " ORDER BY part, seq", params))


def state_at(*, session: Session, seq: int) -> dict[str, Any]:
    """Variables and memory notes as they were just after event `seq` (1 query)."""
    state = _state_at(session, seq)
    return {"variables": state.variables, "memory_notes": state.memory}


# --------------------------------------------------------------------------------------------
# Steps (rlm-code StepState)


def _step_state(text: str | None, variables: dict[str, Any], memory: list[Any]) -> dict[str, Any]:
    data = orjson.loads(text) if text else {}
    if not isinstance(data, dict):
        data = {}
    out = {name: data.get(name, default) for name, default in STEP_FIELDS}
    out["memory_notes"] = memory
    out["variables"] = variables
    out["raw_action"] = data.get("raw_action") or {}
    out["raw_observation"] = data.get("raw_observation") or {}
    return out


def step_seq(*, session: Session, index: int) -> int | None:
    """The seq of the event that closes step `index` (0-based position)."""
    if index < 0 or index >= session.step_count:
        return None
    # No ORDER BY (`.first()` would add the model's (session, seq) ordering, and SQLite then
    # walks the whole session in seq order instead of probing the step_pos index).
    found = (
        Event.objects.filter(session=session, step_pos=index)
        .order_by()
        .values_list("seq", flat=True)[:1]
    )
    return next(iter(found), None)


def step_state_at(*, session: Session, index: int) -> dict[str, Any] | None:
    """rlm-code's StepState at position `index` (as `goto_step`), with the variables and memory
    notes as they were when that step closed; None outside the step list. 1 query."""
    if index < 0 or index >= session.step_count:
        return None
    step_sql = f"(SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND step_pos = %s)"
    state_sql, state_params = _state_union(session.pk, step_sql, [session.pk, index])
    rows = _fetch(
        f"{state_sql} UNION ALL SELECT 0, seq, step_state, NULL FROM {EVENT_TABLE} "
        "WHERE session_id = %s AND step_pos = %s ORDER BY part, seq",
        [*state_params, session.pk, index],
    )
    if not rows or rows[0][0] != 0:
        return None
    state = _state_from(rows[1:])
    return _step_state(rows[0][2], state.variables, state.memory)


def iter_step_states(
    *, session: Session, offset: int = 0, limit: int | None = None, chunk: int = 1000
) -> Iterable[tuple[int, int, dict[str, Any]]]:
    """(position, seq, StepState) for steps offset.., read a chunk of steps at a time with the
    state carried forward from one chunk to the next (exports, snapshots)."""
    stop = session.step_count if limit is None else min(session.step_count, offset + limit)
    position = offset
    state: _State | None = None
    last_seq = -1
    while position < stop:
        end = min(stop, position + chunk)
        rows = _fetch(
            f"SELECT seq, step_pos, step_state FROM {EVENT_TABLE} WHERE session_id = %s "
            "AND step_pos >= %s AND step_pos < %s ORDER BY step_pos",
            [session.pk, position, end],
        )
        if not rows:
            return
        if state is None:
            state, last_seq = _state_before_steps(session, rows[0][0])
        changes = _changes_in(session, last_seq, rows[-1][0])
        for pos, seq, vars_, mem, text in _merge_steps(rows, changes, state):
            yield pos, seq, _step_state(text, vars_, mem)
        last_seq = rows[-1][0]
        position = end


def _state_before_steps(session: Session, first_seq: int) -> tuple[_State, int]:
    """The state just before the first step of a page, and the seq it is current at."""
    if first_seq <= 0:
        return _State({}, []), -1
    return _state_at(session, first_seq - 1), first_seq - 1


def _changes_in(session: Session, after: int, upto: int) -> list[tuple[int, str]]:
    if upto <= after:
        return []
    return _fetch(
        f"SELECT seq, state_change FROM {EVENT_TABLE} WHERE session_id = %s AND seq > %s "
        "AND seq <= %s AND state_change IS NOT NULL ORDER BY seq",
        [session.pk, after, upto],
    )


def _merge_steps(rows: list[tuple], changes: list[tuple[int, str]], state: _State):
    i = 0
    for seq, pos, text in rows:
        while i < len(changes) and changes[i][0] <= seq:
            state.apply(changes[i][1])
            i += 1
        variables, memory = state.handout()
        yield pos, seq, variables, memory, text


def steps_page(*, session: Session, offset: int, limit: int) -> dict[str, Any]:
    """`{"total", "steps": [StepState...]}` for positions offset..offset+limit-1 (3 queries).

    The state is computed once for the first step and carried forward through the page.
    """
    _check_window(offset, limit)
    steps = [
        step
        for _pos, _seq, step in iter_step_states(session=session, offset=offset, limit=limit, chunk=limit)
    ]
    return {"total": session.step_count, "steps": steps}


# --------------------------------------------------------------------------------------------
# Warnings


Thresholds = namedtuple("Thresholds", "cost_usd latency_ms repeated_failures")


def thresholds() -> Thresholds:
    """The warning thresholds, read once per request (settings are a lazy object)."""
    return Thresholds(settings.WARN_STEP_COST_USD, settings.WARN_LATENCY_MS, settings.WARN_REPEATED_FAILURES)


def warnings_for(row: Row, *, session: Session, limits: Thresholds | None = None) -> list[dict[str, Any]]:
    """Warnings triggered at this event (thresholds: settings.WARN_*; docs/api.md, "Warnings")."""
    limits = limits or thresholds()
    found: list[dict[str, Any]] = []
    cost_limit = limits.cost_usd
    latency_limit = limits.latency_ms
    if row.cost_usd is not None and cost_limit is not None and row.cost_usd > cost_limit:
        found.append({
            "type": "cost",
            "message": f"This event cost ${row.cost_usd:.4f}, over the ${cost_limit:.4f} threshold",
            "value": row.cost_usd,
            "threshold": cost_limit,
        })
    if row.cost_unpriced:
        found.append({
            "type": "unpriced",
            "message": f"{row.tokens or 0} tokens used with no known price for "
            f"{row.tool or 'this model'}: its cost is unknown, not $0",
            "value": row.tokens,
            "threshold": None,
        })
    if row.kind in CALL_ANSWERS and latency_limit is not None:
        latency = row.pair_duration_ms if row.pair_duration_ms is not None else row.duration_ms
        if latency is not None and latency > latency_limit:
            found.append({
                "type": "latency",
                "message": f"{row.tool or row.kind} answered after {latency:.0f} ms, "
                f"over the {latency_limit:.0f} ms threshold",
                "value": latency,
                "threshold": latency_limit,
            })
    if row.kind in ANSWERED_CALLS and row.pair_seq is None:
        open_ms = max(0.0, session.elapsed_ms - row.elapsed_ms)
        if session.status != Session.Status.LIVE:
            found.append({
                "type": "unanswered",
                "message": f"{row.tool or row.kind} never got a response",
                "value": None,
                "threshold": None,
            })
        elif latency_limit is not None and open_ms > latency_limit:
            found.append({
                "type": "unanswered",
                "message": f"{row.tool or row.kind} has had no response for {open_ms:.0f} ms",
                "value": open_ms,
                "threshold": latency_limit,
            })
    repeat_limit = limits.repeated_failures
    if row.fail_streak and row.fail_streak >= repeat_limit:
        found.append({
            "type": "repeated_failure",
            "message": f"{row.tool} failed {row.fail_streak} times in a row",
            "value": row.fail_streak,
            "threshold": repeat_limit,
        })
    return found


# --------------------------------------------------------------------------------------------
# Context at an event


def _step_index(row: Row, step_count: int) -> int | None:
    """The step an event belongs to: the one it closes, else the one in progress."""
    if step_count <= 0:
        return None
    index = row.step_pos if row.step_pos is not None else row.steps_total
    return min(index, step_count - 1)


def agentlens_type_names(session: Session) -> dict[str, str] | None:
    """For an AgentLens session, the AgentLens event type each canonical kind stood for (None for
    other formats). Each row counts events by kind only: a kind that stood for several types in
    this session (`custom`: custom, form_*, decision, observation, unknown types; `note`: the
    two alert types) keeps its own name, with all of them counted together."""
    if session.source_format != agentlens.NAME:
        return None
    seen = ((session.metadata or {}).get("agentlens") or {}).get("event_types")
    if seen is None:  # a live session, never finished: what its converter has seen so far
        states = (session.ingest_state or {}).get("format_state") or {}
        seen = (states.get(agentlens.NAME) or {}).get("types") or {}
    names = dict(_AGENTLENS_NAMES)
    for kind, types in seen.items():
        if len(types) == 1:
            names[kind] = types[0]
        else:
            names.pop(kind, None)
    return names


def _event_counts(text: str | None, *, splice: bool, type_names: dict[str, str] | None) -> Any:
    if type_names is None:
        return _json(text, splice=splice, default={})
    counts: dict[str, int] = {}
    for kind, count in orjson.loads(text or "{}").items():
        name = type_names.get(kind, kind)
        counts[name] = counts.get(name, 0) + count
    return counts


def _context_base(
    row: Row,
    session: Session,
    *,
    splice: bool,
    limits: Thresholds | None = None,
    type_names: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "eventIndex": row.seq,
        "totalEvents": session.event_count,
        "cumulativeCostUsd": row.cost_total,
        "elapsedMs": row.elapsed_ms,
        "eventCounts": _event_counts(row.kind_counts, splice=splice, type_names=type_names),
        "llmHistory": [],
        "toolResults": [],
        "pendingApprovals": [],
        "errorCount": row.errors_total,
        "warnings": warnings_for(row, session=session, limits=limits),
        "tokens": row.tokens_total,
        "reward": row.reward_total,
        "stepIndex": _step_index(row, session.step_count),
    }


def _history_arms(
    before_seq: int, pending_after: int, *, llm_kinds: tuple[str, ...] = LLM_KINDS
) -> list[tuple[str, list[Any]]]:
    """Arms reading the last HISTORY_LIMIT LLM events and tool results with seq < before_seq,
    and the approval requests still undecided after `pending_after`."""
    arms = []
    for kind in llm_kinds + TOOL_RESULT_KINDS:
        arms.append((f"kind = %s AND seq < %s ORDER BY seq DESC LIMIT {HISTORY_LIMIT}", [kind, before_seq]))
    arms.append((
        "kind = %s AND seq < %s AND (pair_seq IS NULL OR pair_seq > %s) "
        f"ORDER BY seq DESC LIMIT {HISTORY_LIMIT}",
        [Kind.APPROVAL_REQUESTED, before_seq, pending_after],
    ))
    return arms


def _history_before(session: Session, before_seq: int, pending_after: int) -> list[Row]:
    if before_seq <= 0:
        return []
    calls_only = session.source_format == agentlens.NAME
    llm_kinds = (Kind.LLM_CALL,) if calls_only else LLM_KINDS
    arms = [
        (tail, [session.pk, *params])
        for tail, params in _history_arms(before_seq, pending_after, llm_kinds=llm_kinds)
    ]
    if calls_only:
        arms.append(_lone_responses_arm(session.pk, before_seq))
    return sorted((Row._make(r) for r in _union_rows(arms)), key=lambda r: r.seq)


def _lone_responses_arm(session_pk: int, before_seq: int) -> tuple[str, list[Any]]:
    """The LLM responses before `before_seq` that answer no earlier call: in AgentLens's
    llmHistory each is an entry of its own. The history keeps the last HISTORY_LIMIT entries, so
    none older than the HISTORY_LIMIT-th last call can be one: the range read stops there."""
    return (
        "kind = %s AND seq < %s AND (pair_seq IS NULL OR pair_seq > seq) "
        f"AND seq >= COALESCE((SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND kind = %s "
        f"AND seq < %s ORDER BY seq DESC LIMIT 1 OFFSET {HISTORY_LIMIT - 1}), 0) "
        f"ORDER BY seq DESC LIMIT {HISTORY_LIMIT}",
        [session_pk, Kind.LLM_RESPONSE, before_seq, session_pk, Kind.LLM_CALL, before_seq],
    )


def _is_llm_entry(kind: str, seq: int, pair_seq: int | None, *, calls_only: bool) -> bool:
    """Whether an event is an entry of llmHistory. AgentLens's replay builder gives each
    llm_call an entry and completes it in place with its llm_response; a response answering no
    earlier call gets one of its own. Other formats list calls and responses alike."""
    if not calls_only:
        return kind in LLM_KINDS
    return kind == Kind.LLM_CALL or (kind == Kind.LLM_RESPONSE and (pair_seq is None or pair_seq > seq))


def _answered_by(kind: str, seq: int, pair_seq: int | None, at: int) -> int | None:
    """The seq of the response completing an llmHistory call entry by event `at`, if any."""
    if kind == Kind.LLM_CALL and pair_seq is not None and seq < pair_seq <= at:
        return pair_seq
    return None


def _pending(requests: list[tuple[int, int | None]], seq: int) -> list[int]:
    """Seqs of the approval requests made at or before `seq` and not decided by then."""
    open_ = [s for s, decided in requests if s <= seq and (decided is None or decided > seq)]
    return open_[-HISTORY_LIMIT:]


def context_at(*, session: Session, seq: int) -> dict[str, Any] | None:
    """The AgentLens context at event `seq`, with LLM history, tool results and pending
    approvals inlined, plus the point-in-time state and the current step (about 5 queries)."""
    if seq < 0 or seq >= session.event_count:
        return None
    found = _rows("seq = %s", [session.pk, seq])
    if not found:
        return None
    row = found[0]
    history = _history_before(session, seq + 1, seq)
    calls_only = session.source_format == agentlens.NAME
    llm = [r for r in history if _is_llm_entry(r.kind, r.seq, r.pair_seq, calls_only=calls_only)][-HISTORY_LIMIT:]
    tools = [r for r in history if r.kind in TOOL_RESULT_KINDS][-HISTORY_LIMIT:]
    approvals = [r for r in history if r.kind == Kind.APPROVAL_REQUESTED][-HISTORY_LIMIT:]
    context = _context_base(row, session, splice=False, type_names=agentlens_type_names(session))
    context["llmHistory"] = [event_dict(r) for r in llm]
    if calls_only:
        _complete_calls(session, llm, context["llmHistory"], seq)
    context["toolResults"] = [event_dict(r) for r in tools]
    context["pendingApprovals"] = [event_dict(r) for r in approvals]

    state = _state_at(session, seq)
    context["memoryNotes"] = state.memory
    context["variables"] = state.variables
    context["event"] = event_dict(row)
    context["pairedEvent"] = None
    context["pairDurationMs"] = row.pair_duration_ms
    if row.pair_seq is not None:
        paired = _fetch(
            f"SELECT {_columns(_PAIRED)} FROM {EVENT_TABLE} WHERE session_id = %s AND seq = %s",
            [session.pk, row.pair_seq],
        )
        if paired:
            context["pairedEvent"] = _paired_dict(*paired[0])
            if calls_only and _initiates(row):
                context["pairDurationMs"] = _between_ms(row.ts, paired[0][3])
    index = context["stepIndex"]
    if index is None:
        context["step"] = None
        context["stepSeq"] = None
    elif row.step_pos is not None:
        context["step"] = _step_state(_step_text(session, row.seq), state.variables, state.memory)
        context["stepSeq"] = row.seq
    else:
        context["stepSeq"] = step_seq(session=session, index=index)
        context["step"] = step_state_at(session=session, index=index)
    return context


def _has_pair(row: Row) -> bool:
    return row.pair_seq is not None


def _initiates(row: Row) -> bool:
    """Whether an AgentLens event is the initiating side of its pair: a call or request whose
    answer came after it (AgentLens pairs an answer with a call already seen)."""
    return row.kind in AGENTLENS_INITIATORS and row.pair_seq is not None and row.pair_seq > row.seq


def _between_ms(start: Any, end: Any) -> float | None:
    """Milliseconds from one event's time to another's, as AgentLens's pairDurationMs:
    `new Date(b).getTime() - new Date(a).getTime()`, each time cut to the millisecond."""
    first, last = _epoch_ms(start), _epoch_ms(end)
    return float(last - first) if first is not None and last is not None else None


def _epoch_ms(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_datetime(value)
        if value is None:
            return None
    if value.tzinfo is None:  # stored as naive UTC
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _complete_calls(session: Session, rows: list[Row], entries: list[dict[str, Any]], at: int) -> None:
    """Each llmHistory entry with its `response` as of event `at`: the llm_response completing
    the call by then, else None (AgentLens fills the call's entry in place)."""
    answers = [_answered_by(r.kind, r.seq, r.pair_seq, at) for r in rows]
    wanted = [seq for seq in answers if seq is not None]
    found = {r.seq: r for r in _rows(f"seq IN ({', '.join(['%s'] * len(wanted))})", [session.pk, *wanted])} if wanted else {}
    for entry, answer in zip(entries, answers):
        response = found.get(answer) if answer is not None else None
        entry["response"] = event_dict(response) if response is not None else None


def _step_text(session: Session, seq: int) -> str | None:
    found = _fetch(
        f"SELECT step_state FROM {EVENT_TABLE} WHERE session_id = %s AND seq = %s", [session.pk, seq]
    )
    return found[0][0] if found else None


# --------------------------------------------------------------------------------------------
# Replay pages (the AgentLens ReplayState)


def _check_window(offset: int, limit: int) -> None:
    if offset < 0:
        raise ReplayParameterError(f"offset must be 0 or more, got {offset}")
    if not 1 <= limit <= MAX_PAGE:
        raise ReplayParameterError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")


def resolve_kinds(event_types: Iterable[str] | None) -> tuple[str, ...] | None:
    """Canonical kinds for an `eventTypes` filter; None means no filter."""
    if event_types is None:
        return None
    kinds: list[str] = []
    for name in event_types:
        name = name.strip()
        if not name:
            continue
        kind = KIND_ALIASES.get(name, name)
        if kind not in ALL_KINDS:
            raise ReplayParameterError(
                f"unknown event type {name!r}; known types: {', '.join(sorted(ALL_KINDS))}"
            )
        if kind not in kinds:
            kinds.append(kind)
    if not kinds:
        return None
    return tuple(kinds)


def _kind_total(session: Session, kinds: Sequence[str]) -> int:
    counts = session.kind_counts
    return sum(int(counts.get(kind, 0)) for kind in kinds)


def _seq_of_nth(session: Session, kinds: Sequence[str], nth: int, lo: int) -> int:
    """The seq of the nth (1-based) event of these kinds, by a k-ary search over seq.

    Each event stores the running count of every kind up to itself, so "how many events of
    these kinds are at or before seq s" is one indexed row; each round reads SEARCH_FANOUT of
    them in one query and narrows the interval as many times: 4 queries for 100,000 events.
    """
    hi = session.event_count - 1
    while lo < hi:
        width = hi - lo
        probes = sorted({lo + (width * i) // SEARCH_FANOUT for i in range(SEARCH_FANOUT)})
        found = dict(
            _fetch(
                f"SELECT seq, kind_counts FROM {EVENT_TABLE} WHERE session_id = %s "
                f"AND seq IN ({', '.join(['%s'] * len(probes))})",
                [session.pk, *probes],
            )
        )
        for probe in probes:
            counts = orjson.loads(found.get(probe, "{}"))
            if sum(counts.get(kind, 0) for kind in kinds) >= nth:
                hi = probe
                break
            lo = probe + 1
    return lo


def _filtered_rows(session: Session, kinds: Sequence[str], first: int, last: int) -> list[Row]:
    arms = [("kind = %s AND seq >= %s AND seq <= %s", [session.pk, kind, first, last]) for kind in kinds]
    return sorted((Row._make(r) for r in _union_rows(arms)), key=lambda r: r.seq)


def replay_page(
    *,
    session: Session,
    offset: int = 0,
    limit: int = 1000,
    event_types: list[str] | None = None,
    include_context: bool = True,
    splice: bool = False,
) -> dict[str, Any]:
    """AgentLens's ReplayState for events offset..offset+limit-1 (of the matching events).

    Unlike AgentLens, a filter only hides steps: every context is over all events. In a page,
    `llmHistory`, `toolResults` and `pendingApprovals` hold seqs; an entry is in `steps` when
    that event is a step of this page, else in the page-level maps `llm`, `tools`, `approvals`
    (docs/api.md, "Replay pages"). `resolve_page_context()` inlines them.
    """
    _check_window(offset, limit)
    kinds = resolve_kinds(event_types)
    n = session.event_count
    if kinds is None:
        total = n
        rows: list[Row] = []
        if offset < n:
            rows = _rows("seq >= %s AND seq < %s", [session.pk, offset, min(n, offset + limit)])
    else:
        total = _kind_total(session, kinds)
        rows = []
        if offset < total:
            first = _seq_of_nth(session, kinds, offset + 1, 0)
            last = _seq_of_nth(session, kinds, min(offset + limit, total), first)
            rows = _filtered_rows(session, kinds, first, last)

    by_seq = {row.seq: row for row in rows}
    maps: dict[str, dict[int, Any]] = {"llm": {}, "tools": {}, "approvals": {}}
    contexts: list[dict[str, Any] | None] = [None] * len(rows)
    if include_context and rows:
        contexts = _page_contexts(session, rows, by_seq, kinds is not None, maps, splice=splice)

    calls_only = session.source_format == agentlens.NAME
    shows_pair = _initiates if calls_only else _has_pair
    missing_pairs = sorted({r.pair_seq for r in rows if shows_pair(r) and r.pair_seq not in by_seq})
    paired: dict[int, dict[str, Any]] = {}
    if missing_pairs:
        for found in _fetch(
            f"SELECT {_columns(_PAIRED)} FROM {EVENT_TABLE} WHERE session_id = %s "
            f"AND seq IN ({', '.join(['%s'] * len(missing_pairs))})",
            [session.pk, *missing_pairs],
        ):
            paired[found[0]] = _paired_dict(*found)

    steps = []
    for i, row in enumerate(rows):
        pair = None
        if shows_pair(row):
            other = by_seq.get(row.pair_seq)
            pair = (
                _paired_dict(other.seq, other.kind, other.source_type, other.ts, other.is_error)
                if other is not None
                else paired.get(row.pair_seq)
            )
        step: dict[str, Any] = {"index": offset + i, "event": event_dict(row, splice=splice)}
        if not calls_only:
            step["pairedEvent"] = pair
            step["pairDurationMs"] = row.pair_duration_ms
        elif pair is not None:
            # AgentLens's builder sets both keys on the initiating step only, timed by the
            # two events' timestamps (the answer's latencyMs stays in its payload).
            step["pairedEvent"] = pair
            step["pairDurationMs"] = _between_ms(row.ts, pair["timestamp"])
        step["context"] = contexts[i]
        steps.append(step)

    page: dict[str, Any] = {
        "session": session_info(session),
        # True only once a verification has run and found nothing (verification.py).
        "chainValid": session.chain_valid is True,
        "totalSteps": total,
        "steps": steps,
        "pagination": {"offset": offset, "limit": limit, "hasMore": offset + len(rows) < total},
        "summary": replay_summary(session),
    }
    if include_context:
        page.update(maps)
    return page


def _page_contexts(
    session: Session,
    rows: list[Row],
    by_seq: dict[int, Row],
    filtered: bool,
    maps: dict[str, dict[int, Any]],
    *,
    splice: bool,
) -> list[dict[str, Any]]:
    first_seq, last_seq = rows[0].seq, rows[-1].seq
    pre = _history_before(session, first_seq, first_seq - 1)
    known: dict[int, Row] = {r.seq: r for r in pre}
    calls_only = session.source_format == agentlens.NAME
    type_names = agentlens_type_names(session)
    llm_seqs = [r.seq for r in pre if _is_llm_entry(r.kind, r.seq, r.pair_seq, calls_only=calls_only)][-HISTORY_LIMIT:]
    # An AgentLens call's entry is completed in place by its response: call seq -> answer seq.
    answers = {r.seq: r.pair_seq for r in pre if calls_only and _answered_by(r.kind, r.seq, r.pair_seq, last_seq)}
    tool_seqs = [r.seq for r in pre if r.kind in TOOL_RESULT_KINDS][-HISTORY_LIMIT:]
    requests = [(r.seq, r.pair_seq) for r in pre if r.kind == Kind.APPROVAL_REQUESTED]

    if filtered:
        # Events between the page's rows that the filter hides still shape every context:
        # read which of them are history events (seq and kind only, from the kind index).
        arms = [
            ("kind = %s AND seq >= %s AND seq <= %s", [session.pk, kind, first_seq, last_seq])
            for kind in LLM_KINDS + TOOL_RESULT_KINDS + (Kind.APPROVAL_REQUESTED,)
        ]
        span = sorted(_union_rows(arms, columns="seq, kind, pair_seq"))
    else:
        span = [(r.seq, r.kind, r.pair_seq) for r in rows]
    for seq, kind, pair_seq in span:
        if kind in LLM_KINDS:
            if _is_llm_entry(kind, seq, pair_seq, calls_only=calls_only):
                llm_seqs.append(seq)
                if calls_only and _answered_by(kind, seq, pair_seq, last_seq):
                    answers[seq] = pair_seq
        elif kind in TOOL_RESULT_KINDS:
            tool_seqs.append(seq)
        elif kind == Kind.APPROVAL_REQUESTED:
            requests.append((seq, pair_seq))

    contexts = []
    referenced: set[int] = set()
    # Each step's history is a window of these sorted lists, and windows only move forward:
    # collect their union as merged index ranges instead of set-adding 100 seqs per step.
    llm_spans = _Spans()
    tool_spans = _Spans()
    limits = thresholds()
    for row in rows:
        context = _context_base(row, session, splice=splice, limits=limits, type_names=type_names)
        end = bisect.bisect_right(llm_seqs, row.seq)
        start = max(0, end - HISTORY_LIMIT)
        context["llmHistory"] = llm_seqs[start:end]
        llm_spans.add(start, end)
        end = bisect.bisect_right(tool_seqs, row.seq)
        start = max(0, end - HISTORY_LIMIT)
        context["toolResults"] = tool_seqs[start:end]
        tool_spans.add(start, end)
        if requests:
            context["pendingApprovals"] = _pending(requests, row.seq)
            referenced.update(context["pendingApprovals"])
        contexts.append(context)
    llm_entries = llm_spans.values(llm_seqs)
    referenced.update(llm_entries, tool_spans.values(tool_seqs))
    if answers:
        # The responses completing call entries resolve like entries (resolve_page_context).
        referenced.update(answers[seq] for seq in llm_entries if seq in answers)

    outside = sorted(seq for seq in referenced if seq not in by_seq)
    fetch = [seq for seq in outside if seq not in known]
    for chunk_start in range(0, len(fetch), 500):
        chunk = fetch[chunk_start:chunk_start + 500]
        for found in _rows(f"seq IN ({', '.join(['%s'] * len(chunk))})", [session.pk, *chunk]):
            known[found.seq] = found
    for seq in outside:
        row = known.get(seq)
        if row is None:
            continue
        if row.kind in LLM_KINDS:
            maps["llm"][seq] = event_dict(row, splice=splice)
        elif row.kind in TOOL_RESULT_KINDS:
            maps["tools"][seq] = event_dict(row, splice=splice)
        else:
            maps["approvals"][seq] = event_dict(row, splice=splice)
    return contexts


class _Spans:
    """The union of [start, end) index ranges added in non-decreasing order."""

    def __init__(self) -> None:
        self.spans: list[list[int]] = []

    def add(self, start: int, end: int) -> None:
        if start >= end:
            return
        if self.spans and start <= self.spans[-1][1]:
            self.spans[-1][1] = max(self.spans[-1][1], end)
        else:
            self.spans.append([start, end])

    def values(self, items: list[int]) -> list[int]:
        return [value for start, end in self.spans for value in items[start:end]]


def resolve_page_context(page: dict[str, Any]) -> list[dict[str, Any] | None]:
    """The contexts of a (non-spliced) replay page with every reference replaced by its entry,
    i.e. what context_at() gives for each step (without state and step). In an AgentLens
    session each llmHistory entry also gets its `response`: the event completing that call by
    the step's event (its `pairSeq`, when not after it), else None."""
    events = {step["event"]["seq"]: step["event"] for step in page["steps"]}
    lookup = {**{k: v for m in ("llm", "tools", "approvals") for k, v in page.get(m, {}).items()}, **events}
    completes = page["session"]["format"] == agentlens.NAME
    resolved = []
    for step in page["steps"]:
        context = step["context"]
        if context is None:
            resolved.append(None)
            continue
        full = dict(context)
        for key in ("llmHistory", "toolResults", "pendingApprovals"):
            full[key] = [lookup[seq] for seq in context[key]]
        if completes:
            at = context["eventIndex"]
            full["llmHistory"] = [
                {**entry, "response": lookup.get(_answered_by(entry["kind"], entry["seq"], entry["pairSeq"], at))}
                for entry in full["llmHistory"]
            ]
        resolved.append(full)
    return resolved


# --------------------------------------------------------------------------------------------
# Navigation: windows, search, errors, turns


def events_around(
    *,
    session: Session,
    seq: int,
    kinds: list[str] | None = None,
    before: int = 25,
    after: int = 25,
    include_payload: bool = True,
) -> dict[str, Any]:
    """A window of events around `seq` for a step list: up to `before` events before it, the
    event itself when it matches, up to `after` after it; `first`/`last` say whether the window
    reaches the session's first/last matching event."""
    if before < 0 or after < 0 or before + after > MAX_PAGE:
        raise ReplayParameterError(f"before and after must be 0 or more and add up to at most {MAX_PAGE}")
    selected = resolve_kinds(kinds)
    n = session.event_count
    seq = max(0, min(seq, n - 1)) if n else 0
    if n == 0:
        rows: list[Row] = []
        first = last = True
    elif selected is None:
        start, stop = max(0, seq - before), min(n - 1, seq + after)
        rows = _rows("seq >= %s AND seq <= %s", [session.pk, start, stop])
        first, last = start == 0, stop == n - 1
    else:
        arms = []
        for kind in selected:
            arms.append((f"kind = %s AND seq < %s ORDER BY seq DESC LIMIT {before + 1}", [session.pk, kind, seq]))
            arms.append((f"kind = %s AND seq >= %s ORDER BY seq LIMIT {after + 2}", [session.pk, kind, seq]))
        found = sorted((Row._make(r) for r in _union_rows(arms)), key=lambda r: r.seq)
        earlier = [r for r in found if r.seq < seq]
        here = [r for r in found if r.seq == seq]
        later = [r for r in found if r.seq > seq]
        first = len(earlier) <= before
        last = len(later) <= after
        rows = earlier[-before:] if before else []
        rows += here + later[:after]
    events = []
    for row in rows:
        event = event_dict(row)
        if not include_payload:
            event.pop("payload")
        event["stepIndex"] = _step_index(row, session.step_count)
        events.append(event)
    return {"seq": seq, "events": events, "first": first, "last": last, "totalEvents": n}


def _step_error_sql() -> str:
    """True for an event that closes a step with a non-empty error (rlm-code's error steps)."""
    if connection.vendor == "postgresql":
        return "(step_state IS NOT NULL AND COALESCE(step_state::jsonb ->> 'error', '') <> '')"
    return "(step_state IS NOT NULL AND COALESCE(json_extract(step_state, '$.error'), '') <> '')"


def _flagged_error_sql() -> str:
    """`is_error` spelled the way each planner matches the partial index event_session_error_seq:
    SQLite only uses it when the query repeats its `is_error = 1` literally."""
    return "is_error" if connection.vendor == "postgresql" else "is_error = 1"


def _error_sql() -> str:
    return f"(is_error OR {_step_error_sql()})"


def next_error(*, session: Session, seq: int, direction: int = 1) -> int | None:
    """The seq of the next (direction > 0) or previous error event or error step from `seq`.

    The flagged error event comes from the partial `is_error` index; error steps are only
    looked for between `seq` and it.
    """
    forward = direction >= 0
    op, order = (">", "ASC") if forward else ("<", "DESC")
    flagged = _fetch(
        f"SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND {_flagged_error_sql()} AND seq {op} %s "
        f"ORDER BY seq {order} LIMIT 1",
        [session.pk, seq],
    )
    bound = flagged[0][0] if flagged else None
    where = f"session_id = %s AND step_pos IS NOT NULL AND seq {op} %s"
    params: list[Any] = [session.pk, seq]
    if bound is not None:
        where += f" AND seq {'<' if forward else '>'} %s"
        params.append(bound)
    stepped = _fetch(
        f"SELECT seq FROM {EVENT_TABLE} WHERE {where} AND {_step_error_sql()} ORDER BY seq {order} LIMIT 1",
        params,
    )
    return stepped[0][0] if stepped else bound


def errors_around(*, session: Session, seq: int) -> tuple[int | None, int | None]:
    """(previous, next) error event or error step from `seq`: `next_error` both ways, in one
    statement instead of four (the player asks on every frame; on PostgreSQL each statement is a
    round trip). Each step lookup stops at the flagged error found on its side, as there."""
    flagged = _flagged_error_sql()
    step_error = _step_error_sql()
    sql = (
        f"WITH after_flag AS (SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND {flagged} "
        "AND seq > %s ORDER BY seq ASC LIMIT 1), "
        f"before_flag AS (SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND {flagged} "
        "AND seq < %s ORDER BY seq DESC LIMIT 1) "
        "SELECT (SELECT seq FROM before_flag), (SELECT seq FROM after_flag), "
        f"(SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND step_pos IS NOT NULL AND seq < %s "
        f"AND seq > COALESCE((SELECT seq FROM before_flag), -1) AND {step_error} "
        "ORDER BY seq DESC LIMIT 1), "
        f"(SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND step_pos IS NOT NULL AND seq > %s "
        f"AND seq < COALESCE((SELECT seq FROM after_flag), {_NO_SEQ_AFTER}) AND {step_error} "
        "ORDER BY seq ASC LIMIT 1)"
    )
    pk = session.pk
    ((flag_before, flag_after, step_before, step_after),) = _fetch(sql, [pk, seq, pk, seq, pk, seq, pk, seq])
    return (
        step_before if step_before is not None else flag_before,
        step_after if step_after is not None else flag_after,
    )


# Larger than any seq (a BIGINT): the upper bound when no flagged error follows.
_NO_SEQ_AFTER = 2**63 - 1


def next_turn_boundary(*, session: Session, seq: int) -> int | None:
    """The seq of the next user message after `seq` (a turn boundary), if any."""
    found = _fetch(
        f"SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND kind = %s AND seq > %s "
        "ORDER BY seq LIMIT 1",
        [session.pk, Kind.USER_MESSAGE, seq],
    )
    return found[0][0] if found else None


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _snippet(text: str, needle: str, width: int = 60) -> str:
    at = text.lower().find(needle.lower())
    if at < 0:
        return text[: 2 * width]
    start = max(0, at - width)
    return ("…" if start else "") + text[start:at + len(needle) + width] + ("…" if at + len(needle) + width < len(text) else "")


def search(
    *,
    session: Session,
    q: str = "",
    kind: str | None = None,
    errors: bool = False,
    from_seq: int | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """Events matching text (in the payload, the original record or the step), a kind and/or
    being errors, from `from_seq` on, in seq order; `nextFromSeq` continues the search.

    Text search reads forward from `from_seq` until `limit` matches are found (no full-text
    index: stored payloads are searched as they are).
    """
    if not 1 <= limit <= 500:
        raise ReplayParameterError(f"limit must be between 1 and 500, got {limit}")
    if from_seq is not None and from_seq < 0:
        raise ReplayParameterError(f"from must be 0 or more, got {from_seq}")
    where = ["seq >= %s", "seq < %s"]
    params: list[Any] = [session.pk, from_seq or 0, session.event_count]
    if kind:
        selected = resolve_kinds([kind])
        where.append("kind = %s")
        params.append(selected[0] if selected else kind)
    if errors:
        where.append(_error_sql())
    if q:
        like = "ILIKE" if connection.vendor == "postgresql" else "LIKE"
        pattern = _like_pattern(q)
        where.append(
            f"(payload {like} %s ESCAPE '\\' OR raw {like} %s ESCAPE '\\' "
            f"OR step_state {like} %s ESCAPE '\\')"
        )
        params += [pattern, pattern, pattern]
    rows = _rows(" AND ".join(where), params, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    results = []
    for row in rows:
        event = event_dict(row)
        event["stepIndex"] = _step_index(row, session.step_count)
        if q:
            event["snippet"] = _snippet(row.payload or "", q) if q.lower() in (row.payload or "").lower() else _snippet(row.raw or "", q)
        results.append(event)
    return {
        "q": q,
        "kind": kind,
        "errors": errors,
        "results": results,
        "nextFromSeq": rows[-1].seq + 1 if more and rows else None,
    }


def event_at(*, session: Session, seq: int) -> dict[str, Any] | None:
    """One event in the API shape."""
    found = _rows("seq = %s", [session.pk, seq])
    return event_dict(found[0]) if found else None
