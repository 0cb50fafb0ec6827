"""AgentLens events (FORMATS.md section 2): the three containers, sessions grouped by sessionId,
pairing and durations, approvals, costs counted once, unpriced tokens, steps, bad input.

The fixtures under fixtures/agentlens/ hold the same 24 events of two interleaved sessions
(`ses_deploy_7f3a`: 15 events, `ses_triage_2b91`: 9) as JSON lines, a pretty-printed JSON array
and an `{"events": [...]}` ingest body; the expected figures below are read off those events.
"""

from __future__ import annotations

import itertools
import random
import re
import shutil

import orjson
import pytest

from sessions_app.canonical import Kind, Problems
from sessions_app.formats import Head, Source, agentlens, detect
from sessions_app.formats import _json_records
from sessions_app.models import Session

from .builders_formats import FIXTURES, ingest_file, payload, problem_keys, rows, step_state

DIR = FIXTURES / "agentlens"
CONTAINERS = ["two_sessions.ndjson", "two_sessions_array.json", "two_sessions_body.json"]
DEPLOY, TRIAGE = "ses_deploy_7f3a", "ses_triage_2b91"
DEPLOY_KINDS = [
    "session_start", "llm_call", "llm_response", "cost", "tool_call", "tool_response", "tool_call",
    "tool_error", "tool_call", "tool_error", "approval_requested", "approval_denied", "llm_call",
    "llm_response", "session_end",
]  # fmt: skip
TRIAGE_KINDS = [
    "session_start", "llm_call", "llm_response", "cost", "approval_requested", "approval_granted",
    "tool_call", "tool_response", "session_end",
]  # fmt: skip


def source_events(name: str) -> list[dict]:
    return [orjson.loads(line) for line in (DIR / name).read_bytes().splitlines() if line.strip()]


def unhashed(events: list[dict]) -> None:
    """Drop AgentLens's hashes from events a test edits: the edits would break its chain
    (test_format_agentlens_chain.py checks that), which is not what the test is about."""
    for event in events:
        del event["prevHash"], event["hash"]


def by_id(sessions: list[Session]) -> dict[str, Session]:
    return {session.source_session_id: session for session in sessions}


@pytest.mark.parametrize("name", CONTAINERS + ["triage_newest_first.json"])
def test_agentlens_is_detected_by_content_whatever_the_file_name(name, tmp_path):
    renamed = tmp_path / "events.txt"
    shutil.copy(DIR / name, renamed)
    assert detect(Source(path=renamed)) == "agentlens"


@pytest.mark.parametrize(
    "other", ["flux0/support_chat.jsonl", "daycare/complete_new.jsonl", "daycare/complete_old.jsonl"]
)
def test_other_formats_are_not_taken_for_agentlens(other):
    assert not agentlens.sniff(Head.of(Source(path=FIXTURES / other)))


@pytest.mark.parametrize("name", CONTAINERS)
def test_each_container_yields_one_session_per_session_id_in_first_seen_order(name, project):
    sessions, problems = ingest_file(agentlens, DIR / name, project)
    assert [s.source_session_id for s in sessions] == [DEPLOY, TRIAGE]
    assert problems.count == 0
    deploy, triage = sessions
    assert [e.kind for e in rows(deploy)] == DEPLOY_KINDS
    assert [e.kind for e in rows(triage)] == TRIAGE_KINDS
    assert (deploy.agent_id, triage.agent_id) == ("deploy-bot", "triage-bot")
    assert (deploy.event_count, triage.event_count) == (15, 9)


def test_the_three_containers_give_identical_sessions(project):
    stored = {}
    for name in CONTAINERS:
        sessions, _ = ingest_file(agentlens, DIR / name, project)
        stored[name] = [
            [(e.kind, e.tool, e.pair_id, e.cost_usd, e.tokens, e.step_pos, orjson.loads(e.raw)) for e in rows(s)]
            for s in sessions
        ]
    assert stored[CONTAINERS[0]] == stored[CONTAINERS[1]] == stored[CONTAINERS[2]]


def test_raw_is_each_events_exact_source_text_and_lines_are_where_it_starts(project):
    ndjson_lines = (DIR / "two_sessions.ndjson").read_text().splitlines()
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    for event in rows(sessions[0]) + rows(sessions[1]):
        assert event.raw == ndjson_lines[event.line - 1]

    array_lines = (DIR / "two_sessions_array.json").read_text().splitlines()
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions_array.json", project)
    for event in rows(sessions[0]):
        # A pretty-printed element keeps its own indentation and line breaks.
        assert event.raw.startswith("{\n")
        assert array_lines[event.line - 1].strip() == "{"
        first_key = array_lines[event.line].strip()
        assert first_key == f'"id": "{orjson.loads(event.raw)["id"]}",'


