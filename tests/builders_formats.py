"""Builders for the AgentLens, flux0 and daycare format tests: parse a file with a format module
and write each session through ingest, the way the importer does."""

from __future__ import annotations

from pathlib import Path

import orjson

from sessions_app.canonical import Problems
from sessions_app.formats import Source
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import Event, Project, Session

FIXTURES = Path(__file__).parent / "fixtures"


def ingest_file(module, path: Path, project: Project) -> tuple[list[Session], Problems]:
    """Every session of the file, stored; and the problems the format reported."""
    problems = Problems()
    sessions = []
    for parsed in module.parse(Source(path=path), problems):
        session = create_session(project=project, source_format=module.NAME, meta=parsed.meta)
        append_events(session=session, events=parsed.events)
        finish_session(session=session, meta=parsed.meta)
        session.refresh_from_db()
        sessions.append(session)
    return sessions, problems


def rows(session: Session) -> list[Event]:
    return list(Event.objects.filter(session=session).order_by("seq"))


def payload(event: Event) -> dict:
    return orjson.loads(event.payload)


def step_state(event: Event) -> dict:
    return orjson.loads(event.step_state)


def problem_keys(problems: Problems) -> list[tuple[int | None, str]]:
    return [(p.line, p.field) for p in problems.items]
