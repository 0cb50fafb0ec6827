"""Search inside events across the caller's sessions (the sessions page's own search box looks
at their metadata; the player's at one session's events, matched the same way)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from .. import access
from ..forms import EventSearchForm
from ..replay.navigation import search_sessions
from .pages import login_required, render_page


@login_required
@require_GET
def search_events(request: HttpRequest) -> HttpResponse:
    """The first 50 events holding the text (newest session first), then 50 more at a time."""
    projects = access.projects_visible_to(request)
    form = EventSearchForm(request.GET, projects=projects)
    values = form.values()
    sessions = access.sessions_visible_to(request).in_project(values["project"])
    found = search_sessions(sessions=sessions, q=values["q"], after=values["after"])
    context = {"form": form, "q": values["q"], "hits": found["hits"], "more": found["next"],
               "continued": values["after"] is not None}  # fmt: skip
    return render_page(request, "sessions_app/search.html", "search-hits", context)