def test_source_id_hash_and_prev_hash_are_kept_in_the_payload(project):
    originals = {e["id"]: e for e in source_events("two_sessions.ndjson")}
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    for event in rows(sessions[0]):
        source = payload(event)["_source"]
        original = originals[source["id"]]
        assert (source["hash"], source["prevHash"], source["severity"]) == (
            original["hash"], original["prevHash"], original["severity"],
        )  # fmt: skip
        for key, value in original["payload"].items():
            assert payload(event)[key] == value
    assert sessions[0].metadata["source_chain"] == {"valid": True, "chained": True}


def test_calls_pair_with_their_responses_and_errors_by_call_id(project):
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    events = rows(sessions[0])
    calls = {e.pair_id: e for e in events if e.kind in (Kind.TOOL_CALL, Kind.LLM_CALL)}
    answers = {e.pair_id: e for e in events if e.kind in (Kind.TOOL_RESPONSE, Kind.TOOL_ERROR, Kind.LLM_RESPONSE)}
    assert set(calls) == set(answers) == {"llm_01", "tc_01", "tc_02", "tc_03", "llm_02"}
    for pair_id, call in calls.items():
        assert call.pair_seq == answers[pair_id].seq
        assert answers[pair_id].pair_seq == call.seq
    # The source's own durationMs / latencyMs wins over the timestamp difference.
    assert calls["tc_01"].pair_duration_ms == 120
    assert calls["tc_02"].pair_duration_ms == 4000
    assert calls["llm_01"].pair_duration_ms == 1150
    assert calls["llm_02"].pair_duration_ms == 1800
    assert (calls["tc_01"].tool, calls["llm_01"].tool) == ("read_file", "claude-sonnet-4-20250514")


def test_approvals_pair_by_request_id_and_close_a_step_with_the_decision(project):
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    deploy, triage = sessions
    request, denied = [e for e in rows(deploy) if e.pair_id == "apr_01"]
    assert (request.kind, denied.kind) == (Kind.APPROVAL_REQUESTED, Kind.APPROVAL_DENIED)
    assert request.pair_seq == denied.seq
    assert request.pair_duration_ms == 60000  # no duration in the source: 10:30:13 -> 10:31:13
    denial = step_state(denied)
    assert denial["action_type"] == "approval"
    assert denial["action_code"] == "deploy api v2.3 to prod"
    assert denial["success"] is False
    assert denial["output"] == "denied by alice: smoke tests are red"
    assert denial["duration_ms"] == 60000
    granted = next(e for e in rows(triage) if e.kind == Kind.APPROVAL_GRANTED)
    assert step_state(granted)["success"] is True
    assert step_state(granted)["output"] == "granted by bob"


def test_cost_tracked_restating_a_priced_llm_response_is_not_counted_twice(project):
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    deploy, triage = sessions
    response, cost = [e for e in rows(deploy) if e.kind in (Kind.LLM_RESPONSE, Kind.COST)][:2]
    assert (response.cost_usd, response.tokens) == (0.0048, 1280)
    assert (cost.cost_usd, cost.tokens) == (None, None)
    assert payload(cost)["_replay"] == {"counted_on": "llm_response", "callId": "llm_01"}
    assert payload(cost)["costUsd"] == 0.0048  # the source's figure stays visible
    assert deploy.cost_usd == pytest.approx(0.0048)
    # A cost_tracked for something else (an embedding call) counts, as AgentLens counts it.
    embedding = next(e for e in rows(triage) if e.kind == Kind.COST)
    assert (embedding.cost_usd, embedding.tokens) == (0.0001, 5000)
    assert triage.cost_usd == pytest.approx(0.0121)
    assert triage.tokens == 6200
    assert [e.cost_total for e in rows(triage)][-1] == pytest.approx(0.0121)


def test_tokens_used_without_a_price_are_flagged_unpriced_not_free(project):
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    deploy = sessions[0]
    second = [e for e in rows(deploy) if e.kind == Kind.LLM_RESPONSE][1]
    assert second.pair_id == "llm_02"
    assert (second.tokens, second.cost_usd, second.cost_unpriced) == (2150, None, True)
    assert not any(e.cost_unpriced for e in rows(deploy) if e.pair_id != "llm_02")
    assert deploy.tokens == 1280 + 2150


def test_steps_close_at_llm_responses_tool_outcomes_and_approval_decisions(project):
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    deploy = sessions[0]
    steps = [e for e in rows(deploy) if e.step_pos is not None]
    assert [e.kind for e in steps] == [
        "llm_response", "tool_response", "tool_error", "tool_error", "approval_denied", "llm_response",
    ]  # fmt: skip
    assert [e.step_pos for e in steps] == list(range(6))
    states = [step_state(e) for e in steps]
    assert [s["step"] for s in states] == [1, 2, 3, 4, 5, 6]
    assert [s["action_type"] for s in states] == ["llm_call", "tool_call", "tool_call", "tool_call", "approval", "llm_call"]
    assert [s["success"] for s in states] == [True, True, False, False, False, True]
    assert states[0]["output"] == "I'll read the deploy config and run the smoke tests first."
    assert states[0]["action_rationale"] == "Review the deploy plan for api v2.3 and ship it if green."
    assert states[0]["tokens_used"] == 1280
    assert states[0]["timestamp"] == "2026-02-08T10:30:02.150Z"
    assert states[1]["action_code"] == 'read_file({"path":"config/deploy.yaml"})'
    assert states[1]["output"] == "replicas: 3\nimage: registry.local/api:v2.3\n"
    assert states[2]["error"] == "2 of 41 smoke tests failed [E_TESTS]"
    assert states[2]["duration_ms"] == 4000
    assert states[5]["tokens_used"] == 2150
    assert deploy.step_count == 6
    assert deploy.step_error_count == 2
    assert deploy.step_success_count == 3


