"""Builders for the write-side tests: canonical event records (JSON) and files of them."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

T0 = datetime(2026, 2, 8, 10, 30, tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def canonical_records(
    count: int,
    *,
    start: int = 0,
    t0: datetime = T0,
    gap_ms: float = 250.0,
    tag: str = "",
) -> Iterator[dict[str, Any]]:
    """A deterministic mix of LLM calls/responses, tool calls and closed steps."""
    for i in range(start, start + count):
        ts = iso(t0 + timedelta(milliseconds=gap_ms * i))
        phase = i % 4
        payload = {"i": i, "text": f"{tag}event {i} " + "x" * 40}
        if phase == 0:
            yield {"kind": "llm_call", "timestamp": ts, "payload": payload, "tool": "gpt-4o",
                   "pair_id": f"{tag}c{i}"}  # fmt: skip
        elif phase == 1:
            yield {"kind": "llm_response", "timestamp": ts, "payload": payload, "tool": "gpt-4o",
                   "pair_id": f"{tag}c{i - 1}", "tokens": 10 + i % 7, "cost_usd": 0.001}  # fmt: skip
        elif phase == 2:
            yield {"kind": "tool_call", "timestamp": ts, "payload": payload, "tool": "grep",
                   "pair_id": f"{tag}t{i}"}  # fmt: skip
        else:
            yield {"kind": "step_end", "timestamp": ts, "payload": payload, "reward": 0.25,
                   "step": i // 4,
                   "step_state": {"step": i // 4, "success": True, "error": "", "reward": 0.25,
                                  "action_type": "code", "tokens_used": 3},
                   "state_change": {"variables": {f"v{i}": i}, "memory": [f"note {i}"]}}  # fmt: skip


def session_start(task: str, *, t0: datetime = T0, session_id: str = "", **extra: Any) -> dict:
    payload = {"task": task, "environment": "pytest", "model": "gpt-4o", **extra}
    if session_id:
        payload["session_id"] = session_id
    return {"kind": "session_start", "timestamp": iso(t0 - timedelta(seconds=1)), "payload": payload}


def session_end(*, t: datetime, status: str = "completed", answer: str = "42") -> dict:
    return {"kind": "session_end", "timestamp": iso(t),
            "payload": {"status": status, "final_answer": answer}}  # fmt: skip


def write_canonical_file(path: Path, *, sessions: int = 1, events: int = 20, compress: bool = False) -> Path:
    """NDJSON of `sessions` canonical sessions, each opened by session_start."""
    lines = []
    for s in range(sessions):
        t0 = T0 + timedelta(hours=s)
        lines.append(session_start(f"task {s}", t0=t0, session_id=f"file-session-{s}"))
        lines.extend(canonical_records(events, t0=t0, tag=f"s{s}-"))
        lines.append(session_end(t=t0 + timedelta(milliseconds=250 * events)))
    data = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def watch_job_progress(monkeypatch: Any, job: Any) -> list[tuple[int, int]]:
    """Spy on an import job's progress writes: each time the importer writes events_done, read
    the row back through a connection of its own. The list gets (written, seen by the other
    connection) pairs; they are equal when progress is visible while the import runs."""
    from django.db import connections

    from sessions_app.ingest import importing

    observed: list[tuple[int, int]] = []
    write = importing._JobProgress._write

    def spy(self: Any, **values: Any) -> None:
        write(self, **values)
        reader = connections.create_connection("default")
        try:
            with reader.cursor() as cursor:
                cursor.execute("SELECT events_done FROM sessions_app_importjob WHERE id = %s", [job.pk])
                observed.append((values["events_done"], cursor.fetchone()[0]))
        finally:
            reader.close()

    monkeypatch.setattr(importing._JobProgress, "_write", spy)
    monkeypatch.setattr(importing, "PROGRESS_EVERY", 200)
    return observed
