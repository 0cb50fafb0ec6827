"""Search inside events across the caller's sessions: hits as (session, event #n, kind, snippet)
linking into the player at that event, matched as the player's own search matches, bounded with
a keyset "more", scoped to the caller's projects (one or all)."""

from __future__ import annotations

import re
from urllib.parse import unquote

import pytest
from django.urls import reverse

from sessions_app import replay
from sessions_app.models import Project, Role, Session

from .builders_dashboard import _event, build_session, conversation_events, logged_in, user  # noqa: F401
from .builders_teams import member

SEARCH = reverse("sessions:search_events")


def _hits(html: str) -> list[tuple[int, int]]:
    return [(int(s), int(q)) for s, q in re.findall(r'<li data-session="(\d+)" data-seq="(\d+)">', html)]


def _in_project(session: Session, project: Project) -> Session:
    Session.objects.filter(pk=session.pk).update(project=project)
    return Session.objects.get(pk=session.pk)


@pytest.fixture
def three(db, user):
    """Two sessions of the caller's (in two projects), one of another team's; all say "answer"."""
    second = Project.objects.create(name="Second", slug="second")
    member("analyst", second, Role.VIEWER)
    first = build_session(conversation_events(turns=2), source_session_id="talk-one")
    other = _in_project(build_session(conversation_events(turns=1), source_session_id="talk-two"), second)
    theirs = _in_project(build_session(conversation_events(turns=1), source_session_id="secret-talk"),
                         Project.objects.create(name="Theirs", slug="theirs"))  # fmt: skip
    return first, other, theirs


def test_hits_inside_events_across_the_callers_sessions_link_into_the_player(logged_in, three):
    first, other, theirs = three
    response = logged_in.get(SEARCH, {"q": "ANSWER 0.1"})
    html = response.content.decode()
    assert response.status_code == 200 and "<html" in html and "HX-Request" in response["Vary"]
    # Newest session first; the other team's never.
    seq_first = replay.search(session=first, q="answer 0.1")["results"][0]["seq"]
    seq_other = replay.search(session=other, q="answer 0.1")["results"][0]["seq"]
    assert _hits(html) == [(other.pk, seq_other), (first.pk, seq_first)]
    assert "secret-talk" not in html and theirs.pk not in {s for s, _ in _hits(html)}
    item = html[html.index(f'<li data-session="{first.pk}" data-seq="{seq_first}">') :]
    item = item[: item.index("</li>")]
    assert f'href="{reverse("sessions:player", args=[first.pk])}?step={seq_first}"' in item
    assert '<bdi class="hit-session">talk-one</bdi>' in item and f"event #{seq_first + 1} " in item
    assert '<span class="kind">llm_response</span>' in item and "answer 0.1" in item


def test_it_finds_exactly_what_the_players_search_finds_in_each_session(logged_in, three):
    first, other, _ = three
    for text in ("question", "ok", "boom", "gpt"):
        html = logged_in.get(SEARCH, {"q": text}, HTTP_HX_REQUEST="true").content.decode()
        for session in (first, other):
            in_player = [r["seq"] for r in replay.search(session=session, q=text, limit=500)["results"]]
            assert [q for s, q in _hits(html) if s == session.pk] == in_player, text


def test_a_hit_found_by_its_step_alone_shows_the_step_around_the_text(logged_in, db):
    # conversation_events' step ends say "out 0" only in their step (neither their payload nor
    # the record the builder stores holds it): the snippet must show the step, not another field.
    session = build_session(conversation_events(turns=1), source_session_id="steps")
    html = logged_in.get(SEARCH, {"q": "out 0"}, HTTP_HX_REQUEST="true").content.decode()
    [(found, seq)] = _hits(html)
    item = html[html.index(f'<li data-session="{found}" data-seq="{seq}">') :]
    snippet = re.search(r'<div class="snippet"><bdi>(.*?)</bdi></div>', item, re.S).group(1)
    assert found == session.pk and "out 0" in snippet
    [result] = replay.search(session=session, q="out 0")["results"]
    assert result["seq"] == seq and "out 0" in result["snippet"]


def test_percent_and_underscore_are_text_not_wildcards(logged_in, db):
    literal = build_session([_event(0, "user_message", payload={"text": "save 50%_now"})], source_session_id="lit")
    build_session([_event(0, "user_message", payload={"text": "save 50 and now"})], source_session_id="wild")
    html = logged_in.get(SEARCH, {"q": "50%_n"}).content.decode()
    assert [s for s, _ in _hits(html)] == [literal.pk]


def test_one_project_narrows_the_search_and_another_teams_slug_is_ignored(logged_in, three):
    first, other, _ = three
    html = logged_in.get(SEARCH, {"q": "question", "project": "second"}).content.decode()
    assert {s for s, _ in _hits(html)} == {other.pk}
    html = logged_in.get(SEARCH, {"q": "question", "project": "theirs"}).content.decode()
    assert {s for s, _ in _hits(html)} == {first.pk, other.pk}  # not a choice: all of mine


def test_hits_come_fifty_at_a_time_with_a_keyset_more_link(logged_in, db):
    sessions = [build_session(conversation_events(turns=12), source_session_id=f"long-{n}") for n in range(2)]
    expected = [(s.pk, r["seq"]) for s in reversed(sessions)
                for r in replay.search(session=s, q="answer", limit=500)["results"]]  # fmt: skip
    assert len(expected) == 2 * 12 * 4
    pages, params = [], {"q": "answer"}
    while True:
        html = logged_in.get(SEARCH, params, HTTP_HX_REQUEST="true").content.decode()
        assert html.lstrip().startswith('<section id="search-hits"')
        pages.append(_hits(html))
        found = re.search(r'rel="next" href="[^"]*after=([^"&]+)', html)
        if not found:
            break
        params = {"q": "answer", "after": unquote(found.group(1))}
    assert [len(p) for p in pages] == [50, 46] and sum(pages, []) == expected


def test_without_text_nothing_is_searched_and_bad_values_fall_back(logged_in, three, django_assert_max_num_queries):
    with django_assert_max_num_queries(4):  # the session, the user, the projects: no event read
        html = logged_in.get(SEARCH, HTTP_HX_REQUEST="true").content.decode()
    assert "Type some text" in html and _hits(html) == []
    response = logged_in.get(SEARCH, {"q": "answer", "after": "99999999999999999999~x", "project": "nope"})
    assert response.status_code == 200 and len(_hits(response.content.decode())) == 12


def test_history_restore_gets_the_full_page(logged_in, three):
    html = logged_in.get(SEARCH, {"q": "answer"}, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert "<html" in html.content.decode() and 'id="event-search"' in html.content.decode()
