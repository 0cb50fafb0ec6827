"""list_sessions and search_events: finding sessions, and events across them, among the
caller's projects; the sessions page's query (replay/listing.py) and the search across
sessions (replay/navigation.py), with their keyset cursors passed through as text."""

from __future__ import annotations

from .. import access
from ..models import Session
from ..replay.listing import format_cursor, parse_cursor
from ..replay.listing import list_sessions as list_session_page
from ..replay.navigation import parse_search_cursor, search_cursor, search_sessions
from .lookup import project_named
from .text import MAX_ANSWER_CHARS, ToolInputError, clip, duration, fit, iso, number, session_cost

MAX_ROWS = 50
# Newest run first, as the sessions page lists them (its cursor is `<start time>~<id>`).
SORT = "-started"


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_ROWS:
        raise ToolInputError(f"limit must be between 1 and {MAX_ROWS}, got {limit}")


def session_line(session: Session) -> str:
    errors = session.error_count + session.step_error_count
    parts = [
        f"#{session.pk}",
        clip(session.source_session_id, 120) or "(no source id)",
        f"project {session.project.slug}",
        session.source_format,
        str(session.status),
        f"started {iso(session.started_at)}",
        duration(session.duration_seconds * 1000.0) or "-",
        f"{number(session.event_count)} events",
        session_cost(session),
        f"{number(errors)} errors",
    ]
    line = " · ".join(parts)
    if session.agent_id:
        line += f" · agent {clip(session.agent_id, 120)}"
    if session.task:
        line += f"\n   task: {clip(session.task, 160)}"
    return line


def list_sessions(
    *,
    actor: access.Actor,
    project: str | None = None,
    status: str | None = None,
    text: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> str:
    """The caller's sessions, newest run first, filtered as the sessions page filters them."""
    _check_limit(limit)
    chosen = project_named(actor, project)
    after = None
    if cursor:
        after = parse_cursor(cursor, SORT)
        if after is None:
            raise ToolInputError("cursor: pass back the cursor a previous list_sessions call gave, unchanged")
    filters = {"project": chosen or "", "status": status or "", "q": (text or "").strip()}
    page = list_session_page(
        sessions=access.sessions_visible_to(actor), filters=filters, sort=SORT, after=after, per_page=limit
    )
    scope = f"project {chosen.slug}" if chosen else "your projects"
    lines = [f"{number(page.total)} sessions in {scope} match, newest run first."]
    if not page.sessions:
        return "\n".join(lines)
    rows = [session_line(session) for session in page.sessions]
    shown = fit(lines, rows)
    lines += ["", *rows[:shown], ""]
    lines.append("Open one with replay_session (sessionId = the #number or the source id).")
    if shown < len(rows):
        # The sessions page's own keyset cursor, after the last session shown.
        lines.append(
            f"Cut at {MAX_ANSWER_CHARS:,} characters, the most one answer holds. More: list_sessions with "
            f'the same filters and cursor="{format_cursor(page.sessions[shown - 1], SORT)}"'
        )
    elif page.next_cursor:
        lines.append(f'More: list_sessions with the same filters and cursor="{page.next_cursor}"')
    return "\n".join(lines)


def _search_cursor(cursor: str | None) -> tuple[int, int] | None:
    if not cursor:
        return None
    after = parse_search_cursor(cursor)
    if after is None:
        raise ToolInputError("cursor: pass back the cursor a previous search_events call gave, unchanged")
    return after


def search_events(
    *, actor: access.Actor, text: str, project: str | None = None, limit: int = 20, cursor: str | None = None
) -> str:
    """Events holding `text` (payload, original record or agent step) in the caller's
    sessions, newest session first, each session's in order."""
    _check_limit(limit)
    text = text.strip()
    if not text:
        raise ToolInputError("text: say what to look for")
    chosen = project_named(actor, project)
    sessions = access.sessions_visible_to(actor).in_project(chosen)
    found = search_sessions(sessions=sessions, q=text, after=_search_cursor(cursor), limit=limit)
    hits = found["hits"]
    scope = f"project {chosen.slug}" if chosen else "your projects"
    if not hits:
        return f"No events in {scope} hold {text!r}" + (" after the cursor." if cursor else ".")
    lines = [f"Events holding {clip(text, 200)!r} in {scope}, newest session first (matched case-insensitively):", ""]
    rows = [
        f"session #{hit['session']} ({clip(hit['name'] or '-', 120)}) · "
        f"event #{hit['seq'] + 1} {hit['kind']}: {clip(hit['snippet'], 240)}"
        for hit in hits
    ]
    shown = fit(lines, rows)
    lines += [*rows[:shown], ""]
    lines.append("See one in its place with replay_session (fromStep = the event number - 1) or step_state (event).")
    if shown < len(rows):
        last = hits[shown - 1]  # the search's cursor is the last hit shown
        lines.append(
            f"Cut at {MAX_ANSWER_CHARS:,} characters, the most one answer holds. More: search_events with the "
            f'same text and project and cursor="{search_cursor(last["session"], last["seq"])}"'
        )
    elif found["next"]:
        lines.append(f'More: search_events with the same text and project and cursor="{found["next"]}"')
    return "\n".join(lines)
