"""Navigation reads: windows of events for the step list, search, next/previous error, turns."""

from __future__ import annotations

import pytest

from sessions_app import replay
from sessions_app.canonical import Kind
from sessions_app.models import Event

from .builders_replay import event, session_of

pytestmark = pytest.mark.django_db


def test_window_around_an_event_with_first_and_last_flags(make_session):
    session = make_session(events=100)
    middle = replay.events_around(session=session, seq=50, before=3, after=2)
    assert [e["seq"] for e in middle["events"]] == [47, 48, 49, 50, 51, 52]
    assert (middle["first"], middle["last"]) == (False, False)
    start = replay.events_around(session=session, seq=1, before=3, after=2)
    assert [e["seq"] for e in start["events"]] == [0, 1, 2, 3] and start["first"] is True
    end = replay.events_around(session=session, seq=99, before=1, after=5)
    assert [e["seq"] for e in end["events"]] == [98, 99] and end["last"] is True


def test_filtered_window_holds_only_the_chosen_kinds(make_session):
    session = make_session(events=200)
    errors = list(
        Event.objects.filter(session=session, kind="tool_error").order_by("seq").values_list("seq", flat=True)
    )
    window = replay.events_around(session=session, seq=errors[4], kinds=["tool_error"], before=2, after=2)
    assert [e["seq"] for e in window["events"]] == errors[2:7]
    assert {e["kind"] for e in window["events"]} == {"tool_error"}
    assert (window["first"], window["last"]) == (False, False)
    edge = replay.events_around(session=session, seq=errors[1], kinds=["tool_error"], before=5, after=0)
    assert [e["seq"] for e in edge["events"]] == errors[:2] and edge["first"] is True
    # Centred between two matching events: the one at the centre is not there, the rest is.
    between = replay.events_around(session=session, seq=errors[3] + 1, kinds=["tool_error"], before=1, after=1)
    assert [e["seq"] for e in between["events"]] == [errors[3], errors[4]]


def test_window_without_payloads_for_a_light_step_list(make_session):
    session = make_session(events=20)
    window = replay.events_around(session=session, seq=10, before=1, after=1, include_payload=False)
    assert all("payload" not in e for e in window["events"])
    # seq 9 closes step 1; seq 10 belongs to step 2, still in progress.
    assert [e["stepIndex"] for e in window["events"]] == [1, 2, 2]


def test_search_finds_text_case_insensitively_and_continues_from_where_it_stopped(make_session):
    session = make_session(events=300)
    first = replay.search(session=session, q="EVENT 12", limit=5)
    assert [r["seq"] for r in first["results"]] == [12, 120, 121, 122, 123]
    assert first["results"][0]["snippet"] == '{"i":12,"text":"event 12"}'
    following = replay.search(session=session, q="event 12", from_seq=first["nextFromSeq"], limit=50)
    assert [r["seq"] for r in following["results"]] == [124, 125, 126, 127, 128, 129]
    assert following["nextFromSeq"] is None


def test_search_treats_like_wildcards_as_plain_text():
    session = session_of(
        [
            event(Kind.NOTE, 0, payload={"text": "100% done"}),
            event(Kind.NOTE, 1, payload={"text": "1000 done"}),
            event(Kind.NOTE, 2, payload={"text": "a_b"}),
            event(Kind.NOTE, 3, payload={"text": "axb"}),
        ]
    )
    assert [r["seq"] for r in replay.search(session=session, q="100%")["results"]] == [0]
    assert [r["seq"] for r in replay.search(session=session, q="a_b")["results"]] == [2]


def test_search_by_kind_and_errors(make_session):
    session = make_session(events=100)
    by_kind = replay.search(session=session, kind="tool_error", limit=100)["results"]
    assert [r["seq"] for r in by_kind] == list(
        Event.objects.filter(session=session, kind="tool_error").order_by("seq").values_list("seq", flat=True)
    )
    errors = replay.search(session=session, errors=True, limit=100)["results"]
    flagged = {r["seq"] for r in errors if r["isError"]}
    error_steps = {r["seq"] for r in errors if r["kind"] == "step_end"}
    assert flagged == set(Event.objects.filter(session=session, is_error=True).values_list("seq", flat=True))
    # rlm-code's error steps: steps whose error is not empty, flagged or not.
    assert error_steps == {seq for seq in range(100) if seq % 5 == 4 and seq % 3 == 0}
    with pytest.raises(replay.ReplayParameterError, match="unknown event type"):
        replay.search(session=session, kind="nope")


def test_next_and_previous_error_include_error_steps(make_session):
    session = make_session(events=100)
    errors = sorted(r["seq"] for r in replay.search(session=session, errors=True, limit=100)["results"])
    assert replay.errors_around(session=session, seq=errors[2]) == (errors[1], errors[3])
    assert replay.errors_around(session=session, seq=errors[0])[0] is None
    assert replay.errors_around(session=session, seq=errors[-1])[1] is None


def test_errors_around_is_previous_and_next_error_in_one_statement(make_session, django_assert_num_queries):
    session = make_session(events=100)
    errors = sorted(r["seq"] for r in replay.search(session=session, errors=True, limit=100)["results"])
    assert errors, "the session needs errors of both sorts"
    for seq in range(-1, 101):
        expected = (
            max((e for e in errors if e < seq), default=None),
            min((e for e in errors if e > seq), default=None),
        )
        with django_assert_num_queries(1):
            around = replay.errors_around(session=session, seq=seq)
        assert around == expected


def test_next_turn_boundary_is_the_next_user_message():
    session = session_of(
        [
            event(Kind.USER_MESSAGE, 0),
            event(Kind.AGENT_MESSAGE, 10),
            event(Kind.CHUNK, 20),
            event(Kind.USER_MESSAGE, 30),
            event(Kind.AGENT_MESSAGE, 40),
        ]
    )
    assert replay.next_turn_boundary(session=session, seq=0) == 3
    assert replay.next_turn_boundary(session=session, seq=2) == 3
    assert replay.next_turn_boundary(session=session, seq=3) is None
