"""The player page: full page, the frame partial with its out-of-band panels, history restore,
login, pinned query counts, filters that leave the context alone, hostile payloads, daycare
blocks, flux0 turns, child agents, checkpoints, search, charts and the scrubber overview."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from sessions_app.canonical import Kind
from sessions_app.ingest.importing import import_file
from sessions_app.ingest.writer import append_events, finish_session, set_checkpoint
from sessions_app.models import AuditEntry, Checkpoint, Event, Project, Session
from sessions_app.replay import charts, timeline

from .builders_dashboard import (  # noqa: F401
    XSS_IMG,
    XSS_SCRIPT,
    _event,
    build_session,
    child_agent_events,
    conversation_events,
    hostile_events,
    logged_in,
    turn_length,
    user,
)

FIXTURES = Path(__file__).parent / "fixtures"


def url(session: Session) -> str:
    return reverse("sessions:player", args=[session.pk])


def frame_data(html: str) -> dict:
    found = re.search(r'<script id="frame-data" type="application/json">(.*?)</script>', html, re.S)
    assert found, "the frame carries its navigation facts"
    return json.loads(found.group(1))


def current_row(html: str) -> int:
    found = re.search(r'aria-current="step">\s*<a href="[^"]*" data-seq="(\d+)"', html)
    assert found
    return int(found.group(1))


def context_panel(html: str) -> str:
    start = html.index('<section id="context-panel"')
    return html[start : html.index("</section>\n", html.index("Pending approvals", start))]


@pytest.fixture
def talk(db) -> Session:
    return build_session(conversation_events(turns=3), source_session_id="talk", task="answer questions")


def test_full_page_has_every_control_and_panel(logged_in, talk):
    response = logged_in.get(url(talk), {"step": 5})
    html = response.content.decode()
    assert response.status_code == 200 and "<html" in html
    for element_id in ("scrubber", "scrubber-overview", "step-list", "play", "step-back", "step-forward", "speed",
                       "filters", "context-panel", "search-q", "checkpoint-form", "charts", "chain-badge"):  # fmt: skip
        assert f'id="{element_id}"' in html, element_id
    assert current_row(html) == 5
    assert frame_data(html)["seq"] == 5
    assert 'id="scrubber-data"' in html
    # Exports of all three kinds, through the API the login cookie opens.
    for fmt in ("jsonl", "snapshot", "original"):
        assert f"{reverse('api:export', args=[talk.pk])}?format={fmt}" in html
    assert "HX-Request" in response["Vary"]


def test_htmx_request_gets_the_step_list_with_side_panels_out_of_band(logged_in, talk):
    response = logged_in.get(url(talk), {"step": 7, "speed": "5"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="step-list"')
    assert "<html" not in html and 'id="filters"' not in html and 'id="scrubber"' not in html
    assert (
        '<section id="context-panel" class="context-panel" aria-label="Context at event #8" hx-swap-oob="true">' in html
    )
    assert '<output id="step-status" class="step-status" hx-swap-oob="true">' in html
    assert current_row(html) == 7
    # Links inside the frame keep the player's state.
    href = re.search(r'<a href="([^"]*)" data-seq="8"', html).group(1)
    assert href.startswith("?step=8&amp;") and "speed=5" in href
    assert "HX-Request" in response["Vary"]


def test_history_restore_request_gets_the_full_page(logged_in, talk):
    response = logged_in.get(url(talk), {"step": 7}, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    html = response.content.decode()
    assert "<html" in html and 'id="filters"' in html and 'id="scrubber"' in html
    assert current_row(html) == 7
    assert "hx-swap-oob" not in html.split('id="step-list"')[1].split("</section>")[0]


@pytest.mark.parametrize("path", ["player", "search", "charts"])
def test_anonymous_visitor_is_sent_to_login_and_sees_nothing(client, talk, path):
    target = url(talk) if path == "player" else reverse(f"sessions:{path}", args=[talk.pk])
    response = client.get(target, {"q": "question"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")
    assert b"question" not in response.content and b"talk" not in response.content


def test_anonymous_cannot_write_checkpoints_or_verify(client, talk):
    assert client.post(reverse("sessions:checkpoint", args=[talk.pk]), {"name": "x", "step": 1}).status_code == 302
    assert client.post(reverse("sessions:verify", args=[talk.pk])).status_code == 302
    assert not Checkpoint.objects.exists()


def test_anonymous_htmx_step_request_is_redirected_by_htmx(client, talk):
    response = client.get(url(talk), {"step": 3}, HTTP_HX_REQUEST="true")
    assert response["HX-Redirect"].startswith(reverse("login"))
    assert b"step-list" not in response.content


def test_a_session_without_events_still_opens(logged_in, db):
    session = build_session([], finish=False, source_session_id="empty")
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = logged_in.get(url(session), **headers)
        assert response.status_code == 200
        assert "has no events yet" in response.content.decode()
    page = logged_in.get(url(session)).content.decode()
    # Nothing to count yet: not "Event #1 of 0", nor a success rate of no steps.
    assert "No events yet" in page and "of 0" not in page and "0.00%" not in page


def test_unknown_session_is_404(logged_in, talk):
    assert logged_in.get(reverse("sessions:player", args=[talk.pk + 100])).status_code == 404


# Pinned query counts, at an event inside an open step of a conversation with errors:
# Django's session and user rows, the session, the window (1), the context (3: history, state
# at the event, the open step's seq with its StepState and state; the event's own row and its
# paired event's are the window's, not read again), the next turn boundary (1), previous and
# next error (1: replay.errors_around), and the conversation's last user messages (1), the
# comment threads at the event with their replies (1).
FRAME_QUERIES = 11
# + overview samples, checkpoint marks, checkpoint list, sign-offs, discussion, the tours that
# stop on the session, for a maintainer (the test's user) the project's tours "add this step to a
# tour…" offers, and for a session without a kept file whether its first event holds its record
# (exports.original_missing)
PAGE_QUERIES = FRAME_QUERIES + 8


def test_step_partial_query_count_is_pinned(logged_in, talk, django_assert_num_queries):
    with django_assert_num_queries(FRAME_QUERIES):
        response = logged_in.get(url(talk), {"step": 14}, HTTP_HX_REQUEST="true")
    assert current_row(response.content.decode()) == 14


def test_full_page_query_count_is_pinned(logged_in, talk, django_assert_num_queries):
    with django_assert_num_queries(PAGE_QUERIES):
        response = logged_in.get(url(talk), {"step": 14})
    assert response.status_code == 200


def test_query_count_does_not_depend_on_session_length(logged_in, make_session):
    small, large = make_session(events=60), make_session(events=3000)
    counts = []
    for session, seq in ((small, 30), (large, 2950)):
        with CaptureQueriesContext(connection) as queries:
            logged_in.get(url(session), {"step": seq}, HTTP_HX_REQUEST="true")
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_step_defaults_and_bounds(logged_in, talk):
    assert frame_data(logged_in.get(url(talk)).content.decode())["seq"] == 0
    last = talk.event_count - 1
    assert frame_data(logged_in.get(url(talk), {"step": 10**9}).content.decode())["seq"] == last
    assert frame_data(logged_in.get(url(talk), {"step": "-4"}).content.decode())["seq"] == 0
    assert (
        frame_data(logged_in.get(url(talk), {"step": "abc", "speed": "99", "types": "nope"}).content.decode())["seq"]
        == 0
    )


def step_notice(html: str) -> str | None:
    found = re.search(r'<p class="filter-notice" role="status" id="step-notice">(.*?)</p>', html, re.S)
    return found.group(1) if found else None


def test_a_step_the_url_asks_for_but_cannot_have_is_named_beside_the_event_shown(logged_in, talk):
    last = talk.event_count - 1
    assert step_notice(logged_in.get(url(talk)).content.decode()) is None
    assert step_notice(logged_in.get(url(talk), {"step": last}).content.decode()) is None
    refused = logged_in.get(url(talk), {"step": "abc"}).content.decode()
    assert step_notice(refused) == "?step=abc is not an event&#x27;s seq (a whole number from 0); showing event #1."
    assert step_notice(logged_in.get(url(talk), {"step": "-4"}).content.decode()).startswith("?step=-4 is not")
    past = logged_in.get(url(talk), {"step": last + 5}, HTTP_HX_REQUEST="true").content.decode()
    assert frame_data(past)["seq"] == last
    assert step_notice(past) == (
        f"?step={last + 5} is past this session&#x27;s last event (seq {last}); showing event #{last + 1}, the last."
    )
    # What the URL said is shown as text, cut short.
    hostile = logged_in.get(url(talk), {"step": "<script>x</script>" + "9" * 100}).content.decode()
    assert "<script>x" not in hostile and step_notice(hostile).startswith("?step=&lt;script&gt;x&lt;/script&gt;999")
    assert len(step_notice(hostile)) < 200


def test_a_speed_pace_or_kind_the_player_cannot_follow_is_named_beside_the_event_shown(logged_in, talk):
    # They were dropped silently: a link that played at 1× or showed every kind said nothing.
    asked = {"speed": "999", "pace": "fast", "types": "llm_call,bogus,<b>x</b>", "step": "1"}
    said = step_notice(logged_in.get(url(talk), asked, HTTP_HX_REQUEST="true").content.decode())
    assert said == (
        "?speed=999 is not a speed (1, 2, 5, 10); playing at 1×. ?pace=fast is not a pace (steps or recorded); "
        "the pace is steps. ?types=bogus,&lt;b&gt;x&lt;/b&gt;: no such event kind, ignored."
    )
    both = step_notice(logged_in.get(url(talk), {"step": "abc", "speed": "3"}).content.decode())
    assert both == "?step=abc is not an event&#x27;s seq (a whole number from 0); showing event #1. ?speed=3 is not " \
        "a speed (1, 2, 5, 10); playing at 1×."  # fmt: skip
    fine = {"speed": "5", "pace": "recorded", "types": ["llm_call", "tool_call"], "step": "1"}
    assert step_notice(logged_in.get(url(talk), fine).content.decode()) is None


def test_frame_knows_neighbours_turn_boundary_and_errors(logged_in, talk):
    turn = turn_length()
    data = frame_data(logged_in.get(url(talk), {"step": 2}).content.decode())
    assert (data["prev"], data["next"]) == (1, 3)
    assert data["turn"] == turn  # the next user message
    assert data["next_error"] == turn + 10  # the failing tool call of the second turn
    assert data["prev_error"] is None
    later = frame_data(logged_in.get(url(talk), {"step": 2 * turn + 1}).content.decode())
    assert later["turn"] is None and later["prev_error"] == turn + 11  # the failed step closes it
    assert later["next_error"] is None


def test_filters_hide_kinds_but_leave_the_context_numbers_alone(logged_in, talk):
    seq = 17
    everything = logged_in.get(url(talk), {"step": seq}, HTTP_HX_REQUEST="true").content.decode()
    filtered = logged_in.get(
        url(talk), {"step": seq, "types": "tool_call,tool_error"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    shown = {
        int(s)
        for s in re.findall(r'<li class="event kind-(?:\w+)[^"]*"[^>]*>\s*<a href="[^"]*" data-seq="(\d+)"', filtered)
    }
    kinds = dict(Event.objects.filter(session=talk).values_list("seq", "kind"))
    assert shown and all(kinds[s] in {"tool_call", "tool_error"} for s in shown)
    assert len(shown) < talk.event_count

    def without_links(html: str) -> str:
        # Links keep the filter; each render masks the comment forms' CSRF token anew.
        return re.sub(r'href="[^"]*"|name="csrfmiddlewaretoken" value="[^"]*"', "", context_panel(html))

    assert without_links(everything) == without_links(filtered)
    data = frame_data(filtered)
    assert kinds[data["next"]] in {"tool_call", "tool_error"} and kinds[data["prev"]] in {"tool_call", "tool_error"}


def test_hostile_payloads_are_shown_as_text(logged_in, db):
    session = build_session(hostile_events(), source_session_id="<i>evil</i>", task=XSS_SCRIPT)
    for step in range(session.event_count):
        html = logged_in.get(url(session), {"step": step}).content.decode()
        assert XSS_SCRIPT not in html and XSS_IMG not in html and "<b>tool</b>" not in html
        assert "<i>evil</i>" not in html
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html  # the step's memory note
    assert "&lt;img src=" in html


def test_step_state_shows_code_highlighted_and_output_only_once_it_happened(logged_in, talk):
    before = context_panel(logged_in.get(url(talk), {"step": 3}).content.decode())
    assert '<span class="tok-bi">print</span>' in before  # the open step's code, highlighted
    assert "out 0" not in before and "in progress" in before
    closing = turn_length() - 1
    after = context_panel(logged_in.get(url(talk), {"step": closing}).content.decode())
    assert "out 0" in after and "success" in after


def test_context_panel_shows_totals_history_memory_and_variables_at_that_step(logged_in, talk):
    seq = turn_length() + 4  # second turn, after its second LLM response
    panel = context_panel(logged_in.get(url(talk), {"step": seq}).content.decode())
    row = Event.objects.get(session=talk, seq=seq)
    assert f"${row.cost_total:.4f}" in panel and f"<dd>{row.tokens_total}</dd>" in panel
    assert "note 0" in panel and "note 1" not in panel  # memory as it was then
    assert "<th><bdi>v0</bdi></th>" in panel and "<bdi>v1</bdi>" not in panel
    assert "answer 1.1" in panel  # LLM history up to this point
    assert "question 1" in panel  # conversation so far


def test_daycare_block_shows_inner_calls_print_output_and_recovery_phase(logged_in, db):
    (outcome,) = import_file(path=FIXTURES / "daycare" / "pending_tool_call.jsonl", project=Project.get_default())
    session = outcome.session
    assert session.metadata["pending_phase"] == "tool_call"
    last = session.event_count - 1
    html = logged_in.get(url(session), {"step": last}).content.decode()
    assert "pending recovery: tool_call" in html
    panel = context_panel(html)
    assert "run_python block" in panel
    assert "github_issue" in panel and "Crash on resume" in panel  # inner call, result, print output
    assert '<span class="tok-kw">for</span>' in panel  # the block's code, highlighted
    assert "interrupted" in panel


def test_daycare_complete_block_shows_result_and_error(logged_in, db):
    (outcome,) = import_file(path=FIXTURES / "daycare" / "complete_new.jsonl", project=Project.get_default())
    session = outcome.session
    closing = Event.objects.get(session=session, step_pos=0).seq
    panel = context_panel(logged_in.get(url(session), {"step": closing}).content.decode())
    assert "channel_not_found" in panel and "send_message" in panel and "github_search" in panel
    middle = context_panel(logged_in.get(url(session), {"step": closing - 3}).content.decode())
    assert "<strong>github_search</strong>" in middle  # only what had happened by then
    assert "<strong>send_message</strong>" not in middle and "channel_not_found" not in middle


def test_flux0_turns_show_rebuilt_messages_and_the_reply_while_it_streams(logged_in, db):
    (outcome,) = import_file(path=FIXTURES / "flux0" / "support_chat.jsonl", project=Project.get_default())
    session = outcome.session
    streaming = context_panel(logged_in.get(url(session), {"step": 6}).content.decode())
    assert "agent (streaming)" in streaming and "Sorry to hear that!" in streaming
    assert "arrives tomorrow" not in streaming
    later = context_panel(logged_in.get(url(session), {"step": 12}).content.decode())
    assert "Sorry to hear that! Order #4411 shipped on Monday and arrives tomorrow." in later
    step_list = logged_in.get(url(session), {"step": 6}).content.decode()
    assert "× chunk" in step_list  # the streamed chunks fold into one row


def test_child_agents_are_nested_with_their_own_cost(logged_in, db):
    session = build_session(child_agent_events(), source_session_id="parent")
    html = logged_in.get(url(session), {"step": 5}).content.decode()
    assert 'class="event kind-llm_response depth-1' in html
    panel = context_panel(html)
    assert "kid-1" in panel and "own cost $0.2500" in panel
    running = context_panel(logged_in.get(url(session), {"step": 3}).content.decode())
    assert "kid-1" in running and "running" in running


def test_checkpoint_is_saved_at_the_current_step_and_marked_on_the_scrubber(logged_in, talk):
    response = logged_in.post(reverse("sessions:checkpoint", args=[talk.pk]), {"name": "before <retry>", "step": 9},
                              HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="checkpoints"')
    assert Checkpoint.objects.get(session=talk).seq == 9
    assert "before &lt;retry&gt;" in html and 'data-seq="9"' in html
    assert 'id="scrubber-overview" class="scrubber-overview" hx-swap-oob="true"' in html
    assert "checkpoint before &lt;retry&gt; (#10)" in html  # seq 9 is event #10
    bad = logged_in.post(
        reverse("sessions:checkpoint", args=[talk.pk]), {"name": "", "step": 9}, HTTP_HX_REQUEST="true"
    )
    assert bad.status_code == 400 and b"Not saved: Name: give the checkpoint a name." in bad.content


def test_search_lists_matches_from_the_current_step(logged_in, talk):
    response = logged_in.get(reverse("sessions:search", args=[talk.pk]), {"q": "answer 2", "step": 0},
                             HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="search-results"')
    seqs = [int(s) for s in re.findall(r'data-seq="(\d+)"', html)]
    payloads = {e.seq: e.payload for e in Event.objects.filter(session=talk, seq__in=seqs)}
    assert seqs and all("answer 2" in payloads[s] for s in seqs)
    errors = logged_in.get(
        reverse("sessions:search", args=[talk.pk]), {"errors": "on", "step": 0}, HTTP_HX_REQUEST="true"
    )
    error_seqs = [int(s) for s in re.findall(r'data-seq="(\d+)"', errors.content.decode())]
    assert error_seqs == [turn_length() + 10, turn_length() + 11]


def test_search_results_keep_the_viewers_kinds_speed_pace_and_tour_and_offer_the_start(logged_in, talk):
    # A result clicked in tour mode stayed in the tour; at 5x it played on at 5x (walkthrough).
    from sessions_app import tours
    from sessions_app.access import Actor

    from .builders_teams import member

    ada = Actor(user=member("ada", talk.project))
    tour = tours.create_tour(actor=ada, project=talk.project, title="t")
    tours.set_stops(actor=ada, tour=tour, stops=[tours.StopSpec(session=talk.pk, seq=2, title="s")])
    url = reverse("sessions:search", args=[talk.pk])
    asked = {"q": "answer 2", "step": 0, "speed": "5", "pace": "recorded", "types": ["result", "error"],
             "tour": tour.pk, "stop": 1}  # fmt: skip
    html = logged_in.get(url, asked, HTTP_HX_REQUEST="true").content.decode()
    links = [link.replace("&amp;", "&") for link in re.findall(r'<a href="([^"]+)" data-seq="\d+"', html)]
    assert links and all(
        link.endswith(f"&types=result&types=error&speed=5&pace=recorded&tour={tour.pk}&stop=1") for link in links
    ), links
    # The player's form sends them, so the pushed address holds them too.
    page = logged_in.get(url.replace("search/", "")).content.decode()
    assert 'hx-include="#filters, #speed, #pace, #tour-params"' in page.split('id="search-form"')[1].split(">")[0]
    # Nothing after the shown step: said, with the same search from the start.
    last = talk.event_count - 1
    empty = logged_in.get(url, {"q": "answer 2", "step": last}, HTTP_HX_REQUEST="true").content.decode()
    assert f"Nothing found from #{last + 1} on: the search reads forward." in empty
    start = re.search(r'href="([^"]+)"[^>]*>Search from the start</a>', empty).group(1)
    assert "step=0" in start and "q=answer+2" in start
    again = logged_in.get(start.replace("&amp;", "&"), HTTP_HX_REQUEST="true").content.decode()
    assert re.findall(r'data-seq="(\d+)"', again)


def test_a_search_without_javascript_is_the_player_at_its_step_with_the_results(logged_in, talk):
    """The search's address is a page of its own: the whole player at the step it searched from,
    the results in their panel and the box holding what was asked."""
    url = reverse("sessions:search", args=[talk.pk])
    page = logged_in.get(url, {"q": "answer 2", "step": 5})
    html = page.content.decode()
    assert page.status_code == 200 and html.lstrip().startswith("<!doctype html>") and "<title>" in html
    assert frame_data(html)["seq"] == 5 and "from #6" in html
    assert 'name="q" id="search-q" maxlength="200" placeholder="text in events" value="answer 2"' in html
    results = html.split('<section id="search-results"')[1].split("</section>")[0]
    seqs = [int(seq) for seq in re.findall(r'data-seq="(\d+)"', results)]
    assert seqs and all(seq >= 5 for seq in seqs)
    # The form carries the step shown (each frame keeps it current), so a plain submit searches from there.
    assert '<input type="hidden" name="step" id="search-step" value="5">' in html
    frame = logged_in.get(url.replace("search/", ""), {"step": 9}, HTTP_HX_REQUEST="true").content.decode()
    assert '<input type="hidden" name="step" id="search-step" value="9" hx-swap-oob="true">' in frame


@pytest.mark.parametrize("htmx", [True, False])
def test_a_search_too_long_is_a_400_that_says_so_in_the_panel(logged_in, talk, htmx):
    """It used to be dropped silently, and with "errors only" gave a 500."""
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = logged_in.get(reverse("sessions:search", args=[talk.pk]), {"q": "x" * 201, "errors": "on"}, **headers)
    html = response.content.decode()
    assert response.status_code == 400
    assert '<p class="error" role="alert">Search: at most 200 characters (it has 201).</p>' in html
    assert html.lstrip().startswith('<section id="search-results"' if htmx else "<!doctype html>")


def test_without_javascript_links_move_through_the_events_as_the_buttons_would(logged_in, talk):
    """The player's buttons need JavaScript: a <noscript> row of links moves as they would,
    keeping the viewer's kinds and speed (the walkthrough could only click rows)."""
    first_error = turn_length() + 10
    html = logged_in.get(url(talk), {"step": 5, "speed": "2"}).content.decode()
    links = dict(
        re.findall(
            r'<a href="\?step=(\d+)&amp;speed=2&amp;pace=steps"(?: rel="\w+")?>([^<]+)</a>',
            html.split('class="no-js-steps"')[1].split("</nav>")[0],
        )
    )
    assert links == {"0": "|◀ first", "4": "◀ previous", "6": "next ▶", str(talk.event_count - 1): "last ▶|",
                     str(first_error): "next error ⟶"}  # fmt: skip
    # The moment's link, which the copy button cannot copy without JavaScript, is a link there.
    assert re.search(r'<noscript><a href="[^"]*\?step=5[^"]*">link to this moment</a></noscript>', html)
    at_end = logged_in.get(url(talk), {"step": talk.event_count - 1}).content.decode().split('class="no-js-steps"')[1]
    assert "next ▶" not in at_end.split("</nav>")[0] and "⟵ previous error" in at_end.split("</nav>")[0]


