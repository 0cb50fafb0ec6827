"""Tours in the dashboard: the project's Learn page, a tour's page and its edits (htmx and plain
posts), playing a tour, "add this step to a tour…" from the player (the step shown, never the
one the page was loaded at), and the player's tour mode (the narration panel, "Stop 2 of 3",
previous and next stops, the parameters every frame keeps, two queries a frame)."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from sessions_app import tours
from sessions_app.access import Actor
from sessions_app.models import AuditEntry, Project, Role, Session, ShareLink, Tour, TourStop

from .builders_teams import acme, member, mia, other, vic  # noqa: F401  (fixtures)
from .test_comments import HOSTILE, Elements
from .test_tours import first, recorded, second, signed_in  # noqa: F401  (fixtures)


@pytest.fixture
def tour(acme, first, second, mia) -> Tour:
    """Three stops: first-run #2, second-run #5, first-run #9."""
    actor = Actor(user=member("mia", acme, Role.MAINTAINER))
    made = tours.create_tour(actor=actor, project=acme, title="How it fixed the bug", description="Read *this*")
    tours.set_stops(actor=actor, tour=made, stops=[
        tours.StopSpec(session=first.pk, seq=2, title="It reads the file", narration="First **look**."),
        tours.StopSpec(session=second.pk, seq=5, title="Another run fails", narration="Compare them."),
        tours.StopSpec(session=first.pk, seq=9, title="The fix", narration="Here it *works*."),
    ])  # fmt: skip
    return made


def stop_ids(tour: Tour) -> list[int]:
    return list(TourStop.objects.filter(tour=tour).order_by("position").values_list("pk", flat=True))


