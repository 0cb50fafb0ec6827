"""Tours: a project's guided tours, one tour with its stops, and the whole ordered list of stops.
Any member reads them; maintainers and up write (docs/teams.md).

Numbers: a stop's `position` and an event's `seq` are 0-based indexes, as everywhere in the API;
`number` (the stop, "stop 2 of 3") and `event_number` (the event as the player counts it) are
the same places counted from 1, for people."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Body, Field, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from .. import access, audit, tours
from ..models import Role, Tour, TourStop
from ..models.bounds import MAX_ID, MAX_POSITION
from .schemas import BodyIn, DetailOut, Id, Text

router = Router(tags=["tours"])

DENIED = {400: DetailOut, 403: DetailOut, 404: DetailOut}


class TourIn(BodyIn):
    title: Text = Field(..., max_length=tours.MAX_TITLE)
    description: Text = Field("", max_length=tours.MAX_TEXT, description="Markdown; shown sanitised")


class TourChangeIn(BodyIn):
    read_only = frozenset({"id", "project", "description_html", "created_by", "created_at", "updated_at",
                           "stop_count", "sessions", "play_url", "stops"})  # fmt: skip
    title: Text | None = Field(None, max_length=tours.MAX_TITLE, description="leave out to keep it")
    description: Text | None = Field(None, max_length=tours.MAX_TEXT, description="Markdown; leave out to keep it")


class StopIn(BodyIn):
    read_only = frozenset({"position", "number", "event_number", "narration_html", "player_url"})
    # Past these no row's: refused before they reach the database (models/bounds.py). A seq below
    # 0 is the workflow's to refuse, naming the session's range.
    session: int = Field(..., ge=1, le=MAX_ID, description="a session of the tour's project")
    seq: int = Field(
        ..., le=MAX_POSITION, description="the event the stop is at: 0-based, 0 <= seq < the session's eventCount"
    )
    title: Text = Field(..., max_length=tours.MAX_TITLE)
    narration: Text = Field("", max_length=tours.MAX_TEXT, description="Markdown; shown sanitised")


class StopOut(Schema):
    position: int = Field(description="0-based place in the tour")
    number: int = Field(description="1-based stop number, as pages show it (stop 2 of 3)")
    session: int
    seq: int = Field(description="0-based index of the event the stop is at")
    event_number: int = Field(description="the same event counted from 1 (seq + 1)")
    title: str
    narration: str = Field(description="the Markdown as written")
    narration_html: str = Field(description="the narration rendered and sanitised")
    player_url: str = Field(description="the player at this stop, in tour mode")


class TourSummaryOut(Schema):
    id: int
    project: str = Field(description="the project's slug")
    title: str
    description: str = Field(description="the Markdown as written")
    description_html: str = Field(description="the description rendered and sanitised")
    created_by: str
    created_at: datetime
    updated_at: datetime
    stop_count: int
    sessions: list[int] = Field(description="the sessions its stops are in, in the order the tour reaches them")
    play_url: str = Field(description="plays the tour from stop 1 (redirects to its player)")


class TourOut(TourSummaryOut):
    stops: list[StopOut]


def _stop_row(stop: TourStop) -> dict[str, Any]:
    return {
        "position": stop.number - 1, "number": stop.number, "session": stop.session_id, "seq": stop.seq,
        "event_number": stop.seq + 1, "title": stop.title, "narration": stop.narration,
        "narration_html": str(stop.narration_html), "player_url": stop.player_url,
    }  # fmt: skip


def _tour_row(
    tour: Tour, *, slug: str, stop_count: int, sessions: list[int], description_html: str | None = None
) -> dict[str, Any]:
    html = tours.describe(tour) if description_html is None else description_html
    return {
        "id": tour.pk, "project": slug, "title": tour.title, "description": tour.description,
        "description_html": str(html), "created_by": tour.created_by_name,
        "created_at": tour.created_at, "updated_at": tour.updated_at, "stop_count": stop_count,
        "sessions": sessions, "play_url": tours.play_url(tour.pk),
    }  # fmt: skip


def _with_stops(tour: Tour) -> dict[str, Any]:
    stops = tours.stops_of(tour=tour)
    sessions = list(dict.fromkeys(stop.session_id for stop in stops))
    row = _tour_row(tour, slug=tour.project.slug, stop_count=len(stops), sessions=sessions)
    return row | {"stops": [_stop_row(stop) for stop in stops]}


def _bad(exc: tours.TourError) -> HttpError:
    return HttpError(400, str(exc))


@router.get("/projects/{slug}/tours", response={200: list[TourSummaryOut], **DENIED}, url_name="tours")
def list_tours(request: HttpRequest, slug: str):
    """The project's tours by title, each with its length and the sessions it spans."""
    project = access.project_for(request, slug)
    return [
        _tour_row(
            s.tour,
            slug=project.slug,
            stop_count=s.stop_count,
            sessions=[sid for sid, _ in s.sessions],
            description_html=s.description_html,
        )
        for s in tours.tours_of_project(project=project)
    ]


@router.post("/projects/{slug}/tours", response={201: TourOut, **DENIED}, url_name="create_tour")
def create_tour(request: HttpRequest, slug: str, body: TourIn):
    """A new tour, without stops (PUT its stops next). Maintainers and up."""
    project = access.project_for(request, slug, need=Role.MAINTAINER)
    try:
        tour = tours.create_tour(actor=access.actor_of(request), project=project, title=body.title,
                                 description=body.description, ip=audit.client_ip(request))  # fmt: skip
    except tours.TourError as exc:
        raise _bad(exc)
    tour.project = project
    return Status(201, _with_stops(tour))


@router.get("/tours/{tour_id}", response={200: TourOut, **DENIED}, url_name="tour")
def get_tour(request: HttpRequest, tour_id: Id):
    """The tour with its stops in order."""
    return _with_stops(access.tour_for(request, tour_id))


@router.patch("/tours/{tour_id}", response={200: TourOut, **DENIED}, url_name="change_tour")
def change_tour(request: HttpRequest, tour_id: Id, body: TourChangeIn):
    """Change the title and/or the description. Maintainers and up."""
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    try:
        tours.change_tour(actor=access.actor_of(request), tour=tour, title=body.title, description=body.description,
                          ip=audit.client_ip(request))  # fmt: skip
    except tours.TourError as exc:
        raise _bad(exc)
    return _with_stops(tour)


@router.delete("/tours/{tour_id}", response={204: None, **DENIED}, url_name="delete_tour")
def delete_tour(request: HttpRequest, tour_id: Id):
    """Delete the tour and its stops (the sessions stay). Maintainers and up."""
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    tours.delete_tour(actor=access.actor_of(request), tour=tour, ip=audit.client_ip(request))
    return Status(204, None)


@router.put("/tours/{tour_id}/stops", response={200: list[StopOut], **DENIED}, url_name="tour_stops")
def set_stops(request: HttpRequest, tour_id: Id, stops: list[StopIn] = Body(...)):
    """Replace the stops with this ordered list (a JSON array; `[]` empties the tour) and answer
    with it. Each stop's session must be of the tour's project, its seq an event of that session;
    a refusal names the stop by index and number and the field (`stops[1].seq: stop 2: ...`)."""
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    specs = [tours.StopSpec(session=s.session, seq=s.seq, title=s.title, narration=s.narration) for s in stops]
    try:
        saved = tours.set_stops(actor=access.actor_of(request), tour=tour, stops=specs, ip=audit.client_ip(request))
    except tours.TourError as exc:
        raise _bad(exc)
    return [_stop_row(stop) for stop in saved]
