"""rlm-code snapshot JSON (`SessionSnapshot.to_dict()`) and SessionStore folders (FORMATS.md 1d).

A snapshot file is one JSON object: the session's fields, then `steps` (StepState dicts with the
variables and memory notes at each step), then the final `memory_notes`, `variables` and
`metadata` (a member may also come before or after the steps). It is streamed with ijson
(`json_documents`): member by member and step by step, so memory holds one step at a time
however long the session. A syntax error ends the snapshot there: the steps before it import.

Each step becomes one step_end event whose raw record is the step written again by orjson; its
variables and memory notes become the event's state change. A final `state` event carries the
snapshot's top-level variables/memory when they differ from the last step's.

A SessionStore folder (`snapshots/<session_id>_<snapshot_id>.json`,
`checkpoints/<session_id>_<name>.json`) gives one session per session id, from its snapshot with
the most steps (a checkpoint when there is no snapshot); every checkpoint of that session becomes
a named checkpoint at its step.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from ..canonical import CanonicalEvent, CheckpointSpec, Kind, ParsedSession, Problems, SessionMeta, StateChange
from . import Head, Source, cannot_store
from .fields import json_kind
from .json_documents import JsonDocument, top_level_keys
from .rlm_native import mapping, number, parse_timestamp, text
from .step_state import STEP_DEFAULTS

NAME = "rlm_snapshot"

_STEPS = "steps"
_TAIL = ("memory_notes", "variables")
_HEADER_KEYS = ("snapshot_id", "session_id", "total_steps")


def sniff(head: Head) -> bool:
    if head.source.is_dir:
        return is_store(head.source.path)
    text_ = head.text.lstrip()
    if not text_.startswith(b"{"):
        return False
    # An event's own key at the top of the first record: a JSON-lines session. Only at the top:
    # Replay's snapshot of an AgentLens session, one line, holds "eventType" in its steps.
    if not _EVENT_KEYS.isdisjoint(_first_keys(head)):
        return False
    return all(f'"{key}"'.encode() in text_ for key in _HEADER_KEYS)


_EVENT_KEYS = frozenset({"event_type", "eventType"})


def _first_keys(head: Head) -> set[str]:
    """The top-level keys of the first record: as the head read its first line (with Python's
    reader too, as a JSON-lines reader reads a line holding a bare NaN), else as far as the
    head's bytes reach."""
    if head.first_line_read:
        return set(head.records[0])
    return top_level_keys(head.text.lstrip())


def is_store(path: Path) -> bool:
    return (path / "snapshots").is_dir() or (path / "checkpoints").is_dir()


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    if source.is_dir:
        yield from _parse_store(source, problems)
        return
    yield from _parse_snapshot(source, problems)


# --- one snapshot file -------------------------------------------------------------------------


def read_header(source: Source, problems: Problems, *, whole: bool = False) -> dict[str, Any]:
    """The members before `steps` (what the store needs to group snapshots by session); with
    `whole`, also those after it (a checkpoint's name is in its trailing metadata)."""
    header: dict[str, Any] = {}
    walk = JsonDocument(source, problems).members(_STEPS)
    with closing(walk):
        for _, key, value, in_steps in walk:
            if in_steps:
                if whole:
                    continue
                break
            header[key] = value
    return header


