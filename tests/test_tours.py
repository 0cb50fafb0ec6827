"""Guided tours through the API and their workflows: a tour's stops across sessions of one
project, the whole ordered list replaced at once, a session of another project or an event a
session does not have refused naming the stop and the field, roles (viewers read, maintainers
change), an audit entry per change holding no narration, and narrations rendered inert."""

from __future__ import annotations

import orjson
import pytest
from django.test import Client

from sessions_app import tours
from sessions_app.access import Actor
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import AuditEntry, Project, Role, Session, Tour, TourStop

from .builders_teams import acme, key_of, member, mia, other, recorded, signed_in, vic  # noqa: F401  (fixtures)
from .conftest import synthetic_events
from .test_comments import HOSTILE, Elements


@pytest.fixture
def first(acme) -> Session:
    return recorded(acme, "first-run")


@pytest.fixture
def second(acme) -> Session:
    return recorded(acme, "second-run", events=8)


@pytest.fixture
def theirs(other) -> Session:
    return recorded(other, "their-run")


def send(client: Client, method: str, url: str, body: object = None):
    data = orjson.dumps(body) if body is not None else b""
    return client.generic(method, url, data, content_type="application/json")


def new_tour(client: Client, title: str = "How it fixed the bug", **body) -> dict:
    response = send(client, "POST", "/api/projects/acme/tours", {"title": title, **body})
    assert response.status_code == 201, response.content
    return response.json()


def three_stops(a: Session, b: Session) -> list[dict]:
    return [
        {"session": a.pk, "seq": 2, "title": "It reads the file", "narration": "First **look**."},
        {"session": b.pk, "seq": 5, "title": "Another run fails", "narration": "Compare with run one."},
        {"session": a.pk, "seq": 9, "title": "The fix", "narration": ""},
    ]


def put_stops(client: Client, tour_id: int, stops: list[dict]):
    return send(client, "PUT", f"/api/tours/{tour_id}/stops", stops)


# --- the API ----------------------------------------------------------------------------------


def test_a_maintainer_builds_a_tour_across_two_sessions_and_reads_it_back(mia, first, second):
    made = new_tour(mia, description="Why *each* step mattered")
    assert made["stops"] == [] and made["stop_count"] == 0 and made["project"] == "acme"
    assert made["description_html"] == "<p>Why <em>each</em> step mattered</p>\n"

    response = put_stops(mia, made["id"], three_stops(first, second))
    assert response.status_code == 200, response.content
    stops = response.json()
    assert [(s["position"], s["number"]) for s in stops] == [(0, 1), (1, 2), (2, 3)]
    assert [(s["session"], s["seq"], s["event_number"]) for s in stops] == [
        (first.pk, 2, 3), (second.pk, 5, 6), (first.pk, 9, 10),
    ]  # fmt: skip
    assert (
        stops[0]["narration"] == "First **look**."
        and stops[0]["narration_html"] == "<p>First <strong>look</strong>.</p>\n"
    )
    assert stops[1]["player_url"] == f"/sessions/{second.pk}/?step=5&tour={made['id']}&stop=2"

    tour = mia.get(f"/api/tours/{made['id']}").json()
    assert tour["stops"] == stops and tour["stop_count"] == 3
    assert tour["sessions"] == [first.pk, second.pk]  # in the order the tour reaches them
    assert tour["play_url"] == f"/tours/{made['id']}/play/?stop=1"
    listed = mia.get("/api/projects/acme/tours").json()
    assert [(t["id"], t["stop_count"], t["sessions"]) for t in listed] == [(made["id"], 3, [first.pk, second.pk])]


def test_putting_the_list_again_reorders_and_replaces_it_whole(mia, first, second):
    tour_id = new_tour(mia)["id"]
    stops = three_stops(first, second)
    put_stops(mia, tour_id, stops)
    reordered = put_stops(mia, tour_id, [stops[2], stops[0]]).json()
    assert [(s["number"], s["title"]) for s in reordered] == [(1, "The fix"), (2, "It reads the file")]
    assert list(TourStop.objects.filter(tour_id=tour_id).order_by("position").values_list("position", "seq")) == [
        (0, 9), (1, 2),
    ]  # fmt: skip
    assert put_stops(mia, tour_id, []).json() == []
    assert not TourStop.objects.filter(tour_id=tour_id).exists()


