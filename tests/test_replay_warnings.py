"""Warnings triggered at a step: cost, latency, unanswered calls, repeated failures, unpriced."""

from __future__ import annotations

import pytest

from sessions_app import replay
from sessions_app.canonical import Kind
from sessions_app.models import Session

from .builders_replay import event, session_of

pytestmark = pytest.mark.django_db


def warnings_by_seq(session: Session) -> dict[int, list[str]]:
    page = replay.replay_page(session=session, offset=0, limit=1000)
    return {s["event"]["seq"]: [w["type"] for w in s["context"]["warnings"]] for s in page["steps"]}


def test_an_event_over_the_cost_threshold_warns_at_that_step_only(settings):
    settings.WARN_STEP_COST_USD = 0.50
    session = session_of(
        [
            event(Kind.LLM_CALL, 0, pair_id="a", tool="gpt-4o"),
            event(Kind.LLM_RESPONSE, 100, pair_id="a", tool="gpt-4o", cost_usd=0.75, tokens=9000),
            event(Kind.LLM_CALL, 200, pair_id="b", tool="gpt-4o"),
            event(Kind.LLM_RESPONSE, 300, pair_id="b", tool="gpt-4o", cost_usd=0.20, tokens=100),
        ]
    )
    assert warnings_by_seq(session) == {0: [], 1: ["cost"], 2: [], 3: []}
    warning = replay.context_at(session=session, seq=1)["warnings"][0]
    assert warning["value"] == 0.75 and warning["threshold"] == 0.50
    assert "$0.7500" in warning["message"]


def test_cost_threshold_comes_from_settings(settings):
    settings.WARN_STEP_COST_USD = 1.0
    session = session_of([event(Kind.COST, 0, cost_usd=0.75)])
    assert warnings_by_seq(session) == {0: []}


def test_a_slow_call_warns_when_its_answer_arrives(settings):
    settings.WARN_LATENCY_MS = 30_000
    session = session_of(
        [
            event(Kind.TOOL_CALL, 0, pair_id="t1", tool="search"),
            event(Kind.TOOL_RESPONSE, 45_000, pair_id="t1", tool="search"),
            event(Kind.TOOL_CALL, 46_000, pair_id="t2", tool="search"),
            event(Kind.TOOL_RESPONSE, 47_000, pair_id="t2", tool="search"),
        ]
    )
    assert warnings_by_seq(session) == {0: [], 1: ["latency"], 2: [], 3: []}
    warning = replay.context_at(session=session, seq=1)["warnings"][0]
    assert warning["value"] == 45_000 and "search answered after 45000 ms" in warning["message"]


def test_an_answer_without_its_call_is_slow_by_its_own_duration(settings):
    """docs/api.md: latency is the pair's, else the event's own durationMs (a response whose
    call was never recorded)."""
    settings.WARN_LATENCY_MS = 30_000
    session = session_of(
        [
            event(Kind.TOOL_RESPONSE, 0, pair_id="orphan", tool="search", duration_ms=45_000),
            event(Kind.TOOL_RESPONSE, 10, pair_id="quick", tool="search", duration_ms=20),
        ]
    )
    assert warnings_by_seq(session) == {0: ["latency"], 1: []}
    assert replay.context_at(session=session, seq=0)["warnings"][0]["value"] == 45_000


def test_a_sub_agent_that_never_answered_warns_once_the_session_ended():
    session = session_of(
        [
            event(Kind.CHILD_SPAWN, 0, pair_id="kid-1", child_id="kid-1"),
            event(Kind.CHILD_SPAWN, 10, pair_id="kid-2", child_id="kid-2"),
            event(Kind.CHILD_RESULT, 20, pair_id="kid-2", child_id="kid-2"),
        ]
    )
    assert warnings_by_seq(session) == {0: ["unanswered"], 1: [], 2: []}


def test_a_call_that_never_got_an_answer_warns_once_the_session_ended():
    session = session_of(
        [
            event(Kind.LLM_CALL, 0, pair_id="lost", tool="gpt-4o"),
            event(Kind.LLM_CALL, 10, pair_id="ok", tool="gpt-4o"),
            event(Kind.LLM_RESPONSE, 20, pair_id="ok", tool="gpt-4o"),
        ]
    )
    assert session.status != Session.Status.LIVE
    assert warnings_by_seq(session) == {0: ["unanswered"], 1: [], 2: []}


def test_an_open_call_in_a_live_session_warns_only_after_the_latency_threshold(settings):
    settings.WARN_LATENCY_MS = 30_000
    recent = session_of([event(Kind.TOOL_CALL, 0, pair_id="x", tool="db"), event(Kind.NOTE, 10_000)], finish=False)
    assert recent.status == Session.Status.LIVE
    assert warnings_by_seq(recent) == {0: [], 1: []}
    stale = session_of([event(Kind.TOOL_CALL, 0, pair_id="x", tool="db"), event(Kind.NOTE, 31_000)], finish=False)
    assert warnings_by_seq(stale) == {0: ["unanswered"], 1: []}


def test_the_same_tool_failing_repeatedly_warns_from_the_nth_failure(settings):
    settings.WARN_REPEATED_FAILURES = 3
    events = []
    outcomes = [True, True, True, True, False, True]  # failed?
    for i, failed in enumerate(outcomes):
        events.append(event(Kind.TOOL_CALL, i * 10, pair_id=f"c{i}", tool="fetch"))
        kind = Kind.TOOL_ERROR if failed else Kind.TOOL_RESPONSE
        events.append(event(kind, i * 10 + 5, pair_id=f"c{i}", tool="fetch", failed=failed, is_error=failed))
    session = session_of(events)
    answers = {seq: types for seq, types in warnings_by_seq(session).items() if seq % 2 == 1}
    assert answers == {1: [], 3: [], 5: ["repeated_failure"], 7: ["repeated_failure"], 9: [], 11: []}
    message = replay.context_at(session=session, seq=7)["warnings"][0]["message"]
    assert message == "fetch failed 4 times in a row"


def test_a_cost_that_could_not_be_priced_is_a_warning_not_a_silent_zero():
    session = session_of(
        [
            event(Kind.LLM_RESPONSE, 0, tool="mystery-model", tokens=1200, cost_unpriced=True),
        ]
    )
    warning = replay.context_at(session=session, seq=0)["warnings"][0]
    assert warning["type"] == "unpriced"
    assert "1200 tokens" in warning["message"] and "mystery-model" in warning["message"]


def test_page_warnings_equal_context_warnings(make_session, settings):
    settings.WARN_STEP_COST_USD = 0.004
    settings.WARN_REPEATED_FAILURES = 2
    session = make_session(events=400)
    page = replay.replay_page(session=session, offset=0, limit=400)
    found = 0
    for step in page["steps"]:
        expected = replay.context_at(session=session, seq=step["event"]["seq"])["warnings"]
        assert step["context"]["warnings"] == expected
        found += len(expected)
    assert found > 0
