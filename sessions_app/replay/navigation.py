"""Navigation: windows of events, next error, turns, search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from django.db import connection
from django.db.models import QuerySet

from ..canonical import Kind
from ..models import Session
from .context import _step_index
from .pages import resolve_kinds
from .rows import EVENT_TABLE, MAX_PAGE, ReplayParameterError, Row, _fetch, _rows, _union_rows, event_dict

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
    window = window_rows(session=session, seq=seq, kinds=kinds, before=before, after=after)
    return window_dict(window, session=session, include_payload=include_payload)


@dataclass
class Window:
    """The rows of `events_around`'s window, as read (the player hands them to `context_at` too)."""

    seq: int
    rows: list[Row]
    first: bool
    last: bool


def window_rows(
    *, session: Session, seq: int, kinds: list[str] | None = None, before: int = 25, after: int = 25
) -> Window:
    """`events_around`'s window as rows: one range read, or one read of a few arms by kind."""
    if before < 0 or after < 0 or before + after > MAX_PAGE:
        raise ReplayParameterError(f"before and after must be 0 or more and add up to at most {MAX_PAGE}")
    selected = resolve_kinds(kinds)
    n = session.event_count
    seq = max(0, min(seq, n - 1)) if n else 0
    if n == 0:
        return Window(seq=seq, rows=[], first=True, last=True)
    if selected is None:
        start, stop = max(0, seq - before), min(n - 1, seq + after)
        rows = _rows("seq >= %s AND seq <= %s", [session.pk, start, stop])
        return Window(seq=seq, rows=rows, first=start == 0, last=stop == n - 1)
    arms = []
    for kind in selected:
        arms.append((f"kind = %s AND seq < %s ORDER BY seq DESC LIMIT {before + 1}", [session.pk, kind, seq]))
        arms.append((f"kind = %s AND seq >= %s ORDER BY seq LIMIT {after + 2}", [session.pk, kind, seq]))
    found = sorted((Row._make(r) for r in _union_rows(arms)), key=lambda r: r.seq)
    earlier = [r for r in found if r.seq < seq]
    here = [r for r in found if r.seq == seq]
    later = [r for r in found if r.seq > seq]
    rows = earlier[-before:] if before else []
    rows += here + later[:after]
    return Window(seq=seq, rows=rows, first=len(earlier) <= before, last=len(later) <= after)


def window_dict(window: Window, *, session: Session, include_payload: bool = True) -> dict[str, Any]:
    """The window in the API's shape (`events_around`)."""
    events = []
    for row in window.rows:
        event = event_dict(row)
        if not include_payload:
            event.pop("payload")
        event["stepIndex"] = _step_index(row, session.step_count)
        events.append(event)
    return {
        "seq": window.seq, "events": events, "first": window.first, "last": window.last,
        "totalEvents": session.event_count,
    }  # fmt: skip


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
        f"SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND kind = %s AND seq > %s ORDER BY seq LIMIT 1",
        [session.pk, Kind.USER_MESSAGE, seq],
    )
    return found[0][0] if found else None


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _needles(q: str) -> list[str]:
    """`q` as typed and, where JSON writes it otherwise, as written inside a JSON string: the
    fields searched are stored JSON text, where `say "stop"` reads `say \\"stop\\"` (a search
    for code with quotes or a Windows path found nothing)."""
    written = orjson.dumps(q).decode()[1:-1]
    return [q] if written == q else [q, written]


def _text_match(q: str) -> tuple[str, list[str]]:
    """The condition (and its parameters) of an event holding `q` in its payload, its original
    record or its step, case-insensitively, with `%`, `_` and `\\` in `q` taken literally: the
    player's search and the search across sessions both ask it, so they find the same events."""
    like = "ILIKE" if connection.vendor == "postgresql" else "LIKE"
    patterns = [_like_pattern(needle) for needle in _needles(q)]
    conditions = [f"{column} {like} %s ESCAPE '\\'" for column in ("payload", "raw", "step_state") for _ in patterns]
    return f"({' OR '.join(conditions)})", patterns * 3


def _hit_snippet(payload: str | None, step_state: str | None, raw: str | None, q: str) -> str:
    """The text around `q` in the first of the fields `_text_match` searched that holds it: an
    event found by its step alone (the original record not stored, as for a kept file) shows
    its step, not an empty line."""
    # A record whose sender flagged its content redacted (AgentLens's `redacted: true`, shown
    # "[REDACTED]") is not quoted: the hit says where, its snippet what is shown.
    quoted = (payload, step_state) if _flagged_redacted(payload) else (payload, raw, step_state)
    needles = _needles(q)
    for text in quoted:  # in `_text_match`'s order
        for needle in needles if text else ():
            if needle.lower() in text.lower():
                return _snippet(text, needle)
    return _snippet(payload or "", q)