@pytest.mark.parametrize("whose", ["another project's", "no one's"])
def test_a_session_outside_the_tours_project_is_refused_naming_the_stop(mia, first, second, theirs, whose):
    tour_id = new_tour(mia)["id"]
    put_stops(mia, tour_id, three_stops(first, second))
    stops = three_stops(first, second)
    stops[1]["session"] = theirs.pk if whose == "another project's" else theirs.pk + 1000
    response = put_stops(mia, tour_id, stops)
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail.startswith("stops[1].session: stop 2: session ") and "not a session of this tour's project" in detail
    assert "their-run" not in detail  # says nothing of what is there
    assert TourStop.objects.filter(tour_id=tour_id).count() == 3  # the list is refused whole


@pytest.mark.parametrize("seq", [12, -1, 10_000])
def test_an_event_the_session_does_not_have_is_refused_naming_the_stop_and_the_field(mia, first, second, seq):
    tour_id = new_tour(mia)["id"]
    stops = three_stops(first, second)
    stops[2]["seq"] = seq
    response = put_stops(mia, tour_id, stops)
    assert response.status_code == 400
    assert response.json()["detail"] == (
        f"stops[2].seq: stop 3: session {first.pk} has no event {seq} (its events are 0 to 11)"
    )
    assert not TourStop.objects.filter(tour_id=tour_id).exists()


@pytest.mark.parametrize(
    "change, field",
    [({"title": "   "}, "stops[0].title: stop 1"), ({"title": "x\x00y"}, "0.title"), ({"narration": "a\x00"}, "0.narration"),
     ({"title": "x" * 201}, "0.title"), ({"session": "seven"}, "0.session")],
)  # fmt: skip
def test_a_bad_stop_field_is_a_400_naming_it(mia, first, second, change, field):
    tour_id = new_tour(mia)["id"]
    stops = three_stops(first, second)
    stops[0] |= change
    response = put_stops(mia, tour_id, stops)
    assert response.status_code == 400
    assert field in response.json()["detail"]


def test_a_tour_needs_a_title_and_nul_is_a_400_naming_the_field(mia):
    assert send(mia, "POST", "/api/projects/acme/tours", {"title": ""}).json()["detail"] == "title: give it a title"
    response = send(mia, "POST", "/api/projects/acme/tours", {"title": "ok", "description": "a\x00b"})
    assert response.status_code == 400 and response.json()["detail"].startswith("description:")
    assert not Tour.objects.exists()


def test_patch_changes_the_title_and_description_and_leaves_what_is_left_out(mia, first, second):
    tour_id = new_tour(mia, description="old")["id"]
    put_stops(mia, tour_id, three_stops(first, second))
    response = send(mia, "PATCH", f"/api/tours/{tour_id}", {"title": "Renamed"})
    assert response.status_code == 200
    assert (response.json()["title"], response.json()["description"]) == ("Renamed", "old")
    assert len(response.json()["stops"]) == 3
    assert send(mia, "PATCH", f"/api/tours/{tour_id}", {"description": "new"}).json()["description"] == "new"


def test_delete_removes_the_tour_and_its_stops_but_not_the_sessions(mia, first, second):
    tour_id = new_tour(mia)["id"]
    put_stops(mia, tour_id, three_stops(first, second))
    assert send(mia, "DELETE", f"/api/tours/{tour_id}").status_code == 204
    assert mia.get(f"/api/tours/{tour_id}").status_code == 404
    assert not TourStop.objects.exists() and Session.objects.filter(pk__in=[first.pk, second.pk]).count() == 2


