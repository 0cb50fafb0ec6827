"""Guided tours: an ordered, narrated walk through steps of one project's sessions.

A tour's stops are numbered from 1 for people ("stop 2 of 3") and kept at 0-based, dense
`position`s; a stop is one event (`seq`, 0-based as everywhere in Replay) of a session of the
tour's project. The API (api/tours.py), the Learn and tour pages and the player's "add this step
to a tour…" form (views/tours.py) call these workflows; each change records its tour.* audit
entry with ids, numbers and seqs only (never a narration).

Who may call them at all (maintainer to change, viewer to read) is the caller's
`access.tour_for` / `access.project_for`; what depends on the stops (their sessions are of the
tour's project and visible to the actor, their seqs exist) is checked here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache

from django.db import connection, transaction
from django.db.models import Count
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString

from . import audit, markdown
from .access import Actor, NotVisible, hold, sessions_visible_to
from .deletion import lock_links
from .lookalikes import as_picked, hidden_in_name
from .models import Project, Session, ShareLink, Tour, TourStop

MAX_TITLE = 200  # the models' CharField
MAX_TEXT = 20_000  # characters of Markdown in a description or a narration
MAX_STOPS = 200


class TourError(ValueError):
    """A tour or stop the workflow refuses (a 400): the message names the field, and for a
    stop its number (1-based) and its index in the list (0-based)."""


@dataclass(frozen=True)
class StopSpec:
    """A stop as a caller sends it: a session of the tour's project, an event of it (`seq`,
    0-based), a title and a Markdown narration."""

    session: int
    seq: int
    title: str
    narration: str = ""


@dataclass
class TourSummary:
    """A line of the Learn page (and of the API's list): the tour, how long it is, what it spans."""

    tour: Tour
    description_html: SafeString
    stop_count: int
    sessions: list[tuple[int, str]] = field(default_factory=list)  # (id, label), in first-stop order


# --- links ------------------------------------------------------------------------------------


def play_url(tour_id: int, number: int = 1) -> str:
    """Where "play" starts a tour (stop `number`, 1-based): it redirects to that stop's player."""
    return f"{reverse('sessions:tour_play', args=[tour_id])}?stop={number}"


def stop_player_url(*, tour_id: int, session_id: int, seq: int, number: int) -> str:
    """The player at a stop, in tour mode."""
    return f"{reverse('sessions:player', args=[session_id])}?step={seq}&tour={tour_id}&stop={number}"


# --- reading ----------------------------------------------------------------------------------


def stops_of(*, tour: Tour) -> list[TourStop]:
    """The tour's stops in order, each with its session, `number` (1-based) and `narration_html`
    (sanitised): one query. Numbers count the stops as they are: deleting a session deletes its
    stops in the database (a cascade, no renumbering), which may leave a gap in `position`."""
    stops = list(TourStop.objects.filter(tour=tour).select_related("session").order_by("position"))
    for number, stop in enumerate(stops, 1):
        stop.number = number
        stop.narration_html = markdown.shown(stop, "narration")
        stop.player_url = stop_player_url(tour_id=tour.pk, session_id=stop.session_id, seq=stop.seq,
                                          number=stop.number)  # fmt: skip
    return stops


def describe(tour: Tour) -> SafeString:
    return markdown.shown(tour, "description")


def tours_of_project(*, project: Project) -> list[TourSummary]:
    """The project's tours by title, each with its stop count and the sessions it spans: two
    queries (the tours with their counts; the distinct sessions of their stops)."""
    tours = list(Tour.objects.filter(project=project).annotate(stop_count=Count("stops")).order_by("title", "id"))
    spans: dict[int, list[tuple[int, str]]] = {}
    rows = (
        TourStop.objects.filter(tour__project=project)
        .order_by("tour_id", "position")
        .values_list("tour_id", "session_id", "session__source_session_id")
    )
    for tour_id, session_id, source_id in rows:
        spanned = spans.setdefault(tour_id, [])
        if all(sid != session_id for sid, _ in spanned):
            spanned.append((session_id, source_id or f"session {session_id}"))
    return [
        TourSummary(tour=t, description_html=describe(t), stop_count=t.stop_count, sessions=spans.get(t.pk, []))
        for t in tours
    ]


# --- checks -----------------------------------------------------------------------------------


def _clean_title(title: str, *, what: str = "title") -> str:
    title = as_picked(" ".join(title.split()))
    if not title:
        raise TourError(f"{what}: give it a title")
    if why := hidden_in_name(what, title):
        raise TourError(why)
    if len(title) > MAX_TITLE:
        raise TourError(f"{what}: at most {MAX_TITLE} characters (this one has {len(title)})")
    return title


def _clean_text(text: str, *, what: str) -> str:
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise TourError(f"{what}: at most {MAX_TEXT:,} characters of Markdown (this one has {len(text):,})")
    return text


def _checked(*, actor: Actor, tour: Tour, stops: Sequence[StopSpec], listed: bool = True) -> list[StopSpec]:
    """The stops cleaned, or a TourError naming the first bad one and its field: in a list
    (`listed`) by its index and its number ("stops[1].seq: stop 2: ..."), alone by the field.
    One query: the sessions they name, among those the actor may open in the tour's project
    (any other is "not a session of this tour's project", whether it exists or not)."""
    if len(stops) > MAX_STOPS:
        raise TourError(f"stops: a tour holds at most {MAX_STOPS} stops (this list has {len(stops)})")
    ids = {stop.session for stop in stops}
    counts = dict(
        sessions_visible_to(actor).filter(project_id=tour.project_id, pk__in=ids).values_list("pk", "event_count")
    )
    cleaned = []
    for index, stop in enumerate(stops):

        def where(name: str) -> str:
            return f"stops[{index}].{name}: stop {index + 1}" if listed else name  # noqa: B023 (used at once)

        if stop.session not in counts:
            raise TourError(f"{where('session')}: session {stop.session} is not a session of this tour's project")
        events = counts[stop.session]
        if not 0 <= stop.seq < events:
            span = f"its events are 0 to {events - 1}" if events else "it has no events"
            raise TourError(f"{where('seq')}: session {stop.session} has no event {stop.seq} ({span})")
        title = _clean_title(stop.title, what=where("title"))
        narration = _clean_text(stop.narration, what=where("narration"))
        cleaned.append(StopSpec(session=stop.session, seq=stop.seq, title=title, narration=narration))
    return cleaned


def _current(tour: Tour, *, stopping_on: Iterable[int] = ()) -> list[TourStop]:
    """The tour's stops in order, its row locked first: two maintainers adding a stop at once
    each see the other's (PostgreSQL; SQLite writes one transaction at a time anyway). The
    sessions of new stops (`stopping_on`) are held before it (access.hold's order). NotVisible
    when any of them, or the tour, was deleted since the caller looked it up."""
    hold(Session, *stopping_on)
    hold(Tour, tour.pk)
    return list(TourStop.objects.filter(tour=tour).order_by("position"))


def _write(*, tour: Tour, stops: list[StopSpec]) -> None:
    """Replace the tour's stops with `stops`, in order (positions 0..n-1, dense)."""
    TourStop.objects.filter(tour=tour).delete()
    TourStop.objects.bulk_create(
        TourStop(
            tour=tour,
            position=position,
            session_id=stop.session,
            seq=stop.seq,
            title=stop.title,
            narration=stop.narration,
            **markdown.kept_columns("narration", stop.narration),  # bulk_create calls no save()
        )
        for position, stop in enumerate(stops)
    )
    _touch(tour)


def _renumber(tour: Tour, stops: list[TourStop]) -> None:
    """Give `stops` (the tour's rows in their new order) positions 0..n-1, updating only the
    rows that move: first past every position in use, then into place, so the unique (tour,
    position) constraint holds after every statement. A stop keeps its id."""
    moving = [(index, stop) for index, stop in enumerate(stops) if stop.position != index]
    aside = max((stop.position for stop in stops), default=0) + 1
    for index, stop in moving:
        TourStop.objects.filter(pk=stop.pk).update(position=aside + index)
    for index, stop in moving:
        TourStop.objects.filter(pk=stop.pk).update(position=index)
    _touch(tour)


def _touch(tour: Tour) -> None:
    tour.updated_at = timezone.now()
    Tour.objects.filter(pk=tour.pk).update(updated_at=tour.updated_at)


def _record(action: str, *, actor: Actor, tour: Tour, ip: str | None, **detail: object) -> None:
    # Never a title, description or narration: text someone wrote, which a redaction may have to
    # remove (a secret quoted in a title) and the log, never rewritten, would keep.
    audit.record(action=action, actor=actor, project=tour.project_id, target=f"tour:{tour.pk}", detail=detail, ip=ip)


def _links_newly_reaching(tour: Tour, before: set[int], after: set[int]) -> list[int]:
    """The tour's open share links, when its stops now reach a session they did not (a tour link
    shows its visitors the sessions of the tour's stops, access._share_grants): recorded with
    the change, so the audit log says who widened what a link shows."""
    if not after - before:
        return []
    return sorted(ShareLink.objects.active().filter(tour=tour).values_list("pk", flat=True))


def _stop_index(current: list[TourStop], stop_id: int, tour: Tour) -> int:
    for index, stop in enumerate(current):
        if stop.pk == stop_id:
            return index
    raise NotVisible(f"tour {tour.pk} has no stop {stop_id}")


# --- writing ----------------------------------------------------------------------------------


def create_tour(*, actor: Actor, project: Project, title: str, description: str = "", ip: str | None = None) -> Tour:
    """A new tour of `project`, without stops yet."""
    title = _clean_title(title)
    description = _clean_text(description, what="description")
    now = timezone.now()
    with transaction.atomic():
        tour = Tour.objects.create(project=project, title=title, description=description, created_by=actor.user,
                                   created_by_name=actor.name, created_at=now, updated_at=now)  # fmt: skip
        _record("tour.create", actor=actor, tour=tour, ip=ip)
    return tour


def change_tour(
    *, actor: Actor, tour: Tour, title: str | None = None, description: str | None = None, ip: str | None = None
) -> Tour:
    """Change a tour's title and/or description (None: leave it as it is)."""
    changed = []
    if title is not None and (title := _clean_title(title)) != tour.title:
        tour.title = title
        changed.append("title")
    if description is not None and (description := _clean_text(description, what="description")) != tour.description:
        tour.description = description
        changed.append("description")
    if changed:
        tour.updated_at = timezone.now()
        with transaction.atomic():
            tour.save(update_fields=[*changed, "updated_at"])
            _record("tour.change", actor=actor, tour=tour, ip=ip, fields=changed)
    return tour


def delete_tour(*, actor: Actor, tour: Tour, ip: str | None = None) -> int:
    """Delete a tour and its stops (the sessions stay); how many of its share links were open:
    they go with it (the database's cascade), said to the deleter and in the log, where its
    visitors' links had died without a word."""
    tour_id = tour.pk
    with transaction.atomic():
        Project.lock(tour.project_id)  # first: deletion.delete_session says why
        stops = len(_current(tour))
        lock_links(ShareLink.objects.filter(tour=tour))
        links = ShareLink.objects.active().filter(tour=tour).count()
        _record("tour.delete", actor=actor, tour=tour, ip=ip, stops=stops, **({"share_links": links} if links else {}))
        tour.delete()
    tour.pk = tour_id  # for the caller's answer
    return links


def set_stops(*, actor: Actor, tour: Tour, stops: Sequence[StopSpec], ip: str | None = None) -> list[TourStop]:
    """Replace the tour's stops with `stops`, in order: the whole list, checked whole first."""
    cleaned = _checked(actor=actor, tour=tour, stops=stops)
    with transaction.atomic():
        sessions = {stop.session for stop in cleaned}
        before = {stop.session_id for stop in _current(tour, stopping_on=sessions)}
        reached = _links_newly_reaching(tour, before, sessions)
        _write(tour=tour, stops=cleaned)
        _record("tour.change", actor=actor, tour=tour, ip=ip, stops=len(cleaned), sessions=sorted(sessions),
                **({"shared_through_links": reached} if reached else {}))  # fmt: skip
    return stops_of(tour=tour)


def add_stop(
    *, actor: Actor, tour: Tour, session: Session, seq: int, title: str, narration: str = "",
    position: int | None = None, ip: str | None = None,
) -> TourStop:  # fmt: skip
    """Append a stop at event `seq` of `session` (or insert it at 0-based `position`); errors
    name the new stop's field alone."""
    if session.project_id != tour.project_id:
        raise TourError(f"tour: tour {tour.pk} is of another project than session {session.pk}")
    added = StopSpec(session=session.pk, seq=seq, title=title, narration=narration)
    (added,) = _checked(actor=actor, tour=tour, stops=[added], listed=False)
    with transaction.atomic():
        current = _current(tour, stopping_on=[session.pk])
        if len(current) >= MAX_STOPS:
            raise TourError(f"tour: a tour holds at most {MAX_STOPS} stops")
        position = len(current) if position is None else position
        if not 0 <= position <= len(current):
            raise TourError(f"position: a new stop goes at 0 to {len(current)} (the tour has {len(current)} stops)")
        end = current[-1].position + 1 if current else 0  # past the last (positions may have a gap)
        new = TourStop.objects.create(tour=tour, position=end, session=session, seq=added.seq,
                                      title=added.title, narration=added.narration)  # fmt: skip
        reached = _links_newly_reaching(tour, {stop.session_id for stop in current}, {session.pk})
        current.insert(position, new)
        _renumber(tour, current)
        _record("tour.change", actor=actor, tour=tour, ip=ip, stop_added=position + 1, session=session.pk, seq=seq,
                **({"shared_through_links": reached} if reached else {}))  # fmt: skip
    stop = stops_of(tour=tour)[position]
    stop.shared_through_links = len(reached)
    return stop


def change_stop(*, actor: Actor, tour: Tour, stop_id: int, title: str, narration: str, ip: str | None = None) -> None:
    """Change one stop's title and narration (the tour page's stop form)."""
    title = _clean_title(title)
    narration = _clean_text(narration, what="narration")
    with transaction.atomic():
        current = _current(tour)
        index = _stop_index(current, stop_id, tour)
        TourStop.objects.filter(pk=stop_id).update(
            title=title, narration=narration, **markdown.kept_columns("narration", narration)
        )
        _touch(tour)
        _record("tour.change", actor=actor, tour=tour, ip=ip, stop_changed=index + 1)


def move_stop(*, actor: Actor, tour: Tour, stop_id: int, by: int, ip: str | None = None) -> int:
    """Move a stop `by` places (-1 up, +1 down), kept within the tour; its number afterwards."""
    with transaction.atomic():
        current = _current(tour)
        index = _stop_index(current, stop_id, tour)
        target = max(0, min(len(current) - 1, index + by))
        if target != index:
            current.insert(target, current.pop(index))
            _renumber(tour, current)
            _record("tour.change", actor=actor, tour=tour, ip=ip, stop_moved=index + 1, to=target + 1)
    return target + 1


def remove_stop(*, actor: Actor, tour: Tour, stop_id: int, ip: str | None = None) -> None:
    """Delete one stop; the later ones move up a place."""
    with transaction.atomic():
        current = _current(tour)
        index = _stop_index(current, stop_id, tour)
        removed = current[index]
        TourStop.objects.filter(pk=removed.pk).delete()
        _renumber(tour, current[:index] + current[index + 1 :])
        _record("tour.change", actor=actor, tour=tour, ip=ip, stop_removed=index + 1, session=removed.session_id,
                seq=removed.seq)  # fmt: skip


# --- tour mode --------------------------------------------------------------------------------


@dataclass
class StopLink:
    number: int
    title: str
    session: int
    seq: int
    url: str


@dataclass
class TourMode:
    """What the player shows of a tour at stop `number` of `count` (the narration panel), and
    what its script needs (`script_data`): where the next stop is."""

    tour_id: int
    tour_title: str
    number: int
    count: int
    stop: StopLink
    narration_html: SafeString
    here: bool  # the stop is in the session the player shows
    prev: StopLink | None
    next: StopLink | None
    script_data: dict[str, object]


@cache
def _stop_rows_sql() -> str:
    """Every stop's place, session, seq and title, and the id, narration and kept HTML
    (markdown.py) of the one at position %s only, of tour %s. Written as SQL: the same query as
    TourStop.objects.filter(tour=...).order_by("position").annotate(shown=Case(When(position=...,
    then=F("narration")), ...)).values_list(...), which Django took longer to compile than the
    database to run, on every frame of tour mode."""
    meta, quote = TourStop._meta, connection.ops.quote_name
    c = {
        name: quote(meta.get_field(name).column)
        for name in ("id", "position", "session", "seq", "title", "tour", *_SHOWN_STOP)
    }
    shown = ", ".join(f"CASE WHEN {c['position']} = %s THEN {c[name]} ELSE '' END" for name in _SHOWN_STOP)
    return (
        f"SELECT {c['position']}, {c['session']}, {c['seq']}, {c['title']}, {c['id']}, {shown} "
        f"FROM {quote(meta.db_table)} WHERE {c['tour']} = %s ORDER BY {c['position']}"
    )


_SHOWN_STOP = ("narration", "narration_html", "narration_html_of")


def _stop_rows(tour_id: int, index: int) -> list[tuple[int, int, int, str, int, str, str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(_stop_rows_sql(), [index] * len(_SHOWN_STOP) + [tour_id])
        return cursor.fetchall()


def tour_mode(*, tour: Tour, session: Session, number: int, link_suffix: str = "") -> TourMode | None:
    """The tour at stop `number` (1-based; out of range: the nearest) as the player at
    `session` shows it, its stop links ending in `link_suffix` (the viewer's choices); None for
    a tour without stops. One query: every stop's place and title, and only the shown stop's
    narration (a tour's narrations may be long)."""
    index = max(number, 1) - 1
    rows = _stop_rows(tour.pk, index)
    if not rows:
        return None
    index = min(index, len(rows) - 1)  # a stale link past the end: the last stop
    if rows[index][0] == index:
        shown = TourStop(pk=rows[index][4], **dict(zip(_SHOWN_STOP, rows[index][5:])))
    else:  # the stop is not at its dense position (see stops_of): ask for it
        shown = TourStop.objects.only("pk", *_SHOWN_STOP).get(tour=tour, position=rows[index][0])
    base = reverse("sessions:tour_play", args=[tour.pk])  # once, not once a stop
    links = [
        StopLink(number=n, title=t, session=s, seq=q, url=f"{base}?stop={n}{link_suffix}")
        for n, (_, s, q, t, *_) in enumerate(rows, 1)
    ]
    stop = links[index]
    following = links[index + 1] if index + 1 < len(links) else None
    data = {
        "tour": tour.pk, "stop": stop.number, "count": len(links), "session": session.pk,
        "next": None if following is None else {
            "number": following.number, "seq": following.seq, "here": following.session == session.pk,
            "url": following.url,
        },
    }  # fmt: skip
    return TourMode(
        tour_id=tour.pk, tour_title=tour.title, number=stop.number, count=len(links), stop=stop,
        narration_html=markdown.shown(shown, "narration"), here=stop.session == session.pk,
        prev=links[index - 1] if index > 0 else None, next=following, script_data=data,
    )  # fmt: skip
