"""Guided tours in the dashboard: a project's Learn page, a tour's page with its stops, playing
a tour, "add this step to a tour…" in the player, and the player's tour mode.

Every tour is looked up through sessions_app/access.py (viewer to read, maintainer to change);
changes go through sessions_app/tours.py, whose TourError ("field: message") is a 400 shown next
to its form. Plain forms that htmx enhances: an htmx post gets the changed region (the tour's
head or its stops; a refusal too, at 400, which base.html's responseHandling swaps in), a plain
post a redirect.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages as django_messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from .. import access, audit, tours
from ..forms import (
    PlayerForm,
    TourForm,
    TourModeForm,
    TourStopAddForm,
    TourStopForm,
    TourStopMoveForm,
    error_text,
    labelled,
)
from ..models import Project, Role, Session, ShareLink, Tour, TourStop
from .pages import asked_first, login_required, player_link_suffix, signed_in_or_shared, take_messages

_LEARN_TAG = "learn"  # what the Learn page says once: a tour deleted


def _can_edit(request: HttpRequest, found: Tour | Session | Project) -> bool:
    return access.may(request, found, Role.MAINTAINER)


# --- the Learn page ---------------------------------------------------------------------------


@login_required
@require_GET
def learn(request: HttpRequest, slug: str) -> HttpResponse:
    """A project's tours: title, description, length, the sessions they span, play."""
    return _learn_page(request, access.project_for(request, slug), form=TourForm())


def _learn_page(request: HttpRequest, project: Project, *, form: TourForm, status: int = 200) -> HttpResponse:
    context = {"project": project, "tours": tours.tours_of_project(project=project), "form": form,
               "can_edit": _can_edit(request, project), "notices": take_messages(request, _LEARN_TAG)[_LEARN_TAG]}  # fmt: skip
    return render(request, "sessions_app/learn.html", context, status=status)


@login_required
@require_POST
def tour_create(request: HttpRequest, slug: str) -> HttpResponse:
    """A new tour (title, description); its stops come from the player."""
    project = access.project_for(request, slug, need=Role.MAINTAINER)
    form = TourForm(request.POST)
    if form.is_valid():
        try:
            tour = tours.create_tour(actor=access.actor_of(request), project=project, title=form.cleaned_data["title"],
                                     description=form.cleaned_data["description"], ip=audit.client_ip(request))  # fmt: skip
        except tours.TourError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("sessions:tour", tour.pk)
    return _learn_page(request, project, form=form, status=400)


# --- the tour page ----------------------------------------------------------------------------


@signed_in_or_shared
@require_GET
def tour_page(request: HttpRequest, tour_id: int) -> HttpResponse:
    """The tour: its description and stops. A share link's visitor of this very tour reads it
    too (access.tour_for admits its grant as a viewer, checked on every request, so a revoked or
    expired link stops at once); it is counted once, when /s/<token> is opened, not per page."""
    return _tour_answer(request, access.tour_for(request, tour_id), region=None)


def _tour_answer(request: HttpRequest, tour: Tour, *, region: str | None, error: str = "", stop: int | None = None,
                 form: TourForm | None = None, said: str = "", focus_stop: int | None = None,
                 stop_posted: Any = None) -> HttpResponse:  # fmt: skip
    """The tour page, or (an htmx post) its changed `region` ("tour-head" or "tour-stops"); a
    refusal (`error`, about stop id `stop` when it is one's) is a 400 shown by its form. `said`:
    what a change of stops did, for a screen reader; `focus_stop`: the stop the keyboard goes to
    when the control it was on is gone (replay.js)."""
    if region is not None and not error and not request.htmx:
        return redirect("sessions:tour", tour.pk)  # post/redirect/get
    context = {
        "tour": tour, "description_html": tours.describe(tour), "stops": tours.stops_of(tour=tour),
        "can_edit": (can_edit := _can_edit(request, tour)),
        "delete_question": _delete_question(tour) if can_edit else "",  # the editors' form only
        "error": error, "error_region": region, "error_stop": stop,
        # Seen through a share link (no role of one's own): the tour, not the project around it.
        "shared": access.share_grant_on(request, tour),
        "form": form or TourForm(initial={"title": tour.title, "description": tour.description}),
        "stops_said": said, "focus_stop": focus_stop,
        # A refused stop edit shows what was typed: the stored text came back, and the next Save
        # stored it again, the new narration lost.
        "stop_posted": stop_posted,
    }  # fmt: skip
    name = f"sessions_app/tour.html#{region}" if region is not None and request.htmx else "sessions_app/tour.html"
    response = render(request, name, context, status=400 if error else 200)
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_POST
def tour_edit(request: HttpRequest, tour_id: int) -> HttpResponse:
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    form = TourForm(request.POST)
    error = "" if form.is_valid() else error_text(form)
    if not error:
        try:
            tours.change_tour(actor=access.actor_of(request), tour=tour, title=form.cleaned_data["title"],
                              description=form.cleaned_data["description"], ip=audit.client_ip(request))  # fmt: skip
        except tours.TourError as exc:
            error = str(exc)
    if error:
        tour.refresh_from_db(fields=["title", "description"])  # the heading shows what is saved
    return _tour_answer(request, tour, region="tour-head", error=error, form=form if error else None)


