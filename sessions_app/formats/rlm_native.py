"""rlm-code native session JSONL: what `SessionRecorder` writes (docs/formats.md, "Native session JSONL").

One record a line: `{"event_type", "timestamp", "step", "data", "run_id"?, "depth"?,
"parent_id"?, "duration_ms"?}`. A step is assembled from step_start/step_action/step_result and
closed by step_end, which carries the full StepState (variables with full values included).

Where we deliberately differ from rlm-code's `load_session` (docs/formats.md):
- tokens are counted once per step: step_result's `tokens_used`, or step_end's when the step had
  no step_result (rlm-code adds both). `llm_response` tokens_in/tokens_out stay in its payload:
  the recorder's step tokens already cover them, so counting them too would count twice again.
- step_end's own fields (action_type, action_code, output, error, duration_ms, ...) fill in what
  step_start/step_action/step_result did not bring, instead of being ignored;
- step_end's `variables` and `memory_notes` are kept, as a state change;
- every line that cannot be used is reported with its number and field.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import orjson

from ..canonical import (
    INT64_MAX,
    INT64_MIN,
    CanonicalEvent,
    CheckpointSpec,
    Kind,
    ParsedSession,
    Problems,
    SessionMeta,
    StateChange,
)
from . import Head, Source, parse_appended_sessions
from .fields import in_utc_range, json_kind
from .step_state import STEP_DEFAULTS

NAME = "rlm_native"

KINDS = {
    "session_start": Kind.SESSION_START,
    "session_end": Kind.SESSION_END,
    "step_start": Kind.STEP_START,
    "step_action": Kind.ACTION,
    "step_result": Kind.RESULT,
    "step_end": Kind.STEP_END,
    "state_snapshot": Kind.STATE,
    "memory_update": Kind.MEMORY_UPDATE,
    "variable_update": Kind.VARIABLE_UPDATE,
    "llm_request": Kind.LLM_CALL,
    "llm_response": Kind.LLM_RESPONSE,
    "child_spawn": Kind.CHILD_SPAWN,
    "child_result": Kind.CHILD_RESULT,
    "final_detected": Kind.FINAL,
    "checkpoint": Kind.CHECKPOINT,
    "error": Kind.ERROR,
}

_STEP_END_KEPT_ELSEWHERE = frozenset(STEP_DEFAULTS) | {"variables", "memory_notes"}
_TEXT_FIELDS = ("action_type", "action_code", "action_rationale", "output", "error")
_MISSING = object()


def sniff(head: Head) -> bool:
    for record in head.records[:5]:
        event_type = record.get("event_type")
        if isinstance(event_type, str) and event_type in KINDS and "iteration" not in record:
            # TrajectoryLogger files share some names (llm_request, error); only the native
            # recorder writes ISO text timestamps with a `step`.
            if event_type == "session_start" or ("step" in record and isinstance(record.get("timestamp"), str)):
                return True
    return False


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    """One ParsedSession per session_start that follows earlier events (append-mode files)."""
    return parse_with(Converter, source, problems, session_events=_session_events)


def _session_events(
    converter: Converter,
    pending: list[tuple[int, dict[str, Any], str]],
    records: Iterator[tuple[int, dict[str, Any], str]],
    problems: Problems,
) -> Iterator[CanonicalEvent]:
    # The import hot path: `convert_one` gives at most one event a record, without a list.
    convert = converter.convert_one
    number, record, raw = pending.pop()
    event = convert(record, raw, number, problems)
    if event is not None:
        yield event
    for number, record, raw in records:
        if converter.emitted and record.get("event_type") == "session_start":
            pending.append((number, record, raw))  # the next session of an appended file
            break
        event = convert(record, raw, number, problems)
        if event is not None:
            yield event
    converter.finish()


def _converted_session_events(
    converter: Converter,
    pending: list[tuple[int, dict[str, Any], str]],
    records: Iterator[tuple[int, dict[str, Any], str]],
    problems: Problems,
) -> Iterator[CanonicalEvent]:
    """`_session_events` for any converter: `convert` gives a list of events a record, and what
    the converter holds back comes out of `flush` once the session's records are exhausted."""
    line, record, raw = pending.pop()
    yield from converter.convert(record, raw, line, problems)
    for line, record, raw in records:
        if converter.starts_new_session(record):
            pending.append((line, record, raw))  # the next session of an appended file
            break
        yield from converter.convert(record, raw, line, problems)
    yield from converter.flush()
    converter.finish()


