"""Comments on a session's moments: threads on an event (`seq`), replies, edits with their
history kept, soft deletes and resolving a thread (their Markdown is shown by markdown.py).

The API (api/comments.py) and the player's forms (views/comments.py) call these workflows;
each records its audit entry (ids and seqs only: a comment's body never reaches the log).
Who may call them at all (reviewer and up) is the caller's `access.session_for`; the
rules that depend on the comment (only one's own edit, admins delete anyone's) live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe

from . import audit, markdown
from .access import Actor, NotVisible, hold
from .models import Comment, CommentRevision, Role, Session

MAX_BODY = 10_000  # characters of Markdown
# The Discussion list and the scrubber's marks: a session with more threads shows the first.
MAX_THREADS = 500


class CommentError(ValueError):
    """A comment the workflow refuses (a 400): the message names the field."""


class ThreadGone(CommentError):
    """A reply to a thread whose every comment was deleted: there is nothing left to answer."""


@dataclass
class Thread:
    """A thread's first comment and its replies, oldest first."""

    first: Comment
    replies: list[Comment] = field(default_factory=list)

    @property
    def resolved(self) -> bool:
        return self.first.resolved_at is not None

    @property
    def all_deleted(self) -> bool:
        """Nothing left to answer or resolve: the page offers neither (`create_comment` refuses
        a reply), and the thread keeps its place as "(deleted)"."""
        return self.first.deleted_at is not None and all(reply.deleted_at is not None for reply in self.replies)


def permalink(comment: Comment) -> str:
    """The moment a comment is on: the player at its seq, scrolled to the comment."""
    return f"{reverse('sessions:player', args=[comment.session_id])}?step={comment.seq}#c-{comment.pk}"


def _shown(comment: Comment) -> Comment:
    """The comment with what pages and the API show of it: HTML and permalink."""
    comment.body_html = mark_safe("") if comment.deleted_at else markdown.shown(comment, "body")
    comment.permalink = permalink(comment)
    return comment


# --- reading ----------------------------------------------------------------------------------


def _threads(comments: list[Comment]) -> list[Thread]:
    threads: dict[int, Thread] = {}
    replies: list[Comment] = []
    for comment in comments:
        _shown(comment)
        if comment.parent_id is None:
            threads[comment.pk] = Thread(first=comment)
        else:
            replies.append(comment)
    for reply in replies:
        if reply.parent_id in threads:
            threads[reply.parent_id].replies.append(reply)
    return list(threads.values())


# Columns named, not `*`: a statement prepared on a PostgreSQL connection (settings.py) must not
# change its result's columns when a migration adds one.
_THREADS_AT_SQL = (
    f"SELECT {', '.join(f.column for f in Comment._meta.concrete_fields)} FROM {Comment._meta.db_table}"
    " WHERE session_id = %s AND seq = %s ORDER BY created_at, id"
)


def threads_at(*, session: Session, seq: int) -> list[Thread]:
    """The threads on one event, with their replies: one query (a reply has its thread's seq;
    the (session, seq) index serves it). Written as SQL: it runs with every player step, and
    the ORM took ~0.45 ms to compile it (docs/benchmarks.md, issue 20)."""
    return _threads(list(Comment.objects.raw(_THREADS_AT_SQL, [session.pk, seq])))


def threads_of(*, session: Session) -> list[Thread]:
    """Every thread of the session in seq order, with replies: what the API lists. One query."""
    return _threads(list(Comment.objects.filter(session=session).order_by("seq", "created_at", "id")))


@dataclass
class ThreadSummary:
    """A line of the Discussion list and a mark on the scrubber."""

    id: int
    seq: int
    author_name: str
    snippet: str  # the first comment as plain text (`markdown.plain_text`)
    deleted: bool
    resolved: bool
    replies: int
    created_at: datetime
    permalink: str
    restored_from: str = ""  # the signer of the bundle it was restored from (Comment.restored_from)
    x: float = 0.0  # its place on the scrubber (0..1), set by the page that draws it


def thread_summaries(*, session: Session, limit: int = MAX_THREADS) -> list[ThreadSummary]:
    """The session's threads in seq order, each with its count of replies not deleted: one
    query. A thread whose every comment was deleted is left out (and so not counted): nothing
    of it is left to read, answer or resolve."""
    rows = (
        Comment.objects.filter(session=session, parent=None)
        .annotate(reply_count=Count("replies", filter=Q(replies__deleted_at=None)))
        .exclude(deleted_at__isnull=False, reply_count=0)
        .order_by("seq", "created_at", "id")[:limit]
    )
    return [
        ThreadSummary(
            id=c.pk,
            seq=c.seq,
            author_name=c.author_name,
            snippet="" if c.deleted_at is not None else markdown.plain_text(markdown.shown(c, "body")),
            deleted=c.deleted_at is not None,
            resolved=c.resolved_at is not None,
            replies=c.reply_count,
            created_at=c.created_at,
            permalink=permalink(c),
            restored_from=c.restored_from,
        )  # fmt: skip
        for c in rows
    ]


def comment_in(*, session: Session, comment_id: int) -> Comment:
    """The comment of this session; any other (another session's too) does not exist here."""
    try:
        comment = Comment.objects.select_related("parent").get(session=session, pk=comment_id)
    except Comment.DoesNotExist:
        raise NotVisible(f"session {session.pk} has no comment {comment_id}")
    comment.session = session  # already fetched (and scoped) by the caller
    return comment


# --- writing ----------------------------------------------------------------------------------


def _clean_body(body: str) -> str:
    body = body.strip()
    if not body:
        raise CommentError("body: a comment needs some text")
    if len(body) > MAX_BODY:
        raise CommentError(f"body: a comment holds at most {MAX_BODY:,} characters (this one has {len(body):,})")
    return body