def _flagged_redacted(payload: str | None) -> bool:
    if not payload or '"redacted":true' not in payload:  # the stored payload is orjson's text
        return False
    try:
        return orjson.loads(payload).get("redacted") is True
    except (orjson.JSONDecodeError, AttributeError):
        return False


def _steps_of_hits_found_by_their_step(session: Session, rows: list[Row], q: str) -> dict[int, str]:
    """The step (its stored JSON) of each hit whose payload and record do not hold `q`: it was
    found by its step, which a Row does not carry. One query, and none when every hit is found
    in its payload or record (nearly always)."""
    needles = [needle.lower() for needle in _needles(q)] if q else []
    seqs = [
        row.seq for row in rows
        if q and not any(text and any(n in text.lower() for n in needles) for text in (row.payload, row.raw))
    ]  # fmt: skip
    if not seqs:
        return {}
    marks = ", ".join("%s" for _ in seqs)
    found = _fetch(f"SELECT seq, step_state FROM {EVENT_TABLE} WHERE session_id = %s AND seq IN ({marks})",
                   [session.pk, *seqs])  # fmt: skip
    return {seq: step_state for seq, step_state in found}


def _snippet(text: str, needle: str, width: int = 60) -> str:
    at = text.lower().find(needle.lower())
    if at < 0:
        return text[: 2 * width]
    start = max(0, at - width)
    return (
        ("…" if start else "")
        + text[start : at + len(needle) + width]
        + ("…" if at + len(needle) + width < len(text) else "")
    )


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
        matches, pattern = _text_match(q)
        where.append(matches)
        params += pattern
    rows = _rows(" AND ".join(where), params, limit=limit + 1, raw=True)
    more = len(rows) > limit
    rows = rows[:limit]
    steps = _steps_of_hits_found_by_their_step(session, rows, q)
    results = []
    for row in rows:
        event = event_dict(row)
        event["stepIndex"] = _step_index(row, session.step_count)
        if q:
            event["snippet"] = _hit_snippet(row.payload, steps.get(row.seq), row.raw, q)
        results.append(event)
    return {
        "q": q,
        "kind": kind,
        "errors": errors,
        "results": results,
        "nextFromSeq": rows[-1].seq + 1 if more and rows else None,
    }


# Search across sessions


SEARCH_HITS = 50


def search_sessions(
    *, sessions: QuerySet[Session], q: str, after: tuple[int, int] | None = None, limit: int = SEARCH_HITS
) -> dict[str, Any]:
    """Events holding `q` (matched as `search` matches it in one session) in any of `sessions`
    (the caller's, access.sessions_visible_to, perhaps narrowed to one project): newest session
    first, each session's hits in seq order, at most `limit`, each with its session's `name`
    (its source's id; empty when it has none). `after` (session id, seq; `parse_search_cursor`) is the
    last hit of the page before; `next` is the cursor text of the page after, if any.

    One statement, on the (session, seq) index: no full-text index, so a rare text reads every
    event of the sessions it spans (docs/dashboard.md has what that costs on 100k events).
    """
    if not q:
        return {"q": q, "hits": [], "next": None}
    matches, params = _text_match(q)
    ids_sql, ids_params = sessions.order_by().values("pk").query.sql_with_params()
    where = [f"session_id IN ({ids_sql})", matches]
    params = [*ids_params, *params]
    if after is not None:
        where.append("(session_id < %s OR (session_id = %s AND seq > %s))")
        params += [after[0], after[0], after[1]]
    sql = (
        f"SELECT session_id, seq, kind, payload, step_state, raw FROM {EVENT_TABLE} WHERE {' AND '.join(where)} "
        f"ORDER BY session_id DESC, seq LIMIT {int(limit) + 1}"
    )
    rows = _fetch(sql, params)
    more = len(rows) > limit
    rows = rows[:limit]
    shown = {row[0] for row in rows}
    names = dict(sessions.filter(pk__in=shown).values_list("pk", "source_session_id")) if shown else {}
    hits = [{"session": session_id, "seq": seq, "kind": kind, "snippet": _hit_snippet(payload, step_state, raw, q),
             "name": names.get(session_id) or ""}
            for session_id, seq, kind, payload, step_state, raw in rows]  # fmt: skip
    return {"q": q, "hits": hits, "next": search_cursor(rows[-1][0], rows[-1][1]) if more and rows else None}


def search_cursor(session_id: int, seq: int) -> str:
    """The cursor of the page after the hit at (session, seq): `parse_search_cursor` reads it."""
    return f"{session_id}~{seq}"


def parse_search_cursor(text: str | None) -> tuple[int, int] | None:
    """The (session id, seq) a `search_sessions` cursor names; None for none, or for text that
    is no cursor (digits past 64 bits included: they name no row)."""
    session, _, seq = (text or "").partition("~")
    if session.isdecimal() and seq.isdecimal() and len(session) <= 18 and len(seq) <= 18:
        return int(session), int(seq)
    return None