class SnapshotSteps:
    """Turns one snapshot's members into the session's metadata and step events."""

    def __init__(self, meta: SessionMeta, problems: Problems) -> None:
        self.meta = meta
        self.problems = problems
        self.header: dict[str, Any] = {}
        self.cumulative = 0.0
        self.last_variables: Any = None
        self.last_memory: Any = None
        self.tail: dict[str, tuple[Any, int]] = {}  # the final memory_notes, variables, metadata
        self.steps = 0
        self.duration: tuple[float, int] | None = None  # duration_seconds, checked, and its line

    def apply_header(self, key: str, value: Any, line: int) -> None:
        meta, problems = self.meta, self.problems
        self.header[key] = value
        if key == "session_id" and value:
            meta.source_session_id = str(value)
        elif key == "run_id" and value:
            meta.run_id = str(value)
        elif key in ("task", "environment", "model", "final_answer"):
            setattr(meta, key, str(text(value)))
        elif key == "completed":
            meta.completed = bool(value)
        elif key == "total_reward":
            total = number(value, "total_reward", line, problems)
            meta.total_reward = float(total) if total is not None else None
        elif key in ("total_tokens", "step", "total_steps"):
            number(value, key, line, problems)
        elif key == "duration_seconds":
            duration = number(value, key, line, problems)
            self.duration = (duration, line) if duration is not None else None
        elif key in ("memory_notes", "variables", "metadata"):
            self.tail[key] = (value, line)
        elif key == _STEPS:  # an array arrives element by element, never as a member
            kind = json_kind(value)
            problems.add(line, key, f"expected a list of StepState objects, got {kind}: no steps read")
        elif key == "created_at":
            meta.ended_at = parse_timestamp(value)
            if meta.ended_at is None and value is not None:
                problems.add(line, key, f"not a timestamp: {str(value)[:40]!r}")
        if key in ("created_at", "duration_seconds") and meta.ended_at is not None and self.duration:
            # A snapshot states when it was taken and how long the run had been going.
            self._set_start(meta.ended_at, *self.duration)

    def _set_start(self, ended_at: datetime, duration: float, line: int) -> None:
        if duration < 0:
            self.problems.add(line, "duration_seconds", f"negative duration {duration}: start time left unset")
            return
        try:
            self.meta.started_at = ended_at - timedelta(seconds=duration)
        except OverflowError:
            # timedelta stops at 999,999,999 days and datetime at year 1.
            self.problems.add(
                line, "duration_seconds",
                f"{duration} seconds before created_at is before year 1: start time left unset",
            )  # fmt: skip

    def step_event(self, line: int, value: Any) -> CanonicalEvent | None:
        problems = self.problems
        if type(value) is not dict:
            problems.add(line, "steps", f"expected a StepState object, got {json_kind(value)}")
            return None
        state: dict[str, Any] = {}
        for name, default in STEP_DEFAULTS.items():
            got = value.get(name, default)
            if name in ("reward", "cumulative_reward", "duration_ms", "tokens_used", "step"):
                if got is not default:
                    got = number(got, f"steps[{self.steps}].{name}", line, problems)
                    if got is None:
                        got = default
                if name in ("tokens_used", "step"):
                    got = int(got)
            elif name in ("raw_action", "raw_observation") and type(got) is not dict:
                got = mapping(got, f"steps[{self.steps}].{name}", line, problems)
            elif name in ("action_type", "action_code", "action_rationale", "output", "error"):
                got = text(got)
            state[name] = got
        state["success"] = bool(state["success"])
        try:
            raw = orjson.dumps(value)
        except orjson.JSONEncodeError as error:
            problems.add(line, "steps", cannot_store(error))
            return None
        variables = value.get("variables")
        memory = value.get("memory_notes")
        if variables is not None and type(variables) is not dict:
            variables = mapping(variables, f"steps[{self.steps}].variables", line, problems) or None
        if memory is not None and type(memory) is not list:
            problems.add(line, f"steps[{self.steps}].memory_notes", "expected a list")
            memory = None
        self.last_variables, self.last_memory = variables, memory
        self.steps += 1
        self.cumulative = state["cumulative_reward"]
        event = CanonicalEvent(
            kind=Kind.STEP_END,
            source_type="snapshot_step",
            raw=raw.decode(),
            payload={
                k: v for k, v in value.items() if k not in STEP_DEFAULTS and k not in ("variables", "memory_notes")
            },
            timestamp=parse_timestamp(state["timestamp"]),
            line=line,
            step=state["step"],
            tokens=state["tokens_used"],
            reward=state["reward"],
            cumulative_reward=state["cumulative_reward"],
            failed=not state["success"],
            step_state=state,
            duration_ms=state["duration_ms"],
        )
        if variables is not None or memory is not None:
            event.state_change = StateChange(
                memory=memory, variables=variables, replace_variables=variables is not None
            )
        return event

    def final_state_event(self) -> CanonicalEvent | None:
        """The snapshot's own variables/memory, when they differ from its last step's."""
        values = {key: self.tail[key][0] for key in _TAIL if key in self.tail}
        variables = values.get("variables")
        memory = values.get("memory_notes")
        if type(variables) is not dict:
            variables = None
        if type(memory) is not list:
            memory = None
        if (variables is None or variables == self.last_variables) and (memory is None or memory == self.last_memory):
            return None
        kept = [key for key in _TAIL if key in self.tail]
        try:
            raw = orjson.dumps({key: self.tail[key][0] for key in kept})
        except orjson.JSONEncodeError as error:
            self.problems.add(self.tail[kept[0]][1], kept[0], cannot_store(error))
            return None
        return CanonicalEvent(
            kind=Kind.STATE,
            source_type="snapshot_state",
            raw=raw.decode(),
            payload={},
            timestamp=self.meta.ended_at,
            line=min(self.tail[key][1] for key in kept),
            state_change=StateChange(memory=memory, variables=variables, replace_variables=variables is not None),
        )


