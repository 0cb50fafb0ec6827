"""Rows of events read with raw SQL, and their API shapes: what every reader of the read side shares."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from django.db import connection
from django.utils.dateparse import parse_datetime

from ..canonical import Kind
from ..formats import agentlens
from ..formats.fields import too_many_containers
from ..models import Event

EVENT_TABLE = Event._meta.db_table
HISTORY_LIMIT = 50  # llmHistory / toolResults / pendingApprovals, as AgentLens caps them
MAX_PAGE = 5000
# A payload decoded for the dashboard, a context or MCP (never for the API's pages, which splice
# the stored text): past this many characters, or past formats.fields.DECODED_CONTAINERS_LIMIT
# objects and arrays, it is left undecoded and a stand-in says so. One event of 23 MB (up to the
# API's body limit) took 2 GiB and 6 s to show in the player, for every viewer of it, and forty
# of 990,000 characters of "[]," 860 MB; the API's replay page returns it whole.
DECODED_PAYLOAD_LIMIT = 1_000_000
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
    "errors_total", "elapsed_ms", "reward_total", "steps_total", "kind_counts", "raw",  # raw last: _row_columns
)  # fmt: skip
Row = namedtuple("Row", _COLUMNS)

# The timestamp as the API's text, made by the database: on SQLite, Django's connection converts
# declared datetime and bool columns with a Python function per value (a fifth of a page's read
# time), while the same columns as expressions come back as text and integers (ingest stores naive
# UTC text, ISO 8601 but for its "T"); on PostgreSQL, loading a datetime and formatting it again
# in Python was ~5 ms of a 1000-event page's ~35 ms. Both give what `_iso` gives for a datetime:
# "YYYY-MM-DDTHH:MM:SS[.ffffff]Z", the microseconds left out when they are zero.
_EXPRESSIONS = {
    "sqlite": {
        "ts": "replace(ts, ' ', 'T') || 'Z' AS ts",
        "is_error": "(is_error = 1) AS is_error",
        "cost_unpriced": "(cost_unpriced = 1) AS cost_unpriced",
    },
    "postgresql": {
        "ts": (
            "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN "
            "date_trunc('second', ts) = ts THEN '' "
            "ELSE to_char(ts AT TIME ZONE 'UTC', '.US') END || 'Z' AS ts"
        ),
    },
}


def _columns(names: Sequence[str]) -> str:
    expressions = _EXPRESSIONS.get(connection.vendor, {})
    return ", ".join(expressions.get(name, name) for name in names)


_PAIRED = ("seq", "kind", "source_type", "ts", "is_error")


class ReplayParameterError(ValueError):
    """A parameter a caller got wrong (the API answers 400 with the message)."""


# Reading rows


def _fetch(sql: str, params: Sequence[Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _row_columns(*, raw: bool = False) -> str:
    """A Row's columns. The source record (`raw`, the longest text of most rows) is read only
    when asked for, by search's snippets; elsewhere it is NULL, text no page shows (reading it
    was ~5 % of a 1000-event page's row read)."""
    return f"{_columns(_COLUMNS[:-1])}, {'raw' if raw else 'NULL AS raw'}"


def _rows(
    where: str, params: Sequence[Any], *, order: str = "seq", limit: int | None = None, raw: bool = False
) -> list[Row]:
    sql = f"SELECT {_row_columns(raw=raw)} FROM {EVENT_TABLE} WHERE session_id = %s AND {where} ORDER BY {order}"
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
    columns = columns or _row_columns()
    parts = []
    params: list[Any] = []
    for i, (tail, arm_params) in enumerate(arms):
        parts.append(f"SELECT * FROM (SELECT {columns} FROM {EVENT_TABLE} WHERE session_id = %s AND {tail}) AS arm{i}")
        params.extend(arm_params)
    return _fetch(" UNION ALL ".join(parts), params)


def as_utc(value: Any) -> datetime | None:
    """A stored timestamp as an aware UTC datetime, however the database or a dict gave it
    (an ISO text, "Z" or not; a naive datetime, which ingest stores as UTC)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = parse_datetime(value)
        except ValueError:
            return None
        if value is None:
            return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


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
        "payload": orjson.Fragment(row.payload or "{}") if splice else decoded_payload(row.payload),
    }


def decoded_payload(text: str | None) -> Any:
    """A stored payload decoded to be shown, or past DECODED_PAYLOAD_LIMIT a stand-in saying so
    (every reader that shows payloads goes through this)."""
    if text is not None and (len(text) > DECODED_PAYLOAD_LIMIT or too_many_containers(text)):
        # `text`, which every panel and preview shows of a message, says what happened.
        return {
            "notShown": len(text),
            "text": f"a payload of {len(text):,} characters, too large to show here; the API's replay "
            "page (GET /api/sessions/{id}/replay) and the exports return it whole",
        }
    return orjson.loads(text) if text else {}


def _paired_dict(seq: int, kind: str, source_type: str, ts: Any, is_error: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "kind": kind,
        "eventType": source_type,
        "timestamp": _iso(ts),
        "isError": bool(is_error),
    }


def _check_window(offset: int, limit: int) -> None:
    if offset < 0:
        raise ReplayParameterError(f"offset must be 0 or more, got {offset}")
    if not 1 <= limit <= MAX_PAGE:
        raise ReplayParameterError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
