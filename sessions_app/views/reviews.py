"""Recording a sign-off from the player's panel (views/player.py builds the panel): everyone
sees a session's sign-offs, reviewers record one."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from .. import access, audit
from ..forms import PlayerForm, SignOffForm, error_text
from ..models import Role
from ..reviews import SignOffRefused, sign_off
from .pages import login_required
from .player import player_page, sign_off_panel


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
    elif "verdict" in form.errors:
        error, status = "A sign-off needs a verdict: approved, changes requested or rejected.", 400
    else:  # the note, named as the page names it (it had been said to lack a verdict)
        error, status = f"Not signed off: {error_text(form)}", 400
    panel = {"sign_off_form": form, "sign_off_error": error}
    if not request.htmx:
        # Without JavaScript: the player as the form was sent from it (its address holds the
        # step, kinds, speed, pace and tour stop), the refusal in its panel; it had been a bare
        # fragment, and a success lost the step, then the tour.
        if not error:
            query = request.GET.urlencode()
            return redirect(session.get_absolute_url() + (f"?{query}" if query else ""))
        return player_page(request, session, PlayerForm(request.GET).values(), extra=panel, status=status)
    session.refresh_from_db()  # the verification the sign-off ran
    context = {"session": session, **sign_off_panel(request, session, **panel), "badge_oob": True}
    # A refusal answers its 400 or 409 with the panel saying why (base.html's responseHandling
    # swaps it in); the chain badge comes out of band with what the verification found (it had
    # kept the time of the one before until a reload).
    response = HttpResponse(
        render_to_string("sessions_app/player.html#sign-offs", context, request)
        + render_to_string("sessions_app/player.html#chain-badge", context, request),
        status=status,
    )
    patch_vary_headers(response, ["HX-Request"])
    return response