def test_repeated_failures_of_one_tool_build_a_fail_streak(project):
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    outcomes = [(e.tool, e.fail_streak) for e in rows(sessions[0]) if e.kind in (Kind.TOOL_RESPONSE, Kind.TOOL_ERROR)]
    assert outcomes == [("read_file", 0), ("run_tests", 1), ("run_tests", 2)]


def test_errors_come_from_severity_and_tool_errors(project):
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    deploy, triage = sessions
    assert [e.seq for e in rows(deploy) if e.is_error] == [7, 9]
    assert deploy.error_count == 2
    assert triage.error_count == 0


def test_session_fields_come_from_session_started_and_session_ended(project):
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    deploy, triage = by_id(sessions)[DEPLOY], by_id(sessions)[TRIAGE]
    assert deploy.status == Session.Status.FAILED  # reason "error"
    assert triage.status == Session.Status.COMPLETED and triage.completed
    assert deploy.started_at.isoformat() == "2026-02-08T10:30:00+00:00"
    assert deploy.ended_at.isoformat() == "2026-02-08T10:31:16+00:00"
    assert deploy.elapsed_ms == 76000
    assert deploy.model == "claude-sonnet-4-20250514"
    assert deploy.models_used == ["claude-sonnet-4-20250514"]
    assert deploy.tools_used == ["read_file", "run_tests"]
    assert (deploy.llm_calls, deploy.tool_calls) == (2, 3)
    assert deploy.metadata["agentlens"]["endReason"] == "error"
    assert deploy.metadata["agentlens"]["summary"] == "deploy blocked by failing smoke tests"
    assert deploy.metadata["agentlens"]["tags"] == ["prod", "api"]


def test_a_newest_first_export_is_put_back_in_time_order(project):
    sessions, problems = ingest_file(agentlens, DIR / "triage_newest_first.json", project)
    assert problems.count == 0
    (triage,) = sessions
    events = rows(triage)
    assert [e.kind for e in events] == TRIAGE_KINDS
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    lines = [e.line for e in events]
    assert lines == sorted(lines, reverse=True)
    assert triage.metadata["agentlens"]["time_order"] == "newest_first"
    # Read back in time order, the chain links as AgentLens verifies it (by timestamp).
    assert triage.metadata["source_chain"] == {"valid": True, "chained": True}
    assert triage.cost_usd == pytest.approx(0.0121)




def test_events_out_of_time_order_stay_in_file_order_with_a_problem(project, tmp_path):
    events = source_events("two_sessions.ndjson")
    triage = [e for e in events if e["sessionId"] == TRIAGE]
    triage[2], triage[3] = triage[3], triage[2]
    path = tmp_path / "mixed.ndjson"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in triage) + b"\n")
    sessions, problems = ingest_file(agentlens, path, project)
    assert [e.kind for e in rows(sessions[0])][2:4] == ["cost", "llm_response"]
    # AgentLens's own chain shows the swap: the event moved up does not link to the one before.
    assert problem_keys(problems) == [(1, "timestamp"), (3, "prevHash")]
    assert "not in time order" in problems.items[0].message
    assert sessions[0].metadata["agentlens"]["time_order"] == "mixed"


def test_a_cost_tracked_naming_an_unpriced_call_prices_it_without_recounting_tokens():
    converter = agentlens.Converter()
    problems = Problems()
    base = {"sessionId": "s", "agentId": "a", "severity": "info", "timestamp": "2026-02-08T10:30:00Z"}
    response = {**base, "eventType": "llm_response", "payload": {
        "callId": "c1", "model": "gpt-4o", "completion": "x", "usage": {"inputTokens": 70, "outputTokens": 30}}}
    cost = {**base, "eventType": "cost_tracked", "payload": {
        "callId": "c1", "model": "gpt-4o", "totalTokens": 100, "costUsd": 0.002}}
    (first,) = converter.convert(response, orjson.dumps(response).decode(), 1, problems)
    (second,) = converter.convert(cost, orjson.dumps(cost).decode(), 2, problems)
    assert (first.tokens, first.cost_usd, first.cost_unpriced) == (100, None, True)
    assert (second.tokens, second.cost_usd, second.cost_unpriced) == (None, 0.002, False)
    assert second.payload["_replay"] == {"prices": "llm_response", "callId": "c1"}
    assert problems.count == 0


