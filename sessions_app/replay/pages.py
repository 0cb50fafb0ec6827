"""Replay pages (the AgentLens ReplayState), filtered by kind without a scan."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from ..canonical import ALL_KINDS, Kind
from ..formats import agentlens
from ..models import Session
from ..models.planning import planned_for_values
from .context import (
    _answered_by,
    _between_ms,
    _context_base,
    _has_pair,
    _history_before,
    _initiates,
    _is_llm_entry,
    _pending,
    agentlens_type_names,
    thresholds,
)
from .rows import (
    _PAIRED,
    EVENT_TABLE,
    HISTORY_LIMIT,
    KIND_ALIASES,
    LLM_KINDS,
    SEARCH_FANOUT,
    TOOL_RESULT_KINDS,
    ReplayParameterError,
    Row,
    _check_window,
    _columns,
    _fetch,
    _paired_dict,
    _rows,
    _union_rows,
    event_dict,
)
from .summary import replay_summary, session_info

# Replay pages (the AgentLens ReplayState)


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
            raise ReplayParameterError(f"unknown event type {name!r}; known types: {', '.join(sorted(ALL_KINDS))}")
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
        with planned_for_values():  # a list of seqs: planning.py says why
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
    (docs/api.md, "Replay pages").
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
        with planned_for_values():  # a list of seqs: planning.py says why
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
        chunk = fetch[chunk_start : chunk_start + 500]
        with planned_for_values():  # a list of seqs: planning.py says why
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
