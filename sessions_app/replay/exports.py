"""Exports, as streaming generators of bytes (a chunk of events read at a time, never a whole
session in memory):

- `export_native_jsonl`: rlm-code's native session JSONL, synthesised for any source format,
  which rlm-code's own `load_session` loads with the summary our `get_summary` gives;
- `export_snapshot`: a `SessionSnapshot.to_dict()` JSON document (rlm-code `SessionReplayer
  .from_file` loads it);
- `export_original`: the source exactly as received (the imported file byte for byte).

Deliberate choices in the native export (docs/api.md, "Exports"):
- no `step_result` lines: rlm-code adds a step's tokens once for step_result and again for
  step_end, so each step is written as step_start, step_action and a step_end carrying the
  observation, reward, success and tokens; rlm-code then counts tokens once, as we do. The price:
  rlm-code reads a step's duration only from step_result, so it shows 0 ms for exported steps
  (the step_end line still carries the real `duration_ms`).
- events rlm-code has no type for (tool calls, approvals, messages, costs ...) are left out; the
  `original` export keeps everything.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from django.db import connection
from django.utils import timezone

from ..access import NotVisible
from ..canonical import Kind
from ..formats import Source
from ..models import Event, RedactionRules, Session
from .rows import as_utc
from .state import iter_step_states, state_at
from .summary import get_summary

CHUNK = 2000
# Events of an unfinished step are held back so they can follow its step_start line; a step
# that runs longer than this is written as it comes instead (memory stays bounded).
STEP_BUFFER = 2000
_TABLE = Event._meta.db_table
_OPTIONS = orjson.OPT_NON_STR_KEYS


def _iso(value: datetime | None) -> str:
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


def event_chunks(session: Session, columns: str, count: int) -> Iterator[list[tuple]]:
    """Rows of the first `count` events in seq order, CHUNK at a time (keyset reads)."""
    next_seq = 0
    while next_seq < count:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {columns} FROM {_TABLE} WHERE session_id = %s AND seq >= %s AND seq < %s "
                f"ORDER BY seq LIMIT {CHUNK}",
                [session.pk, next_seq, count],
            )
            rows = cursor.fetchall()
        if not rows:
            # Rows missing at the end (edited out of the database: verification names them), or
            # the session deleted while it was read: then the download must not end as if whole
            # (nor a bundle be signed for events it lacks).
            if not Session.objects.filter(pk=session.pk).exists():
                raise NotVisible(f"session {session.pk} was deleted while it was exported; the download is cut short")
            return
        yield rows
        next_seq = rows[-1][0] + 1


# --------------------------------------------------------------------------------------------
# Original records


def kept_file(session: Session) -> Path | None:
    """The kept file the session was imported from, if it is still on disk."""
    job = session.import_job
    if job is None or not job.stored_path:
        return None
    path = Path(job.stored_path)
    return path if path.is_file() else None


def original_file(session: Session) -> Path | None:
    """The kept file, while it may be given: not once a session it also held was deleted
    (originals.note_orphans), whose records it holds; it is deleted after the grace period."""
    job = session.import_job
    if job is not None and job.orphaned_at is not None:
        return None
    return kept_file(session)


def original_missing(session: Session) -> str:
    """Why the session has no original records to give ("" when it has them): neither a kept
    file nor the records stored on its events."""
    if original_file(session) is not None or _first_raw(session) is not None:
        return ""
    job = session.import_job
    if job is not None and job.orphaned_at is not None:
        return ("the file it was imported from also held a session deleted since, so it is given no more "
                "(its events stay: export them as rlm-code JSONL)")  # fmt: skip
    rules = RedactionRules.redactor_for(session.project_id)
    if rules is not None and not rules.keep_originals:
        return "no original records are kept for it: the project's redaction rules keep none"
    if job is not None and job.original_deleted_at is not None:
        return "the file it was imported from was deleted (a redaction or the clean-up)"
    if job is not None and job.stored_path:
        return "the file it was imported from is missing from the server's data folder"
    return "no original records are kept for it (it came from a bundle that carried none)"


def _first_raw(session: Session) -> str | None:
    # A session's events keep their records or none do (an import that kept its file, or rules
    # that keep no originals, store none): the first one tells.
    return Event.objects.filter(session=session, seq=0).values_list("raw", flat=True).first()


def original_name(session: Session) -> str | None:
    """The name the original had when it was received (a .gz ending dropped: it is sent undone)."""
    if original_file(session) is None:
        return None
    name = session.import_job.original_name
    return name[:-3] if name.lower().endswith(".gz") else name


def export_original(*, session: Session) -> Iterator[bytes]:
    """The source exactly as received: the imported file byte for byte (gzip undone; all of it
    when it held several sessions). A session with no kept file (a live one, or a folder format)
    gives its stored records instead, one a line, in seq order."""
    path = original_file(session)
    if path is not None:
        with Source(path=path).open() as stream:
            while chunk := stream.read(1 << 20):
                yield chunk
        return
    yield from _stored_records(session)


def _stored_records(session: Session) -> Iterator[bytes]:
    # A record a format turned into several events is stored on each of them; it is written
    # once (consecutive events from the same source line).
    last_line: int | None = None
    for rows in event_chunks(session, "seq, line, raw", session.event_count):
        out = []
        for _seq, line, raw in rows:
            if raw is None:
                # Not kept: the project's redaction rules keep no originals (docs/redaction.md),
                # or the import kept the file, since gone.
                continue
            if line is not None and line == last_line:
                continue
            last_line = line
            out.append(raw.encode("utf-8", "surrogatepass") + b"\n")
        yield b"".join(out)


# --------------------------------------------------------------------------------------------
# rlm-code native JSONL


def _native_run_id(session: Session) -> str:
    return session.run_id or session.source_session_id or f"replay-{session.pk}"


class _NativeWriter:
    """Builds rlm-code native lines while the events stream in seq order."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.run_id = _native_run_id(session)
        self.variables: dict[str, Any] = {}
        self.memory: list[Any] = []
        self.step_number = 0
        self.pending: list[bytes] = []  # lines of the step in progress

    def line(
        self,
        event_type: str,
        timestamp: str,
        data: dict[str, Any],
        *,
        step: int | None = None,
        depth: int = 0,
        parent_id: str = "",
        duration_ms: float | None = None,
    ) -> bytes:
        record: dict[str, Any] = {
            "event_type": event_type,
            "timestamp": timestamp,
            "step": self.step_number if step is None else step,
            "data": data,
            "run_id": self.run_id,
        }
        if depth:
            record["depth"] = depth
        if parent_id:
            record["parent_id"] = parent_id
        if duration_ms is not None:
            record["duration_ms"] = duration_ms
        return orjson.dumps(record, option=_OPTIONS) + b"\n"

    def state_lines(
        self, change: dict[str, Any], timestamp: str, *, memory_only: bool = False, step: int | None = None
    ) -> list[bytes]:
        """memory_update / variable_update lines for what a state change actually changed, at
        `step` (the event's own step number; else the last step's)."""
        out = []
        if change.get("memory") is not None:
            notes = list(change["memory"])
            if notes != self.memory:
                self.memory = notes
                out.append(self.line("memory_update", timestamp, {"notes": notes}, step=step))
        variables = change.get("variables")
        if isinstance(variables, dict):
            new = dict(variables) if change.get("replace") else {**self.variables, **variables}
            if not memory_only:
                for name, value in new.items():
                    if name not in self.variables or self.variables[name] != value:
                        out.append(
                            self.line(
                                "variable_update",
                                timestamp,
                                {
                                    "name": name,
                                    "type": type(value).__name__,
                                    "preview": str(value)[:200],
                                },
                                step=step,
                            )
                        )
            self.variables = new
        return out

    def flush_pending(self) -> list[bytes]:
        out, self.pending = self.pending, []
        return out