def section(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    start = html.rindex("<", 0, start)
    tag = html[start + 1 : html.index(" ", start)]
    return html[start : html.index(f"</{tag}>", start)]


# --- the Learn page ---------------------------------------------------------------------------


def test_the_learn_page_lists_tours_with_length_sessions_and_play(vic, tour, first, second):
    response = vic.get(reverse("sessions:learn", args=["acme"]))
    assert response.status_code == 200
    card = section(response.content.decode(), "tour-list")
    assert "How it fixed the bug" in card and "Read <em>this</em>" in card
    assert "3 stops across 2 sessions" in " ".join(card.split())
    assert f'href="/sessions/{first.pk}/"' in card and f'href="/sessions/{second.pk}/"' in card
    assert f'href="/tours/{tour.pk}/play/?stop=1"' in card and f'href="/tours/{tour.pk}/"' in card
    assert 'id="tour-create-form"' not in response.content.decode()  # a viewer makes none


def test_the_project_page_links_its_learn_page(vic, acme):
    assert 'href="/projects/acme/learn/"' in vic.get(reverse("sessions:project", args=["acme"])).content.decode()


def test_a_maintainer_creates_a_tour_from_the_learn_page_and_lands_on_it(mia, acme):
    page = mia.get(reverse("sessions:learn", args=["acme"])).content.decode()
    assert 'id="tour-create-form"' in page
    response = mia.post(
        reverse("sessions:tour_create", args=["acme"]), {"title": "  Onboarding  ", "description": "hi"}
    )
    made = Tour.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/tours/{made.pk}/"
    assert (made.title, made.description, made.project, made.created_by_name) == ("Onboarding", "hi", acme, "mia")
    assert AuditEntry.objects.filter(action="tour.create", target=f"tour:{made.pk}").count() == 1


def test_a_tour_without_a_title_is_a_400_with_the_form_saying_why(mia):
    response = mia.post(reverse("sessions:tour_create", args=["acme"]), {"title": "", "description": "x"})
    assert response.status_code == 400 and "This field is required" in response.content.decode()
    assert not Tour.objects.exists()


def test_a_viewer_cannot_create_a_tour_and_an_outsider_sees_no_learn_page(vic, other, tour):
    assert vic.post(reverse("sessions:tour_create", args=["acme"]), {"title": "mine"}).status_code == 403
    outsider = signed_in("olga", other, Role.ADMIN)
    assert outsider.get(reverse("sessions:learn", args=["acme"])).status_code == 404
    assert outsider.get(reverse("sessions:tour", args=[tour.pk])).status_code == 404
    assert outsider.get(reverse("sessions:tour_play", args=[tour.pk])).status_code == 404


# --- the tour page ----------------------------------------------------------------------------


def test_the_tour_page_shows_the_stops_in_order_with_narration_and_forms_for_maintainers(mia, vic, tour, first):
    page = mia.get(reverse("sessions:tour", args=[tour.pk])).content.decode()
    stops = section(page, "tour-stops")
    numbers = re.findall(r'<span class="stop-number">Stop (\d+)</span> <bdi class="stop-title">([^<]+)</bdi>', stops)
    assert numbers == [("1", "It reads the file"), ("2", "Another run fails"), ("3", "The fix")]
    assert "<p>First <strong>look</strong>.</p>" in stops
    assert f'href="/sessions/{first.pk}/?step=9&amp;tour={tour.pk}&amp;stop=3"' in stops
    assert "</bdi></a> at event #10</p>" in stops  # seq 9, as people count (the player says the same)
    assert "Move stop 2 up" in stops and "stop-edit-form" in stops and 'id="tour-edit-form"' in page
    viewed = vic.get(reverse("sessions:tour", args=[tour.pk])).content.decode()
    assert "<p>First <strong>look</strong>.</p>" in viewed
    assert not any(form in viewed for form in ("Move stop", "stop-edit-form", "tour-edit-form", "tour-delete-form"))


def test_moving_a_stop_with_htmx_answers_with_the_stops_in_their_new_order(mia, tour):
    a, b, c = stop_ids(tour)
    response = mia.post(reverse("sessions:tour_stop_move", args=[tour.pk, c]), {"direction": "up"},
                        HTTP_HX_REQUEST="true")  # fmt: skip
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="tour-stops"')
    assert re.findall(r'<bdi class="stop-title">([^<]+)</bdi>', html) == [
        "It reads the file",
        "The fix",
        "Another run fails",
    ]
    assert stop_ids(tour) == [a, c, b]


def test_a_plain_post_redirects_back_to_the_tour_page(mia, tour):
    a, b, c = stop_ids(tour)
    response = mia.post(reverse("sessions:tour_stop_move", args=[tour.pk, a]), {"direction": "down"})
    assert response.status_code == 302 and response["Location"] == f"/tours/{tour.pk}/"
    assert stop_ids(tour) == [b, a, c]


def test_editing_and_deleting_a_stop(mia, tour):
    a, b, c = stop_ids(tour)
    response = mia.post(reverse("sessions:tour_stop_edit", args=[tour.pk, b]),
                        {"title": "Run two", "narration": "<script>alert(1)</script> [x](javascript:alert(1))"},
                        HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 200 and "Run two" in html
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not any((attrs.get("href") or "").startswith("javascript") for _, attrs in Elements(html).found)
    response = mia.post(reverse("sessions:tour_stop_delete", args=[tour.pk, a]), HTTP_HX_REQUEST="true")
    assert re.findall(r'<span class="stop-number">Stop (\d+)</span> <bdi class="stop-title">([^<]+)</bdi>',
                      response.content.decode()) == [("1", "Run two"), ("2", "The fix")]  # fmt: skip
    assert stop_ids(tour) == [b, c]


def test_a_refused_stop_edit_is_a_400_shown_at_that_stop(mia, tour):
    a, b, c = stop_ids(tour)
    response = mia.post(reverse("sessions:tour_stop_edit", args=[tour.pk, b]), {"title": " ", "narration": "typed <b>"},
                        HTTP_HX_REQUEST="true")  # fmt: skip
    assert response.status_code == 400
    stop = section(response.content.decode(), "stop-2")
    assert 'role="alert">Title: This field is required.' in stop and '<details class="stop-edit" open>' in stop
    assert TourStop.objects.get(pk=b).title == "Another run fails"
    # What was typed comes back (the stored narration had, and the next Save stored it again).
    assert ">typed &lt;b&gt;</textarea>" in stop and "Compare them.</textarea>" not in stop
    assert "It reads the file</textarea>" not in response.content.decode()  # the other stops: as stored
    assert "First **look**.</textarea>" in section(response.content.decode(), "stop-1")


def test_editing_the_title_and_description_answers_with_the_head(mia, tour):
    response = mia.post(reverse("sessions:tour_edit", args=[tour.pk]),
                        {"title": "Renamed", "description": "<img src=x onerror=alert(1)> *ok*"},
                        HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<section id="tour-head"')
    assert '<h1 id="tour-title">Renamed</h1>' in html and "<em>ok</em>" in html and "<img" not in html
    refused = mia.post(reverse("sessions:tour_edit", args=[tour.pk]), {"title": "x" * 201}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 400 and '<h1 id="tour-title">Renamed</h1>' in refused.content.decode()
    assert "Title: Ensure this value has at most 200 characters" in refused.content.decode()


def test_deleting_the_tour_goes_to_the_learn_page_saying_so_and_what_ended_with_it(mia, tour, acme):
    # It landed on Learn without a word, and its open share links died unsaid (the log too).
    from sessions_app import sharing

    sharing.create_link(actor=Actor(user=member("mia", acme, Role.MAINTAINER)), tour=tour)
    page = mia.get(reverse("sessions:tour", args=[tour.pk])).content.decode()
    assert 'data-confirm="Delete the tour “How it fixed the bug” and its stops? Its 1 open share link will stop' in page
    response = mia.post(reverse("sessions:tour_delete", args=[tour.pk]))
    assert response.status_code == 302 and response["Location"] == "/projects/acme/learn/"
    assert not Tour.objects.exists() and not TourStop.objects.exists() and not ShareLink.objects.exists()
    learn = mia.get(response["Location"]).content.decode()
    assert "Deleted the tour “How it fixed the bug”. Its 1 open share link stopped working." in learn
    assert "Deleted the tour" not in mia.get(response["Location"]).content.decode()  # said once
    entry = AuditEntry.objects.filter(action="tour.delete").get()
    assert json.loads(entry.detail) == {"stops": 3, "share_links": 1}
    response = mia.post(reverse("sessions:tour_delete", args=[tour.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 404


def test_a_viewer_may_not_edit_anything_on_the_tour_page(vic, tour):
    a, *_ = stop_ids(tour)
    for name, args, body in (("tour_edit", [tour.pk], {"title": "x"}), ("tour_delete", [tour.pk], {}),
                             ("tour_stop_edit", [tour.pk, a], {"title": "x"}),
                             ("tour_stop_move", [tour.pk, a], {"direction": "down"}),
                             ("tour_stop_delete", [tour.pk, a], {})):  # fmt: skip
        assert vic.post(reverse(f"sessions:{name}", args=args), body).status_code == 403, name
    assert stop_ids(tour)[0] == a and Tour.objects.get().title == "How it fixed the bug"


def test_a_stop_of_another_tour_is_404_on_this_one(mia, acme, tour):
    elsewhere = tours.create_tour(actor=Actor(user=member("mia", acme)), project=acme, title="Other")
    a, *_ = stop_ids(tour)
    assert mia.post(reverse("sessions:tour_stop_delete", args=[elsewhere.pk, a])).status_code == 404
    assert TourStop.objects.filter(pk=a).exists()


# --- playing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("query, stop", [("", 1), ("?stop=2", 2), ("?stop=3", 3), ("?stop=99", 3), ("?stop=x", 1)])
def test_play_redirects_to_the_player_at_the_stop_in_tour_mode(vic, tour, first, second, query, stop):
    response = vic.get(reverse("sessions:tour_play", args=[tour.pk]) + query)
    where = {1: (first.pk, 2), 2: (second.pk, 5), 3: (first.pk, 9)}[stop]
    assert response.status_code == 302
    assert response["Location"] == f"/sessions/{where[0]}/?step={where[1]}&tour={tour.pk}&stop={stop}"


def test_playing_a_tour_without_stops_opens_its_page(mia, acme):
    empty = tours.create_tour(actor=Actor(user=member("mia", acme)), project=acme, title="Empty")
    assert mia.get(reverse("sessions:tour_play", args=[empty.pk]))["Location"] == f"/tours/{empty.pk}/"


# --- tour mode in the player ------------------------------------------------------------------


def player(client: Client, session: Session, **params) -> str:
    headers = {"HTTP_HX_REQUEST": "true"} if params.pop("htmx", False) else {}
    response = client.get(reverse("sessions:player", args=[session.pk]), params, **headers)
    assert response.status_code == 200
    return response.content.decode()


def tour_data(html: str) -> dict:
    found = re.search(r'<script id="tour-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def test_tour_mode_shows_the_narration_panel_with_its_stop_and_the_stops_around_it(vic, tour, second):
    html = player(vic, second, step=5, tour=tour.pk, stop=2)
    panel = section(html, "tour-narration")
    assert '<span class="tour-stop-count">Stop 2 of 3</span>' in panel and "Another run fails" in panel
    assert "<p>Compare them.</p>" in panel
    assert f'id="tour-prev" href="/tours/{tour.pk}/play/?stop=1"' in panel
    assert f'id="tour-next" href="/tours/{tour.pk}/play/?stop=3"' in panel and 'id="tour-play-next"' in panel
    assert tour_data(html)["next"] == {"number": 3, "seq": 9, "here": False, "url": f"/tours/{tour.pk}/play/?stop=3"}
    controls = section(html, "controls")
    assert f'<input type="hidden" name="tour" value="{tour.pk}">' in controls
    assert '<input type="hidden" name="stop" id="tour-stop" value="2">' in controls
    assert 'class="player-body touring"' in html
    assert f"&amp;tour={tour.pk}&amp;stop=2" in section(html, "step-list")  # step links keep the tour


def test_the_next_stop_in_the_same_session_is_played_to_there(vic, tour, first):
    html = player(vic, first, step=2, tour=tour.pk, stop=1)
    assert tour_data(html)["next"] == {"number": 2, "seq": 5, "here": False, "url": f"/tours/{tour.pk}/play/?stop=2"}
    html = player(vic, first, step=9, tour=tour.pk, stop=3)
    panel = section(html, "tour-narration")
    assert "Stop 3 of 3" in panel and "The last stop." in panel and "tour-play-next" not in panel
    assert f'<a id="tour-end" href="/tours/{tour.pk}/">Back to the tour\'s page</a>' in panel
    assert tour_data(html)["next"] is None


def test_each_frame_brings_the_narration_panel_out_of_band_for_its_stop(vic, tour, first):
    # "Play to next stop" asks for the frame at stop 3's seq with stop=3: its panel comes along.
    html = player(vic, first, step=9, tour=tour.pk, stop=3, htmx=True)
    assert html.lstrip().startswith('<section id="step-list"')
    panel = section(html, "tour-narration")
    assert 'hx-swap-oob="true"' in html[html.index('<aside id="tour-narration"') :].split(">", 1)[0]
    assert "Stop 3 of 3" in panel and "<p>Here it <em>works</em>.</p>" in panel


def test_away_from_the_stop_the_panel_offers_to_go_back_to_it(vic, tour, first):
    panel = section(player(vic, first, step=4, tour=tour.pk, stop=1), "tour-narration")
    assert "Stop 1 of 3" in panel and 'data-seq="2"' in panel and "Back to the stop" in panel


def test_a_history_restore_gets_the_full_page_in_tour_mode(vic, tour, first):
    response = vic.get(reverse("sessions:player", args=[first.pk]), {"step": 2, "tour": tour.pk, "stop": 1},
                       HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert "<html" in html and 'id="tour-params"' in html and "Stop 1 of 3" in section(html, "tour-narration")


@pytest.mark.parametrize("what", ["no such tour", "another project's tour", "not a number"])
def test_a_tour_parameter_that_is_no_tour_of_this_project_plays_the_session_as_usual(vic, other, tour, first, what):
    foreign = tours.create_tour(actor=Actor(user=member("olga", other, Role.ADMIN)), project=other, title="Theirs")
    value = {"no such tour": tour.pk + 100, "another project's tour": foreign.pk, "not a number": "x"}[what]
    html = player(vic, first, step=2, tour=value, stop=1)
    assert 'id="tour-narration"' not in html and 'id="tour-params"' not in html and "Theirs" not in html


def test_tour_mode_costs_two_queries_a_frame(vic, tour, first):
    url = reverse("sessions:player", args=[first.pk])
    vic.get(url, {"step": 3}, HTTP_HX_REQUEST="true")  # warm
    with CaptureQueriesContext(connection) as plain:
        vic.get(url, {"step": 3}, HTTP_HX_REQUEST="true")
    with CaptureQueriesContext(connection) as touring:
        vic.get(url, {"step": 3, "tour": tour.pk, "stop": 1}, HTTP_HX_REQUEST="true")
    assert len(touring) - len(plain) == 2  # the tour (scoped) and its stops


# --- "add this step to a tour…" ---------------------------------------------------------------


def test_maintainers_get_the_add_to_tour_panel_and_viewers_the_tours_through_the_session(mia, vic, tour, first, second):
    html = player(mia, first, step=4)
    panel = section(html, "tour-panel")
    form = re.search(r'<form id="tour-stop-form"[^>]*>', panel).group(0)
    # htmx posts to the plain address with the shown step; without JavaScript the address names
    # the step the page shows, which never moves then.
    assert 'hx-include="#nav-step"' in form and f'hx-post="/sessions/{first.pk}/tour-stops/"' in form
    assert f'action="/sessions/{first.pk}/tour-stops/?step=4"' in form
    assert 'name="step"' not in panel  # the shown step comes from #nav-step, never a copy of the loaded one
    assert f'<option value="{tour.pk}">How it fixed the bug</option>' in panel
    # A viewer (a newcomer) has no form, but is shown the tours that walk through the session.
    viewer_panel = section(player(vic, first, step=4), "tour-panel")
    assert 'id="tour-stop-form"' not in viewer_panel
    here = re.search(r'<p id="tours-here">(.*?)</p>', viewer_panel).group(1)
    assert here == (f'In the tour <a href="/tours/{tour.pk}/play/"><bdi>How it fixed the bug</bdi></a>: '
                    "a guided walk through this session.")  # fmt: skip
    assert f'href="/projects/{first.project.slug}/learn/"' in viewer_panel
    # A session no tour stops on says nothing of tours, beyond the link to the project's.
    tour.stops.filter(session=second).delete()
    untoured = section(player(vic, second, step=0), "tour-panel")
    assert 'id="tours-here"' not in untoured and "This project's tours" in untoured


def test_adding_the_shown_step_appends_a_stop_and_says_where(mia, tour, first):
    response = mia.post(reverse("sessions:tour_stop_add", args=[first.pk]),
                        {"step": 7, "tour": tour.pk, "title": "Shown step", "narration": "why"},
                        HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<section id="tour-panel"')
    assert "Added event #8 as stop 4 of" in " ".join(html.split())
    last = TourStop.objects.filter(tour=tour).order_by("position").last()
    assert (last.session_id, last.seq, last.title, last.narration, last.position) == (
        first.pk,
        7,
        "Shown step",
        "why",
        3,
    )


def test_adding_to_a_new_tour_creates_it_with_its_first_stop(mia, acme, second):
    response = mia.post(reverse("sessions:tour_stop_add", args=[second.pk]),
                        {"step": 3, "tour": "", "new_tour": "Fresh tour", "title": "Start here"},
                        HTTP_HX_REQUEST="true")  # fmt: skip
    made = Tour.objects.get(title="Fresh tour")
    assert (
        response.status_code == 200
        and f'<option value="{made.pk}" selected>Fresh tour</option>' in response.content.decode()
    )
    assert list(made.stops.values_list("session_id", "seq", "position")) == [(second.pk, 3, 0)]
    assert list(AuditEntry.objects.filter(target=f"tour:{made.pk}").values_list("action", flat=True).order_by("seq")) == [
        "tour.create", "tour.change",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "body, says",
    # Each form field named by its label, as the panel shows it (New tour's title, Step, Stop title).
    [({"title": "t", "tour": ""}, "s title: Pick a tour"), ({"title": "t", "new_tour": "N"}, "Step: This field is required"),
     ({"title": "t", "new_tour": "N", "step": 12}, "Step: session"), ({"title": "", "new_tour": "N", "step": 1}, "Stop title:")],
)  # fmt: skip
def test_a_refused_addition_is_a_400_that_says_why_and_makes_no_tour(mia, first, body, says):
    response = mia.post(reverse("sessions:tour_stop_add", args=[first.pk]), body, HTTP_HX_REQUEST="true")
    assert response.status_code == 400 and says in response.content.decode()
    assert not Tour.objects.exists()  # not even the new tour of a refused first stop


def test_a_refused_addition_shows_the_form_as_it_was_filled_in_and_a_title_beside_a_picked_tour_is_asked(
    mia, first, tour
):
    # The form came back empty, its picker on the first tour: the next try, with the new tour's
    # title typed, added the stop to that tour and dropped the title without a word.
    url = reverse("sessions:tour_stop_add", args=[first.pk])
    typed = {"step": 7, "tour": "", "new_tour": "", "title": "Variables <appear>", "narration": "See *this*"}
    panel = mia.post(url, typed, HTTP_HX_REQUEST="true").content.decode()
    assert 'value="Variables &lt;appear&gt;"' in panel and ">See *this*</textarea>" in panel
    assert '<option value="" selected>a new tour' in panel and f'<option value="{tour.pk}" selected' not in panel
    both = mia.post(url, typed | {"tour": tour.pk, "new_tour": "Fresh"}, HTTP_HX_REQUEST="true")
    assert both.status_code == 400 and "New tour&#x27;s title: Pick “a new tour”" in both.content.decode()
    assert f'<option value="{tour.pk}" selected>' in both.content.decode() and 'value="Fresh"' in both.content.decode()
    assert tour.stops.count() == 3 and not Tour.objects.filter(title="Fresh").exists()
    # A new tour's title refused by the workflow is named as that field, not the stop's title.
    hidden = mia.post(url, typed | {"new_tour": "My \u202etour", "title": "fine"}, HTTP_HX_REQUEST="true")
    assert hidden.status_code == 400 and "New tour&#x27;s title: no invisible" in hidden.content.decode()


def test_a_viewer_cannot_add_and_a_tour_of_another_project_is_refused(mia, vic, acme, other, first, tour):
    assert vic.post(reverse("sessions:tour_stop_add", args=[first.pk]),
                    {"step": 1, "tour": tour.pk, "title": "t"}).status_code == 403  # fmt: skip
    foreign = tours.create_tour(actor=Actor(user=member("mia", other, Role.MAINTAINER)), project=other, title="Theirs")
    response = mia.post(reverse("sessions:tour_stop_add", args=[first.pk]), {"step": 1, "tour": foreign.pk, "title": "t"},
                        HTTP_HX_REQUEST="true")  # fmt: skip
    assert response.status_code == 400 and "another project" in response.content.decode()
    assert not foreign.stops.exists()


def test_a_plain_post_of_the_add_form_opens_the_new_stop_in_tour_mode(mia, tour, first):
    response = mia.post(reverse("sessions:tour_stop_add", args=[first.pk]), {"step": 6, "tour": tour.pk, "title": "t"})
    assert response.status_code == 302 and response["Location"] == f"/sessions/{first.pk}/?step=6&tour={tour.pk}&stop=4"
    # Without JavaScript the form's own address names the step (the body has none).
    plain = mia.post(f"{reverse('sessions:tour_stop_add', args=[first.pk])}?step=2", {"tour": tour.pk, "title": "u"})
    assert plain.status_code == 302 and plain["Location"] == f"/sessions/{first.pk}/?step=2&tour={tour.pk}&stop=5"
    # A refusal is the site's page saying why, not a line of text.
    refused = mia.post(f"{reverse('sessions:tour_stop_add', args=[first.pk])}?step=2", {"tour": tour.pk, "title": ""})
    assert refused.status_code == 400 and refused["Content-Type"].startswith("text/html")
    assert "Not added to a tour" in refused.content.decode() and "Stop title:" in refused.content.decode()


def test_hostile_narration_never_reaches_the_tour_page_or_the_player_as_markup(mia, tour, first):
    a, *_ = stop_ids(tour)
    mia.post(reverse("sessions:tour_stop_edit", args=[tour.pk, a]), {"title": "<script>t</script>",
             "narration": "\n\n".join(HOSTILE)})  # fmt: skip
    for html in (section(mia.get(reverse("sessions:tour", args=[tour.pk])).content.decode(), "stop-1"),
                 section(player(mia, first, step=2, tour=tour.pk, stop=1), "tour-narration")):  # fmt: skip
        html = re.sub(r'<script id="tour-data" type="application/json">[^<]*</script>', "", html)  # data, not markup
        elements = Elements(html).found
        assert not any(tag in ("script", "img", "iframe") for tag, _ in elements), html
        assert not any(name.startswith("on") for _, attrs in elements for name in attrs)
        assert not any((attrs.get("href") or "").strip().lower().startswith("javascript") for _, attrs in elements)
        assert "&lt;script&gt;t&lt;/script&gt;" in html


def test_a_tour_share_links_visitor_plays_the_tour_without_signing_in(mia, tour, first, second):
    made = mia.post(f"/api/tours/{tour.pk}/share-links", b'{"expires_in_days": 1}', content_type="application/json")
    assert made.status_code == 201
    visitor = Client()
    opened = visitor.get(made.json()["url"])
    assert opened.status_code == 302
    played = visitor.get(opened["Location"])
    assert played.status_code == 302 and played["Location"] == f"/sessions/{first.pk}/?step=2&tour={tour.pk}&stop=1"
    html = player(visitor, second, step=5, tour=tour.pk, stop=2)
    panel = section(html, "tour-narration")
    assert "Stop 2 of 3" in panel and "<p>Compare them.</p>" in panel
    # The tour's title links to its page, which the link's visitor reads too.
    assert f'<a href="/tours/{tour.pk}/"><bdi>How it fixed the bug</bdi></a>' in panel
    assert 'id="tour-panel"' not in html


def test_the_tour_page_loads_the_share_links_panel_for_maintainers_only(mia, vic, tour):
    page = mia.get(reverse("sessions:tour", args=[tour.pk])).content.decode()
    assert f'hx-get="/tours/{tour.pk}/share-links/"' in section(page, "share-links")
    assert 'id="share-links"' not in vic.get(reverse("sessions:tour", args=[tour.pk])).content.decode()


def _tour_visitor(mia: Client, tour: Tour) -> tuple[Client, int]:
    """A browser (no account) that opened a share link to `tour`, and the link's id."""
    made = mia.post(f"/api/tours/{tour.pk}/share-links", b'{"expires_in_days": 1}', content_type="application/json")
    assert made.status_code == 201
    visitor = Client()
    assert visitor.get(made.json()["url"]).status_code == 302
    return visitor, made.json()["id"]


def test_a_tour_links_visitor_reads_the_tour_page_without_its_controls_or_project(mia, acme, tour, first):
    Tour.objects.filter(pk=tour.pk).update(description="Read *this*\n\n" + "\n\n".join(HOSTILE))
    visitor, link = _tour_visitor(mia, tour)
    response = visitor.get(reverse("sessions:tour", args=[tour.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    head, stops = section(page, "tour-head"), section(page, "tour-stops")
    assert '<h1 id="tour-title">How it fixed the bug</h1>' in head
    # Until when, as the player says it to the same visitor.
    expires = ShareLink.objects.get(pk=link).expires_at
    assert f'shared with you by link (read-only), until <time datetime="{expires.isoformat()}">' in page
    assert "<p>Read <em>this</em></p>" in head
    elements = Elements(head).found
    assert not any(tag in ("script", "img", "iframe") for tag, _ in elements), head
    assert not any(name.startswith("on") for _, attrs in elements for name in attrs)
    numbers = re.findall(r'<span class="stop-number">Stop (\d+)</span> <bdi class="stop-title">([^<]+)</bdi>', stops)
    assert numbers == [("1", "It reads the file"), ("2", "Another run fails"), ("3", "The fix")]
    assert "<p>First <strong>look</strong>.</p>" in stops
    assert f'href="/sessions/{first.pk}/?step=9&amp;tour={tour.pk}&amp;stop=3"' in stops
    assert f'href="/tours/{tour.pk}/play/?stop=1"' in head
    for absent in ("tour-edit-form", "stop-edit-form", "Move stop", "tour-delete-form", 'id="share-links"',
                   "/share-links/", "<form", f'href="/projects/{acme.slug}/', "Log out"):  # fmt: skip
        assert absent not in page, absent
    assert "shared with you" in page
    # The recording, not the team (docs/teams.md): the author is named to members only.
    assert " · by <bdi>mia</bdi>" not in head
    assert " · by <bdi>mia</bdi>" in section(
        mia.get(reverse("sessions:tour", args=[tour.pk])).content.decode(), "tour-head"
    )
    # Counted once, when the link was opened, as for a session link's pages: not per page view.
    assert AuditEntry.objects.filter(action="share_link.use").count() == 1
    # Reading, never changing: the tour's forms still want a maintainer.
    a, *_ = stop_ids(tour)
    assert visitor.post(reverse("sessions:tour_edit", args=[tour.pk]), {"title": "x"}).status_code == 302
    assert visitor.post(reverse("sessions:tour_stop_delete", args=[tour.pk, a])).status_code == 302
    assert Tour.objects.get(pk=tour.pk).title == "How it fixed the bug" and stop_ids(tour)[0] == a


def test_another_tours_link_or_a_session_link_does_not_open_this_tour_page(mia, acme, tour, first):
    other_tour = tours.create_tour(actor=Actor(user=member("mia", acme, Role.MAINTAINER)), project=acme, title="Other")
    visitor, _ = _tour_visitor(mia, other_tour)
    assert visitor.get(reverse("sessions:tour", args=[other_tour.pk])).status_code == 200
    assert visitor.get(reverse("sessions:tour", args=[tour.pk])).status_code == 404
    # A link to a session that is one of this tour's stops opens that session, not the tour.
    made = mia.post(f"/api/sessions/{first.pk}/share-links", b'{"expires_in_days": 1}',
                    content_type="application/json")  # fmt: skip
    assert made.status_code == 201
    session_visitor = Client()
    assert session_visitor.get(made.json()["url"]).status_code == 302
    assert session_visitor.get(reverse("sessions:player", args=[first.pk])).status_code == 200
    assert session_visitor.get(reverse("sessions:tour", args=[tour.pk])).status_code == 404
    # Without any link: the sign-in page, as before.
    anonymous = Client().get(reverse("sessions:tour", args=[tour.pk]))
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")


def test_a_revoked_or_expired_tour_link_closes_the_tour_page_at_once(mia, tour):
    visitor, link = _tour_visitor(mia, tour)
    page = reverse("sessions:tour", args=[tour.pk])
    assert visitor.get(page).status_code == 200
    assert mia.delete(f"/api/share-links/{link}").status_code == 204
    assert visitor.get(page).status_code == 404
    later, second_link = _tour_visitor(mia, tour)
    assert later.get(page).status_code == 200
    ShareLink.objects.filter(pk=second_link).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert later.get(page).status_code == 404


def test_members_see_the_tour_page_as_before(mia, vic, acme, tour):
    for client in (mia, vic):
        page = client.get(reverse("sessions:tour", args=[tour.pk])).content.decode()
        assert f'href="/projects/{acme.slug}/"' in page and f'href="/projects/{acme.slug}/learn/"' in page
        assert "shared with you" not in page
    assert 'id="tour-edit-form"' in mia.get(reverse("sessions:tour", args=[tour.pk])).content.decode()