def test_a_viewer_reads_tours_and_every_change_is_403(mia, vic, first, second):
    tour_id = new_tour(mia)["id"]
    put_stops(mia, tour_id, three_stops(first, second))
    assert vic.get(f"/api/tours/{tour_id}").status_code == 200
    assert len(vic.get("/api/projects/acme/tours").json()) == 1
    assert send(vic, "POST", "/api/projects/acme/tours", {"title": "mine"}).status_code == 403
    assert send(vic, "PATCH", f"/api/tours/{tour_id}", {"title": "mine"}).status_code == 403
    assert put_stops(vic, tour_id, []).status_code == 403
    assert send(vic, "DELETE", f"/api/tours/{tour_id}").status_code == 403
    assert Tour.objects.get(pk=tour_id).title == "How it fixed the bug" and TourStop.objects.count() == 3


def test_a_read_only_key_of_a_maintainer_reads_but_cannot_change(mia, acme, first):
    tour_id = new_tour(mia)["id"]
    key = key_of(member("mia", acme, Role.MAINTAINER), read_only=True)
    headers = {"authorization": f"Bearer {key}"}
    assert Client().get(f"/api/tours/{tour_id}", headers=headers).status_code == 200
    response = Client().patch(f"/api/tours/{tour_id}", b'{"title": "x"}', content_type="application/json",
                              headers=headers)  # fmt: skip
    assert response.status_code == 403


def test_a_non_member_gets_404_and_sees_no_tour(mia, other, first, second):
    tour_id = new_tour(mia)["id"]
    outsider = signed_in("olga", other, Role.ADMIN)
    assert outsider.get(f"/api/tours/{tour_id}").status_code == 404
    assert outsider.get("/api/projects/acme/tours").status_code == 404
    assert put_stops(outsider, tour_id, three_stops(first, second)).status_code == 404
    assert send(outsider, "DELETE", f"/api/tours/{tour_id}").status_code == 404
    assert outsider.get("/api/projects/other/tours").json() == []


def test_a_maintainer_of_another_project_cannot_put_its_sessions_in_a_tour(mia, acme, other, first, theirs):
    # Maintainer of both: the session is visible, but a tour stays within its project.
    member("mia", other, Role.MAINTAINER)
    tour_id = new_tour(mia)["id"]
    response = put_stops(mia, tour_id, [{"session": theirs.pk, "seq": 0, "title": "elsewhere"}])
    assert response.status_code == 400 and response.json()["detail"].startswith("stops[0].session: stop 1")


def test_each_change_is_an_audit_entry_on_the_tour_holding_no_narration(mia, first, second):
    tour_id = new_tour(mia)["id"]
    stops = three_stops(first, second)
    stops[0]["narration"] = "SECRET-NARRATION"
    put_stops(mia, tour_id, stops)
    send(mia, "PATCH", f"/api/tours/{tour_id}", {"description": "SECRET-DESCRIPTION"})
    send(mia, "DELETE", f"/api/tours/{tour_id}")
    entries = list(AuditEntry.objects.filter(action__startswith="tour.").order_by("seq"))
    assert [e.action for e in entries] == ["tour.create", "tour.change", "tour.change", "tour.delete"]
    assert {e.target for e in entries} == {f"tour:{tour_id}"} and {e.actor for e in entries} == {"mia"}
    assert orjson.loads(entries[1].detail) == {"stops": 3, "sessions": sorted([first.pk, second.pk])}
    assert orjson.loads(entries[2].detail) == {"fields": ["description"]}
    assert all("SECRET" not in e.detail for e in entries)


def test_narrations_and_descriptions_reach_the_api_inert_with_their_source_kept(mia, first):
    hostile = "\n\n".join(HOSTILE)
    tour_id = new_tour(mia, description=hostile)["id"]
    [stop] = put_stops(
        mia, tour_id, [{"session": first.pk, "seq": 1, "title": "<b>t</b>", "narration": hostile}]
    ).json()
    tour = mia.get(f"/api/tours/{tour_id}").json()
    assert stop["narration"] == hostile and tour["description"] == hostile
    for html in (stop["narration_html"], tour["description_html"]):
        elements = Elements(html).found
        assert not any(tag in ("script", "img", "iframe") for tag, _ in elements), html
        assert not any(name.startswith("on") for _, attrs in elements for name in attrs), html
        assert not any((attrs.get("href") or "").strip().lower().startswith("javascript") for _, attrs in elements)
        assert "&lt;script&gt;" in html