def test_converter_state_carries_pairs_steps_and_cost_dedupe_across_batches():
    events = [e for e in source_events("two_sessions.ndjson") if e["sessionId"] == DEPLOY]

    def convert(batches):
        converted, state = [], None
        for batch in batches:
            converter = agentlens.Converter(orjson.loads(orjson.dumps(state)) if state else None)
            for index, record in enumerate(batch):
                converted.extend(converter.convert(record, orjson.dumps(record).decode(), index, Problems()))
            state = converter.state()
        return [(e.kind, e.tool, e.pair_id, e.cost_usd, e.tokens, e.step, e.step_state) for e in converted]

    whole = convert([events])
    # Split between the priced llm_response and the cost_tracked restating it, and mid-pairs.
    assert convert([events[:3], events[3:5], events[5:]]) == whole
    assert whole[3][3] is None  # still recognised as a restatement after the split


def test_one_request_body_a_line_is_read_element_by_element(project, tmp_path):
    events = source_events("two_sessions.ndjson")
    path = tmp_path / "bodies.ndjson"
    bodies = [events[:10], events[10:]]
    path.write_bytes(b"\n".join(orjson.dumps({"events": body}) for body in bodies) + b"\n")
    sessions, problems = ingest_file(agentlens, path, project)
    assert problems.count == 0
    assert [s.event_count for s in sessions] == [15, 9]
    first = rows(sessions[0])[0]
    assert first.line == 1 and orjson.loads(first.raw) == events[0]


def test_array_elements_are_the_same_whatever_the_read_block_size(monkeypatch):
    expected = [e for e in source_events("two_sessions.ndjson")]
    for block in (1, 5, 64, 4096):
        monkeypatch.setattr(_json_records, "READ_BLOCK", block)
        for name in ("two_sessions_array.json", "two_sessions_body.json"):
            problems = Problems()
            records = list(_json_records.iter_records(Source(path=DIR / name), problems, body_keys=("events",)))
            assert [r.value for r in records] == expected, (block, name)
            assert problems.count == 0


def test_bad_lines_are_reported_by_line_and_field_and_the_good_ones_import(project):
    sessions, problems = ingest_file(agentlens, DIR / "bad_input.ndjson", project)
    assert problem_keys(problems) == [
        (1, "line"),  # BOM
        (3, "line"),  # malformed JSON
        (6, "sessionId"),  # sessionId null
        (8, "line"),  # invalid UTF-8
        (11, "line"),  # truncated last line
        (2, "payload"),  # payload null
        (2, "payload.callId"),  # so the call cannot be paired
        (4, "payload.usage.totalTokens"),  # null number
        (4, "payload.costUsd"),  # "free"
        (5, "eventType"),  # unknown type "telepathy"
        (9, "payload.durationMs"),  # null number
        (10, "timestamp"),  # "yesterday"
    ]
    messages = {(p.line, p.field): p.message for p in problems.items}
    assert messages[(1, "line")] == "byte-order mark at the start of the file (ignored)"
    assert messages[(8, "line")].startswith("invalid UTF-8")
    assert messages[(11, "line")] == "truncated record (file ends mid-line)"
    assert messages[(4, "payload.costUsd")] == "not a number: free (ignored)"
    assert messages[(5, "eventType")] == "unknown eventType 'telepathy': kept as a custom event"
    (session,) = sessions
    events = rows(session)
    assert [e.line for e in events] == [1, 2, 4, 5, 7, 9, 10]
    assert [e.kind for e in events] == [
        "session_start", "llm_call", "llm_response", "custom", "tool_call", "tool_response", "session_end",
    ]  # fmt: skip
    response = events[2]
    # totalTokens null -> input + output; costUsd "free" -> no price: unpriced, not $0.
    assert (response.tokens, response.cost_usd, response.cost_unpriced) == (15, None, True)
    assert events[3].source_type == "telepathy"
    assert events[6].ts is None and session.status == Session.Status.COMPLETED


def test_a_truncated_or_broken_array_reports_where_and_keeps_the_whole_elements(project, tmp_path):
    text = (DIR / "two_sessions_array.json").read_bytes()
    cut = text[: text.index(b'"eventType": "tool_call"', 4000)]  # ends inside an element
    path = tmp_path / "cut.json"
    path.write_bytes(cut)
    sessions, problems = ingest_file(agentlens, path, project)
    whole = sum(s.event_count for s in sessions)
    element_starts = [n for n, line in enumerate(cut.split(b"\n"), start=1) if line == b"  {"]
    assert problem_keys(problems) == [(element_starts[-1], "line")]
    assert problems.items[0].message == "truncated record (file ends mid-line)"
    assert whole == cut.count(b'"eventType"')  # the cut element stops before its eventType

    broken = text.replace(b'"ses_triage_2b91"', b'"ses_\xff_triage"', 1)
    path.write_bytes(broken)
    sessions, problems = ingest_file(agentlens, path, project)
    # The unreadable element is lost, so the next event of its session no longer links.
    assert [p.field for p in problems.items] == ["line", "prevHash"]
    assert problems.items[0].message.startswith("invalid UTF-8")
    assert sum(s.event_count for s in sessions) == 23