def test_verify_without_javascript_goes_back_to_the_player_as_it_was(logged_in, talk):
    """The walkthrough's no-JS verify landed on event #1, its place lost."""
    verify, player = reverse("sessions:verify", args=[talk.pk]), url(talk)
    back = logged_in.post(verify, HTTP_REFERER=f"http://testserver{player}?step=9&types=tool_call&speed=2")
    assert back.status_code == 302 and back["Location"] == f"{player}?step=9&types=tool_call&speed=2"
    # From a search's page (the player with its results): the player at that step.
    searched = logged_in.post(verify, HTTP_REFERER=f"http://testserver{player}search/?step=7&q=answer&errors=on")
    assert searched["Location"] == f"{player}?step=7"
    # Only to this session's player on this site: anything else opens the session at its start.
    for referer in (f"http://elsewhere.example{player}?step=9", "http://testserver/sessions/?q=x", ""):
        assert logged_in.post(verify, HTTP_REFERER=referer)["Location"] == player, referer


def test_verify_rehashes_and_reports_the_broken_seq(logged_in, talk):
    Event.objects.filter(session=talk, seq=4).update(raw='{"tampered": true}')
    response = logged_in.post(reverse("sessions:verify", args=[talk.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert b"broken at seq 4" in response.content
    assert b"broken at seq 4" in logged_in.get(url(talk)).content
    # The badge opens the event where it broke (seq 4, event #5 in the player's numbering).
    badge = re.search(r'<a class="badge chain chain-broken" href="([^"]+)" title="([^"]+)">broken at seq 4 \(event #5\)</a>',
                      response.content.decode())  # fmt: skip
    assert badge and badge.group(1) == f"{url(talk)}?step=4" and "first at event #5" in badge.group(2)
    # The downloads say a bundle made now will not verify (the walkthrough exported one unwarned).
    assert (
        "stored events changed (first at event #5): a bundle exported now" in logged_in.get(url(talk)).content.decode()
    )


def test_live_session_page_follows_the_tail(logged_in, db):
    session = build_session(conversation_events(turns=1), finish=False, source_session_id="live")
    html = logged_in.get(url(session)).content.decode()
    assert 'data-live="true"' in html
    assert reverse("sessions:tail", args=[session.pk]) in html
    assert frame_data(html)["seq"] == session.event_count - 1  # a live session opens at its newest event
    partial = logged_in.get(url(session), {"step": 1}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="scrubber-overview" class="scrubber-overview" hx-swap-oob="true"' in partial


def test_charts_partial_holds_four_figures_whose_points_name_their_seq(logged_in, talk):
    response = logged_in.get(reverse("sessions:charts", args=[talk.pk]), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="charts"')
    assert "vendor/plotly/plotly.min.js" in html
    data = json.loads(re.search(r'<script id="chart-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert set(data["figures"]) == {"reward", "cost", "tokens", "latency"}
    steps = list(
        Event.objects.filter(session=talk, step_pos__isnull=False).order_by("seq").values_list("seq", "reward_total")
    )
    cumulative = data["figures"]["reward"]["data"][1]
    assert cumulative["customdata"] == [seq for seq, _ in steps]
    assert cumulative["y"] == [total for _, total in steps]


def test_an_empty_chart_says_why_instead_of_showing_bare_axes(make_session):
    def notes(figure: dict) -> list[str]:
        return [note["text"] for note in figure["layout"].get("annotations", [])]

    session = make_session(events=40)  # steps, priced LLM calls with their responses
    full = charts.player_figures(session=session)["figures"]
    assert all(trace["x"] for figure in full.values() for trace in figure["data"][:1])
    assert not any(notes(figure) for figure in full.values())
    empty = charts.player_figures(session=make_session())["figures"]
    assert {name: notes(figure) for name, figure in empty.items()} == {
        "reward": ["no steps: rewards are recorded per step"],
        "cost": ["unpriced: no event of this session has a known price"],
        "tokens": ["no steps: tokens are counted per step"],
        "latency": ["no call with its response: latency runs from a call to its answer"],
    }


def test_charts_of_a_long_session_are_sampled(make_session):
    session = make_session(events=5000)
    figures = charts.player_figures(session=session)["figures"]
    for name, figure in figures.items():
        for trace in figure["data"]:
            assert len(trace["x"]) <= charts.MAX_POINTS, name
    cost = figures["cost"]["data"][0]
    last = Event.objects.get(session=session, seq=session.event_count - 1)
    # The axis counts events from 1; the point's customdata is the seq a click jumps to.
    assert cost["x"][-1] == last.seq + 1 and cost["customdata"][-1] == last.seq
    assert cost["y"][-1] == pytest.approx(last.cost_total, abs=1e-6)
    latency = figures["latency"]["data"][0]
    assert max(latency["y"]) == pytest.approx(
        max(Event.objects.filter(session=session, kind=Kind.LLM_CALL).values_list("pair_duration_ms", flat=True)),
        abs=0.1,
    )


def test_scrubber_overview_counts_every_event_once_and_marks_errors(make_session):
    session = make_session(events=1000)
    overview = timeline.session_overview(session=session, buckets=120)
    assert overview.samples[0] == [-1, 0.0] and overview.samples[-1] == [999, 1.0]
    xs = [x for _, x in overview.samples]
    assert xs == sorted(xs)
    # Every column is drawn full height, split by kind: the total drawn height equals columns.
    drawn = sum(float(h) for d in overview.paths.values() for h in re.findall(r"v([\d.]+)h", d))
    assert drawn == pytest.approx(timeline.HEIGHT * 120, rel=1e-3)
    errors_buckets = overview.error_buckets
    assert errors_buckets > 0 and overview.error_path.count("M") == errors_buckets


def test_scrubber_positions_follow_time_and_compress_idle_gaps(db):
    from datetime import timedelta

    from .builders_dashboard import _event

    events = [_event(i, Kind.NOTE) for i in range(10)]
    for i, event in enumerate(events):
        event.timestamp = events[0].timestamp + timedelta(seconds=i if i < 5 else 3600 + i)
    session = build_session(events, source_session_id="idle")
    overview = timeline.session_overview(session=session)
    assert len(overview.idle) == 1 and overview.idle[0].seconds == pytest.approx(3601, abs=1)
    # The hour of idling does not squeeze the ten events into a sliver of the scrubber.
    assert timeline.position_of(4, overview.samples) > 0.2
    assert timeline.position_of(5, overview.samples) > timeline.position_of(4, overview.samples)


def test_highlighter_escapes_everything_it_wraps():
    from sessions_app.highlighting import highlight_json, highlight_python

    html = highlight_python("x = '</pre><script>alert(1)</script>'  # <b>\nif x: pass")
    assert "<script>" not in html and "&lt;/pre&gt;&lt;script&gt;" in html and '<span class="tok-kw">if</span>' in html
    assert "&lt;b&gt;" in html
    broken = highlight_python("def (:\n  <img src=x onerror=1>")
    assert "<img" not in broken and "&lt;img" in broken
    data = highlight_json(orjson.dumps({"k": "<img src=x onerror=1>"}, option=orjson.OPT_INDENT_2).decode())
    assert "<img" not in data and '<bdi class="tok-key">' in data


# --- issue 19: the player's rough edges ---------------------------------------------------------


def checkpoint_url(session: Session, *rest: object) -> str:
    if not rest:
        return reverse("sessions:checkpoint", args=[session.pk])
    checkpoint_id, action = rest
    return reverse(f"sessions:checkpoint_{action}", args=[session.pk, checkpoint_id])


def checkpoint_form(html: str) -> str:
    start = html.index('<form id="checkpoint-form"')
    return html[start : html.index("</form>", start)]


def test_every_frame_moves_the_checkpoint_forms_step_to_the_shown_event(logged_in, talk):
    """The form once carried the step the page loaded at (and htmx let the form's own value win
    over the included #nav-step): the shown step is now the form's only step, replaced by each
    frame, so an htmx post and a plain post both save what is shown."""
    form = checkpoint_form(logged_in.get(url(talk), {"step": 2}).content.decode())
    assert form.count('name="step"') == 1 and 'id="checkpoint-step" value="2"' in form
    assert "hx-include" not in form
    frame = logged_in.get(url(talk), {"step": 12}, HTTP_HX_REQUEST="true").content.decode()
    assert '<input type="hidden" name="step" id="checkpoint-step" value="12" hx-swap-oob="true">' in frame
    # A plain post (no htmx) of that form goes back to the player at the saved step.
    plain = logged_in.post(checkpoint_url(talk), {"name": "shown", "step": 12})
    assert plain.status_code == 302 and plain["Location"].endswith(f"/sessions/{talk.pk}/?step=12")
    assert Checkpoint.objects.get(session=talk, name="shown").seq == 12


def test_a_viewer_gets_no_checkpoint_forms(client, talk):
    from sessions_app.models import Role

    from .builders_teams import member

    set_checkpoint(session=talk, name="kept", seq=3)
    client.force_login(member("vera", role=Role.VIEWER))
    page = client.get(url(talk)).content.decode()
    assert 'id="checkpoint-form"' not in page and "checkpoint-edit" not in page and "kept" in page
    frame = client.get(url(talk), {"step": 4}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="checkpoint-step"' not in frame  # no out-of-band input without its form
    assert client.post(checkpoint_url(talk), {"name": "x", "step": 1}).status_code == 403


def test_saving_over_a_name_asks_before_replacing_it(logged_in, talk):
    assert logged_in.post(checkpoint_url(talk), {"name": "here", "step": 3}, HTTP_HX_REQUEST="true").status_code == 200
    asked = logged_in.post(checkpoint_url(talk), {"name": "here", "step": 9}, HTTP_HX_REQUEST="true")
    html = asked.content.decode()
    assert asked.status_code == 409 and html.lstrip().startswith('<section id="checkpoints"')
    assert "A checkpoint named “<bdi>here</bdi>” exists at #4: replace it?" in html
    confirm = html[
        html.index('<form id="checkpoint-replace"') : html.index("</form>", html.index("checkpoint-replace"))
    ]
    for hidden in ('name="name" value="here"', 'name="step" value="9"', 'name="replace" value="1"'):
        assert hidden in confirm
    assert "Replace it with #10" in confirm
    assert Checkpoint.objects.get(session=talk, name="here").seq == 3  # nothing overwritten
    # Without htmx the whole player comes back at the asked step, asking the same.
    plain = logged_in.post(checkpoint_url(talk), {"name": "here", "step": 9})
    assert plain.status_code == 409 and "<html" in plain.content.decode()
    assert "exists at #4: replace it?" in plain.content.decode() and frame_data(plain.content.decode())["seq"] == 9
    replaced = logged_in.post(checkpoint_url(talk), {"name": "here", "step": 9, "replace": "1"}, HTTP_HX_REQUEST="true")
    assert replaced.status_code == 200 and "replace it?" not in replaced.content.decode()
    assert Checkpoint.objects.get(session=talk, name="here").seq == 9
    actions = list(
        AuditEntry.objects.filter(action__startswith="checkpoint.").order_by("seq").values_list("action", "detail")
    )
    assert [a for a, _ in actions] == ["checkpoint.create", "checkpoint.change"]
    assert orjson.loads(actions[1][1]) == {
        "checkpoint": Checkpoint.objects.get(name="here").pk,
        "seq": 9,
        "from_seq": 3,
    }


@pytest.mark.parametrize(
    "body,message",
    [
        ({"name": "", "step": 2}, "Not saved: Name: give the checkpoint a name."),
        (
            {"name": "x", "step": 10_000},
            "Not saved: Event: this session has no event #10001 (its events are #1 to #36).",
        ),
        ({"name": "x", "step": "-1"}, "Not saved: Event: not an event of this session."),
    ],
)
def test_a_refused_checkpoint_says_why_in_the_panel(logged_in, talk, body, message):
    response = logged_in.post(checkpoint_url(talk), body, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 400 and html.lstrip().startswith('<section id="checkpoints"')
    assert f'<p class="error" role="alert">{message.format(pk=talk.pk)}</p>' in html
    assert not Checkpoint.objects.exists()


def test_a_checkpoint_is_renamed_and_deleted_from_the_panel(logged_in, talk):
    kept = set_checkpoint(session=talk, name="first", seq=5)
    other = set_checkpoint(session=talk, name="second", seq=7)
    page = logged_in.get(url(talk)).content.decode()
    assert f'action="{checkpoint_url(talk, kept.pk, "rename")}"' in page
    assert f'action="{checkpoint_url(talk, kept.pk, "delete")}"' in page
    renamed = logged_in.post(checkpoint_url(talk, kept.pk, "rename"), {"name": "before retry"}, HTTP_HX_REQUEST="true")
    assert renamed.status_code == 200 and "before retry" in renamed.content.decode()
    assert Checkpoint.objects.get(pk=kept.pk).name == "before retry"
    taken = logged_in.post(checkpoint_url(talk, kept.pk, "rename"), {"name": "second"}, HTTP_HX_REQUEST="true")
    assert taken.status_code == 409
    assert "exists at #8: rename or delete that one first." in taken.content.decode()
    assert Checkpoint.objects.get(pk=kept.pk).name == "before retry"
    deleted = logged_in.post(checkpoint_url(talk, other.pk, "delete"), HTTP_HX_REQUEST="true")
    assert deleted.status_code == 200 and "second" not in deleted.content.decode()
    assert list(Checkpoint.objects.filter(session=talk).values_list("name", flat=True)) == ["before retry"]
    entries = [
        (a, orjson.loads(d))
        for a, d in AuditEntry.objects.filter(action__startswith="checkpoint.")
        .order_by("seq")
        .values_list("action", "detail")
    ]
    assert entries == [
        ("checkpoint.change", {"checkpoint": kept.pk, "seq": 5, "renamed": True}),
        ("checkpoint.delete", {"checkpoint": other.pk, "seq": 7}),
    ]
    # A plain post goes back to the player; another session's checkpoint is not found.
    assert logged_in.post(checkpoint_url(talk, kept.pk, "delete")).status_code == 302
    elsewhere = build_session(conversation_events(turns=1), source_session_id="elsewhere")
    assert logged_in.post(checkpoint_url(elsewhere, other.pk, "delete")).status_code == 404


def test_a_live_frame_brings_the_header_and_the_filter_counts(logged_in, db):
    session = build_session(conversation_events(turns=1), finish=False, source_session_id="growing")
    page = logged_in.get(url(session)).content.decode()
    assert 'id="kind-count-tool_error" class="muted kind-count" data-count="0"' in page  # not seen yet: hidden
    before = session.event_count
    append_events(session=session, events=[_event(before + i, kind) for i, kind in
                                           enumerate([Kind.TOOL_CALL, Kind.TOOL_ERROR, Kind.TOOL_ERROR])])  # fmt: skip
    frame = logged_in.get(url(session), {"step": before + 2}, HTTP_HX_REQUEST="true").content.decode()
    totals = frame[
        frame.index('<dl id="session-totals"') : frame.index("</dl>", frame.index('<dl id="session-totals"'))
    ]
    assert 'class="totals" hx-swap-oob="true"' in totals
    assert f"<dt>Events</dt><dd>{before + 3}</dd>" in totals
    assert '<span id="session-status" class="badge status-live" hx-swap-oob="true">Live</span>' in frame
    assert (
        '<span id="kind-count-tool_error" class="muted kind-count" data-count="2" hx-swap-oob="true">2</span>' in frame
    )
    assert (
        '<span id="kind-count-tool_call" class="muted kind-count" data-count="2" hx-swap-oob="true">2</span>' in frame
    )
    # The frame asked for as it finishes says so; a session not written lately sends none of it.
    finish_session(session=session)
    assert (
        'status-completed" hx-swap-oob="true">Completed'
        in logged_in.get(url(session), {"step": 1}, HTTP_HX_REQUEST="true").content.decode()
    )
    Session.objects.filter(pk=session.pk).update(updated_at=session.updated_at - timedelta(hours=1))
    quiet = logged_in.get(url(session), {"step": 1}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="session-totals"' not in quiet and "kind-count-" not in quiet


def test_a_filter_that_hides_the_shown_event_says_so_and_links_to_it(logged_in, talk):
    html = logged_in.get(url(talk), {"step": 0, "types": "tool_call"}, HTTP_HX_REQUEST="true").content.decode()
    notice = re.search(r'<p class="filter-notice" role="status">(.*?)</p>', html, re.S)
    assert notice, "the step list says the shown event is hidden"
    assert "Event #1 (user_message) is hidden by the filter — " in notice.group(1)
    href = re.search(r'<a href="([^"]*)" data-show-kind="user_message">show it</a>', notice.group(1)).group(1)
    assert href.startswith("?step=0&amp;types=tool_call&amp;types=user_message")
    shown = logged_in.get(url(talk) + href.replace("&amp;", "&")).content.decode()
    assert current_row(shown) == 0 and "filter-notice" not in shown
    assert "filter-notice" not in logged_in.get(url(talk), {"step": 0}, HTTP_HX_REQUEST="true").content.decode()


def test_events_and_steps_are_numbered_from_one(logged_in, talk):
    set_checkpoint(session=talk, name="cp", seq=9)
    html = logged_in.get(url(talk), {"step": 7}).content.decode()
    status = re.search(r'<output id="step-status"[^>]*>(.*?)</output>', html, re.S).group(1)
    assert status.startswith(f"Event <strong>#8</strong> of {talk.event_count}")
    assert re.search(r'data-seq="7">\s*<span class="seq">#8</span>', html)  # URLs keep the seq
    closing = Event.objects.get(session=talk, step_pos=0).seq
    row = html[html.index(f'data-seq="{closing}">') :]
    assert '<span class="step-no">step 1</span>' in row[: row.index("</a>")]
    assert 'aria-valuenow="7" aria-valuetext="event 8 of' in html
    checkpoints = html[html.index('<section id="checkpoints"') :]
    assert '<span class="muted">#10' in checkpoints[: checkpoints.index("</ul>")]
    found = logged_in.get(reverse("sessions:search", args=[talk.pk]), {"q": "answer 0.0", "step": 0},
                          HTTP_HX_REQUEST="true").content.decode()  # fmt: skip
    seq = Event.objects.get(session=talk, payload__contains="answer 0.0").seq
    assert f'data-seq="{seq}">#{seq + 1} ' in found and "from #1" in found


def test_agent_written_text_is_isolated_from_its_surroundings(logged_in, db):
    session = build_session(hostile_events(), source_session_id="rtl", task="\u05e9\u05dc\u05d5\u05dd task")
    set_checkpoint(session=session, name="\u05d0 checkpoint", seq=1)
    html = logged_in.get(url(session), {"step": 1}).content.decode()
    assert '<p class="task" dir="auto">' in html
    assert '<bdi class="tool">&lt;b&gt;tool&lt;/b&gt;</bdi>' in html and '<bdi class="preview">' in html
    assert "⚑ <bdi>\u05d0 checkpoint</bdi>" in html
    found = logged_in.get(reverse("sessions:search", args=[session.pk]), {"q": "hi", "step": 0},
                          HTTP_HX_REQUEST="true").content.decode()  # fmt: skip
    assert "<bdi>" in found


def test_a_payload_too_large_to_show_is_a_stand_in_in_the_player_and_contexts_and_whole_in_the_api(
    logged_in, settings, monkeypatch
):
    # One event of 23 MB took 2 GiB and 6 s to show, for every viewer (security sweep): past
    # DECODED_PAYLOAD_LIMIT a payload is not decoded for showing, only spliced whole by the API.
    from sessions_app.replay import rows

    monkeypatch.setattr(rows, "DECODED_PAYLOAD_LIMIT", 5_000)
    huge = {"blob": [[] for _ in range(2_000)], "marker": "HUGE-PAYLOAD-END"}
    session = build_session([_event(0, Kind.USER_MESSAGE, payload={"text": "hi"}),
                             _event(1, Kind.TOOL_RESPONSE, payload=huge, tool="t"),
                             _event(2, Kind.USER_MESSAGE, payload={"text": "bye"})])  # fmt: skip
    html = logged_in.get(url(session), {"step": 1}).content.decode()
    panel = context_panel(html)
    assert "too large to show here" in panel and "HUGE-PAYLOAD-END" not in html
    assert f"{len(orjson.dumps(huge)):,} characters" in panel
    context = logged_in.get(f"/api/sessions/{session.pk}/context", {"seq": 1}).json()
    assert "notShown" in context["event"]["payload"]
    page = logged_in.get(f"/api/sessions/{session.pk}/replay", {"offset": 1, "limit": 1}).json()
    assert page["steps"][0]["event"]["payload"] == huge
    # A payload within the limit shows as it always did.
    assert "bye" in context_panel(logged_in.get(url(session), {"step": 2}).content.decode())
    # The player's other panels read payloads of other events (the conversation so far): the
    # same stand-in there, never the payload decoded (review).
    said = {"text": "HUGE-MESSAGE-START " + "y" * 6_000}
    talkative = build_session([_event(0, Kind.USER_MESSAGE, payload=said),
                               _event(1, Kind.USER_MESSAGE, payload={"text": "and then"})])  # fmt: skip
    later = logged_in.get(url(talkative), {"step": 1}).content.decode()
    said_there = later[later.index('aria-label="Conversation so far"') :]
    assert "too large to show here" in said_there and "HUGE-MESSAGE-START" not in later
    # Short but made of many objects and arrays (the shape that costs most decoded): the same.
    from sessions_app.formats import fields

    monkeypatch.setattr(rows, "DECODED_PAYLOAD_LIMIT", 10**9)
    monkeypatch.setattr(fields, "DECODED_CONTAINERS_LIMIT", 1_000)
    context = logged_in.get(f"/api/sessions/{session.pk}/context", {"seq": 1}).json()
    assert context["event"]["payload"]["notShown"] == len(orjson.dumps(huge))  # 2,000 arrays
    context = logged_in.get(f"/api/sessions/{session.pk}/context", {"seq": 2}).json()
    assert context["event"]["payload"] == {"text": "bye"}


def test_the_chain_badge_of_a_session_that_just_ended_asks_again_until_it_is_verified(logged_in, talk):
    from sessions_app.verification import verify_session

    badge_url = reverse("sessions:chain_badge", args=[talk.pk])
    # Just ended (finished, its row written now), not verified yet: the badge polls itself.
    badge = logged_in.get(badge_url).content.decode()
    assert "not verified yet" in badge and 'hx-trigger="every 3s"' in badge and f'hx-get="{badge_url}"' in badge
    assert 'hx-trigger="every 3s"' in logged_in.get(url(talk)).content.decode()
    verify_session(session=talk)
    badge = logged_in.get(badge_url).content.decode()
    assert "verified at" in badge and "hx-trigger" not in badge
    # To the second and in UTC, so that a verification run again in the same minute shows; while
    # one runs (seconds for 100,000 events) its button is disabled and the form says so.
    checked = Session.objects.get(pk=talk.pk).chain_checked_at
    assert f'verified at <time datetime="{checked.isoformat()}">{checked:%Y-%m-%d %H:%M:%S} UTC</time>' in badge
    verify_form = re.search(r'<form [^>]*hx-post="/sessions/\d+/verify/"[^>]*>.*?</form>', badge, re.S).group(0)
    assert 'hx-disabled-elt="find button"' in verify_form
    assert '<span class="busy-note" role="status">verifying every event…</span>' in verify_form
    page = logged_in.get(url(talk)).content.decode()
    sign_off_form = page[page.index('<form id="sign-off-form"') :]
    sign_off_form = sign_off_form[: sign_off_form.index("</form>")]
    assert 'hx-disabled-elt="find button"' in sign_off_form and 'class="busy-note" role="status"' in sign_off_form
    # Ended long ago and never verified (a worker down): no polling for ever.
    Session.objects.filter(pk=talk.pk).update(chain_checked_at=None, chain_valid=None,
                                              updated_at=timezone.now() - timedelta(minutes=10))  # fmt: skip
    badge = logged_in.get(badge_url).content.decode()
    assert "not verified yet" in badge and "hx-trigger" not in badge


def test_the_checkpoints_panel_says_when_it_lists_only_the_first(logged_in, talk):
    # It stopped at 200 without a word; the rest could be neither seen nor renamed there.
    from sessions_app.checkpoints import MAX_LISTED
    from sessions_app.models import Checkpoint

    Checkpoint.objects.bulk_create(Checkpoint(session=talk, seq=0, name=f"c{n:03}") for n in range(MAX_LISTED))
    page = logged_in.get(url(talk)).content.decode()
    assert page.count("⚑ <bdi>c") == MAX_LISTED and "checkpoints, in event order" not in page
    Checkpoint.objects.create(session=talk, seq=1, name="one more")
    page = logged_in.get(url(talk)).content.decode()
    assert f"The first {MAX_LISTED} of {MAX_LISTED + 1} checkpoints, in event order" in page
