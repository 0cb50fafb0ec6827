"""Which session or project a tool's argument names, as the caller may see it.

An agent knows a session by the id its own framework gave it (AgentLens's `ses_…`, an rlm-code
run id), a person by Replay's number in the dashboard's address: `sessionId` takes either.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import access
from ..models import Project, Session
from .text import clip

# Source ids that repeat (the same run imported again as a new session, docs/dashboard.md):
# how many of the others a lookup names.
OTHERS_NAMED = 5


@dataclass
class Found:
    session: Session
    note: str = ""  # what the caller should know about how the name was resolved


def session_named(actor: access.Actor, name: str) -> Found:
    """The session `name` names among those the actor may see: Replay's id when it is one the
    actor sees, else the source's own session id (the newest run when several share it). Any
    other name is "not found", whether or not a session of another project holds it."""
    name = name.strip()
    if not name:
        raise access.NotVisible("sessionId: name a session (Replay's id or the source's own session id)")
    if name.isdecimal() and len(name) <= 18:
        try:
            return Found(access.session_for(actor, int(name)))
        except access.NotVisible:
            pass  # perhaps a source's own id made of digits
    runs = list(
        access.sessions_visible_to(actor)
        .filter(source_session_id=name)
        .with_start_time()
        .order_by("-start_time", "-id")
        .values_list("pk", flat=True)[: OTHERS_NAMED + 1]
    )
    if not runs:
        raise access.NotVisible(f"session {name!r} not found")
    # Fetched again by id: the role check happens where every other route's does.
    session = access.session_for(actor, runs[0])
    note = ""
    if len(runs) > 1:
        others = ", ".join(str(pk) for pk in runs[1:OTHERS_NAMED])
        more = " and more" if len(runs) > OTHERS_NAMED else ""
        note = (
            f"Several sessions have the source id {name!r}: this is the newest run (Replay id {session.pk}); "
            f"name another by its Replay id ({others}{more})."
        )
    return Found(session, note)


def project_named(actor: access.Actor, slug: str | None) -> Project | None:
    """The project a `project` argument names (by slug), if the actor is a member; None for none."""
    if slug is None or not slug.strip():
        return None
    return access.project_for(actor, slug.strip())


def session_title(session: Session) -> str:
    """How the tools name a session: the source's id and Replay's."""
    if session.source_session_id:
        return f"{clip(session.source_session_id, 120)} (Replay id {session.pk})"
    return f"Replay id {session.pk}"