# One damaged element of the pretty-printed array (the 8th, a tool_call of ses_deploy_7f3a):
# (what is done to it, the problems it gives as (line offset from its first line, message start)).
DAMAGE = {
    "unclosed string": (lambda e: e.replace(b'"tool_call"', b'"tool_call', 1), [(0, "malformed JSON")]),
    "extra opening brace": (lambda e: e.replace(b'"eventType"', b'{"eventType"', 1), [(0, "malformed JSON")]),
    "closing brace inside": (
        lambda e: e.replace(b'"eventType"', b'}"eventType"', 1),
        [(0, "malformed JSON"), (5, "unexpected text after an array element")],
    ),
    "missing comma inside": (lambda e: e.replace(b'"tool_call",', b'"tool_call"', 1), [(0, "malformed JSON")]),
}


def damaged_array(text: bytes, damage, element: int = 7) -> tuple[bytes, int]:
    """The array with its `element`th element damaged, and the line that element starts on."""
    starts = [m.start() for m in re.finditer(rb"\n  \{", text)]
    begin, end = starts[element] + 1, starts[element + 1]
    return text[:begin] + damage(text[begin:end]) + text[end:], text.count(b"\n", 0, begin) + 1


@pytest.mark.parametrize("block", [7, 4096, 1 << 20])
@pytest.mark.parametrize("name", list(DAMAGE))
def test_a_malformed_element_costs_only_itself_not_the_elements_after_it(name, block, monkeypatch, tmp_path):
    damage, expected = DAMAGE[name]
    monkeypatch.setattr(_json_records, "READ_BLOCK", block)
    text = (DIR / "two_sessions_array.json").read_bytes()
    data, line = damaged_array(text, damage)
    path = tmp_path / "damaged.json"
    path.write_bytes(data)
    problems = Problems()
    records = list(_json_records.iter_records(Source(path=path), problems, body_keys=("events",)))
    events = source_events("two_sessions.ndjson")
    assert [r.value for r in records] == events[:7] + events[8:]
    assert [(p.line - line, p.message[: len(m)]) for p, (_, m) in zip(problems.items, expected)] == expected, problems.items
    assert problems.count == len(expected)


# Damage to one element of an array written on one line, as a request body or a compact export
# is: there the next element is found by how the elements open (`{"id":`) instead of by
# indentation. (what is done to the element, the problems it gives, (line, message start)).
ONE_LINE_DAMAGE = {
    "unclosed string": (lambda e: e.replace(b'","', b',"', 1), [(1, "malformed JSON")]),  # every element has one
    "extra opening brace": (DAMAGE["extra opening brace"][0], [(1, "malformed JSON")]),
    "closing brace inside": (
        DAMAGE["closing brace inside"][0],
        [(1, "malformed JSON"), (1, "unexpected text after an array element (skipped to the next element)")],
    ),
    # The pretty-printed cases' own damage needs a "tool_call": this one fits every element.
    "missing comma inside": (lambda e: e.replace(b'","', b'" "', 1), [(1, "malformed JSON")]),
}
# The last element has no next one to be found by: what it swallows or leaves is the array's end.
ONE_LINE_DAMAGE_LAST = {
    "unclosed string": [(1, "truncated record (file ends mid-line)")],
    "extra opening brace": [(1, "malformed JSON"), (2, "file ends before the array is closed")],
    "closing brace inside": [
        (1, "malformed JSON"), (1, "unexpected text after an array element (skipped to the end of the array)"),
    ],
}


@pytest.mark.parametrize("block", [7, 4096, 1 << 20])
@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
@pytest.mark.parametrize("element", [0, 7, 23])
@pytest.mark.parametrize("name", list(ONE_LINE_DAMAGE))
def test_a_malformed_element_of_a_one_line_array_costs_only_itself(name, element, body, block, monkeypatch, tmp_path):
    damage, expected = ONE_LINE_DAMAGE[name]
    monkeypatch.setattr(_json_records, "READ_BLOCK", block)
    events = source_events("two_sessions.ndjson")
    parts = [orjson.dumps(event) for event in events]
    assert damage(parts[element]) != parts[element]
    parts[element] = damage(parts[element])
    array = b"[" + b", ".join(parts) + b"]"
    path = tmp_path / "damaged.json"
    path.write_bytes((b'{"events": ' + array + b"}" if body else array) + b"\n")
    if element == len(events) - 1:
        expected = ONE_LINE_DAMAGE_LAST.get(name, expected)
        if body and name == "extra opening brace":  # the body's own closing brace, then
            expected = [expected[0], (1, "unexpected '}' between array elements (skipped)"), expected[1]]
    problems = Problems()
    records = list(_json_records.iter_records(Source(path=path), problems, body_keys=("events",)))
    assert [r.value for r in records] == events[:element] + events[element + 1 :]
    assert [(p.line, p.message[: len(m)]) for p, (_, m) in zip(problems.items, expected)] == expected, problems.items
    assert problems.count == len(expected)