@login_required
@require_POST
def tour_delete(request: HttpRequest, tour_id: int) -> HttpResponse:
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    if asked := asked_first(request, question=_delete_question(tour), answer="Delete the tour",
                            back=reverse("sessions:tour", args=[tour.pk])):  # fmt: skip
        return asked
    links = tours.delete_tour(actor=access.actor_of(request), tour=tour, ip=audit.client_ip(request))
    ended = f" Its {links} open share link{pluralize(links)} stopped working." if links else ""
    django_messages.success(request, f"Deleted the tour “{tour.title}”.{ended}", extra_tags=_LEARN_TAG)
    learn_url = reverse("sessions:learn", args=[tour.project.slug])
    return HttpResponseClientRedirect(learn_url) if request.htmx else redirect(learn_url)


def _delete_question(tour: Tour) -> str:
    """Also the tour page's data-confirm: its links die with it."""
    links = ShareLink.objects.active().filter(tour=tour).count()
    ending = f" Its {links} open share link{pluralize(links)} will stop working." if links else ""
    return f"Delete the tour “{tour.title}” and its stops?{ending}"


@login_required
@require_POST
def stop_edit(request: HttpRequest, tour_id: int, stop_id: int) -> HttpResponse:
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    form = TourStopForm(request.POST)
    error = "" if form.is_valid() else error_text(form)
    if not error:
        try:
            tours.change_stop(actor=access.actor_of(request), tour=tour, stop_id=stop_id,
                              title=form.cleaned_data["title"], narration=form.cleaned_data["narration"],
                              ip=audit.client_ip(request))  # fmt: skip
        except tours.TourError as exc:
            error = str(exc)
    if error:
        return _tour_answer(request, tour, region="tour-stops", error=error, stop=stop_id, stop_posted=request.POST)
    # Its form closes with the answer: the keyboard goes to the stop itself, and a screen reader hears it.
    return _tour_answer(request, tour, region="tour-stops", said="The stop was saved.", focus_stop=stop_id)


@login_required
@require_POST
def stop_move(request: HttpRequest, tour_id: int, stop_id: int) -> HttpResponse:
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    form = TourStopMoveForm(request.POST)
    if not form.is_valid():
        return _tour_answer(request, tour, region="tour-stops", error=error_text(form), stop=stop_id)
    by = -1 if form.cleaned_data["direction"] == "up" else 1
    number = tours.move_stop(actor=access.actor_of(request), tour=tour, stop_id=stop_id, by=by,
                             ip=audit.client_ip(request))  # fmt: skip
    return _tour_answer(request, tour, region="tour-stops", said=f"The stop is now stop {number}.", focus_stop=stop_id)


@login_required
@require_POST
def stop_delete(request: HttpRequest, tour_id: int, stop_id: int) -> HttpResponse:
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    if asked := asked_first(request, question=f"Delete this stop of the tour “{tour.title}”?", answer="Delete the stop",
                            back=reverse("sessions:tour", args=[tour.pk])):  # fmt: skip
        return asked
    tours.remove_stop(actor=access.actor_of(request), tour=tour, stop_id=stop_id, ip=audit.client_ip(request))
    return _tour_answer(request, tour, region="tour-stops", said="The stop was deleted.")


# --- playing a tour ---------------------------------------------------------------------------


@signed_in_or_shared
@require_GET
def tour_play(request: HttpRequest, tour_id: int) -> HttpResponse:
    """Stop N (1-based, default 1; past the end: the last) of the tour: its session's player at
    the stop's event, in tour mode. Share links to a tour lead here (its visitor passes; what it
    may open is access.tour_for's to say)."""
    tour = access.tour_for(request, tour_id)
    number = TourModeForm(request.GET).values()["stop"] or 1
    stops = list(TourStop.objects.filter(tour=tour).order_by("position").values_list("session_id", "seq"))
    if not stops:
        return redirect("sessions:tour", tour.pk)
    number = min(number, len(stops))
    session_id, seq = stops[number - 1]
    url = tours.stop_player_url(tour_id=tour.pk, session_id=session_id, seq=seq, number=number)
    # From a stop's link in the player: the next session plays with the same kinds and pace.
    return redirect(url + player_link_suffix(PlayerForm(request.GET).values(), changed_only=True))