def _action(step: dict[str, Any]) -> dict[str, Any]:
    """The step_action `action` rlm-code reads action_type/action_code/raw_action from."""
    raw = step.get("raw_action") or {}
    if raw.get("action", "") == step["action_type"] and raw.get("code", "") == step["action_code"]:
        return raw
    return {**raw, "action": step["action_type"], "code": step["action_code"]}


def _observation(step: dict[str, Any]) -> dict[str, Any]:
    """The step_end `observation` rlm-code reads output/error/raw_observation from."""
    raw = step.get("raw_observation") or {}
    output = raw.get("output", raw.get("stdout", ""))
    error = raw.get("error", raw.get("stderr", ""))
    if output == step["output"] and error == step["error"]:
        return raw
    return {**raw, "output": step["output"], "error": step["error"]}


def _text(payload: dict[str, Any], *names: str) -> str:
    for name in names:
        value = payload.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _llm_request_data(payload: dict[str, Any], model: str) -> dict[str, Any]:
    if "prompt_preview" in payload:
        return payload
    prompt = _text(payload, "prompt", "text", "content")
    if not prompt and payload.get("messages") is not None:
        prompt = orjson.dumps(payload["messages"], option=_OPTIONS).decode()
    return {"prompt_preview": prompt[:500], "prompt_length": len(prompt), "model": model}