@pytest.mark.parametrize("block", [7, 1 << 20])
def test_text_after_the_last_element_of_a_one_line_array_is_skipped_to_its_end_as_one_problem(block):
    # Before, each piece of the text became an element of its own, and a problem each.
    events = source_events("two_sessions.ndjson")[:2]
    data = b"[" + orjson.dumps(events[0]) + b", " + orjson.dumps(events[1]) + b' "junk": [1, {"a": 2}], 3 ]\n'
    problems = Problems()
    elements = list(_json_records.split_array(iter([data[i : i + block] for i in range(0, len(data), block)]), problems))
    assert [orjson.loads(raw) for _, raw, _, _ in elements] == events
    assert [(p.line, p.message) for p in problems.items] == [
        (1, "unexpected text after an array element (skipped to the end of the array)")
    ]


def test_any_one_damaged_byte_of_a_one_line_array_costs_at_most_its_own_element():
    # 600 damages with a fixed seed: a byte deleted or doubled, or a brace or quote inserted.
    # Before the one-line landmark, one in four of them lost elements after the damaged one
    # (down to all of them).
    events = source_events("two_sessions.ndjson")
    text = b"[" + b", ".join(orjson.dumps(event) for event in events) + b"]\n"
    rng = random.Random(7)
    for _ in range(600):
        data = bytearray(text)
        at = rng.randrange(len(data))
        how = rng.choice(["delete", "double", "{", "}", '"'])
        if how == "delete":
            del data[at]
        elif how == "double":
            data.insert(at, data[at])
        else:
            data.insert(at, ord(how))
        values = []
        for _, raw, _, value in _json_records.split_array([bytes(data)], Problems()):
            try:
                values.append(orjson.loads(raw) if value is _json_records._UNPARSED else value)
            except orjson.JSONDecodeError:
                pass
        kept = sum(1 for event in events if event in values)
        assert kept >= len(events) - 1, (at, how, kept)


@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
@pytest.mark.parametrize("block", [7, 1 << 20])
def test_an_element_with_a_bare_nan_in_a_one_line_array_is_not_cut(body, block, monkeypatch, tmp_path):
    # Found by review: orjson refuses the NaN Python's json writes, and the element was then cut
    # at a nested object that opens like the elements. Read as a line with NaN is: as null.
    monkeypatch.setattr(_json_records, "READ_BLOCK", block)
    array = b'[{"id": 1, "v": NaN, "children": [{"id": 2}, {"id": 3}]}, {"id": 4}]'
    path = tmp_path / "nan.json"
    path.write_bytes((b'{"events": ' + array + b"}" if body else array) + b"\n")
    problems = Problems()
    records = list(_json_records.iter_records(Source(path=path), problems, body_keys=("events",)))
    assert [r.value for r in records] == [{"id": 1, "v": None, "children": [{"id": 2}, {"id": 3}]}, {"id": 4}]
    assert problems.count == 0


def test_a_valid_element_with_a_nested_line_at_its_own_indentation_is_not_cut():
    # Hand-formatted: a nested object opens a line at the element's indentation. The element is
    # valid, so it stays whole even though braces in a string send it down the structural walk.
    events = source_events("two_sessions.ndjson")[:3]
    events[1]["payload"]["note"] = "}" * 20
    middle = orjson.dumps(events[1]).replace(b'"payload":', b'"payload":\n  ')
    data = b"[\n  " + orjson.dumps(events[0]) + b",\n  " + middle + b",\n  " + orjson.dumps(events[2]) + b"\n]\n"
    problems = Problems()
    elements = list(_json_records.split_array([data], problems))
    assert [orjson.loads(raw) for _, raw, _, _ in elements] == events
    assert problems.count == 0


def test_a_stray_closing_brace_between_elements_is_skipped_not_read_for_ever():
    text = (DIR / "two_sessions_array.json").read_bytes()
    data, line = damaged_array(text, lambda e: b"}\n  " + e)
    problems = Problems()
    # At most 30 elements are taken: a scan that stood on the brace would give 30 empty ones.
    elements = list(itertools.islice(_json_records.split_array([data], problems), 30))
    assert [orjson.loads(raw) for _, raw, _, _ in elements] == source_events("two_sessions.ndjson")
    assert [(p.line, p.message) for p in problems.items] == [
        (line, "unexpected '}' between array elements (skipped)")
    ]


@pytest.mark.parametrize("block", [7, 1 << 20])
def test_text_after_the_last_element_is_skipped_to_the_end_with_one_problem(block, monkeypatch):
    monkeypatch.setattr(_json_records, "READ_BLOCK", block)
    text = (DIR / "two_sessions_array.json").read_bytes().rstrip()
    assert text.endswith(b"}\n]")
    data = text[:-2] + b' "oops": [1, 2\n  ] more\n]\n'
    problems = Problems()
    elements = list(_json_records.split_array(iter([data[i : i + block] for i in range(0, len(data), block)]), problems))
    assert [orjson.loads(raw) for _, raw, _, _ in elements] == source_events("two_sessions.ndjson")
    assert [(p.line, p.message) for p in problems.items] == [
        (text.count(b"\n"), "unexpected text after an array element (skipped to the end of the file)")
    ]


