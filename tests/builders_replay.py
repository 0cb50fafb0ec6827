"""Builders for the replay engine and read-API tests: real rlm-code sessions imported through
importing.import_file, hand-made canonical events for pairing and warnings, an API client."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.test import Client
from rlm_code.rlm.session_replay import SessionRecorder

from sessions_app.canonical import CanonicalEvent, SessionMeta
from sessions_app.ingest.importing import import_file
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import Project, Session
from sessions_app.replay.context import _answered_by as answered_by

from .builders_rlm import record_full_session
from .builders_teams import maintainer_key
from .conftest import T0


def import_one(path: Path, project: Project | None = None) -> Session:
    outcomes = import_file(path=path, project=project or Project.get_default())
    sessions = [o.session for o in outcomes if o.session is not None]
    assert len(sessions) == 1, [o.to_dict() for o in outcomes]
    return sessions[0]


def recorded_session(tmp_path: Path, name: str = "full", **kwargs: Any) -> tuple[Session, SessionRecorder, Path]:
    """A session recorded by rlm-code's SessionRecorder (every method used), imported by us."""
    path = tmp_path / f"{name}.jsonl"
    recorder = record_full_session(path, run_id=f"run_{name}", **kwargs)
    return import_one(path), recorder, path


def record_variant(
    path: Path,
    *,
    run_id: str,
    steps: int,
    change_at: int | None = None,
    change: str = "code",
    tokens: int = 100,
) -> SessionRecorder:
    """A plain recorder session of `steps` steps; from step index `change_at` on, the action's
    code, type or success differs from the base variant (for diff tests)."""
    recorder = SessionRecorder(
        session_id=f"s_{run_id}", run_id=run_id, task="Compare me", environment="pure_rlm",
        model="gpt-4o", output_path=path,
    )  # fmt: skip
    for index in range(steps):
        recorder.record_step_start(index + 1)
        changed = change_at is not None and index >= change_at
        action = {
            "action": "final" if changed and change == "type" else "run_python",
            "code": f"x = {index}" + (" + 1" if changed and change == "code" else ""),
        }
        success = not (changed and change == "success")
        recorder.record_action(action, rationale=f"r{index}")
        observation = {"success": success, "output": f"out {index}"}
        recorder.record_result(
            observation, reward=0.5 if success else -0.5, success=success, duration_ms=3.0, tokens_used=tokens
        )
        recorder.record_variable_update("i", index)
        recorder.record_step_end(
            action, observation, reward=0.5 if success else -0.5, success=success, duration_ms=3.0, tokens_used=tokens
        )
    recorder.end_session()
    return recorder


def event(kind: str, at_ms: float, **fields: Any) -> CanonicalEvent:
    """A canonical event at T0 + at_ms; raw is a small JSON record naming it."""
    payload = fields.pop("payload", {"kind": kind, "at": at_ms})
    return CanonicalEvent(
        kind=kind,
        source_type=fields.pop("source_type", kind),
        raw=orjson.dumps({"kind": kind, "at": at_ms, **{k: str(v) for k, v in fields.items()}}).decode(),
        payload=payload,
        timestamp=T0 + timedelta(milliseconds=at_ms),
        **fields,
    )


def session_of(events: list[CanonicalEvent], *, finish: bool = True, **meta: Any) -> Session:
    session = create_session(
        project=Project.get_default(), source_format=meta.pop("source_format", "canonical"),
        meta=SessionMeta(**meta),
    )  # fmt: skip
    append_events(session=session, events=events)
    if finish:
        finish_session(session=session)
    session.refresh_from_db()
    return session


def api_key(name: str = "tests") -> str:
    """A key of a maintainer of the default project (where build_session puts sessions)."""
    return maintainer_key(name)


@pytest.fixture
def api(db) -> Client:
    """A test client that sends a valid API key with every request."""
    return Client(HTTP_AUTHORIZATION=f"Bearer {api_key()}")


def get_json(client: Client, url: str, status: int = 200) -> Any:
    response = client.get(url)
    assert response.status_code == status, (response.status_code, response.content[:500])
    return orjson.loads(response.content)


def resolve_page_context(page: dict[str, Any]) -> list[dict[str, Any] | None]:
    """The contexts of a (non-spliced) replay page with every reference replaced by its entry,
    i.e. what context_at() gives for each step (without state and step). In an AgentLens
    session each llmHistory entry also gets its `response`: the event completing that call by
    the step's event (its `pairSeq`, when not after it), else None."""
    events = {step["event"]["seq"]: step["event"] for step in page["steps"]}
    lookup = {**{k: v for m in ("llm", "tools", "approvals") for k, v in page.get(m, {}).items()}, **events}
    completes = page["session"]["format"] == "agentlens"
    resolved = []
    for step in page["steps"]:
        context = step["context"]
        if context is None:
            resolved.append(None)
            continue
        full = dict(context)
        for key in ("llmHistory", "toolResults", "pendingApprovals"):
            full[key] = [lookup[seq] for seq in context[key]]
        if completes:
            at = context["eventIndex"]
            full["llmHistory"] = [
                {**entry, "response": lookup.get(answered_by(entry["kind"], entry["seq"], entry["pairSeq"], at))}
                for entry in full["llmHistory"]
            ]
        resolved.append(full)
    return resolved