def parse_with(
    converter_class: type[Converter],
    source: Source,
    problems: Problems,
    *,
    session_events: Callable[..., Iterator[CanonicalEvent]] = _converted_session_events,
) -> Iterator[ParsedSession]:
    """`parse` for a format whose converter is Converter or a subclass (the legacy formats'):
    one ParsedSession per run the file appends."""
    return parse_appended_sessions(
        source,
        problems,
        new_converter=lambda stem: converter_class(fallback_id=stem),
        session_events=session_events,
    )


def legacy_kind(
    record: dict[str, Any], key: str, kinds: dict[str, str], line: int | None, problems: Problems
) -> tuple[str, str] | None:
    """A legacy record's type at `record[key]` and its canonical kind in `kinds`; an unknown
    type is reported and kept as a custom event, a record without one reported and skipped
    (None). (`Converter.convert_one` reads the native type inline, on the import hot path.)"""
    name = record.get(key)
    if type(name) is not str or not name:
        problems.add(line, key, f"missing {key}; line skipped")
        return None
    kind = kinds.get(name)
    if kind is None:
        problems.add(line, key, f"unknown {key} {name[:60]!r}; kept as a custom event")
        kind = Kind.CUSTOM
    return name, kind


def _complete(meta: SessionMeta, fallback_id: str) -> None:
    """What a session's metadata gets once its records are exhausted (either path)."""
    if not meta.run_id:
        meta.run_id = fallback_id
    if not meta.source_session_id:
        meta.source_session_id = meta.run_id
    meta.failed = not meta.completed


_fromisoformat = datetime.fromisoformat


def parse_timestamp(value: Any) -> datetime | None:
    """ISO 8601 text (rlm-code's `datetime.isoformat()`), or epoch seconds; naive means UTC."""
    return parse_timestamp_text(value)[0]


def parse_timestamp_text(value: Any) -> tuple[datetime | None, str | None]:
    """`parse_timestamp`, and for UTC or naive ISO text (rlm-code writes "...+00:00") the same
    instant as the UTC text a database stores (CanonicalEvent.timestamp_text), taken from the
    text itself: formatting an aware datetime again is one of the dearest steps of an import."""
    if (
        type(value) is str and len(value) == 32 and value[26:] == "+00:00"
        and value[4:20:3] == "--T::." and value[20:26] != "000000"
    ):  # fmt: skip
        # rlm-code's own shape, on every line, first and in fewer steps: the separators are
        # checked here, the digits by fromisoformat; the stored text drops "T" and the offset.
        try:
            return _fromisoformat(value), value[:10] + " " + value[11:26]
        except ValueError:
            return None, None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None, None
        tz = parsed.tzinfo
        if tz is UTC:
            if value.endswith("+00:00"):
                return parsed, _naive_utc_text(value[:-6], parsed)
            if value.endswith("Z"):
                return parsed, _naive_utc_text(value[:-1], parsed)
            return parsed, None
        if tz is not None:
            return (parsed, None) if in_utc_range(parsed) else (None, None)
        try:
            # Naive means UTC. Reading the text again with the offset costs a sixth of
            # `parsed.replace(tzinfo=UTC)`; a date alone would read "+00:00" as a time of day.
            aware = datetime.fromisoformat(value + "+00:00")
        except ValueError:
            aware = None
        if aware is None or aware.tzinfo is None:
            aware = parsed.replace(tzinfo=UTC)
        return aware, _naive_utc_text(value, parsed)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        try:
            return datetime.fromtimestamp(value, tz=UTC), None
        except (OverflowError, OSError, ValueError):
            return None, None
    return None, None


def _naive_utc_text(value: str, parsed: datetime) -> str:
    """ "2026-11-22T05:47:01.346935" (UTC, without its offset) -> "2026-11-22 05:47:01.346935",
    as Django writes it: the text itself when it has exactly that shape (checked, since ISO 8601
    allows others: the separators at 4, 7, 10, 13, 16 and 19 in one slice), else formatted."""
    size = len(value)
    if size == 26 and value[4:20:3] == "--T::." and value[20:] != "000000":
        return value[:10] + " " + value[11:]
    if size == 19 and value[4:17:3] == "--T::":
        return value[:10] + " " + value[11:]
    return parsed.replace(tzinfo=None).isoformat(" ")


