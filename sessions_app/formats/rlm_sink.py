"""rlm-code LocalJSONLSink folders: `steps/<run_id>.jsonl` + `runs.jsonl` (FORMATS.md 1d).

Step lines are `{timestamp, run_id, step, action, reward, cumulative_reward, success}`; each
`runs.jsonl` line summarises one finished run `{timestamp, run_id, started_at, finished_at, task,
environment, params, completed, steps, step_count_observed, total_reward, run_path}`. rlm-code's
loader reads such step files as 0 steps; we make one session per run: its step lines become
steps (action type, reward, cumulative reward, success; the sink records nothing else), and its
runs.jsonl line ends the session with the run's task, environment and totals.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..canonical import CanonicalEvent, Kind, ParsedSession, Problems, SessionMeta
from . import Head, Source, read_records
from .rlm_native import number, parse_timestamp, text
from .rlm_snapshot import _PrefixedProblems
from .step_state import STEP_DEFAULTS

NAME = "rlm_sink"


def sniff(head: Head) -> bool:
    path = head.source.path
    return head.source.is_dir and ((path / "steps").is_dir() or (path / "runs.jsonl").is_file())


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    base = source.path
    runs: dict[str, tuple[int, dict[str, Any], str]] = {}
    runs_file = base / "runs.jsonl"
    if runs_file.is_file():
        run_problems = _PrefixedProblems(problems, "runs.jsonl")
        for line, record, raw in read_records(source.within(runs_file, "runs.jsonl"), run_problems):
            run_id = record.get("run_id")
            if not run_id or type(run_id) is not str:
                run_problems.add(line, "run_id", "run summary without a run_id; line skipped")
                continue
            runs[run_id] = (line, record, raw)  # a run logged twice: its last summary wins
    step_files: dict[str, Path] = {}
    steps_dir = base / "steps"
    if steps_dir.is_dir():
        for path in sorted(steps_dir.iterdir()):
            if path.is_file() and not path.name.startswith(".") and path.name.lower().endswith(".jsonl"):
                step_files[path.name[: -len(".jsonl")]] = path
    for run_id in sorted(set(step_files) | set(runs)):
        meta = SessionMeta(source_session_id=run_id, run_id=run_id, completed=False)
        if run_id in runs:
            line, record, _ = runs[run_id]
            _apply_summary(meta, record, line, _PrefixedProblems(problems, "runs.jsonl"))
        yield ParsedSession(
            meta=meta, events=_run_events(run_id, step_files.get(run_id), runs.get(run_id), meta, problems, source)
        )


def _run_events(
    run_id: str,
    path: Path | None,
    summary: tuple[int, dict[str, Any], str] | None,
    meta: SessionMeta,
    problems: Problems,
    folder: Source,
) -> Iterator[CanonicalEvent]:
    cumulative = 0.0
    if path is not None:
        rel = f"steps/{path.name}"
        step_problems = _PrefixedProblems(problems, rel)
        for line, record, raw in read_records(folder.within(path, rel), step_problems):
            event, cumulative = _step_event(record, raw, line, cumulative, step_problems)
            if meta.started_at is None and event.timestamp is not None:
                meta.started_at = event.timestamp
            yield event
    if summary is not None:
        line, record, raw = summary
        yield CanonicalEvent(
            kind=Kind.SESSION_END,
            source_type="run_summary",
            raw=raw,
            payload=record,
            timestamp=parse_timestamp(record.get("finished_at")) or parse_timestamp(record.get("timestamp")),
            line=line,
        )
    meta.failed = not meta.completed


def _step_event(record, raw, line, cumulative, problems) -> tuple[CanonicalEvent, float]:
    state = dict(STEP_DEFAULTS)
    state["raw_action"] = {}
    state["raw_observation"] = {}
    step = record.get("step")
    if step is not None:
        value = number(step, "step", line, problems)
        state["step"] = int(value) if value is not None else 0
    state["timestamp"] = text(record.get("timestamp", ""))
    action = record.get("action")
    state["action_type"] = text(action) if not isinstance(action, dict) else text(action.get("action", ""))
    reward = record.get("reward")
    if reward is not None or "reward" in record:
        value = number(reward, "reward", line, problems)
        state["reward"] = value if value is not None else 0.0
    stated = record.get("cumulative_reward")
    value = number(stated, "cumulative_reward", line, problems) if "cumulative_reward" in record else None
    cumulative = value if value is not None else cumulative + state["reward"]
    state["cumulative_reward"] = cumulative
    state["success"] = bool(record.get("success"))
    event = CanonicalEvent(
        kind=Kind.STEP_END,
        source_type="sink_step",
        raw=raw,
        payload=record,
        timestamp=parse_timestamp(record.get("timestamp")),
        line=line,
        step=state["step"],
        reward=state["reward"],
        cumulative_reward=cumulative,
        failed=not state["success"],
        step_state=state,
    )
    return event, cumulative


def _apply_summary(meta: SessionMeta, record: dict[str, Any], line: int, problems: Problems) -> None:
    meta.task = str(text(record.get("task", "")))
    meta.environment = str(text(record.get("environment", "")))
    params = record.get("params")
    if isinstance(params, dict) and params.get("model"):
        meta.model = str(params["model"])
    meta.completed = bool(record.get("completed"))
    if "total_reward" in record:
        total = number(record["total_reward"], "total_reward", line, problems)
        meta.total_reward = float(total) if total is not None else None
    meta.started_at = parse_timestamp(record.get("started_at"))
    meta.ended_at = parse_timestamp(record.get("finished_at")) or parse_timestamp(record.get("timestamp"))
    meta.metadata = {
        "run_summary": {k: record.get(k) for k in ("steps", "step_count_observed", "run_path", "params") if k in record}
    }