def test_a_malformed_element_of_an_ingest_body_keeps_the_rest_and_imports(project, tmp_path):
    events = source_events("two_sessions.ndjson")
    body = orjson.dumps({"events": events}, option=orjson.OPT_INDENT_2)
    broken = body.replace(b'"eventType": "approval_requested"', b'"eventType": "approval_requested', 1)
    path = tmp_path / "body.json"
    path.write_bytes(broken)
    sessions, problems = ingest_file(agentlens, path, project)
    assert sum(s.event_count for s in sessions) == 23
    # The lost element also breaks AgentLens's chain at the next event of its session.
    assert [p.field for p in problems.items] == ["line", "prevHash"]
    assert problems.items[0].message.startswith("malformed JSON")
    element_line = broken[: broken.index(b"approval_requested")].rfind(b"\n    {")
    assert problems.items[0].line == broken.count(b"\n", 0, element_line) + 2


def test_a_file_without_events_reports_it_once(project, tmp_path):
    path = tmp_path / "empty.json"
    path.write_text('{\n  "total": 0,\n  "hasMore": false\n}\n')
    sessions, problems = ingest_file(agentlens, path, project)
    assert sessions == []
    assert [(p.line, p.field, p.message) for p in problems.items] == [
        (None, "file", 'no top-level array or "events" list found')
    ]


# End to end through the importer: detection, one transaction per session, de-duplication -------


def test_import_file_detects_a_gzipped_array_and_stores_each_session(project, tmp_path):
    import gzip

    from sessions_app.ingest.importing import import_file

    path = tmp_path / "EXPORT.JSON.GZ"
    path.write_bytes(gzip.compress((DIR / "two_sessions_array.json").read_bytes()))
    outcomes = import_file(path=path, project=project)
    assert [(o.format, o.events, o.steps, o.error, o.duplicate) for o in outcomes] == [
        ("agentlens", 15, 6, None, False), ("agentlens", 9, 3, None, False),
    ]  # fmt: skip
    assert [o.session.source_session_id for o in outcomes] == [DEPLOY, TRIAGE]
    assert outcomes[0].session.cost_usd == pytest.approx(0.0048)
    again = import_file(path=path, project=project)
    assert [(o.duplicate, o.session.pk) for o in again] == [(True, o.session.pk) for o in outcomes]


def test_import_file_reports_bad_lines_and_keeps_the_good_ones(project):
    from sessions_app.ingest.importing import import_file

    (outcome,) = import_file(path=DIR / "bad_input.ndjson", project=project)
    assert (outcome.format, outcome.events, outcome.error) == ("agentlens", 7, None)
    assert [(p["line"], p["field"]) for p in outcome.problems][:5] == [
        (1, "line"), (3, "line"), (6, "sessionId"), (8, "line"), (11, "line"),
    ]  # fmt: skip
    assert len(outcome.problems) == 12


def test_elements_with_unbalanced_braces_in_strings_or_many_objects_split_correctly(tmp_path):
    events = source_events("two_sessions.ndjson")[:4]
    events[1]["payload"]["messages"][0]["content"] = 'fix this: if (x) { return "}" } } ]'
    events[2]["payload"]["completion"] = "{" * 700  # never balances: the structural walk decides
    deep: dict = {"leaf": "}"}
    for _ in range(100):
        deep = {"n": deep}
    events[3]["payload"]["deep"] = deep
    # More closing braces than the fast path looks at: the structural walk decides.
    events[3]["payload"]["rows"] = [{"row": n} for n in range(600)]
    path = tmp_path / "tricky.json"
    path.write_bytes(orjson.dumps(events, option=orjson.OPT_INDENT_2))
    problems = Problems()
    records = list(_json_records.iter_records(Source(path=path), problems, body_keys=("events",)))
    assert [r.value for r in records] == events
    assert problems.count == 0


def test_remembered_calls_stay_bounded_and_recent_ones_still_pair(monkeypatch):
    monkeypatch.setattr(agentlens, "MAX_REMEMBERED", 4)
    converter = agentlens.Converter()
    base = {"sessionId": "s", "agentId": "a", "severity": "info", "timestamp": "2026-02-08T10:30:00Z"}
    for n in range(10):
        call = {**base, "eventType": "tool_call", "payload": {"toolName": "t", "callId": f"c{n}", "arguments": {"n": n}}}
        converter.convert(call, "{}", n, Problems())
    assert len(converter.state()["calls"]) <= 4
    answer = {**base, "eventType": "tool_response", "payload": {"toolName": "t", "callId": "c9", "result": "ok"}}
    (event,) = converter.convert(answer, "{}", 11, Problems())
    assert event.step_state["action_code"] == 't({"n":9})'


