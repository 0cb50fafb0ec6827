"""The player's comments: the threads at the shown step (part of every frame), the Discussion
list and scrubber marks (the full page), and the forms that write them.

Each write answers an htmx request with the threads at its step, and the Discussion list and
the marks out of band; a plain form post goes back to the comment's moment in the player (a
refused one with its error and the text typed, `refused_comment`).
"""

from __future__ import annotations

import time
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from .. import access, audit, comments
from ..forms import CommentEditForm, CommentForm, ResolveForm, error_text, labelled
from ..models import Comment, Role, Session
from ..replay import timeline
from .pages import asked_first, login_required


def comment_panel(request: HttpRequest, session: Session, seq: int) -> dict[str, Any]:
    """What the context panel shows of comments at event `seq` (one query: its threads)."""
    return {
        "threads": comments.threads_at(session=session, seq=seq),
        "comment_seq": seq,
        "can_comment": access.may(request, session, Role.REVIEWER),
        "is_admin": access.may(request, session, Role.ADMIN),
        "me": request.user.pk,
        "moment_url": request.build_absolute_uri(f"{session.get_absolute_url()}?step={seq}"),
    }


def discussion(session: Session, overview: timeline.Overview) -> dict[str, Any]:
    """The Discussion list, each thread placed on the scrubber (one query)."""
    summaries = comments.thread_summaries(session=session)
    for summary in summaries:
        summary.x = timeline.position_of(summary.seq, overview.samples)
    return {"discussion": summaries, "discussion_full": len(summaries) >= comments.MAX_THREADS}


# Where a comment refused without JavaScript waits for the player's next full page (the user's
# session, not the URL: the text typed may be long and is nobody else's to see), and for how
# long: the redirect's page comes at once; a draft nobody came back for is not shown days later.
_REFUSED = "refused_comment"
_REFUSED_FOR_SECONDS = 600


def refused_comment(request: HttpRequest, session: Session) -> dict[str, Any]:
    """A comment of `session` refused without JavaScript (_answer), said once, on the player's
    next full page of it (the redirect's): its error, and the text typed back in the form it was
    typed in (a new comment's, a reply's or an edit's: `comment_draft_for`, `comment_draft_id`)."""
    kept = request.session.get(_REFUSED)
    if not isinstance(kept, dict):
        return {}
    if not _recent(kept.get("at")):
        del request.session[_REFUSED]  # nobody came back for it
        return {}
    if kept.get("session") != session.pk:
        return {}
    del request.session[_REFUSED]
    return {
        "comment_error": kept.get("error", ""), "comment_draft": kept.get("body", ""),
        "comment_draft_for": kept.get("form", ""), "comment_draft_id": kept.get("id"),
    }  # fmt: skip


def _recent(at: Any) -> bool:
    return isinstance(at, (int, float)) and 0 <= time.time() - at <= _REFUSED_FOR_SECONDS


def _answer(
    request: HttpRequest, session: Session, *, seq: int, focus: int | None, error: str = "",
    draft: tuple[str, int | None] | None = None,
) -> HttpResponse:  # fmt: skip
    """`draft`: which form a refused text was typed in ("new", "reply" with its thread,
    "edit" with its comment), to give it back there."""
    if not request.htmx:
        url = f"{session.get_absolute_url()}?step={seq}"
        if error:
            form, form_id = draft or ("", None)
            body = request.POST.get("body", "")
            if len(body) > comments.MAX_BODY:
                error += f" The text given back is its first {comments.MAX_BODY:,} characters."
            request.session[_REFUSED] = {
                "session": session.pk, "at": time.time(), "error": error, "form": form,
                "id": form_id, "body": body[: comments.MAX_BODY],
            }  # fmt: skip
            return redirect(f"{url}#comment-threads")
        return redirect(url + (f"#c-{focus}" if focus else ""))
    overview = timeline.session_overview(session=session)
    context = comment_panel(request, session, seq) | discussion(session, overview)
    context |= {"session": session, "comment_error": error, "oob": True}
    if error and draft is not None:  # the swapped-in forms get the refused text back, as above
        context |= {"comment_draft": request.POST.get("body", "")[: comments.MAX_BODY],
                    "comment_draft_for": draft[0], "comment_draft_id": draft[1]}  # fmt: skip
    response = render(request, "sessions_app/includes/comments.html#comment-changes", context,
                      status=400 if error else 200)  # fmt: skip
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_POST
def create(request: HttpRequest, session_id: int) -> HttpResponse:
    """A new thread at the shown step, or a reply (`parent`)."""
    session = access.session_for(request, session_id, need=Role.REVIEWER)
    form = CommentForm(request.POST)
    valid = form.is_valid()
    parent = form.cleaned_data.get("parent")  # (a refused form keeps its fields that were valid)
    draft = ("reply", parent) if parent else ("new", None)
    if not valid:
        return _answer(request, session, seq=form.cleaned_data.get("seq") or 0, focus=None, error=error_text(form),
                       draft=draft)  # fmt: skip
    data = form.cleaned_data
    try:
        comment = comments.create_comment(actor=access.actor_of(request), session=session, body=data["body"],
                                          seq=None if data["parent"] else data["seq"], parent=data["parent"],
                                          ip=audit.client_ip(request))  # fmt: skip
    except comments.CommentError as exc:
        error = labelled(str(exc), CommentForm)
        if isinstance(exc, comments.ThreadGone):
            draft = ("new", None)  # its thread offers no reply form now: the text goes to a new one
        return _answer(request, session, seq=data["seq"] or 0, focus=data["parent"], error=error, draft=draft)
    return _answer(request, session, seq=comment.seq, focus=comment.pk)


def _comment(request: HttpRequest, session_id: int, comment_id: int) -> tuple[Session, Comment]:
    session = access.session_for(request, session_id, need=Role.REVIEWER)
    return session, comments.comment_in(session=session, comment_id=comment_id)


@login_required
@require_POST
def edit(request: HttpRequest, session_id: int, comment_id: int) -> HttpResponse:
    session, comment = _comment(request, session_id, comment_id)
    form = CommentEditForm(request.POST)
    error = "" if form.is_valid() else error_text(form)
    if not error:
        try:
            comments.edit_comment(actor=access.actor_of(request), comment=comment, body=form.cleaned_data["body"],
                                  ip=audit.client_ip(request))  # fmt: skip
        except comments.CommentError as exc:
            error = labelled(str(exc), CommentEditForm)
    return _answer(request, session, seq=comment.seq, focus=comment.pk, error=error, draft=("edit", comment.pk))


@login_required
@require_POST
def delete(request: HttpRequest, session_id: int, comment_id: int) -> HttpResponse:
    session, comment = _comment(request, session_id, comment_id)
    if asked := asked_first(request, question="Delete this comment?", answer="Delete the comment",
                            back=comments.permalink(comment)):  # fmt: skip
        return asked
    comments.delete_comment(actor=access.actor_of(request), comment=comment, role=access.role_on(request, session),
                            ip=audit.client_ip(request))  # fmt: skip
    return _answer(request, session, seq=comment.seq, focus=comment.parent_id or comment.pk)


@login_required
@require_POST
def resolve(request: HttpRequest, session_id: int, comment_id: int) -> HttpResponse:
    session, comment = _comment(request, session_id, comment_id)
    form = ResolveForm(request.POST)
    resolved = form.cleaned_data["resolved"] if form.is_valid() else True
    thread = comments.resolve_thread(actor=access.actor_of(request), comment=comment, resolved=resolved,
                                     ip=audit.client_ip(request))  # fmt: skip
    return _answer(request, session, seq=thread.seq, focus=thread.pk)
