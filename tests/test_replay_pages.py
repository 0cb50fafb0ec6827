"""Replay pages (AgentLens ReplayState): shape, filters that only hide steps, keyset reads,
the page-level history maps, chainValid, pinned query counts."""

from __future__ import annotations

import orjson
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app import replay
from sessions_app.ingest.writer import finish_session
from sessions_app.models import Event
from sessions_app.verification import verify_session

from .builders_replay import resolve_page_context

CONTEXT_ONLY = ("memoryNotes", "variables", "event", "pairedEvent", "pairDurationMs", "step", "stepSeq")


@pytest.fixture
def long_session(make_session):
    session = make_session(events=3000)
    finish_session(session=session)
    session.refresh_from_db()
    return session


def matching_seqs(session, kinds) -> list[int]:
    return list(Event.objects.filter(session=session, kind__in=kinds).order_by("seq").values_list("seq", flat=True))


def test_page_has_the_agentlens_replay_state_shape(long_session):
    verify_session(session=long_session)
    page = replay.replay_page(session=long_session, offset=10, limit=5)
    assert set(page) >= {"session", "chainValid", "totalSteps", "steps", "pagination", "summary"}
    assert page["totalSteps"] == 3000 and page["chainValid"] is True
    assert page["pagination"] == {"offset": 10, "limit": 5, "hasMore": True}
    assert [s["index"] for s in page["steps"]] == [10, 11, 12, 13, 14]
    assert [s["event"]["seq"] for s in page["steps"]] == [10, 11, 12, 13, 14]
    step = page["steps"][0]
    assert set(step) == {"index", "event", "pairedEvent", "pairDurationMs", "context"}
    assert step["event"]["kind"] == "llm_call" and step["pairedEvent"]["seq"] == 11
    assert step["pairDurationMs"] == 250.0
    assert set(step["context"]) >= {
        "eventIndex",
        "totalEvents",
        "cumulativeCostUsd",
        "elapsedMs",
        "eventCounts",
        "llmHistory",
        "toolResults",
        "pendingApprovals",
        "errorCount",
        "warnings",
    }
    assert page["summary"]["totalLlmCalls"] == 600 and page["summary"]["models"] == ["gpt-4o"]


def test_last_page_says_there_is_no_more(long_session):
    page = replay.replay_page(session=long_session, offset=2990, limit=50)
    assert len(page["steps"]) == 10 and page["pagination"]["hasMore"] is False
    empty = replay.replay_page(session=long_session, offset=5000, limit=50)
    assert empty["steps"] == [] and empty["pagination"]["hasMore"] is False


@pytest.mark.parametrize("kinds", [["tool_error"], ["llm_call", "tool_error"], ["step_end"]])
@pytest.mark.parametrize("offset", [0, 37, 140])
def test_filtered_page_starts_at_the_nth_matching_event(long_session, kinds, offset):
    expected = matching_seqs(long_session, kinds)
    page = replay.replay_page(session=long_session, offset=offset, limit=25, event_types=kinds, include_context=False)
    assert page["totalSteps"] == len(expected)
    assert [s["event"]["seq"] for s in page["steps"]] == expected[offset : offset + 25]
    assert [s["index"] for s in page["steps"]] == list(range(offset, offset + len(page["steps"])))
    assert page["pagination"]["hasMore"] == (offset + 25 < len(expected))


def test_filtered_context_equals_the_unfiltered_context(long_session):
    filtered = replay.replay_page(session=long_session, offset=60, limit=40, event_types=["tool_error"])
    resolved = resolve_page_context(filtered)
    seqs = [s["event"]["seq"] for s in filtered["steps"]]
    assert len(seqs) == 40 and seqs[-1] - seqs[0] > 500  # the hidden events between them matter
    for seq, context in zip(seqs, resolved):
        unfiltered = replay.replay_page(session=long_session, offset=seq, limit=1)
        assert context == resolve_page_context(unfiltered)[0]
        full = replay.context_at(session=long_session, seq=seq)
        assert context == {k: v for k, v in full.items() if k not in CONTEXT_ONLY}
    # A context counts every event, not only the shown ones.
    assert resolved[0]["eventIndex"] == seqs[0]
    assert sum(resolved[0]["eventCounts"].values()) == seqs[0] + 1
    assert len(resolved[0]["llmHistory"]) == 50


