"""rlm-code legacy trajectory JSONL, in both dialects (docs/formats.md, "Legacy trajectory JSONL").

The documented dialect: `{"event_type", "iteration", "timestamp", "run_id", "data"}` with
run_start/run_end, iteration_start, iteration_code/iteration_reasoning (data.action),
iteration_output (data.observation) and iteration_end closing each step.

What rlm-code's own `TrajectoryLogger` writes differs: float epoch timestamps, `data.code`,
`data.output`, `data.reasoning`, top-level `tokens_in`/`tokens_out`, and no iteration_end at
all, nor, written by its `log_iteration` alone (its own docs' usage), an iteration_start.
rlm-code's loader then finds 0 steps; we open a step at its iteration_start or at the first
part of an iteration (reasoning, code, output) of another number, and close it at the next
iteration_start, at run_end or at the end of the session, on the step's last step event (its
output, else its code, else its start), so those files load with all their steps.

Other names (sub_llm_request/response, context_load, context_update, memory_compact) become
canonical events without step content. Steps are assembled by the native format's converter
(rlm_native.Converter), so both formats share one set of rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..canonical import CanonicalEvent, Kind, ParsedSession, Problems
from . import Head, Source
from .rlm_native import Converter, legacy_kind, mapping, number, parse_with, text

NAME = "rlm_trajectory"

KINDS = {
    "run_start": Kind.SESSION_START,
    "run_end": Kind.SESSION_END,
    "iteration_start": Kind.STEP_START,
    "iteration_reasoning": Kind.ACTION,
    "iteration_code": Kind.ACTION,
    "iteration_output": Kind.RESULT,
    "iteration_end": Kind.STEP_END,
    "llm_request": Kind.LLM_CALL,
    "llm_response": Kind.LLM_RESPONSE,
    "sub_llm_request": Kind.LLM_CALL,
    "sub_llm_response": Kind.LLM_RESPONSE,
    "child_spawn": Kind.CHILD_SPAWN,
    "child_result": Kind.CHILD_RESULT,
    "final_detected": Kind.FINAL,
    "context_load": Kind.CONTEXT,
    "context_update": Kind.CONTEXT,
    "memory_compact": Kind.NOTE,
    "error": Kind.ERROR,
}
_LEGACY_ONLY = {"run_start", "run_end", "iteration_start", "iteration_code", "iteration_output",
                "iteration_reasoning", "iteration_end"}  # fmt: skip
_STEP_CONTENT = (Kind.RESULT, Kind.ACTION, Kind.STEP_START)
_ITERATION_PARTS = frozenset({"iteration_reasoning", "iteration_code", "iteration_output"})


def sniff(head: Head) -> bool:
    for record in head.records[:20]:
        event_type = record.get("event_type")
        if isinstance(event_type, str) and event_type in _LEGACY_ONLY:
            return True
    return False


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    """One ParsedSession per run_start that follows earlier events (the logger appends)."""
    return parse_with(TrajectoryConverter, source, problems)


class TrajectoryConverter(Converter):
    """The native converter with the legacy names, both dialects, and steps held until they
    close (the logger never writes iteration_end, so a step's end is only known later)."""

    def __init__(self, state: dict[str, Any] | None = None, *, fallback_id: str = "") -> None:
        super().__init__(state, fallback_id=fallback_id)
        self.held: list[CanonicalEvent] = []
        self.step_open = False
        self.sub_llm_open: list[list[str]] = []

    def starts_new_session(self, record: dict[str, Any]) -> bool:
        return self.emitted > 0 and record.get("event_type") == "run_start"

    def convert(self, record: dict[str, Any], raw: str, line: int | None, problems: Problems) -> list[CanonicalEvent]:
        found = legacy_kind(record, "event_type", KINDS, line, problems)
        if found is None:
            return []
        event_type, kind = found
        event, data, stamp = self.base_event(record, raw, line, problems, event_type, kind, step_key="iteration")
        if type(stamp) is float or type(stamp) is int:
            # The logger's epoch seconds: steps show ISO text like every other source.
            stamp = event.timestamp.isoformat() if event.timestamp is not None else stamp
        released: list[CanonicalEvent] = []
        if event_type in ("iteration_start", "run_end") and self.step_open:
            released = self._close_held(line, problems)
        elif event_type in _ITERATION_PARTS and self._starts_a_step(event):
            # The logger's `log_iteration`, its own docs' way, writes an iteration's reasoning,
            # code and output with no iteration_start: the step opens at its first part, or at
            # a part of another iteration (rlm-code's TrajectoryViewer groups them by number).
            if self.step_open:
                released = self._close_held(line, problems)
            self._step_start(event, {}, stamp, line, problems)
            self.step_open = True
        handler = _HANDLERS.get(event_type)
        if handler is not None:
            handler(self, event, data, stamp, line, problems, record)
        self.emitted += 1
        if event_type == "iteration_start":
            self.step_open = True
        if self.step_open:
            self.held.append(event)
            if event_type == "iteration_end":
                self.step_open = False
                released.extend(self.held)
                self.held = []
            return released
        released.append(event)
        return released

    def _starts_a_step(self, event: CanonicalEvent) -> bool:
        if not self.step_open:
            return True
        return event.step is not None and event.step != self.step.get("step")

    def flush(self) -> list[CanonicalEvent]:
        """Close a step still open at the end of the session and release what is held."""
        if self.step_open:
            return self._close_held(None, Problems())
        released, self.held = self.held, []
        return released

    def _close_held(self, line: int | None, problems: Problems) -> list[CanonicalEvent]:
        target = None
        for kind in _STEP_CONTENT:
            target = next((e for e in reversed(self.held) if e.kind == kind), None)
            if target is not None:
                break
        if target is not None:
            self.close_step(target, {}, None, target.line, problems)
        released, self.held = self.held, []
        self.step_open = False
        return released

    # --- handlers (same signature as the native ones, plus the record) --------------------------

    def _run_start(self, event, data, stamp, line, problems, record) -> None:
        meta = self.meta
        meta.task = str(text(data.get("task", "")))
        environment = data.get("environment")
        if not environment and type(data.get("metadata")) is dict:
            environment = data["metadata"].get("environment") or data["metadata"].get("env")
        meta.environment = str(text(environment or ""))
        meta.model = str(text(data.get("model") or ""))
        if event.timestamp is not None and meta.started_at is None:
            meta.started_at = event.timestamp

    def _iteration_start(self, event, data, stamp, line, problems, record) -> None:
        self._step_start(event, data, stamp, line, problems)

    def _iteration_action(self, event, data, stamp, line, problems, record) -> None:
        current = self.step
        action = data.get("action")
        if action is not None:  # the documented dialect
            if type(action) is not dict:
                action = mapping(action, "data.action", line, problems)
            current["action_type"] = text(action.get("action", ""))
            current["action_code"] = text(action.get("code", ""))
            current["raw_action"] = action
            current["action_rationale"] = text(data.get("rationale", data.get("reasoning", "")))
            return
        if "code" in data:  # the logger's iteration_code
            current["action_code"] = text(data.get("code"))
            current.setdefault("action_type", "")
            current["raw_action"] = {k: v for k, v in data.items() if k in ("code", "reasoning")}
        rationale = data.get("rationale", data.get("reasoning"))
        if rationale is not None:
            current["action_rationale"] = text(rationale)

    def _iteration_output(self, event, data, stamp, line, problems, record) -> None:
        if "observation" in data:  # the documented dialect reads like a native step_result
            self._step_result(event, data, stamp, line, problems)
            return
        # The logger's iteration_output: {"output"} with tokens and duration at the top level.
        current = self.step
        error = text(data.get("error", data.get("stderr", "")))
        current["output"] = text(data.get("output", data.get("stdout", "")))
        current["error"] = error
        success = data.get("success")
        current["success"] = bool(success) if success is not None else not error
        reward = _number_at(data, "reward", "data.reward", line, problems)
        current["reward"] = reward if reward is not None else 0.0
        cumulative = _number_at(data, "cumulative_reward", "data.cumulative_reward", line, problems)
        current["cumulative_reward"] = cumulative if cumulative is not None else self.cumulative + current["reward"]
        current["duration_ms"] = event.duration_ms or 0.0
        tokens = _number_at(data, "tokens_used", "data.tokens_used", line, problems)
        if tokens is None:
            tokens_in = _number_at(record, "tokens_in", "tokens_in", line, problems)
            tokens_out = _number_at(record, "tokens_out", "tokens_out", line, problems)
            if tokens_in is not None or tokens_out is not None:
                tokens = (tokens_in or 0) + (tokens_out or 0)
        current["tokens_used"] = int(tokens) if tokens is not None else 0
        current["raw_observation"] = data
        event.tokens = current["tokens_used"]
        event.cumulative_reward = current["cumulative_reward"]
        event.failed = not current["success"]
        self.step_tokens_counted = True

    def _iteration_end(self, event, data, stamp, line, problems, record) -> None:
        self.close_step(event, data, stamp, line, problems)
        self.state_change_of(event, data, line, problems)

    def _llm(self, event, data, stamp, line, problems, record) -> None:
        # Responses carry no id: each answers the oldest open request of its own family
        # (sub-LLM calls made from the agent's code are paired apart from the agent's own).
        for name in ("tokens_in", "tokens_out"):
            if record.get(name) is not None:
                number(record[name], name, line, problems)
        sub = record.get("event_type", "").startswith("sub_")
        queue = self.sub_llm_open if sub else self.llm_open
        if event.kind == Kind.LLM_CALL:
            self.llm_counter += 1
            pair_id = f"{'sub-llm' if sub else 'llm'}-{self.llm_counter}"
            model = data.get("model") or self.meta.model
            model = str(model)[:200] if model else ""
            event.pair_id, event.tool = pair_id, model
            queue.append([pair_id, model])
        elif queue:
            event.pair_id, event.tool = queue.pop(0)

    def _child_spawn_(self, event, data, stamp, line, problems, record) -> None:
        self._child_spawn(event, data, stamp, line, problems)

    def _child_result_(self, event, data, stamp, line, problems, record) -> None:
        self._child_result(event, data, stamp, line, problems)

    def _final_(self, event, data, stamp, line, problems, record) -> None:
        self._final(event, data, stamp, line, problems)

    def _error_(self, event, data, stamp, line, problems, record) -> None:
        self._error(event, data, stamp, line, problems)

    def _run_end(self, event, data, stamp, line, problems, record) -> None:
        if "completed" in data:
            self.meta.completed = bool(data["completed"])
        elif "success" in data:  # the logger's run_end
            self.meta.completed = bool(data["success"])
        self.end_session(event, data, data.get("final_response") or data.get("answer"), line, problems)


def _number_at(container: dict[str, Any], key: str, field: str, line, problems) -> Any:
    if key not in container:
        return None
    value = container[key]
    if type(value) is int or (type(value) is float and value - value == 0.0):
        return value
    return number(value, field, line, problems)


_HANDLERS = {
    "run_start": TrajectoryConverter._run_start,
    "run_end": TrajectoryConverter._run_end,
    "iteration_start": TrajectoryConverter._iteration_start,
    "iteration_reasoning": TrajectoryConverter._iteration_action,
    "iteration_code": TrajectoryConverter._iteration_action,
    "iteration_output": TrajectoryConverter._iteration_output,
    "iteration_end": TrajectoryConverter._iteration_end,
    "llm_request": TrajectoryConverter._llm,
    "llm_response": TrajectoryConverter._llm,
    "sub_llm_request": TrajectoryConverter._llm,
    "sub_llm_response": TrajectoryConverter._llm,
    "child_spawn": TrajectoryConverter._child_spawn_,
    "child_result": TrajectoryConverter._child_result_,
    "final_detected": TrajectoryConverter._final_,
    "error": TrajectoryConverter._error_,
}