def _llm_response_data(payload: dict[str, Any]) -> dict[str, Any]:
    if "response_preview" in payload:
        return payload
    response = _text(payload, "response", "completion", "text", "content")
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    return {
        "response_preview": response[:500],
        "response_length": len(response),
        "tokens_in": usage.get("input", usage.get("prompt_tokens", 0)) or 0,
        "tokens_out": usage.get("output", usage.get("completion_tokens", 0)) or 0,
    }


def _times(session: Session) -> tuple[datetime, datetime]:
    """Start and end stamps whose difference is exactly our duration_seconds (rlm-code
    computes the duration from the session_start and session_end lines)."""
    start = session.started_at
    if start is None:
        first = (
            Event.objects.filter(session=session, ts__isnull=False).order_by("seq").values_list("ts", flat=True).first()
        )
        start = first or session.created_at
    start = as_utc(start)
    if session.started_at is not None and session.ended_at is not None:
        end = as_utc(session.ended_at)
    else:
        try:
            end = start + timedelta(seconds=session.duration_seconds)
        except OverflowError:  # recorded times up to year 9999 (a broken or hostile clock)
            end = datetime.max.replace(tzinfo=UTC)
    return start, end


_NATIVE_PASSTHROUGH = {
    Kind.CHILD_SPAWN: "child_spawn",
    Kind.CHILD_RESULT: "child_result",
    Kind.FINAL: "final_detected",
    Kind.CHECKPOINT: "checkpoint",
    Kind.ERROR: "error",
}