def test_live_batches_through_the_api_workflow_store_what_the_file_import_stores(project):
    from sessions_app.canonical import SessionMeta
    from sessions_app.ingest.live import append_batch, create_live_session

    events = [e for e in source_events("two_sessions.ndjson") if e["sessionId"] == DEPLOY]
    session, _ = create_live_session(project=project, meta=SessionMeta(source_session_id=DEPLOY))
    for batch in (events[:3], events[3:8], events[8:]):  # splits a priced answer from its restatement
        result = append_batch(session_id=session.pk, records=batch)
        assert (result.format, result.warnings) == ("agentlens", [])
    session.refresh_from_db()
    imported = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)[0][0]
    live = [(e.kind, e.tool, e.pair_id, e.pair_seq, e.cost_usd, e.tokens, e.step_pos, e.fail_streak) for e in rows(session)]
    filed = [(e.kind, e.tool, e.pair_id, e.pair_seq, e.cost_usd, e.tokens, e.step_pos, e.fail_streak) for e in rows(imported)]
    assert live == filed
    assert session.cost_usd == pytest.approx(0.0048)
    assert (session.source_format, session.step_count) == ("agentlens", 6)


def test_a_small_body_with_one_event_a_line_is_read_as_one_document(project, tmp_path):
    events = source_events("two_sessions.ndjson")
    triage = [e for e in events if e["sessionId"] == TRIAGE]
    path = tmp_path / "body.json"
    # The last element's line is a complete object on its own: it must not pass for JSON lines.
    path.write_bytes(b'{"events": [\n' + b",\n".join(orjson.dumps(e) for e in triage) + b"\n]}\n")
    sessions, problems = ingest_file(agentlens, path, project)
    assert problems.count == 0
    assert [e.kind for e in rows(sessions[0])] == TRIAGE_KINDS


def test_json_lines_with_a_damaged_first_line_or_a_first_line_longer_than_a_block(project, tmp_path, monkeypatch):
    lines = (DIR / "two_sessions.ndjson").read_bytes().splitlines()
    path = tmp_path / "damaged.ndjson"
    path.write_bytes(b"\n".join([lines[0][:50], *lines[1:]]) + b"\n")
    sessions, problems = ingest_file(agentlens, path, project)
    # Without its first event, the session's chain starts at an event with a prevHash.
    assert problem_keys(problems) == [(1, "line"), (2, "prevHash")]
    assert sum(s.event_count for s in sessions) == 23

    monkeypatch.setattr(_json_records, "READ_BLOCK", 64)  # every line is longer than a block
    sessions, problems = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    assert problems.count == 0
    assert [s.event_count for s in sessions] == [15, 9]
    sessions, problems = ingest_file(agentlens, DIR / "two_sessions_body.json", project)
    assert problems.count == 0
    assert [s.event_count for s in sessions] == [15, 9]


def test_a_severity_or_message_text_of_the_wrong_json_type_is_reported_and_the_event_kept(project, tmp_path):
    events = [e for e in source_events("two_sessions.ndjson") if e["sessionId"] == DEPLOY]
    # Unhashable severities used to raise TypeError on the set lookup, a list text in join().
    events[0]["severity"] = []
    events[4]["severity"] = {"level": "error"}
    events[1]["payload"]["messages"][-1]["content"] = [
        {"type": "text", "text": ["x"]}, {"type": "image"}, {"type": "text", "text": "Ship it"},
    ]  # fmt: skip
    unhashed(events)
    path = tmp_path / "wrong_types.ndjson"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    sessions, problems = ingest_file(agentlens, path, project)
    assert problem_keys(problems) == [(1, "severity"), (2, "payload.messages[0].content[0].text"), (5, "severity")]
    messages = [p.message for p in problems.items]
    assert messages[0] == "unknown severity '[]': taken as info"
    assert messages[1] == "a list, not text: left out of the step's prompt"
    (session,) = sessions
    stored = rows(session)
    assert [e.kind for e in stored] == DEPLOY_KINDS
    assert [e.line for e in stored] == list(range(1, 16))
    assert not stored[4].is_error and payload(stored[4])["_source"]["severity"] == "info"
    response = stored[2]
    assert step_state(response)["action_rationale"] == "Ship it"
    assert response.pair_seq == stored[1].seq


def test_live_batches_with_an_unhashable_severity_are_stored_with_a_warning(project):
    from sessions_app.canonical import SessionMeta
    from sessions_app.ingest.live import append_batch, create_live_session

    events = [e for e in source_events("two_sessions.ndjson") if e["sessionId"] == DEPLOY]
    events[2]["severity"] = ["error"]
    unhashed(events)
    session, _ = create_live_session(project=project, meta=SessionMeta(source_session_id=DEPLOY))
    result = append_batch(session_id=session.pk, records=events)
    assert result.warnings == [
        {"index": 2, "field": "severity", "message": "unknown severity '[\"error\"]': taken as info"}
    ]
    stored = rows(session)
    assert [e.kind for e in stored] == DEPLOY_KINDS
    assert stored[2].tokens == 1280 and stored[2].pair_seq == stored[1].seq