# --- the workflows ----------------------------------------------------------------------------


@pytest.fixture
def built(acme, first, second) -> tuple[Actor, Tour, list[int]]:
    actor = Actor(user=member("mia", acme, Role.MAINTAINER))
    tour = tours.create_tour(actor=actor, project=acme, title="Walkthrough")
    specs = [tours.StopSpec(session=s["session"], seq=s["seq"], title=s["title"]) for s in three_stops(first, second)]
    ids = [stop.pk for stop in tours.set_stops(actor=actor, tour=tour, stops=specs)]
    return actor, tour, ids


def positions(tour: Tour) -> list[tuple[int, int]]:
    return list(TourStop.objects.filter(tour=tour).order_by("position").values_list("position", "id"))


def test_what_a_get_answers_may_be_sent_back_changed_but_a_misspelt_field_is_refused(mia, first, second):
    made = new_tour(mia)
    assert put_stops(mia, made["id"], three_stops(first, second)).status_code == 200
    read = mia.get(f"/api/tours/{made['id']}").json()
    stops = read["stops"]
    stops[0]["title"] = "Renamed"
    stops.reverse()
    sent = put_stops(mia, made["id"], stops)  # the GET's own fields (position, player_url, ...) dropped
    assert sent.status_code == 200, sent.content
    assert [stop["title"] for stop in sent.json()] == ["The fix", "Another run fails", "Renamed"]
    changed = send(mia, "PATCH", f"/api/tours/{made['id']}", read | {"title": "Renamed tour"})
    assert changed.status_code == 200 and changed.json()["title"] == "Renamed tour"
    misspelt = put_stops(mia, made["id"], [{**stops[0], "narattion": "typo"}])
    assert (
        misspelt.status_code == 400 and misspelt.json()["detail"] == "stops.0.narattion: Extra inputs are not permitted"
    )
    # An item that is no object is named where it is, not as the body.
    item = put_stops(mia, made["id"], ["x"])
    assert item.status_code == 400 and item.json()["detail"] == "stops.0: must be a JSON object"


def test_add_stop_appends_or_inserts_keeping_positions_dense(built, first):
    actor, tour, ids = built
    appended = tours.add_stop(actor=actor, tour=tour, session=first, seq=11, title="The end")
    assert appended.number == 4 and appended.seq == 11
    inserted = tours.add_stop(actor=actor, tour=tour, session=first, seq=0, title="The start", position=0)
    assert inserted.number == 1
    assert positions(tour) == list(enumerate([inserted.pk, *ids, appended.pk]))  # the others keep their ids


def test_add_stop_names_the_new_stops_field_alone(built, first, theirs):
    actor, tour, _ = built
    with pytest.raises(tours.TourError, match=r"^seq: session \d+ has no event 12 \(its events are 0 to 11\)$"):
        tours.add_stop(actor=actor, tour=tour, session=first, seq=12, title="too far")
    with pytest.raises(tours.TourError, match="^title: give it a title$"):
        tours.add_stop(actor=actor, tour=tour, session=first, seq=1, title=" ")
    # A title that reads as another (a direction override, a zero-width space) is no title.
    with pytest.raises(tours.TourError, match=r"^title: no invisible or direction-changing characters \(U\+202E\)"):
        tours.add_stop(actor=actor, tour=tour, session=first, seq=1, title="\u202e")
    with pytest.raises(tours.TourError, match=r"^title: no invisible .* \(U\+200B\)"):
        tours.create_tour(actor=actor, project=tour.project, title="Walk\u200bthrough")
    assert tours.create_tour(
        actor=actor, project=tour.project, title="\u0645\u0650\u200c\u0647\u0631"
    ).title  # ZWNJ: a Persian word
    with pytest.raises(tours.TourError, match="^tour: tour .* another project"):
        tours.add_stop(actor=actor, tour=tour, session=theirs, seq=0, title="elsewhere")
    with pytest.raises(tours.TourError, match="^position: a new stop goes at 0 to 3"):
        tours.add_stop(actor=actor, tour=tour, session=first, seq=1, title="nowhere", position=7)
    assert TourStop.objects.filter(tour=tour).count() == 3


