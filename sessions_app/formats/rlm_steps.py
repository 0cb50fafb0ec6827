"""rlm-code runner's legacy step JSONL (docs/formats.md, "Legacy step JSONL").

`{"type": "step", run_id, environment, framework, task, timestamp, step, action {action, code,
reasoning?}, observation {...}, reward, usage {prompt_tokens, completion_tokens, total_calls},
depth, parent_run_id}` lines, one per step, closed by `{"type": "final", completed, steps,
total_reward, final_response, usage}`; pure-RLM runs start with a `{"type": "context"}` line.

Each step line is a whole step: success is `observation.success` when present, else "no error
and no stderr"; tokens are prompt + completion; the cumulative reward is the running sum. Unlike
rlm-code we keep the task and environment every step line carries (its loader only reads them
from a session_start, which these files never have).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..canonical import Kind, ParsedSession, Problems
from . import Head, Source
from .rlm_native import Converter, legacy_kind, mapping_at, number, parse_with, text

NAME = "rlm_steps"

KINDS = {"step": Kind.STEP_END, "final": Kind.SESSION_END, "context": Kind.CONTEXT}


def sniff(head: Head) -> bool:
    for record in head.records[:5]:
        kind = record.get("type")
        if kind == "step" and ("action" in record or "observation" in record):
            return True
        if kind == "final" and ("total_reward" in record or "completed" in record):
            return True
        if kind == "context" and "event_type" not in record:
            return True
    return False


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    """One session per file, or one per `final` line when a file holds several runs."""
    return parse_with(StepsConverter, source, problems)


class StepsConverter(Converter):
    def __init__(self, state: dict[str, Any] | None = None, *, fallback_id: str = "") -> None:
        super().__init__(state, fallback_id=fallback_id)
        self.ended = False

    def starts_new_session(self, record: dict[str, Any]) -> bool:
        # A line after a run's `final` begins the next run appended to the file.
        return self.ended and record.get("type") in ("step", "context")

    def convert(self, record, raw, line, problems):
        found = legacy_kind(record, "type", KINDS, line, problems)
        if found is None:
            return []
        kind_name, kind = found
        # The whole record is the event's data in this format.
        event, _, stamp = self.base_event({**record, "data": {}}, raw, line, problems, kind_name, kind)
        event.payload = record
        if kind == Kind.STEP_END:
            self._step(event, record, stamp, line, problems)
        elif kind == Kind.SESSION_END:
            self._final_line(event, record, line, problems)
        self.emitted += 1
        return [event]

    def _step(self, event, record, stamp, line, problems) -> None:
        meta = self.meta
        for name in ("task", "environment"):
            if not getattr(meta, name) and record.get(name):
                setattr(meta, name, str(record[name]))
        if meta.started_at is None and event.timestamp is not None:
            meta.started_at = event.timestamp
        parent = record.get("parent_run_id")
        if parent:
            event.parent_id = str(parent)[:200]
        action = mapping_at(record, "action", "action", line, problems)
        observation = mapping_at(record, "observation", "observation", line, problems)
        success = observation.get("success")
        if success is None:
            success = not bool(observation.get("error") or observation.get("stderr"))
        usage = mapping_at(record, "usage", "usage", line, problems)
        tokens = 0
        for name in ("prompt_tokens", "completion_tokens"):
            if name in usage:
                value = number(usage[name], f"usage.{name}", line, problems)
                tokens += int(value) if value is not None else 0
        reward = 0.0
        if "reward" in record:
            value = number(record["reward"], "reward", line, problems)
            reward = value if value is not None else 0.0
        step = event.step
        if step is None and "step" in record and record["step"] is not None:
            step = 0
        self.step = {}
        self.step_tokens_counted = False
        step_data = {
            "step": step if step is not None else 0,
            "timestamp": stamp if stamp is not None else "",
            "action": action,
            "observation": observation,
            "action_rationale": text(action.get("reasoning", action.get("rationale", ""))),
            "reward": reward,
            "success": bool(success),
            "tokens_used": tokens,
        }
        self.close_step(event, step_data, stamp, line, problems)

    def _final_line(self, event, record, line, problems) -> None:
        self.ended = True
        if "completed" in record:
            self.meta.completed = bool(record["completed"])
        self.end_session(event, record, record.get("final_response"), line, problems, prefix="")