def _parse_snapshot(
    source: Source,
    problems: Problems,
    *,
    checkpoints: list[CheckpointSpec] | None = None,
) -> Iterator[ParsedSession]:
    meta = SessionMeta(completed=False)
    reader = SnapshotSteps(meta, problems)
    document = JsonDocument(source, problems)
    walk = document.members(_STEPS)
    first_step: list[tuple[int, Any]] = []
    first_line = 1
    # The members before the steps (all of them, in to_dict's order) fill the metadata first.
    for line, key, value, in_steps in walk:
        if in_steps:
            first_step.append((line, value))
            break
        if not reader.header:
            first_line = line
        reader.apply_header(key, value, line)
    if not reader.header and not first_step:
        walk.close()
        return
    if not meta.run_id:
        meta.run_id = meta.source_session_id
    if checkpoints:
        meta.checkpoints.extend(checkpoints)

    def events() -> Iterator[CanonicalEvent]:
        with closing(walk):
            for line, value in first_step:
                event = reader.step_event(line, value)
                if event is not None:
                    yield event
            for line, key, value, in_steps in walk:
                if not in_steps:
                    reader.apply_header(key, value, line)
                    continue
                event = reader.step_event(line, value)
                if event is not None:
                    yield event
        if not first_step and _STEPS not in reader.header and "session_id" not in reader.header:
            # Not a snapshot at all (a JSON lines file given this format, say): said on its first
            # line, before what follows it is called text after the object.
            members = ", ".join(list(reader.header)[:6])
            problems.add(
                first_line, _STEPS, f"not a SessionSnapshot: no steps array nor session_id (its members: {members})"
            )
        after = document.after
        if after is not None:
            problems.add(
                after.line,
                "line",
                "text after the end of the snapshot object (ignored): a snapshot file holds one object",
            )
        final = reader.final_state_event()
        if final is not None:
            yield final
        metadata = reader.tail.get("metadata", (None, 0))[0]
        if isinstance(metadata, dict) and metadata:
            meta.metadata = {"snapshot": metadata}
        meta.failed = not meta.completed

    yield ParsedSession(meta=meta, events=events())


# --- SessionStore folders ----------------------------------------------------------------------


class _PrefixedProblems(Problems):
    """Problems of one file of a folder: the field names the file."""

    def __init__(self, target: Problems, prefix: str) -> None:
        self.target = target
        self.prefix = prefix

    def add(self, line: int | None, field: str, message: str) -> None:
        self.target.add(line, f"{self.prefix}:{field}", message)

    def __len__(self) -> int:
        return len(self.target)


def _parse_store(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    base = source.path
    by_session: dict[str, dict[str, list[tuple[Path, dict[str, Any]]]]] = {}
    for folder in ("snapshots", "checkpoints"):
        directory = base / folder
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            if not path.is_file() or path.name.startswith("."):
                continue
            rel = f"{folder}/{path.name}"
            file_problems = _PrefixedProblems(problems, rel)
            try:
                header = read_header(source.within(path, rel), file_problems, whole=folder == "checkpoints")
            except OSError as exc:
                problems.add(None, rel, f"cannot read: {exc}")
                continue
            session_id = header.get("session_id")
            if not session_id:
                file_problems.add(None, "session_id", "not a SessionSnapshot (no session_id); file skipped")
                continue
            by_session.setdefault(str(session_id), {}).setdefault(folder, []).append((path, header))

    for session_id, files in sorted(by_session.items()):
        snapshots = files.get("snapshots", [])
        checkpoints = files.get("checkpoints", [])
        base_file = max(snapshots or checkpoints, key=_completeness)
        specs = [_checkpoint_spec(path, session_id, header) for path, header in checkpoints]
        folder = "snapshots" if snapshots else "checkpoints"
        rel = f"{folder}/{base_file[0].name}"
        yield from _parse_snapshot(
            source.within(base_file[0], rel),
            _PrefixedProblems(problems, rel),
            checkpoints=specs,
        )


def _completeness(item: tuple[Path, dict[str, Any]]) -> tuple[float, str]:
    header = item[1]
    steps = header.get("total_steps")
    return (steps if type(steps) in (int, float) else -1, str(header.get("created_at") or ""))


def _checkpoint_spec(path: Path, session_id: str, header: dict[str, Any]) -> CheckpointSpec:
    metadata = header.get("metadata") if isinstance(header.get("metadata"), dict) else {}
    name = metadata.get("checkpoint_name") if metadata else None
    if not name:
        stem = path.stem
        name = stem[len(session_id) + 1 :] if stem.startswith(session_id + "_") else stem
    steps = header.get("total_steps")
    step_pos = int(steps) - 1 if type(steps) is int and steps > 0 else None
    return CheckpointSpec(
        name=str(name),
        step_pos=step_pos,
        created_at=parse_timestamp(header.get("created_at")),
        created_by="rlm-code",
        note=f"SessionStore checkpoint {path.name}",
    )
