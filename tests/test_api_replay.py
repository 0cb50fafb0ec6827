"""GET .../replay, .../summary, .../steps, .../steps/{index}, .../context, .../search."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from sessions_app import replay
from sessions_app.canonical import Kind
from sessions_app.ingest.writer import finish_session
from sessions_app.models import Event, Session

from .builders_dashboard import _event, build_session, conversation_events
from .builders_replay import api, get_json, recorded_session  # noqa: F401  (fixture)


@pytest.fixture
def session(make_session):
    built = make_session(events=2500, source_session_id="ses_abc123")
    finish_session(session=built)
    built.refresh_from_db()
    return built


def test_replay_page_is_the_functions_page_as_json(api, session):
    body = get_json(api, f"/api/sessions/{session.pk}/replay?offset=100&limit=50")
    expected = replay.replay_page(session=session, offset=100, limit=50)
    assert body == orjson.loads(orjson.dumps(expected, option=orjson.OPT_NON_STR_KEYS))
    assert body["session"]["sourceSessionId"] == "ses_abc123"
    assert body["pagination"] == {"offset": 100, "limit": 50, "hasMore": True}
    assert set(body["llm"]) <= {str(s) for s in range(100)}  # JSON object keys are text


def test_replay_defaults_to_a_thousand_steps_with_context(api, session):
    body = get_json(api, f"/api/sessions/{session.pk}/replay")
    assert len(body["steps"]) == 1000 and body["steps"][0]["context"] is not None
    assert body["totalSteps"] == 2500


def test_replay_filter_and_no_context(api, session):
    body = get_json(
        api, f"/api/sessions/{session.pk}/replay?eventTypes=llm_call,tool_error&includeContext=false&limit=10"
    )
    assert {s["event"]["kind"] for s in body["steps"]} == {"llm_call", "tool_error"}
    assert body["totalSteps"] == Event.objects.filter(session=session, kind__in=["llm_call", "tool_error"]).count()
    assert all(s["context"] is None for s in body["steps"])


@pytest.mark.parametrize(
    "query,message",
    [
        ("limit=0", "limit: Input should be greater than or equal to 1"),
        ("limit=5001", "limit: Input should be less than or equal to 5000"),
        ("offset=-1", "offset: Input should be greater than or equal to 0"),
        ("limit=ten", "limit: Input should be a valid integer"),
        ("eventTypes=llm_call,bogus", "unknown event type 'bogus'"),
        ("includeContext=maybe", "includeContext: Input should be a valid boolean"),
    ],
)
def test_replay_bad_parameters_are_400_with_a_message(api, session, query, message):
    body = get_json(api, f"/api/sessions/{session.pk}/replay?{query}", 400)
    assert message in body["detail"]


def test_replay_of_an_unknown_session_is_404(api, db):
    assert get_json(api, "/api/sessions/424242/replay", 404)["detail"] == "session 424242 not found"


def test_replay_page_query_count_is_pinned(api, session, django_assert_num_queries):
    api.get(f"/api/sessions/{session.pk}")  # records the key's last use (once a minute)
    for offset in (1, 1201, 2301):  # pages whose first and last events pair outside them
        # key lookup, the session, then the page's 3 reads
        with django_assert_num_queries(5):
            response = api.get(f"/api/sessions/{session.pk}/replay?offset={offset}&limit=100")
        assert response.status_code == 200


def test_single_step_query_count_is_pinned(api, session, django_assert_num_queries):
    api.get(f"/api/sessions/{session.pk}")  # records the key's last use (once a minute)
    for index in (0, 250, session.step_count - 1):
        with django_assert_num_queries(3):  # key lookup, the session, the step with its state
            response = api.get(f"/api/sessions/{session.pk}/steps/{index}")
        assert response.status_code == 200
        assert orjson.loads(response.content) == replay.step_state_at(session=session, index=index)


def test_summary_has_rlm_codes_keys_and_our_totals(api, tmp_path, db):
    recorded, _, path = recorded_session(tmp_path, steps=4)
    body = get_json(api, f"/api/sessions/{recorded.pk}/summary")
    assert body == replay.get_summary(session=recorded)
    assert body["session_id"] == "run_full" and body["total_steps"] == 4
    assert body["totalEvents"] == recorded.event_count and body["llmCalls"] == 4
    assert body["format"] == "rlm_native" and body["models"] == ["gpt-4o-mini"]
    # Our own totals, counted again here from the stored events rather than from the session's
    # running totals the summary reads: for this session, and for one with prices, tools and a
    # failed tool call besides a failed step (rlm-code's recorder prices nothing, calls no tool).
    talk = conversation_events(turns=3, replies=2)
    failed_call = _event(len(talk), Kind.LLM_RESPONSE, pair_id="late", tool="gpt-4o", is_error=True, cost_usd=0.02)
    priced = build_session([*talk, failed_call], source_session_id="priced")
    for session in (recorded, priced):
        body = get_json(api, f"/api/sessions/{session.pk}/summary")
        events = Event.objects.filter(session=session)
        kinds = Counter(events.values_list("kind", flat=True))
        assert (body["totalEvents"], body["llmCalls"], body["toolCalls"]) == (
            events.count(), kinds["llm_call"], kinds["tool_call"]
        )  # fmt: skip
        assert body["errorEvents"] == events.filter(is_error=True).count()
        assert body["totalCost"] == pytest.approx(sum(c for c in events.values_list("cost_usd", flat=True) if c))
        assert body["total_tokens"] == sum(t for t in events.values_list("tokens", flat=True) if t)
        tools = events.filter(kind="tool_call").exclude(tool="").values_list("tool", flat=True)
        assert body["tools"] == sorted(set(tools))
        assert body["status"] == str(Session.objects.get(pk=session.pk).status)
    assert body["totalCost"] > 0 and body["toolCalls"] > 0 and body["errorEvents"] != body["error_count"]


def test_steps_page_and_single_step(api, session):
    body = get_json(api, f"/api/sessions/{session.pk}/steps?offset=10&limit=3")
    assert body["total"] == 500 and len(body["steps"]) == 3
    assert body["steps"][1] == get_json(api, f"/api/sessions/{session.pk}/steps/11")
    assert (
        "has no step at index 500 (its step indexes are 0 to 499)"
        in get_json(api, f"/api/sessions/{session.pk}/steps/500", 404)["detail"]
    )
    assert "limit" in get_json(api, f"/api/sessions/{session.pk}/steps?limit=6000", 400)["detail"]


def test_context_at_an_event(api, session):
    body = get_json(api, f"/api/sessions/{session.pk}/context?seq=777")
    assert body["eventIndex"] == 777 and len(body["llmHistory"]) == 50
    assert body["llmHistory"][-1]["payload"]["text"].startswith("event ")
    assert (
        "has no event at seq 2500 (its seqs are 0 to 2499)"
        in get_json(api, f"/api/sessions/{session.pk}/context?seq=2500", 404)["detail"]
    )


def test_search_with_error_navigation(api, session):
    body = get_json(api, f"/api/sessions/{session.pk}/search?q=event%2012&limit=3")
    assert [r["seq"] for r in body["results"]] == [12, 120, 121] and body["nextFromSeq"] == 122
    errors = get_json(api, f"/api/sessions/{session.pk}/search?errors=1&limit=5&at=100")
    assert all(r["isError"] or r["kind"] == "step_end" for r in errors["results"])
    assert (errors["previousError"], errors["nextError"]) == replay.errors_around(session=session, seq=100)
    assert errors["previousError"] < 100 < errors["nextError"]
    kinds = get_json(api, f"/api/sessions/{session.pk}/search?kind=tool_error&limit=2&from=50")
    assert [r["kind"] for r in kinds["results"]] == ["tool_error", "tool_error"]
    assert kinds["results"][0]["seq"] >= 50
    assert "unknown event type" in get_json(api, f"/api/sessions/{session.pk}/search?kind=nope", 400)["detail"]


def test_a_body_written_without_integer_keys_still_takes_them():
    # The replay page writes its maps' keys as text itself, for speed (api/responses.py); a dict
    # with integer keys met after all is still written, its keys as text.
    from sessions_app.api.responses import json_response

    assert json_response({"a": {1: 2}, "b": [{"c": 3}]}, str_keys=True).content == b'{"a":{"1":2},"b":[{"c":3}]}'
    assert json_response({"a": {"1": 2}}, str_keys=True).content == b'{"a":{"1":2}}'


def test_event_times_read_as_the_database_formats_them_are_python_s_iso_text(api, make_session):
    # The page's timestamps are made by the database (replay/rows.py _EXPRESSIONS, SQLite and
    # PostgreSQL alike): they must be what formatting the stored datetime in Python gives.
    from datetime import UTC, datetime, timedelta

    from sessions_app.ingest.writer import append_events
    from sessions_app.replay.rows import _iso

    from .conftest import synthetic_events

    wanted = [
        datetime(1, 1, 1, 0, 0, 0, 123456, tzinfo=UTC), datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC),
        datetime(2026, 3, 4, 5, 6, 7, 1, tzinfo=UTC), datetime(2026, 3, 4, 5, 6, 7, 999999, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 59, 59, 500000, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ]  # fmt: skip
    session = make_session()
    for i, moment in enumerate(wanted):
        # synthetic_events places event i at t0 + 250 ms * i
        append_events(session=session, events=synthetic_events(1, start=i, t0=moment - timedelta(milliseconds=250 * i)))
    body = get_json(api, f"/api/sessions/{session.pk}/replay?limit=10")
    shown = [step["event"]["timestamp"] for step in body["steps"]]
    stored = [_iso(ts) for ts in Event.objects.filter(session=session).order_by("seq").values_list("ts", flat=True)]
    assert shown == stored == [_iso(moment) for moment in wanted]
    assert shown[1] == "2026-03-04T05:06:07Z" and shown[2] == "2026-03-04T05:06:07.000001Z"