def export_native_jsonl(*, session: Session) -> Iterator[bytes]:
    """rlm-code native session JSONL for any session (see the module docstring)."""
    writer = _NativeWriter(session)
    start, end = _times(session)
    yield writer.line(
        "session_start",
        _iso(start),
        {
            "task": session.task,
            "environment": session.environment,
            "model": session.model,
        },
        step=0,
    )
    columns = (
        "seq, kind, source_type, ts, step, depth, parent_id, child_id, tool, duration_ms, "
        "is_error, payload, step_state, state_change"
    )
    steps = 0
    for rows in event_chunks(session, columns, session.event_count):
        out: list[bytes] = []
        for (_seq, kind, _source_type, ts, step, depth, parent_id, child_id, tool, duration_ms,
             _is_error, payload_text, step_text, change_text) in rows:  # fmt: skip
            stamp = _iso(as_utc(ts)) or _iso(start)
            change = orjson.loads(change_text) if change_text else None
            if step_text is not None:
                # A step closes here: its start, the events it held, its action, its end.
                state = orjson.loads(step_text)
                number = state.get("step", step if step is not None else steps)
                writer.step_number = number
                state_lines = writer.state_lines(change, stamp, memory_only=True) if change else []
                full = {name: state.get(name, default) for name, default in _STEP_FIELDS}
                full["raw_action"] = state.get("raw_action") or {}
                full["raw_observation"] = state.get("raw_observation") or {}
                step_start_ts = full["timestamp"] or stamp
                out.append(writer.line("step_start", step_start_ts, {"step": number}, step=number))
                out.extend(writer.flush_pending())
                out.append(
                    writer.line(
                        "step_action",
                        stamp,
                        {
                            "action": _action(full),
                            "rationale": full["action_rationale"],
                        },
                        step=number,
                    )
                )
                out.extend(state_lines)
                end_data = {
                    **{name: full[name] for name, _ in _STEP_FIELDS},
                    "memory_notes": writer.memory,
                    "variables": writer.variables,
                    "raw_action": full["raw_action"],
                    "raw_observation": full["raw_observation"],
                    "observation": _observation(full),
                }
                out.append(writer.line("step_end", stamp, end_data, step=number))
                steps += 1
                continue

            # An event held in a step says that step's number, as it was recorded; the last
            # closed step's (writer.step_number) only when it carries none.
            lines: list[bytes] = []
            if change:
                lines.extend(writer.state_lines(change, stamp, step=step))
            payload = orjson.loads(payload_text) if payload_text else {}
            if not isinstance(payload, dict):
                payload = {"value": payload}
            if kind == Kind.LLM_CALL:
                lines.append(
                    writer.line(
                        "llm_request",
                        stamp,
                        _llm_request_data(payload, tool),
                        step=step,
                        depth=depth,
                        parent_id=parent_id,
                    )
                )
            elif kind == Kind.LLM_RESPONSE:
                lines.append(
                    writer.line(
                        "llm_response",
                        stamp,
                        _llm_response_data(payload),
                        step=step,
                        depth=depth,
                        parent_id=parent_id,
                        duration_ms=duration_ms,
                    )
                )
            elif kind in _NATIVE_PASSTHROUGH:
                lines.append(
                    writer.line(
                        _NATIVE_PASSTHROUGH[kind],
                        stamp,
                        _passthrough_data(kind, payload, child_id, session),
                        step=step,
                        depth=depth,
                        parent_id=parent_id,
                    )
                )
            writer.pending.extend(lines)
            if len(writer.pending) > STEP_BUFFER:
                out.extend(writer.flush_pending())
        if out:
            yield b"".join(out)
    tail = writer.flush_pending()
    end_data: dict[str, Any] = {
        "completed": session.completed,
        "total_steps": session.step_count,
        "total_reward": session.reward,
        "total_tokens": session.tokens,
    }
    if session.final_answer:
        end_data["final_response"] = session.final_answer
    tail.append(writer.line("session_end", _iso(end), end_data))
    yield b"".join(tail)


_STEP_FIELDS: tuple[tuple[str, Any], ...] = (
    ("step", 0), ("timestamp", ""), ("action_type", ""), ("action_code", ""),
    ("action_rationale", ""), ("success", False), ("output", ""), ("error", ""), ("reward", 0.0),
    ("cumulative_reward", 0.0), ("duration_ms", 0.0), ("tokens_used", 0),
)  # fmt: skip