def test_moving_and_removing_stops_keeps_positions_dense_and_ids(built, first):
    actor, tour, (a, b, c) = built
    assert tours.move_stop(actor=actor, tour=tour, stop_id=c, by=-1) == 2
    assert positions(tour) == [(0, a), (1, c), (2, b)]
    assert tours.move_stop(actor=actor, tour=tour, stop_id=a, by=-1) == 1  # already first: stays
    assert tours.move_stop(actor=actor, tour=tour, stop_id=a, by=5) == 3  # kept within the tour
    assert positions(tour) == [(0, c), (1, b), (2, a)]
    tours.remove_stop(actor=actor, tour=tour, stop_id=c)
    assert positions(tour) == [(0, b), (1, a)]
    details = [orjson.loads(d) for d in AuditEntry.objects.filter(action="tour.change").order_by("seq")
               .values_list("detail", flat=True)]  # fmt: skip
    assert details[-3:] == [
        {"stop_moved": 3, "to": 2}, {"stop_moved": 1, "to": 3}, {"stop_removed": 1, "session": first.pk, "seq": 9},
    ]  # fmt: skip


def test_change_stop_changes_title_and_narration_of_that_stop_only(built):
    actor, tour, (a, b, c) = built
    tours.change_stop(actor=actor, tour=tour, stop_id=b, title="New title", narration="New *words*")
    stops = tours.stops_of(tour=tour)
    assert [s.title for s in stops] == ["It reads the file", "New title", "The fix"]
    assert str(stops[1].narration_html) == "<p>New <em>words</em></p>\n"
    with pytest.raises(tours.TourError, match="^title: give it a title$"):
        tours.change_stop(actor=actor, tour=tour, stop_id=b, title="", narration="")


def test_a_stop_of_another_tour_is_not_found_here(built, acme):
    actor, tour, ids = built
    elsewhere = tours.create_tour(actor=actor, project=acme, title="Another")
    from django.http import Http404

    with pytest.raises(Http404):
        tours.remove_stop(actor=actor, tour=elsewhere, stop_id=ids[0])
    assert TourStop.objects.filter(tour=tour).count() == 3


def test_tours_of_project_gives_each_tours_length_and_the_sessions_it_spans(built, acme, first, second):
    actor, tour, _ = built
    tours.create_tour(actor=actor, project=acme, title="An empty one")
    found = tours.tours_of_project(project=acme)
    assert [(s.tour.title, s.stop_count, s.sessions) for s in found] == [
        ("An empty one", 0, []),
        ("Walkthrough", 3, [(first.pk, "first-run"), (second.pk, "second-run")]),
    ]


def test_deleting_a_session_takes_its_stops_and_leaves_the_rest(built, second):
    actor, tour, (a, b, c) = built
    second.delete()
    assert [(s.pk, s.number) for s in tours.stops_of(tour=tour)] == [(a, 1), (c, 2)]  # counted as they are
    mode = tours.tour_mode(tour=tour, session=second, number=2)
    assert (mode.number, mode.count, mode.stop.seq, mode.prev.number) == (2, 2, 9, 1)
    added = tours.add_stop(actor=actor, tour=tour, session=Session.objects.get(pk=mode.stop.session), seq=3,
                           title="after the gap")  # fmt: skip
    assert added.number == 3 and positions(tour) == [(0, a), (1, c), (2, added.pk)]  # the gap closed
