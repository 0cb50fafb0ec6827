"""Comments: threads on a session's events, replies, edits, deletes and resolving a thread.
Any member reads them; reviewers and up write (docs/teams.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from .. import access, audit, comments
from ..models import Comment, Role
from .schemas import BodyIn, DetailOut, Id, Position, Text

router = Router(tags=["comments"])

DENIED = {400: DetailOut, 403: DetailOut, 404: DetailOut}


class CommentIn(BodyIn):
    seq: Position | None = Field(None, description="the event the thread is on; a reply may leave it out")
    body: Text = Field(..., description=f"Markdown, at most {comments.MAX_BODY:,} characters")
    parent: Id | None = Field(None, description="reply in the thread of this comment")


class CommentEditIn(BodyIn):
    body: Text = Field(..., description="the new Markdown; the old body is kept as a revision")


class ResolveIn(BodyIn):
    resolved: bool = True


class CommentOut(Schema):
    id: int
    seq: int
    parent: int | None
    author: str
    body: str = Field(description="the Markdown as written (empty once deleted)")
    body_html: str = Field(description="the body rendered and sanitised")
    created_at: datetime
    edited_at: datetime | None
    deleted: bool
    permalink: str = Field(description="the player at this comment's moment: /sessions/{id}/?step=N#c-K")
    restored_from: str = Field(
        description="the fingerprint of the key that signed the bundle this comment was restored from "
        "(its author and times are that bundle's word); empty for one written here"
    )
    redacted_at: datetime | None = Field(
        description="when a redaction last replaced words in the body or an earlier revision (null: never); "
        "the author did not write its placeholders"
    )
    redacted_by: str = Field(description="who ran that redaction (empty: none)")


class ThreadOut(CommentOut):
    resolved: bool
    resolved_at: datetime | None
    resolved_by: str
    replies: list[CommentOut]


def _comment_row(comment: Comment) -> dict[str, Any]:
    return {
        "id": comment.pk, "seq": comment.seq, "parent": comment.parent_id, "author": comment.author_name,
        "body": comment.body, "body_html": str(comment.body_html), "created_at": comment.created_at,
        "edited_at": comment.edited_at, "deleted": comment.deleted_at is not None, "permalink": comment.permalink,
        "restored_from": comment.restored_from, "redacted_at": comment.redacted_at,
        "redacted_by": comment.redacted_by,
    }  # fmt: skip


def _thread_row(thread: comments.Thread) -> dict[str, Any]:
    first = thread.first
    return _comment_row(first) | {
        "resolved": thread.resolved, "resolved_at": first.resolved_at, "resolved_by": first.resolved_by,
        "replies": [_comment_row(reply) for reply in thread.replies],
    }  # fmt: skip


def _bad(exc: comments.CommentError) -> HttpError:
    return HttpError(400, str(exc))


@router.get("/sessions/{session_id}/comments", response={200: list[ThreadOut], **DENIED}, url_name="comments")
def list_comments(request: HttpRequest, session_id: Id):
    """The session's threads in seq order, each with its replies oldest first."""
    session = access.session_for(request, session_id)
    return [_thread_row(thread) for thread in comments.threads_of(session=session)]


@router.post("/sessions/{session_id}/comments", response={201: CommentOut, **DENIED}, url_name="create_comment")
def create_comment(request: HttpRequest, session_id: Id, body: CommentIn):
    """Start a thread on event `seq`, or reply in the thread of `parent`. Reviewers and up."""
    session = access.session_for(request, session_id, need=Role.REVIEWER)
    try:
        comment = comments.create_comment(actor=access.actor_of(request), session=session, body=body.body,
                                          seq=body.seq, parent=body.parent, ip=audit.client_ip(request))  # fmt: skip
    except comments.CommentError as exc:
        raise _bad(exc)
    return Status(201, _comment_row(comment))


@router.patch(
    "/sessions/{session_id}/comments/{comment_id}", response={200: CommentOut, **DENIED}, url_name="edit_comment"
)
def edit_comment(request: HttpRequest, session_id: Id, comment_id: Id, body: CommentEditIn):
    """Change one's own comment; the old body is kept. Someone else's: 403."""
    session = access.session_for(request, session_id, need=Role.REVIEWER)
    comment = comments.comment_in(session=session, comment_id=comment_id)
    try:
        comment = comments.edit_comment(actor=access.actor_of(request), comment=comment, body=body.body,
                                        ip=audit.client_ip(request))  # fmt: skip
    except comments.CommentError as exc:
        raise _bad(exc)
    return _comment_row(comment)


@router.delete(
    "/sessions/{session_id}/comments/{comment_id}", response={204: None, **DENIED}, url_name="delete_comment"
)
def delete_comment(request: HttpRequest, session_id: Id, comment_id: Id):
    """Delete one's own comment (admins: anyone's). Its place in the thread stays, its text goes."""
    session = access.session_for(request, session_id, need=Role.REVIEWER)
    comment = comments.comment_in(session=session, comment_id=comment_id)
    comments.delete_comment(actor=access.actor_of(request), comment=comment, role=access.role_on(request, session),
                            ip=audit.client_ip(request))  # fmt: skip
    return Status(204, None)


@router.post(
    "/sessions/{session_id}/comments/{comment_id}/resolve",
    response={200: ThreadOut, **DENIED},
    url_name="resolve_comment",
)
def resolve_comment(request: HttpRequest, session_id: Id, comment_id: Id, body: ResolveIn | None = None):
    """Resolve the comment's thread (`{"resolved": false}` opens it again). Reviewers and up."""
    session = access.session_for(request, session_id, need=Role.REVIEWER)
    comment = comments.comment_in(session=session, comment_id=comment_id)
    first = comments.resolve_thread(actor=access.actor_of(request), comment=comment,
                                    resolved=body.resolved if body is not None else True,
                                    ip=audit.client_ip(request))  # fmt: skip
    thread = next(t for t in comments.threads_at(session=session, seq=first.seq) if t.first.pk == first.pk)
    return _thread_row(thread)
