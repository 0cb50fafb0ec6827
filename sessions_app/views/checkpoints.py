"""The player's checkpoint forms: save at the shown step (asking before a name is replaced),
rename, delete. Maintainers and up (sessions_app/checkpoints.py holds the workflows).

An htmx post answers with the Checkpoints panel (and the scrubber's marks out of band), a
refusal with its status (400, 409) and the reason in the panel; a plain form post goes back to
the player, or on a refusal gets the whole player with the reason in the panel.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from .. import access, audit, checkpoints
from ..forms import CheckpointForm, CheckpointRenameForm, PlayerForm, error_text
from ..models import Checkpoint, Role, Session
from ..replay import timeline
from .pages import login_required
from .player import player_page


def _taken(existing: Checkpoint, question: str) -> str:
    # Event numbers are shown 1-based (#1 is seq 0), as everywhere in the player.
    return f"A checkpoint named “{existing.name}” exists at #{existing.seq + 1}: {question}"


def _answer(request: HttpRequest, session: Session, *, seq: int, error: str = "", status: int = 200,
            taken: Checkpoint | None = None, asked: dict[str, Any] | None = None) -> HttpResponse:  # fmt: skip
    """The Checkpoints panel after a post; `taken` and `asked` (the name and step posted) make
    it ask whether to replace `taken`."""
    panel = {"checkpoint_error": error, "checkpoint_taken": taken, "checkpoint_asked": asked or {}}
    if not request.htmx:
        if status < 300:
            return redirect(f"{session.get_absolute_url()}?step={seq}")
        return player_page(request, session, PlayerForm({"step": seq}).values(), extra=panel, status=status)
    context = panel | {
        "session": session, "oob": True, "can_checkpoint": True,
        "overview": timeline.session_overview(session=session),
    } | checkpoints.checkpoints_listed(session=session)  # fmt: skip
    response = render(request, "sessions_app/player.html#checkpoints", context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _no_event(session: Session, seq: int) -> str:
    """Why event `seq` cannot be named, in the player's 1-based #N; "" if it can. Checked here
    rather than read from CheckpointError, whose message speaks the API's "seq"."""
    if 0 <= seq < session.event_count:
        return ""
    if not session.event_count:
        return "Event: this session has no events yet"
    return f"Event: this session has no event #{seq + 1} (its events are #1 to #{session.event_count})"


def _refusal(exc: checkpoints.CheckpointError, label: str) -> str:
    # The workflow's messages start with the API's field name ("name: ..."): the page's label instead.
    text = str(exc)
    return f"{label}: {text.removeprefix('name: ')}" if text.startswith("name: ") else text


@login_required
@require_POST
def create(request: HttpRequest, session_id: int) -> HttpResponse:
    """Name the shown event (`step`, a seq); a name in use is asked about first (`replace`)."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    form = CheckpointForm(request.POST)
    if not form.is_valid():
        seq = form.cleaned_data.get("step") or 0
        return _answer(request, session, seq=seq, error=f"Not saved: {error_text(form, full_stops=False)}.", status=400)
    data = form.cleaned_data
    if problem := _no_event(session, data["step"]):
        seq = min(data["step"], max(session.event_count - 1, 0))
        return _answer(request, session, seq=seq, error=f"Not saved: {problem}.", status=400)
    try:
        checkpoints.save_checkpoint(actor=access.actor_of(request), session=session, name=data["name"],
                                    seq=data["step"], replace=data["replace"], ip=audit.client_ip(request))  # fmt: skip
    except checkpoints.CheckpointExists as exc:
        return _answer(request, session, seq=data["step"], status=409, taken=exc.existing,
                       error=_taken(exc.existing, "replace it?"),
                       asked={"name": data["name"], "step": data["step"]})  # fmt: skip
    except checkpoints.CheckpointError as exc:
        return _answer(request, session, seq=min(data["step"], max(session.event_count - 1, 0)),
                       error=f"Not saved: {_refusal(exc, 'Name')}.", status=400)  # fmt: skip
    return _answer(request, session, seq=data["step"])


@login_required
@require_POST
def rename(request: HttpRequest, session_id: int, checkpoint_id: int) -> HttpResponse:
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    checkpoint = checkpoints.checkpoint_in(session=session, checkpoint_id=checkpoint_id)
    form = CheckpointRenameForm(request.POST)
    if not form.is_valid():
        return _answer(
            request,
            session,
            seq=checkpoint.seq,
            error=f"Not renamed: {error_text(form, full_stops=False)}.",
            status=400,
        )
    try:
        checkpoints.rename_checkpoint(actor=access.actor_of(request), checkpoint=checkpoint,
                                      name=form.cleaned_data["name"], ip=audit.client_ip(request))  # fmt: skip
    except checkpoints.CheckpointExists as exc:
        error = _taken(exc.existing, "rename or delete that one first.")
        return _answer(request, session, seq=checkpoint.seq, error=error, status=409)
    except checkpoints.CheckpointError as exc:
        return _answer(
            request, session, seq=checkpoint.seq, error=f"Not renamed: {_refusal(exc, 'New name')}.", status=400
        )
    return _answer(request, session, seq=checkpoint.seq)


@login_required
@require_POST
def delete(request: HttpRequest, session_id: int, checkpoint_id: int) -> HttpResponse:
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    checkpoint = checkpoints.checkpoint_in(session=session, checkpoint_id=checkpoint_id)
    checkpoints.delete_checkpoint(actor=access.actor_of(request), checkpoint=checkpoint, ip=audit.client_ip(request))
    return _answer(request, session, seq=checkpoint.seq)
