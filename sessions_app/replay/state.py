"""Point-in-time state: the variables and memory at any event, and rlm-code StepStates."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson
from django.db import connection

from ..models import KEYFRAME_EVERY, Session, Snapshot
from .rows import EVENT_TABLE, STEP_FIELDS, _check_window, _fetch

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
    at or before it (part 1) and the changes to apply on top (part 2).

    Ingest writes a keyframe at the first event at least KEYFRAME_EVERY after the previous one
    once the state has changed (ingest/rows.py, EventRows.add), so when the latest keyframe at or
    before the target is K, any change after K lies before K + KEYFRAME_EVERY. Reading the
    changes over that window only is what keeps the cost flat even where the state never changes.

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


def _state_at(session: Session, seq: int) -> _State:
    sql, params = _state_union(session.pk, "CAST(%s AS BIGINT)", [seq])
    return _state_from(_fetch(sql + " ORDER BY part, seq", params))


def state_at(*, session: Session, seq: int) -> dict[str, Any]:
    """Variables and memory notes as they were just after event `seq` (1 query)."""
    state = _state_at(session, seq)
    return {"variables": state.variables, "memory_notes": state.memory}


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
    # No ORDER BY (the model's (session, seq) ordering would make SQLite walk the whole session
    # in seq order instead of probing the step_pos index). Raw SQL: the ORM took ~0.5 ms to
    # compile this, on every player step.
    found = _fetch(
        f"SELECT seq FROM {EVENT_TABLE} WHERE session_id = %s AND step_pos = %s LIMIT 1", [session.pk, index]
    )
    return found[0][0] if found else None


def step_state_at(*, session: Session, index: int) -> dict[str, Any] | None:
    """rlm-code's StepState at position `index` (as `goto_step`), with the variables and memory
    notes as they were when that step closed; None outside the step list. 1 query."""
    found = step_at(session=session, index=index)
    return None if found is None else found[1]


def step_at(*, session: Session, index: int) -> tuple[int, dict[str, Any]] | None:
    """`step_seq` and `step_state_at` of one step in their one query (the player asks both on
    every frame outside a step's closing event)."""
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
    return rows[0][1], _step_state(rows[0][2], state.variables, state.memory)


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
    steps = [step for _pos, _seq, step in iter_step_states(session=session, offset=offset, limit=limit, chunk=limit)]
    return {"total": session.step_count, "steps": steps}