# The 64-bit range compared as floats: a float against a big int takes CPython's slow path, on
# every event.
_FLOAT_LIMIT = float(INT64_MAX + 1)


def number(value: Any, field: str, line: int | None, problems: Problems) -> float | int | None:
    """A numeric field's value, or None (reported) when it is null, non-numeric, not finite or
    beyond 64 bits."""
    kind = type(value)
    if kind is int:
        if INT64_MIN <= value <= INT64_MAX:
            return value
        problems.add(line, field, f"expected a number within 64 bits, got {value}")
        return None
    if kind is float:
        if -_FLOAT_LIMIT < value < _FLOAT_LIMIT:  # false for NaN and both infinities too
            return value
        problems.add(line, field, f"expected a finite number within 64 bits, got {value}")
        return None
    if value is None:
        problems.add(line, field, "expected a number, got null")
        return None
    if kind is bool:
        return int(value)
    if kind is str:
        try:
            parsed = float(value)
        except ValueError:
            parsed = None
        if parsed is not None and math.isfinite(parsed):
            problems.add(line, field, f"expected a number, got the string {value[:40]!r} (read as {parsed})")
            return parsed
        problems.add(line, field, f"expected a number, got the string {value[:40]!r}")
        return None
    problems.add(line, field, f"expected a number, got {json_kind(value)}")
    return None


def mapping(value: Any, field: str, line: int | None, problems: Problems) -> dict[str, Any]:
    if type(value) is dict:
        return value
    if value is None:
        problems.add(line, field, "expected an object, got null")
    else:
        problems.add(line, field, f"expected an object, got {json_kind(value)}")
    return {}


def mapping_at(container: dict[str, Any], key: str, field: str, line: int | None, problems: Problems) -> dict[str, Any]:
    """The object at `container[key]`: {} when absent, and when not an object (reported)."""
    value = container.get(key, _MISSING)
    if type(value) is dict:
        return value
    if value is _MISSING:
        return {}
    return mapping(value, field, line, problems)


def text(value: Any) -> Any:
    return "" if value is None else value


PREVIEW_CHARS = 200  # the recorder's `str(value)[:200]`
_loads = orjson.loads


def _preview_value(preview: Any, type_name: Any) -> Any:
    """The value a variable_update's preview stands for. The recorder writes `str(value)[:200]`,
    which for a value of a literal type (int, bool, None, dict, list, ...) is Python's repr
    (`{'a': None}`, `True`): read back with ast.literal_eval (no code runs), the state holds the
    value and shows as JSON. A string variable, a preview the recorder cut, or anything that is
    not a JSON value (objects, sets, bytes, dicts keyed by numbers, nan) stays the preview text."""
    if type(preview) is not str or type_name == "str" or len(preview) >= PREVIEW_CHARS:
        return preview
    # Most previews are reprs of numbers and of dicts and lists of plain values, which read as
    # JSON once the quotes and constants are spelled as JSON spells them. Such a reading is kept
    # only when the value's repr gives the preview back exactly: repr round-trips these types,
    # so it is then what literal_eval returns, at a tenth of literal_eval's cost (it compiles).
    try:
        value = _loads(preview.replace("'", '"').replace("True", "true").replace("False", "false")
                       .replace("None", "null"))  # fmt: skip
    except orjson.JSONDecodeError:
        pass
    else:
        if repr(value) == preview:
            return value
    try:
        value = ast.literal_eval(preview)
        orjson.dumps(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, orjson.JSONEncodeError):
        return preview
    return value


