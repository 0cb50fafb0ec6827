"""The diff view: two sessions' steps side by side, the first divergence, metric deltas, the
synchronized scrubber's partial, links into both players."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import unquote

import pytest
from django.urls import reverse

from sessions_app.models import Event, Session

from .builders_dashboard import build_session, conversation_events, logged_in, user  # noqa: F401

COMPARE = reverse("sessions:diff")


@pytest.fixture
def pair(db) -> tuple[Session, Session]:
    a = build_session(conversation_events(turns=3), source_session_id="run-a", task="first try")
    events = conversation_events(turns=4)
    # B's second step runs different code: the sessions diverge at step 1.
    step_ends = [e for e in events if e.step_state is not None]
    step_ends[1].step_state = {**step_ends[1].step_state, "action_code": "x = 'other'"}
    b = build_session(events, source_session_id="run-b", task="second try")
    return a, b


def test_full_page_shows_divergence_deltas_and_aligned_steps(logged_in, pair):
    a, b = pair
    response = logged_in.get(COMPARE, {"a": a.pk, "b": b.pk})
    html = response.content.decode()
    assert response.status_code == 200 and "<html" in html
    assert "First divergence at step 2</strong>: Different code" in html  # index 1, shown 1-based
    assert 'class="divergence-row" id="diff-step-1"' in html
    # The agents' session ids are isolated: a right-to-left override in one reverses nothing after it.
    assert f'<a href="{a.get_absolute_url()}"><bdi>run-a</bdi></a>' in html and "<bdi>run-b</bdi>" in html
    rows = re.findall(r'<tr class="[^"]*" id="diff-step-(\d+)"', html)
    assert [int(r) for r in rows] == [0, 1, 2, 3]  # B's extra step is aligned against nothing
    # Deltas are B - A.
    assert '<td>Steps</td><td class="num">3</td><td class="num">4</td><td class="num">1</td>' in html
    assert f'<td class="num">{b.tokens - a.tokens}</td>' in html
    assert 'id="diff-scrubber"' in html and 'id="diff-offset"' in html
    assert "HX-Request" in response["Vary"]


def test_every_row_links_into_both_players_at_that_step(logged_in, pair):
    a, b = pair
    html = logged_in.get(COMPARE, {"a": a.pk, "b": b.pk}).content.decode()
    for session in (a, b):
        for pos, seq in Event.objects.filter(session=session, step_pos__isnull=False).values_list("step_pos", "seq"):
            assert f'href="{reverse("sessions:player", args=[session.pk])}?step={seq}"' in html, (session, pos)


def test_htmx_request_gets_only_the_rows_from_the_scrubber_offset(logged_in, pair):
    a, b = pair
    response = logged_in.get(COMPARE, {"a": a.pk, "b": b.pk, "offset": 2}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="diff-rows"')
    assert "<html" not in html and 'id="diff-scrubber"' not in html
    assert [int(r) for r in re.findall(r'id="diff-step-(\d+)"', html)] == [2, 3]


def test_history_restore_request_gets_the_full_page(logged_in, pair):
    a, b = pair
    response = logged_in.get(COMPARE, {"a": a.pk, "b": b.pk, "offset": 2}, HTTP_HX_REQUEST="true",
                             HTTP_HX_HISTORY_RESTORE_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert "<html" in html and 'id="diff-scrubber"' in html and 'value="2"' in html


def test_anonymous_visitor_is_sent_to_login_and_sees_no_steps(client, pair):
    a, b = pair
    response = client.get(COMPARE, {"a": a.pk, "b": b.pk})
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert b"run-a" not in response.content


@pytest.mark.parametrize("params", [{}, {"a": "1"}, {"a": "x", "b": "y"}, {"a": "1", "b": "1"}])
def test_bad_parameters_get_a_clear_400(logged_in, pair, params):
    response = logged_in.get(COMPARE, params)
    assert response.status_code == 400
    assert (
        b"Pick" in response.content
        or b"This field is required" in response.content
        or b"whole number" in response.content
    )


def test_unknown_session_is_404(logged_in, pair):
    assert logged_in.get(COMPARE, {"a": pair[0].pk, "b": 10**6}).status_code == 404


def test_identical_sessions_have_no_divergence(logged_in, db):
    a = build_session(conversation_events(turns=2), source_session_id="x")
    b = build_session(conversation_events(turns=2), source_session_id="y")
    html = logged_in.get(COMPARE, {"a": a.pk, "b": b.pk}).content.decode()
    assert "No divergence</strong>: the steps match" in html
    assert "divergence-row" not in html


def test_step_code_in_the_diff_is_escaped(logged_in, db):
    a = build_session(conversation_events(turns=1), source_session_id="x")
    events = conversation_events(turns=1)
    end = next(e for e in events if e.step_state is not None)
    end.step_state = {**end.step_state, "action_code": "print('<script>window.__pwned=1</script>')"}
    b = build_session(events, source_session_id="y")
    html = logged_in.get(COMPARE, {"a": a.pk, "b": b.pk}).content.decode()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;window.__pwned" in html


# --- comparing sessions picked on different list pages; "compare with…" in the player ----------


def _radio(html: str, letter: str, pk: int) -> str:
    found = re.search(rf'<input type="radio" name="{letter}" value="{pk}" form="compare-form"[^>]*>', html)
    return found.group(0) if found else ""


def test_a_pick_on_one_list_page_stays_picked_on_the_next_so_both_reach_the_diff(logged_in, pair):
    a, b = pair
    for n in range(60):  # b on the first page, a (older) on the second
        build_session([], source_session_id=f"filler-{n}", finish=False)
    Session.objects.filter(source_session_id__startswith="filler-").update(started_at=datetime(2021, 1, 1, tzinfo=UTC))
    Session.objects.filter(pk=a.pk).update(started_at=datetime(2020, 1, 1, tzinfo=UTC))
    first = logged_in.get(reverse("sessions:list"), {"b": b.pk}).content.decode()
    assert "checked" in _radio(first, "b", b.pk) and not _radio(first, "a", a.pk)
    after = unquote(re.search(r'rel="next" href="[^"]*after=([^"&]+)', first).group(1))
    # The pager sends the picks it holds (#compare-form) with the next page's request.
    assert re.search(rf'rel="next" href="[^"]*b={b.pk}[^"]*" hx-get="[^"]*" hx-include="#compare-form"', first)
    second = logged_in.get(reverse("sessions:list"), {"after": after, "b": b.pk}, HTTP_HX_REQUEST="true")
    html = second.content.decode()
    assert _radio(html, "a", a.pk) and not _radio(html, "b", a.pk + 10_000)
    picks = html[html.index('id="compare-picks"') :]
    picks = picks[: picks.index("</p>")]
    # B is on the first page: kept here as a picked radio of the same form, named.
    assert f'name="b" value="{b.pk}" form="compare-form" checked' in picks and "run-b" in picks
    # What the compare button then sends: A from this page, B kept from the other one.
    response = logged_in.get(COMPARE, {"a": a.pk, "b": b.pk})
    assert response.status_code == 200 and "First divergence" in response.content.decode()


def test_a_pick_of_a_session_the_caller_cannot_see_is_dropped(logged_in, pair):
    from sessions_app.models import Project

    other = Project.objects.create(name="Other", slug="other")
    hidden = Session.objects.create(project=other, source_format="canonical", source_session_id="not-yours")
    html = logged_in.get(reverse("sessions:list"), {"a": hidden.pk, "b": 2**70}).content.decode()
    assert "not-yours" not in html and 'id="compare-picks"' not in html


def test_compare_with_a_missing_or_huge_id_is_a_form_error_not_a_crash(logged_in, pair):
    a, _ = pair
    missing = logged_in.get(COMPARE, {"a": a.pk})
    # Named as the page names it, not by the query parameter's name.
    assert missing.status_code == 400 and "Session B: This field is required." in missing.content.decode()
    assert logged_in.get(COMPARE, {"a": a.pk, "b": 10**30}).status_code == 400
    # Any id a session can have is one the form takes (the API's bounds): not found, not refused.
    assert logged_in.get(COMPARE, {"a": a.pk, "b": 2**62 + 1}).status_code == 404


def test_the_player_offers_compare_with_its_projects_other_sessions(logged_in, pair):
    a, b = pair
    from sessions_app.models import Project

    other = Project.objects.create(name="Other", slug="other")
    Session.objects.create(project=other, source_format="canonical", source_session_id="run-elsewhere")
    player = logged_in.get(reverse("sessions:player", args=[a.pk])).content.decode()
    picker_url = reverse("sessions:compare_with", args=[a.pk])
    assert '<details id="compare-with"' in player and f'hx-get="{picker_url}"' in player
    response = logged_in.get(picker_url, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<ul id="compare-candidates"') and "HX-Request" in response["Vary"]
    assert f'href="{COMPARE}?a={a.pk}&amp;b={b.pk}"' in html
    assert "run-elsewhere" not in html and f'b={a.pk}"' not in html  # not itself, not another project's
    # Search as you type: the text narrows the candidates (as the list's search does).
    assert "run-b" not in logged_in.get(picker_url, {"q": "nothing like it"}, HTTP_HX_REQUEST="true").content.decode()
    assert "run-b" in logged_in.get(picker_url, {"q": "SECOND"}, HTTP_HX_REQUEST="true").content.decode()
    # Without JavaScript the form opens the picker as a page of its own.
    page = logged_in.get(picker_url, {"q": "second"}).content.decode()
    assert "<html" in page and f'href="{COMPARE}?a={a.pk}&amp;b={b.pk}"' in page


def test_cost_row_says_unpriced_and_gives_no_delta_when_a_side_had_no_price(logged_in, pair):
    a, b = pair
    Session.objects.filter(pk=a.pk).update(cost_usd=0.0, priced_events=0, unpriced_events=3)
    Session.objects.filter(pk=b.pk).update(cost_usd=0.25, priced_events=2, unpriced_events=0)
    row = re.search(r"<td>Cost</td>(.*?)</tr>", logged_in.get(COMPARE, {"a": a.pk, "b": b.pk}).content.decode()).group(
        1
    )
    cells = re.findall(r'<td class="num">(.*?)</td>', row)
    assert "unpriced" in cells[0] and "$0" not in cells[0]
    assert cells[1] == "$0.2500"
    assert "—" in cells[2] and "0.25" not in cells[2]  # not B's whole cost as a difference

    Session.objects.filter(pk=a.pk).update(cost_usd=0.1, priced_events=1, unpriced_events=3)
    row = re.search(r"<td>Cost</td>(.*?)</tr>", logged_in.get(COMPARE, {"a": a.pk, "b": b.pk}).content.decode()).group(
        1
    )
    delta = re.findall(r'<td class="num">(.*?)</td>', row)[2]
    assert delta.startswith("0.1500") and "priced events only" in delta
