"""The player's sign-off panel: everyone sees a session's sign-offs, reviewers record one."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from .. import access, audit
from ..forms import SignOffForm
from ..models import Role, Session
from ..replay.sign_offs import sign_offs_of
from ..reviews import SignOffRefused, sign_off
from .pages import login_required


def sign_off_panel(request: HttpRequest, session: Session, **extra: Any) -> dict[str, Any]:
    """What the panel shows: the sign-offs, and the form for a caller who may sign off."""
    return {
        "sign_offs": sign_offs_of(session=session),
        "can_sign_off": access.may(request, session, Role.REVIEWER),
        "sign_off_form": SignOffForm(),
    } | extra


@login_required
@require_POST
def sign_off_session(request: HttpRequest, session_id: int) -> HttpResponse:
    session = access.session_for(request, session_id, need=Role.REVIEWER)
    form = SignOffForm(request.POST)
    error, status = "", 200
    if form.is_valid():
        try:
            sign_off(session=session, reviewer=access.actor_of(request), verdict=form.cleaned_data["verdict"],
                     note=form.cleaned_data["note"], ip=audit.client_ip(request))  # fmt: skip
            form = SignOffForm()
        except SignOffRefused as exc:
            error, status = f"Not signed off: {exc}.", 409
    else:
        error, status = "A sign-off needs a verdict: approved, changes requested or rejected.", 400
    if not request.htmx and not error:
        return redirect(session.get_absolute_url())
    context = {"session": session, **sign_off_panel(request, session, sign_off_form=form, sign_off_error=error)}
    # A refusal answers its 400 or 409 with the panel saying why, to htmx (base.html's
    # responseHandling swaps it in) and to a plain form post alike.
    response = render(request, "sessions_app/player.html#sign-offs", context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response
