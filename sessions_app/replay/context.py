"""The context at an event: running totals from its own row, recent history, warnings."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from django.conf import settings

from ..canonical import Kind
from ..formats import agentlens
from ..models import Session
from ..models.planning import planned_for_values
from .rows import (
    _AGENTLENS_NAMES,
    _PAIRED,
    AGENTLENS_INITIATORS,
    ANSWERED_CALLS,
    CALL_ANSWERS,
    EVENT_TABLE,
    HISTORY_LIMIT,
    LLM_KINDS,
    TOOL_RESULT_KINDS,
    Row,
    _columns,
    _fetch,
    _json,
    _paired_dict,
    _rows,
    _union_rows,
    as_utc,
    event_dict,
)
from .state import _state_at, _step_state, step_at

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
        found.append(
            {
                "type": "cost",
                "message": f"This event cost ${row.cost_usd:.4f}, over the ${cost_limit:.4f} threshold",
                "value": row.cost_usd,
                "threshold": cost_limit,
            }
        )
    if row.cost_unpriced:
        found.append(
            {
                "type": "unpriced",
                "message": f"{row.tokens or 0} tokens used with no known price for "
                f"{row.tool or 'this model'}: its cost is unknown, not $0",
                "value": row.tokens,
                "threshold": None,
            }
        )
    if row.kind in CALL_ANSWERS and latency_limit is not None:
        latency = row.pair_duration_ms if row.pair_duration_ms is not None else row.duration_ms
        if latency is not None and latency > latency_limit:
            found.append(
                {
                    "type": "latency",
                    "message": f"{row.tool or row.kind} answered after {latency:.0f} ms, "
                    f"over the {latency_limit:.0f} ms threshold",
                    "value": latency,
                    "threshold": latency_limit,
                }
            )
    if row.kind in ANSWERED_CALLS and row.pair_seq is None:
        open_ms = max(0.0, session.elapsed_ms - row.elapsed_ms)
        if session.status != Session.Status.LIVE:
            found.append(
                {
                    "type": "unanswered",
                    "message": f"{row.tool or row.kind} never got a response",
                    "value": None,
                    "threshold": None,
                }
            )
        elif latency_limit is not None and open_ms > latency_limit:
            found.append(
                {
                    "type": "unanswered",
                    "message": f"{row.tool or row.kind} has had no response for {open_ms:.0f} ms",
                    "value": open_ms,
                    "threshold": latency_limit,
                }
            )
    repeat_limit = limits.repeated_failures
    if row.fail_streak and row.fail_streak >= repeat_limit:
        found.append(
            {
                "type": "repeated_failure",
                "message": f"{row.tool} failed {row.fail_streak} times in a row",
                "value": row.fail_streak,
                "threshold": repeat_limit,
            }
        )
    return found


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
    before_seq: int, pending_after: int, *, llm_kinds: tuple[str, ...] = LLM_KINDS, limit: int = HISTORY_LIMIT
) -> list[tuple[str, list[Any]]]:
    """Arms reading the last `limit` LLM events and tool results with seq < before_seq, and the
    last HISTORY_LIMIT approval requests still undecided after `pending_after`."""
    arms = []
    for kind in llm_kinds + TOOL_RESULT_KINDS:
        arms.append((f"kind = %s AND seq < %s ORDER BY seq DESC LIMIT {int(limit)}", [kind, before_seq]))
    arms.append(
        (
            f"kind = %s AND seq < %s AND (pair_seq IS NULL OR pair_seq > %s) ORDER BY seq DESC LIMIT {HISTORY_LIMIT}",
            [Kind.APPROVAL_REQUESTED, before_seq, pending_after],
        )
    )
    return arms


def _history_before(session: Session, before_seq: int, pending_after: int, *, limit: int = HISTORY_LIMIT) -> list[Row]:
    """The events the histories before `before_seq` are made of: the last `limit` of each LLM
    and tool result kind (`limit` below HISTORY_LIMIT: only for a session that is not
    AgentLens's, whose LLM entries are not one per event), the pending approval requests."""
    if before_seq <= 0:
        return []
    calls_only = session.source_format == agentlens.NAME
    llm_kinds = (Kind.LLM_CALL,) if calls_only else LLM_KINDS
    arms = [
        (tail, [session.pk, *params])
        for tail, params in _history_arms(before_seq, pending_after, llm_kinds=llm_kinds, limit=limit)
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


def context_at(
    *, session: Session, seq: int, shown: int | None = None, read: Mapping[int, Row] | None = None
) -> dict[str, Any] | None:
    """The AgentLens context at event `seq`, with LLM history, tool results and pending
    approvals inlined, plus the point-in-time state and the current step (about 5 queries, 3 when
    `read` holds the event and its partner).

    `shown`: for a page that shows only the last `shown` entries of each history (the player):
    the histories hold those, and `historyCounts` how many entries each holds in full. Outside
    AgentLens sessions the LLM and tool counts come from the event's running counts by kind, so
    only the shown entries are read (reading and decoding all 100 was a fifth of a player step's
    CPU, docs/benchmarks.md, issue 20).

    `read`: rows the caller has already read, by seq (the player's window around `seq`): the
    event's own row and its paired event's are taken from there rather than read again."""
    if seq < 0 or seq >= session.event_count:
        return None
    read = read or {}
    row = read.get(seq)
    if row is None:
        found = _rows("seq = %s", [session.pk, seq])
        if not found:
            return None
        row = found[0]
    calls_only = session.source_format == agentlens.NAME
    lean = shown is not None and shown < HISTORY_LIMIT and not calls_only
    history = _history_before(session, seq + 1, seq, limit=shown if lean else HISTORY_LIMIT)
    llm = [r for r in history if _is_llm_entry(r.kind, r.seq, r.pair_seq, calls_only=calls_only)][-HISTORY_LIMIT:]
    tools = [r for r in history if r.kind in TOOL_RESULT_KINDS][-HISTORY_LIMIT:]
    approvals = [r for r in history if r.kind == Kind.APPROVAL_REQUESTED][-HISTORY_LIMIT:]
    context = _context_base(row, session, splice=False, type_names=agentlens_type_names(session))
    if shown is not None:
        counts = context["eventCounts"]  # the running counts at `seq`, this event included
        context["historyCounts"] = {
            "llmHistory": min(HISTORY_LIMIT, sum(counts.get(k, 0) for k in LLM_KINDS)) if lean else len(llm),
            "toolResults": min(HISTORY_LIMIT, sum(counts.get(k, 0) for k in TOOL_RESULT_KINDS)) if lean else len(tools),
            "pendingApprovals": len(approvals),
        }
        llm, tools, approvals = (entries[max(0, len(entries) - shown) :] for entries in (llm, tools, approvals))
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
        known = read.get(row.pair_seq)
        paired = (
            [tuple(getattr(known, name) for name in _PAIRED)]
            if known is not None
            else _fetch(
                f"SELECT {_columns(_PAIRED)} FROM {EVENT_TABLE} WHERE session_id = %s AND seq = %s",
                [session.pk, row.pair_seq],
            )
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
        found = step_at(session=session, index=index)
        context["stepSeq"], context["step"] = (None, None) if found is None else found
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
    moment = as_utc(value)
    return None if moment is None else (moment - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _complete_calls(session: Session, rows: list[Row], entries: list[dict[str, Any]], at: int) -> None:
    """Each llmHistory entry with its `response` as of event `at`: the llm_response completing
    the call by then, else None (AgentLens fills the call's entry in place)."""
    answers = [_answered_by(r.kind, r.seq, r.pair_seq, at) for r in rows]
    wanted = [seq for seq in answers if seq is not None]
    found: dict[int, Row] = {}
    if wanted:
        with planned_for_values():  # a list of seqs: planning.py says why
            found = {r.seq: r for r in _rows(f"seq IN ({', '.join(['%s'] * len(wanted))})", [session.pk, *wanted])}
    for entry, answer in zip(entries, answers):
        response = found.get(answer) if answer is not None else None
        entry["response"] = event_dict(response) if response is not None else None


def _step_text(session: Session, seq: int) -> str | None:
    found = _fetch(f"SELECT step_state FROM {EVENT_TABLE} WHERE session_id = %s AND seq = %s", [session.pk, seq])
    return found[0][0] if found else None