class Converter:
    """Turns native records into canonical events, one record at a time.

    Resumable: `state()` is JSON-serialisable and `Converter(state)` continues a session where
    the last batch stopped (live ingest appends batches of records to one session).
    """

    def __init__(self, state: dict[str, Any] | None = None, *, fallback_id: str = "") -> None:
        saved = state or {}
        self.fallback_id = saved.get("fallback_id", fallback_id)
        self.step: dict[str, Any] = saved.get("step", {})
        self.step_tokens_counted: bool = saved.get("step_tokens_counted", False)
        self.llm_open: list[list[str]] = saved.get("llm_open", [])  # FIFO of [pair_id, model]
        self.llm_counter: int = saved.get("llm_counter", 0)
        self.cumulative: float = saved.get("cumulative", 0.0)
        self.emitted: int = saved.get("emitted", 0)
        self.steps: int = saved.get("steps", 0)
        # The variables and memory as the writer holds them, to store step ends as changes.
        self.variables: dict[str, Any] = saved.get("variables", {})
        self.memory: list[Any] | None = saved.get("memory")
        meta = saved.get("meta", {})
        self.meta = SessionMeta(
            source_session_id=meta.get("source_session_id", ""),
            run_id=meta.get("run_id", ""),
            task=meta.get("task", ""),
            environment=meta.get("environment", ""),
            model=meta.get("model", ""),
            started_at=parse_timestamp(meta.get("started_at")),
            ended_at=parse_timestamp(meta.get("ended_at")),
            completed=meta.get("completed", False),
            failed=meta.get("failed"),
            final_answer=meta.get("final_answer", ""),
            total_reward=meta.get("total_reward"),
        )

    def state(self) -> dict[str, Any]:
        meta = self.meta
        return {
            "fallback_id": self.fallback_id,
            "step": self.step,
            "step_tokens_counted": self.step_tokens_counted,
            "llm_open": self.llm_open,
            "llm_counter": self.llm_counter,
            "cumulative": self.cumulative,
            "emitted": self.emitted,
            "steps": self.steps,
            "variables": self.variables,
            "memory": self.memory,
            "meta": {
                "source_session_id": meta.source_session_id,
                "run_id": meta.run_id,
                "task": meta.task,
                "environment": meta.environment,
                "model": meta.model,
                "started_at": meta.started_at.isoformat() if meta.started_at else None,
                "ended_at": meta.ended_at.isoformat() if meta.ended_at else None,
                "completed": meta.completed,
                "failed": meta.failed,
                "final_answer": meta.final_answer,
                "total_reward": meta.total_reward,
            },
        }

    def starts_new_session(self, record: dict[str, Any]) -> bool:
        """A session_start after events begins the next session of an append-mode file."""
        return self.emitted > 0 and record.get("event_type") == "session_start"

    def flush(self) -> list[CanonicalEvent]:
        """The events held back until the records of the session are exhausted: none here."""
        return []

    def finish(self) -> None:
        """Complete the metadata once the records of the session are exhausted."""
        _complete(self.meta, self.fallback_id)

    def convert(self, record: dict[str, Any], raw: str, line: int | None, problems: Problems) -> list[CanonicalEvent]:
        event = self.convert_one(record, raw, line, problems)
        return [] if event is None else [event]

    def convert_one(
        self, record: dict[str, Any], raw: str, line: int | None, problems: Problems
    ) -> CanonicalEvent | None:
        """`convert` for formats that give at most one event a record (the import hot path)."""
        event_type = record.get("event_type")
        if type(event_type) is not str or not event_type:
            problems.add(line, "event_type", "missing event_type, or not a string; line skipped")
            return None
        kind = KINDS.get(event_type)
        if kind is None:
            problems.add(line, "event_type", f"unknown event_type {event_type[:60]!r}; kept as a custom event")
            kind = Kind.CUSTOM
        event, data, stamp = self.base_event(record, raw, line, problems, event_type, kind)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event, data, stamp, line, problems)
        self.emitted += 1
        return event

    def base_event(
        self,
        record: dict[str, Any],
        raw: str,
        line: int | None,
        problems: Problems,
        event_type: str,
        kind: str,
        step_key: str = "step",
    ) -> tuple[CanonicalEvent, dict[str, Any], Any]:
        """The event with the fields every record type shares; (event, data, raw timestamp)."""
        data = mapping_at(record, "data", "data", line, problems)

        stamp = record.get("timestamp")
        timestamp, timestamp_text = parse_timestamp_text(stamp)
        if timestamp is None and stamp is not None:
            problems.add(line, "timestamp", f"not a timestamp: {str(stamp)[:40]!r}")

        step = record.get(step_key)
        if step is None and step_key != "step":
            step_key = "step"
            step = record.get("step")
        if step is not None and (type(step) is not int or not INT64_MIN <= step <= INT64_MAX):
            value = number(step, step_key, line, problems)
            step = int(value) if value is not None else None

        run_id = record.get("run_id")
        meta = self.meta
        if run_id and not meta.run_id and type(run_id) is str:
            meta.run_id = run_id
            meta.source_session_id = meta.source_session_id or run_id

        duration = record.get("duration_ms", _MISSING)
        if duration is _MISSING:
            duration = None
        elif type(duration) is not float or duration - duration != 0.0:
            duration = number(duration, "duration_ms", line, problems)

        depth = record.get("depth", 0)
        if type(depth) is not int or not INT64_MIN <= depth <= INT64_MAX:
            depth = int(number(depth, "depth", line, problems) or 0)
        parent_id = record.get("parent_id") or ""

        if type(parent_id) is not str:
            parent_id = str(parent_id)
        # Positional (kind, source_type, raw, payload, timestamp, timestamp_text, line, step,
        # depth, agent_id, parent_id, child_id, tool, pair_id, duration_ms): half the cost of
        # keywords, once per line of every rlm-code file.
        event = CanonicalEvent(
            kind, event_type, raw, data, timestamp, timestamp_text, line, step, depth, "",
            parent_id, "", "", "", duration,
        )  # fmt: skip
        return event, data, stamp

    # --- one method per event type -------------------------------------------------------------

    def _session_start(self, event, data, stamp, line, problems) -> None:
        meta = self.meta
        meta.task = str(text(data.get("task", "")))
        meta.environment = str(text(data.get("environment", "")))
        meta.model = str(text(data.get("model", "")))
        if event.timestamp is not None and meta.started_at is None:
            meta.started_at = event.timestamp

    def _step_start(self, event, data, stamp, line, problems) -> None:
        step = event.step
        if step is None and "step" in data:
            value = number(data["step"], "data.step", line, problems)
            step = int(value) if value is not None else None
            event.step = step
        self.step = {"step": step if step is not None else 0, "timestamp": stamp if stamp is not None else ""}
        self.step_tokens_counted = False

    def _step_action(self, event, data, stamp, line, problems) -> None:
        action = mapping_at(data, "action", "data.action", line, problems)
        current = self.step
        current["action_type"] = text(action.get("action", ""))
        current["action_code"] = text(action.get("code", ""))
        current["action_rationale"] = text(data.get("rationale", ""))
        current["raw_action"] = action

    def _step_result(self, event, data, stamp, line, problems) -> None:
        observation = mapping_at(data, "observation", "data.observation", line, problems)
        current = self.step
        success = bool(data.get("success", False))
        current["success"] = success
        current["output"] = text(observation.get("output", observation.get("stdout", "")))
        current["error"] = text(observation.get("error", observation.get("stderr", "")))
        reward = _field_number(data, "reward", line, problems)
        current["reward"] = reward if reward is not None else 0.0
        cumulative = _field_number(data, "cumulative_reward", line, problems)
        if cumulative is None:
            cumulative = _running_sum(self.cumulative, current["reward"], line, problems)
        current["cumulative_reward"] = cumulative
        current["duration_ms"] = event.duration_ms or 0.0
        tokens = _field_number(data, "tokens_used", line, problems)
        tokens = int(tokens) if tokens is not None else 0
        current["tokens_used"] = tokens
        current["raw_observation"] = observation
        event.tokens = tokens
        event.cumulative_reward = cumulative
        event.failed = not success
        self.step_tokens_counted = True

    def _step_end(self, event, data, stamp, line, problems) -> None:
        self.close_step(event, data, stamp, line, problems)
        self.state_change_of(event, data, line, problems)
        # The step lives in step_state and the variables/memory in the state change; the payload
        # keeps only what neither holds (the original line stays whole in `raw`).
        # rlm-code's own step_end holds nothing else: the set difference (in C) usually ends it.
        extra = data.keys() - _STEP_END_KEPT_ELSEWHERE
        event.payload = {k: v for k, v in data.items() if k in extra} if extra else {}

    def close_step(self, event, data, stamp, line, problems) -> None:
        """Close the open step on `event`: the StepState merged from the step's earlier events,
        with `data` (a step_end's own fields, or the legacy action/observation shape) filling
        in what they did not bring."""
        state = self.step
        self.step = {}
        if "step" not in state:
            value = data.get("step", _MISSING)
            if value is _MISSING or value is None:
                value = event.step
            elif type(value) is not int:
                value = number(value, "data.step", line, problems)
            state["step"] = int(value) if value is not None else 0
            state["timestamp"] = data.get("timestamp") or (stamp if stamp is not None else "")
        action = data.get("action")
        observation = data.get("observation")
        fallback_action = action if type(action) is dict else {}
        fallback_observation = observation if type(observation) is dict else {}
        for name in _TEXT_FIELDS:
            if name not in state:
                value = data.get(name, _MISSING)
                if value is _MISSING:
                    value = _legacy_text(name, fallback_action, fallback_observation)
                state[name] = text(value)
        if "success" not in state:
            state["success"] = bool(data.get("success", False))
        if "reward" not in state:
            reward = _field_number(data, "reward", line, problems)
            state["reward"] = reward if reward is not None else 0.0
        if "cumulative_reward" not in state:
            cumulative = _field_number(data, "cumulative_reward", line, problems)
            state["cumulative_reward"] = (
                cumulative if cumulative is not None else _running_sum(self.cumulative, state["reward"], line, problems)
            )
        if "duration_ms" not in state:
            duration = _field_number(data, "duration_ms", line, problems)
            state["duration_ms"] = duration if duration is not None else (event.duration_ms or 0.0)
        if "tokens_used" not in state:
            tokens = _field_number(data, "tokens_used", line, problems)
            state["tokens_used"] = int(tokens) if tokens is not None else 0
        if "raw_action" not in state:
            raw_action = data.get("raw_action")
            state["raw_action"] = raw_action if type(raw_action) is dict else fallback_action
        if "raw_observation" not in state:
            raw_observation = data.get("raw_observation")
            state["raw_observation"] = raw_observation if type(raw_observation) is dict else fallback_observation
        if not self.step_tokens_counted:
            event.tokens = (event.tokens or 0) + state["tokens_used"]
        self.step_tokens_counted = False
        event.step_state = {name: state[name] for name in STEP_DEFAULTS}
        event.reward = state["reward"]
        event.cumulative_reward = state["cumulative_reward"]
        event.failed = not state["success"]
        self.cumulative = state["cumulative_reward"]
        self.steps += 1

    def state_change_of(self, event, data, line, problems) -> None:
        """A step end's `variables` (the whole variable state) and `memory_notes`.

        Stored as the change against the state just before the step end (what the writer holds
        after the earlier changes, previews included): the state at every event is the same as
        with the whole dict each time, without writing every variable again at every step. A
        variable that disappeared makes it a whole replacement.
        """
        variables = data.get("variables")
        notes = data.get("memory_notes")
        if variables is not None and type(variables) is not dict:
            variables = mapping(variables, "data.variables", line, problems) or None
        if notes is not None and type(notes) is not list:
            problems.add(line, "data.memory_notes", f"expected a list, got {json_kind(notes)}")
            notes = None
        changed = None
        replace = False
        if variables is not None:
            current = self.variables
            if not current.keys() <= variables.keys():
                changed, replace = variables, True
            else:
                # The type test keeps 1 -> True or 1 -> 1.0 a change (Python calls them equal).
                changed = {
                    name: value
                    for name, value in variables.items()
                    if type(old := current.get(name, _MISSING)) is not type(value) or old != value
                } or None
            self.variables = variables
        if notes is not None:
            if notes == self.memory:
                notes = None
            else:
                self.memory = notes
        if changed is not None or notes is not None or replace:
            event.state_change = StateChange(memory=notes, variables=changed, replace_variables=replace)

    def _memory_update(self, event, data, stamp, line, problems) -> None:
        notes = data.get("notes")
        if type(notes) is list:
            event.state_change = StateChange(memory=notes)
            self.memory = notes
        else:
            problems.add(line, "data.notes", f"expected a list, got {json_kind(notes)}")

    def _variable_update(self, event, data, stamp, line, problems) -> None:
        # The recorder writes only a 200-character preview; it stands for the value until the
        # next step_end brings the full variables.
        name = data.get("name")
        if type(name) is str and name:
            preview = _preview_value(data.get("preview", ""), data.get("type"))
            event.state_change = StateChange(variables={name: preview})
            self.variables = {**self.variables, name: preview}
        else:
            problems.add(line, "data.name", "variable_update without a variable name")

    def _llm_request(self, event, data, stamp, line, problems) -> None:
        self.llm_counter += 1
        pair_id = f"llm-{self.llm_counter}"
        model = data.get("model") or self.meta.model
        model = str(model)[:200] if model else ""
        event.pair_id = pair_id
        event.tool = model
        self.llm_open.append([pair_id, model])

    def _llm_response(self, event, data, stamp, line, problems) -> None:
        # The recorder gives responses no id: each answers the oldest open request.
        for name in ("tokens_in", "tokens_out"):
            if name in data:
                number(data[name], f"data.{name}", line, problems)
        if self.llm_open:
            pair_id, model = self.llm_open.pop(0)
            event.pair_id = pair_id
            event.tool = model

    def _child_spawn(self, event, data, stamp, line, problems) -> None:
        child_id = data.get("child_id")
        if child_id:
            event.child_id = event.pair_id = str(child_id)[:200]

    def _child_result(self, event, data, stamp, line, problems) -> None:
        child_id = data.get("child_id")
        if child_id:
            event.child_id = event.pair_id = str(child_id)[:200]
        if "success" in data:
            event.failed = not data.get("success")

    def _final(self, event, data, stamp, line, problems) -> None:
        self.meta.final_answer = str(text(data.get("answer", "")))
        self.meta.completed = bool(data.get("completed", True))

    def _checkpoint(self, event, data, stamp, line, problems) -> None:
        name = data.get("checkpoint_name") or f"checkpoint_{event.step or 0}"
        self.meta.checkpoints.append(
            CheckpointSpec(
                name=str(name),
                seq=self.emitted,
                step_pos=self.steps - 1 if self.steps else None,
                created_at=event.timestamp,
                created_by="rlm-code",
            )
        )

    def _error(self, event, data, stamp, line, problems) -> None:
        event.is_error = True

    def _session_end(self, event, data, stamp, line, problems) -> None:
        if "completed" in data:
            self.meta.completed = bool(data["completed"])
        self.end_session(event, data, data.get("final_response"), line, problems)

    def end_session(
        self,
        event: CanonicalEvent,
        fields: dict[str, Any],
        answer: Any,
        line: int | None,
        problems: Problems,
        *,
        prefix: str = "data.",
    ) -> None:
        """What the record ending a session (session_end, or a legacy format's own) states: the
        final answer when there is one, `fields`' total_reward (reported as `prefix` +
        "total_reward"), and the session's end at the event's time."""
        meta = self.meta
        if answer:
            meta.final_answer = str(answer)
        if "total_reward" in fields:
            total = number(fields["total_reward"], f"{prefix}total_reward", line, problems)
            if total is not None:
                meta.total_reward = float(total)
        if event.timestamp is not None:
            meta.ended_at = event.timestamp