def _passthrough_data(kind: str, payload: dict[str, Any], child_id: str, session: Session) -> dict[str, Any]:
    if kind == Kind.CHILD_SPAWN:
        return {
            "child_id": payload.get("child_id", child_id),
            "task": str(payload.get("task", ""))[:200],
            "depth": payload.get("depth", 1),
        }
    if kind == Kind.CHILD_RESULT:
        return {
            "child_id": payload.get("child_id", child_id),
            "success": bool(payload.get("success", True)),
            "result_preview": str(payload.get("result_preview", payload.get("result", "")))[:200],
        }
    if kind == Kind.FINAL:
        return {"answer": payload.get("answer", session.final_answer), "completed": payload.get("completed", True)}
    if kind == Kind.CHECKPOINT:
        return {
            "checkpoint_name": payload.get("checkpoint_name", payload.get("name", "")),
            "step": payload.get("step", 0),
        }
    return {
        "error": _text(payload, "error", "message") or orjson.dumps(payload, option=_OPTIONS).decode(),
        "recoverable": payload.get("recoverable", True),
    }


# --------------------------------------------------------------------------------------------
# Snapshot JSON


def export_snapshot(*, session: Session) -> Iterator[bytes]:
    """A `SessionSnapshot.to_dict()` document: the steps stream a chunk at a time."""
    summary = get_summary(session=session)
    steps = session.step_count
    head = {
        "snapshot_id": hashlib.md5(f"{summary['session_id']}:{steps}".encode()).hexdigest()[:12],
        "session_id": summary["session_id"],
        "run_id": summary["run_id"],
        "created_at": _iso(session.ended_at) or timezone.now().isoformat(),
        "step": steps,
        "total_steps": steps,
        "task": session.task,
        "environment": session.environment,
        "model": session.model,
        "completed": session.completed,
        "final_answer": session.final_answer,
        "total_reward": session.reward,
        "total_tokens": session.tokens,
        "duration_seconds": session.duration_seconds,
    }
    opening = orjson.dumps(head, option=_OPTIONS)
    yield opening[:-1] + b',"steps":['
    batch: list[bytes] = []
    first = True
    for _pos, _seq, step in iter_step_states(session=session):
        batch.append(orjson.dumps(step, option=_OPTIONS))
        if len(batch) >= 500:
            yield (b"" if first else b",") + b",".join(batch)
            first, batch = False, []
    if batch:
        yield (b"" if first else b",") + b",".join(batch)
    final = (
        state_at(session=session, seq=session.event_count - 1)
        if session.event_count
        else {
            "variables": {},
            "memory_notes": [],
        }
    )
    metadata = {
        **(session.metadata or {}),
        "replay_session_id": session.pk,
        "source_format": session.source_format,
    }
    closing = {"memory_notes": final["memory_notes"], "variables": final["variables"], "metadata": metadata}
    yield b"]," + orjson.dumps(closing, option=_OPTIONS)[1:]


# --------------------------------------------------------------------------------------------
# Downloads: what the API's export and the player's export page stream


EXPORT_FORMATS = ("jsonl", "snapshot", "original")
_DOWNLOADS = {
    "jsonl": (export_native_jsonl, "application/x-ndjson", "jsonl"),
    "snapshot": (export_snapshot, "application/json", "json"),
    "original": (export_original, "application/octet-stream", "original.jsonl"),  # or its own name
}


def _safe_filename(name: str, limit: int) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:limit]


class NothingToExport(LookupError):
    """An export the session has nothing for (no original records kept): a 404 naming why, not
    an empty file."""


def export_download(*, session: Session, format: str) -> tuple[Iterator[bytes], str, str]:
    """One export of the session (`format`: one of EXPORT_FORMATS) as its byte stream, content
    type and download file name. The stream's first chunk is made here, in the caller's view:
    what fails in making it is answered by the error handlers as any view's error is, not sent
    as a bare 500 by the server once the streaming response has begun."""
    if format == "original" and (missing := original_missing(session)):
        raise NothingToExport(f"format=original: {missing}")
    generate, content_type, extension = _DOWNLOADS[format]
    stem = _safe_filename(session.source_session_id or f"session-{session.pk}", 100)
    filename = (format == "original" and original_name(session)) or f"{stem}.{extension}"
    stream = generate(session=session)
    first = next(stream, b"")
    return itertools.chain((first,), stream), content_type, _safe_filename(filename, 200)