def _all_deleted(thread: Comment) -> bool:
    return thread.deleted_at is not None and not thread.replies.filter(deleted_at=None).exists()


def _own(actor: Actor, comment: Comment) -> bool:
    return actor.user is not None and comment.author_id == actor.user.pk


def create_comment(
    *, actor: Actor, session: Session, body: str, seq: int | None = None, parent: int | None = None,
    ip: str | None = None,
) -> Comment:  # fmt: skip
    """A new thread on event `seq`, or a reply in the thread of comment `parent` (a reply to a
    reply joins the same thread; a reply is on its thread's seq)."""
    body = _clean_body(body)
    thread = None
    if parent is not None:
        thread = Comment.objects.filter(session=session, pk=parent).first()
        if thread is None and not Session.objects.filter(pk=session.pk).exists():  # deleted since its lookup
            raise NotVisible(f"session {session.pk} not found")
        if thread is None:
            raise CommentError(f"parent: session {session.pk} has no comment {parent}")
        if thread.parent_id is not None:
            thread = thread.parent
        if _all_deleted(thread):
            raise ThreadGone(f"parent: every comment of thread {thread.pk} was deleted; start a new thread instead")
        if seq is not None and seq != thread.seq:
            raise CommentError(f"seq: a reply is on its thread's event, seq {thread.seq}")
        seq = thread.seq
    if seq is None:
        raise CommentError("seq: name the event the comment is on (or a parent to reply to)")
    if not 0 <= seq < session.event_count:
        span = f"its seqs are 0 to {session.event_count - 1}" if session.event_count else "it has no events"
        raise CommentError(f"seq: session {session.pk} has no event at seq {seq} ({span})")
    with transaction.atomic():  # the comment and its audit entry, or neither
        hold(Session, session.pk)
        comment = Comment.objects.create(session=session, seq=seq, parent=thread, author=actor.user,
                                         author_name=actor.name, body=body)  # fmt: skip
        detail = {"comment": comment.pk, "seq": seq} | ({"parent": thread.pk} if thread else {})
        audit.record(action="comment.create", actor=actor, project=session.project_id,
                     target=f"session:{session.pk}", detail=detail, ip=ip)  # fmt: skip
    return _shown(comment)


def _locked(comment: Comment) -> Comment:
    """`comment` as stored now, its row locked to the end of the caller's transaction: a
    delete, an edit or a redaction that committed since the caller loaded it is seen, and
    none starts until this one ends (an edit racing a delete wrote the deleted text back)."""
    fresh = Comment.objects.select_for_update(no_key=True).filter(pk=comment.pk).first()
    if fresh is None:  # deleted with its session since it was loaded
        raise NotVisible(f"comment {comment.pk} not found")
    for name in ("body", "deleted_at", "edited_at", "resolved_at", "resolved_by"):
        setattr(comment, name, getattr(fresh, name))
    return comment


def edit_comment(*, actor: Actor, comment: Comment, body: str, ip: str | None = None) -> Comment:
    """Replace one's own comment's body; the old body is kept as a revision."""
    if not _own(actor, comment):
        raise PermissionDenied("only its author may edit a comment")
    body = _clean_body(body)
    with transaction.atomic():
        _locked(comment)
        if comment.deleted_at is not None:
            raise CommentError("body: a deleted comment cannot be edited")
        if body != comment.body:
            now = timezone.now()
            CommentRevision.objects.create(comment=comment, body=comment.body,
                                           written_at=comment.edited_at or comment.created_at, replaced_at=now)  # fmt: skip
            comment.body, comment.edited_at = body, now
            comment.save(update_fields=["body", "edited_at"])
            audit.record(action="comment.edit", actor=actor, project=comment.session.project_id,
                         target=f"session:{comment.session_id}", detail={"comment": comment.pk, "seq": comment.seq},
                         ip=ip)  # fmt: skip
    return _shown(comment)


def delete_comment(*, actor: Actor, comment: Comment, role: Role | None, ip: str | None = None) -> Comment:
    """Delete one's own comment (an admin of the project, `role`, may delete anyone's). The
    comment keeps its place in its thread, so replies still answer something; its text goes,
    with the text of its earlier revisions."""
    if not _own(actor, comment) and not (role is not None and role.includes(Role.ADMIN)):
        raise PermissionDenied("only its author or a project admin may delete a comment")
    with transaction.atomic():
        if _locked(comment).deleted_at is None:  # deleted once, audited once
            comment.revisions.all().delete()
            comment.body, comment.deleted_at = "", timezone.now()
            comment.save(update_fields=["body", "deleted_at"])
            detail = {"comment": comment.pk, "seq": comment.seq} | (
                {} if _own(actor, comment) else {"author": comment.author_name}
            )
            audit.record(action="comment.delete", actor=actor, project=comment.session.project_id,
                         target=f"session:{comment.session_id}", detail=detail, ip=ip)  # fmt: skip
    return _shown(comment)


def resolve_thread(*, actor: Actor, comment: Comment, resolved: bool = True, ip: str | None = None) -> Comment:
    """Mark the thread `comment` is in resolved (or open again); its first comment answers."""
    thread = comment.parent if comment.parent_id is not None else comment
    with transaction.atomic():
        if (_locked(thread).resolved_at is not None) != resolved:  # resolved once, audited once
            thread.resolved_at = timezone.now() if resolved else None
            thread.resolved_by = actor.name if resolved else ""
            thread.save(update_fields=["resolved_at", "resolved_by"])
            audit.record(action="comment.resolve", actor=actor, project=comment.session.project_id,
                         target=f"session:{comment.session_id}",
                         detail={"comment": thread.pk, "seq": thread.seq, "resolved": resolved}, ip=ip)  # fmt: skip
    return _shown(thread)
