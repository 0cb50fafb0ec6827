"""get_comments: the team's comment threads on a session's events (sessions_app/comments.py),
each at its event, with its replies; the bodies as written (Markdown), since a model reads them
as text and never renders them."""

from __future__ import annotations

from .. import access, comments
from ..models import Comment
from .lookup import session_named, session_title
from .text import MAX_ANSWER_CHARS, ToolInputError, cap, clip, clip_block, fit, iso, number

SHOWN_THREADS = 50
BODY_CHARS = 2000


def _comment(comment: Comment, head: str, indent: str) -> list[str]:
    when = iso(comment.created_at) + (f", edited {iso(comment.edited_at)}" if comment.edited_at else "")
    # A restored comment's author and time are a bundle's word: said, so a model does not take them as ours.
    restored = f" (restored from a bundle signed by {comment.restored_from[:16]}…)" if comment.restored_from else ""
    # Placeholders a redaction put in: its author did not write them.
    redacted = (
        f" (changed by a redaction by {clip(comment.redacted_by or '(someone)', 100)} at {iso(comment.redacted_at)})"
        if comment.redacted_at
        else ""
    )
    lines = [
        f"{head}comment {comment.pk} by {clip(comment.author_name or '(someone)', 100)} at {when}{restored}{redacted}:"
    ]
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
    blocks = []
    for thread in threads[:SHOWN_THREADS]:
        first = thread.first
        state = f"resolved by {clip(str(first.resolved_by or 'someone'), 100)}" if thread.resolved else "open"
        block = [
            f"Event #{first.seq + 1}: thread {first.pk} ({state}, {_count(len(thread.replies), 'reply', 'replies')})"
        ]
        block += _comment(first, "  ", "    ")
        for reply in thread.replies:
            block += _comment(reply, "  ↳ ", "      ")
        blocks.append("\n".join(block))
    # Threads while they fit the answer's budget, whole; a thread too long alone is cut by cap.
    shown = fit(lines, blocks, separator="\n\n")
    for block in blocks[:shown]:
        lines += ["", block]
    everything = f"every thread in full: GET /api/sessions/{session.pk}/comments"
    if len(threads) > shown:
        rest = threads[shown:]
        events = ", ".join(str(t.first.seq + 1) for t in rest[:10]) + (", …" if len(rest) > 10 else "")
        lines += [
            "",
            f"{_count(len(rest), 'more thread', 'more threads')} (the answer holds at most {SHOWN_THREADS} threads "
            f"and {MAX_ANSWER_CHARS:,} characters): ask for one event's with `event` (events {events}), "
            f"or {everything}.",
        ]
    return cap("\n".join(lines), f"Ask for one event's threads with `event`, or {everything}.")