def tour_mode_context(request: HttpRequest, session: Session, state: dict[str, Any], keep: str) -> dict[str, Any]:
    """The player's tour mode (`?tour=<id>&stop=<N>`): the narration panel (its stop links
    carrying the kinds, speed and pace the viewer changed in `state`, PlayerForm's values) and
    the parameters every step keeps (after `keep`). Two queries a frame (the tour, scoped; its
    stops), none without `tour`.
    A tour the caller may not see, or of another project, is no tour mode: the player as usual."""
    params = TourModeForm(request.GET).values()
    if params["tour"] is None:
        return {}
    try:
        tour = access.tour_for(request, params["tour"])
    except Http404:
        return {}
    if tour.project_id != session.project_id:
        return {}
    choices = player_link_suffix(state, changed_only=True)
    mode = tours.tour_mode(tour=tour, session=session, number=params["stop"] or 1, link_suffix=choices)
    if mode is None:
        return {}
    return {"tour_mode": mode, "keep": f"{keep}&tour={mode.tour_id}&stop={mode.number}"}


# --- "add this step to a tour…" in the player -------------------------------------------------


def tour_builder(request: HttpRequest, session: Session) -> dict[str, Any]:
    """The player's Tours panel, for every member: the tours that stop on this session (one
    query), so a newcomer finds the walk through it, and for maintainers "add this step to a
    tour…" (one more: the project's tours for its picker)."""
    tours_here = list(
        Tour.objects.filter(stops__session=session).distinct().order_by("title", "id").values_list("pk", "title")
    )
    if not _can_edit(request, session):
        return {"can_build_tours": False, "tours_here": tours_here}
    return {"can_build_tours": True, "tours_here": tours_here, "project_tours": _tours_to_pick(session)}


def _tours_to_pick(session: Session) -> list[tuple[int, str]]:
    return list(Tour.objects.filter(project_id=session.project_id).order_by("title", "id").values_list("pk", "title"))


@login_required
@require_POST
def stop_add(request: HttpRequest, session_id: int) -> HttpResponse:
    """Add the shown step (`step`, the player's #nav-step) to a tour of the session's project,
    or to a new tour (`new_tour`, its title)."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    posted = request.POST.copy()
    if "step" not in posted and "step" in request.GET:
        # Without JavaScript the page never moved from the step it was loaded at: the form's
        # address names it (htmx sends the shown one, #nav-step, instead).
        posted["step"] = request.GET["step"]
    form = TourStopAddForm(posted)
    if not form.is_valid():
        return _builder_answer(request, session, error=error_text(form), posted=posted)
    data, actor, ip = form.cleaned_data, access.actor_of(request), audit.client_ip(request)
    try:
        with transaction.atomic():  # a new tour is kept only with its first stop
            # The session before the new tour's audit entry takes the log's head (access.hold's
            # order): its delete, meanwhile, took them the other way round, a deadlock (review).
            access.hold(Session, session.pk)
            if data["tour"]:
                tour = access.tour_for(request, data["tour"], need=Role.MAINTAINER)
            else:
                tour = _new_tour(actor, session, data["new_tour"], ip)
            stop = tours.add_stop(actor=actor, tour=tour, session=session, seq=data["step"], title=data["title"],
                                  narration=data["narration"], ip=ip)  # fmt: skip
    except tours.TourError as exc:
        # The workflow names its own field (`seq`, as the API does); this form's is `step`.
        return _builder_answer(request, session, error=labelled(str(exc), TourStopAddForm, names={"seq": "step"}),
                               posted=posted)  # fmt: skip
    if not request.htmx:
        return redirect(stop.player_url)
    return _builder_answer(request, session, added=stop, tour=tour)


def _new_tour(actor: access.Actor, session: Session, title: str, ip: str | None) -> Tour:
    try:
        return tours.create_tour(actor=actor, project=session.project, title=title, ip=ip)
    except tours.TourError as exc:  # its `title` is this form's new tour's title, not the stop's
        message = str(exc)
        raise tours.TourError("new_tour" + message.removeprefix("title") if message.startswith("title:") else message)


def _builder_answer(request: HttpRequest, session: Session, *, error: str = "", added: Any = None,
                    tour: Tour | None = None, posted: Any = None) -> HttpResponse:  # fmt: skip
    """The Tours panel after a post; a refusal shows the form as it was filled in (`posted`): it
    had come back empty, its picker on the first tour, and the next try went to that tour."""
    if error and not request.htmx:
        # Without JavaScript: the site's refusal page saying why (the browser's Back returns to
        # the form as it was filled in).
        return render(request, "refusal.html", {"status": 400, "title": "Not added to a tour", "reason": error},
                      status=400)  # fmt: skip
    kept = {name: (posted or {}).get(name, "") for name in ("tour", "new_tour", "title", "narration")}
    context = {"session": session, **tour_builder(request, session), "tour_error": error, "added": added,
               "added_tour": tour, "tour_posted": kept if error else None}  # fmt: skip
    response = render(
        request, "sessions_app/includes/tour_panel.html#tour-panel", context, status=400 if error else 200
    )
    patch_vary_headers(response, ["HX-Request"])
    return response