def test_unfiltered_page_contexts_equal_context_at(long_session):
    page = replay.replay_page(session=long_session, offset=1234, limit=30)
    for step, context in zip(page["steps"], resolve_page_context(page)):
        full = replay.context_at(session=long_session, seq=step["event"]["seq"])
        assert context == {k: v for k, v in full.items() if k not in CONTEXT_ONLY}


def test_page_maps_hold_each_entry_once_and_only_outside_the_steps(long_session):
    page = replay.replay_page(session=long_session, offset=1000, limit=200)
    step_seqs = {s["event"]["seq"] for s in page["steps"]}
    assert page["llm"] and page["tools"]
    assert not (set(page["llm"]) & step_seqs) and not (set(page["tools"]) & step_seqs)
    refs = set()
    for step in page["steps"]:
        assert len(step["context"]["llmHistory"]) == 50
        refs.update(step["context"]["llmHistory"], step["context"]["toolResults"])
    assert refs == (refs & step_seqs) | set(page["llm"]) | set(page["tools"])
    assert all(seq < 1000 for seq in page["llm"])  # only the history before the page


def test_page_without_context_has_null_contexts_and_no_maps(long_session):
    page = replay.replay_page(session=long_session, offset=0, limit=10, include_context=False)
    assert all(step["context"] is None for step in page["steps"])
    assert "llm" not in page and "tools" not in page


def test_event_types_accept_agentlens_names_and_reject_unknown_ones(long_session):
    page = replay.replay_page(session=long_session, offset=0, limit=5, event_types=["session_started"])
    assert page["totalSteps"] == 0
    with pytest.raises(replay.ReplayParameterError, match="unknown event type 'llm_cal'"):
        replay.replay_page(session=long_session, offset=0, limit=5, event_types=["llm_cal"])
    for limit in (0, 5001):
        with pytest.raises(replay.ReplayParameterError, match="limit must be between 1 and 5000"):
            replay.replay_page(session=long_session, offset=0, limit=limit)


def test_page_query_count_is_pinned_whatever_the_offset(long_session, django_assert_num_queries):
    for offset in (1, 1501, 2001):
        # The rows (plus the one before, to check the link), the history before the page, the
        # paired events just outside it.
        with django_assert_num_queries(3):
            page = replay.replay_page(session=long_session, offset=offset, limit=500)
        assert len(page["steps"]) == min(500, 3000 - offset)


def test_filtered_page_finds_its_offset_in_a_logarithmic_number_of_queries(make_session):
    session = make_session(events=20_000)
    with CaptureQueriesContext(connection) as queries:
        page = replay.replay_page(session=session, offset=700, limit=100, event_types=["tool_error"])
    expected = matching_seqs(session, ["tool_error"])
    assert page["steps"][0]["event"]["seq"] == expected[700]
    probes = [q for q in queries.captured_queries if q["sql"].startswith("SELECT seq, kind_counts")]
    # Two 32-ary searches (first and last seq) over 20,000 events: at most 2 x 3 probe queries.
    assert 0 < len(probes) <= 6
    assert not any("OFFSET" in q["sql"].upper() for q in queries.captured_queries)


def test_a_page_says_the_chain_is_valid_only_after_a_verification_found_it_so(long_session):
    assert replay.replay_page(session=long_session, offset=0, limit=20)["chainValid"] is False
    assert replay.session_info(long_session)["chain"]["state"] == "unverified"
    verify_session(session=long_session)
    assert replay.replay_page(session=long_session, offset=0, limit=20)["chainValid"] is True
    Event.objects.filter(session=long_session, seq=1500).update(payload='{"tampered": true}')
    verify_session(session=long_session)
    page = replay.replay_page(session=long_session, offset=0, limit=20)
    assert page["chainValid"] is False
    assert page["session"]["chain"] == {**page["session"]["chain"], "state": "broken", "brokenSeq": 1500}


def test_spliced_page_serialises_to_the_same_json(long_session):
    plain = replay.replay_page(session=long_session, offset=700, limit=50)
    spliced = replay.replay_page(session=long_session, offset=700, limit=50, splice=True)
    options = orjson.OPT_NON_STR_KEYS
    assert orjson.loads(orjson.dumps(spliced, option=options)) == orjson.loads(orjson.dumps(plain, option=options))


def test_a_thousand_step_page_with_context_stays_under_two_megabytes(make_session):
    session = make_session(events=5000)
    page = replay.replay_page(session=session, offset=3000, limit=1000, splice=True)
    size = len(orjson.dumps(page, option=orjson.OPT_NON_STR_KEYS))
    assert len(page["steps"]) == 1000
    assert size < 2 * 1024 * 1024, size