def _field_number(data: dict[str, Any], name: str, line: int | None, problems: Problems) -> Any:
    value = data.get(name, _MISSING)
    if value is _MISSING:
        return None
    kind = type(value)
    if (kind is int and INT64_MIN <= value <= INT64_MAX) or (kind is float and -_FLOAT_LIMIT < value < _FLOAT_LIMIT):
        return value
    return number(value, f"data.{name}", line, problems)


def _running_sum(total: Any, value: Any, line: int | None, problems: Problems) -> Any:
    """The cumulative reward plus a step's reward. Integers past 64 bits (which no column
    holds) become a float, reported, instead of stopping the import at the write."""
    result = total + value
    if type(result) is int and not INT64_MIN <= result <= INT64_MAX:
        problems.add(
            line, "data.cumulative_reward", f"the cumulative reward {result} passes 64 bits; kept as {float(result)}"
        )
        return float(result)
    return result


def _legacy_text(name: str, action: dict[str, Any], observation: dict[str, Any]) -> Any:
    """What rlm-code reads from a step_end shaped like the legacy formats (action/observation)."""
    if name == "action_type":
        return action.get("action", "")
    if name == "action_code":
        return action.get("code", "")
    if name == "action_rationale":
        return action.get("reasoning", action.get("rationale", ""))
    if name == "output":
        return observation.get("output", observation.get("stdout", ""))
    return observation.get("error", observation.get("stderr", ""))


_HANDLERS = {
    Kind.SESSION_START: Converter._session_start,
    Kind.STEP_START: Converter._step_start,
    Kind.ACTION: Converter._step_action,
    Kind.RESULT: Converter._step_result,
    Kind.STEP_END: Converter._step_end,
    Kind.MEMORY_UPDATE: Converter._memory_update,
    Kind.VARIABLE_UPDATE: Converter._variable_update,
    Kind.LLM_CALL: Converter._llm_request,
    Kind.LLM_RESPONSE: Converter._llm_response,
    Kind.CHILD_SPAWN: Converter._child_spawn,
    Kind.CHILD_RESULT: Converter._child_result,
    Kind.FINAL: Converter._final,
    Kind.CHECKPOINT: Converter._checkpoint,
    Kind.ERROR: Converter._error,
    Kind.SESSION_END: Converter._session_end,
}
