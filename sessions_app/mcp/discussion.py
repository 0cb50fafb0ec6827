"""get_comments: the team's comment threads on a session's events (sessions_app/comments.py),
each at its event, with its replies; the bodies as written (Markdown), since a model reads them
as text and never renders them."""

from __future__ import annotations

from .. import access, comments
from ..models import Comment
from .lookup import session_named, session_title
from .text import ToolInputError, clip_block, iso, number

SHOWN_THREADS = 50
BODY_CHARS = 2000


def _comment(comment: Comment, head: str, indent: str) -> list[str]:
    when = iso(comment.created_at) + (f", edited {iso(comment.edited_at)}" if comment.edited_at else "")
    lines = [f"{head}comment {comment.pk} by {comment.author_name or '(someone)'} at {when}:"]
    if comment.deleted_at:
        return [*lines, f"{indent}(deleted)"]
    return [*lines, *(f"{indent}{line}" for line in clip_block(comment.body, BODY_CHARS).splitlines())]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def get_comments(*, actor: access.Actor, session_id: str, event: int | None = None) -> str:
    """The session's threads in event order (or only those on one event), with replies."""
    found = session_named(actor, session_id)
    session = found.session
    if event is not None:
        if not 1 <= event <= session.event_count:
            raise ToolInputError(f"event {event}: the session has {number(session.event_count)} events")
        threads = comments.threads_at(session=session, seq=event - 1)
        where = f" on event #{event}"
    else:
        threads = comments.threads_of(session=session)
        where = ""
    lines = [f"Comments on session {session_title(session)}{where}: {_count(len(threads), 'thread', 'threads')}"]
    if found.note:
        lines.append(found.note)
    shown = threads[:SHOWN_THREADS]
    for thread in shown:
        first = thread.first
        state = f"resolved by {first.resolved_by or 'someone'}" if thread.resolved else "open"
        lines += [
            "",
            f"Event #{first.seq + 1}: thread {first.pk} ({state}, {_count(len(thread.replies), 'reply', 'replies')})",
        ]
        lines += _comment(first, "  ", "    ")
        for reply in thread.replies:
            lines += _comment(reply, "  ↳ ", "      ")
    if len(threads) > len(shown):
        lines += [
            "",
            f"{_count(len(threads) - len(shown), 'more thread', 'more threads')}: ask for one event's with `event`.",
        ]
    return "\n".join(lines)
