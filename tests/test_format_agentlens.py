"""AgentLens events (FORMATS.md section 2): the three containers, sessions grouped by sessionId,
pairing and durations, approvals, costs counted once, unpriced tokens, steps, bad input.

The fixtures under fixtures/agentlens/ hold the same 24 events of two interleaved sessions
(`ses_deploy_7f3a`: 15 events, `ses_triage_2b91`: 9) as JSON lines, a pretty-printed JSON array
and an `{"events": [...]}` ingest body; the expected figures below are read off those events.
"""

from __future__ import annotations

import random
import re
import shutil
import tempfile
from pathlib import Path

import orjson
import pytest

from sessions_app import formats
from sessions_app.canonical import Kind, Problems
from sessions_app.formats import Head, Source, agentlens, detect
from sessions_app.formats.records import iter_records
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


def test_raw_is_a_lines_own_text_or_an_element_written_again_and_lines_are_where_it_starts(project):
    ndjson_lines = (DIR / "two_sessions.ndjson").read_text().splitlines()
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions.ndjson", project)
    for event in rows(sessions[0]) + rows(sessions[1]):
        assert event.raw == ndjson_lines[event.line - 1]

    array_lines = (DIR / "two_sessions_array.json").read_text().splitlines()
    sessions, _ = ingest_file(agentlens, DIR / "two_sessions_array.json", project)
    for event in rows(sessions[0]) + rows(sessions[1]):
        # An element of a JSON document is written again by orjson (the upload keeps the file).
        value = orjson.loads(event.raw)
        assert event.raw == orjson.dumps(value).decode()
        assert array_lines[event.line - 1].strip() == "{"
        assert array_lines[event.line].strip() == f'"id": "{value["id"]}",'


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
    assert [s["action_type"] for s in states] == [
        "llm_call",
        "tool_call",
        "tool_call",
        "tool_call",
        "approval",
        "llm_call",
    ]
    assert [s["success"] for s in states] == [True, True, False, False, False, True]
    assert states[0]["output"] == "I'll read the deploy config and run the smoke tests first."
    assert states[0]["action_rationale"] == "Review the deploy plan for api v2.3 and ship it if green."
    assert states[0]["tokens_used"] == 1280
    assert states[0]["timestamp"] == "2026-02-08T10:30:02.150Z"
    assert states[1]["action_code"] == 'read_file({"path":"config/deploy.yaml"})'
    # raw_action keeps the arguments as recorded (an object), as the OTLP mapping does.
    assert states[1]["raw_action"] == {"callId": "tc_01", "toolName": "read_file",
                                       "arguments": {"path": "config/deploy.yaml"}}  # fmt: skip
    assert states[4]["raw_action"]["params"] == {"service": "api", "version": "2.3"}
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
    response = {
        **base,
        "eventType": "llm_response",
        "payload": {
            "callId": "c1",
            "model": "gpt-4o",
            "completion": "x",
            "usage": {"inputTokens": 70, "outputTokens": 30},
        },
    }
    cost = {
        **base,
        "eventType": "cost_tracked",
        "payload": {"callId": "c1", "model": "gpt-4o", "totalTokens": 100, "costUsd": 0.002},
    }
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


def element_starts(text: bytes) -> list[int]:
    """The lines on which the elements of a pretty-printed array or body open: those opening an
    object at the least indentation but the document's own."""
    opening = {n: len(line) - len(line.lstrip()) for n, line in enumerate(text.split(b"\n"), start=1)
               if n > 1 and line.lstrip().startswith(b"{")}  # fmt: skip
    return [n for n, indent in opening.items() if indent == min(opening.values())]


@pytest.mark.parametrize("block", [1, 5, 64, 4096, 1 << 20])
def test_array_elements_and_their_lines_are_the_same_whatever_the_read_block_size(block, monkeypatch):
    expected = source_events("two_sessions.ndjson")
    monkeypatch.setattr(formats, "READ_BLOCK", block)
    for name in ("two_sessions_array.json", "two_sessions_body.json"):
        problems = Problems()
        records = list(iter_records(Source(path=DIR / name), problems, body_keys=("events",)))
        assert [r.value for r in records] == expected, (block, name)
        assert [r.line for r in records] == element_starts((DIR / name).read_bytes()), (block, name)
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


def test_a_truncated_array_keeps_the_whole_elements_and_reports_the_line_it_ends_on(project, tmp_path):
    text = (DIR / "two_sessions_array.json").read_bytes()
    cut = text[: text.index(b'"eventType": "tool_call"', 4000)]  # ends inside an element
    path = tmp_path / "cut.json"
    path.write_bytes(cut)
    sessions, problems = ingest_file(agentlens, path, project)
    assert problem_keys(problems) == [(cut.rstrip().count(b"\n") + 1, "line")]
    assert problems.items[0].message.startswith("file ends inside the JSON document (truncated)")
    assert sum(s.event_count for s in sessions) == cut.count(b'"eventType"')  # the cut one stops before it


def test_invalid_utf8_in_an_array_ends_it_there_and_keeps_the_elements_before(project, tmp_path):
    text = (DIR / "two_sessions_array.json").read_bytes()
    at = text.index(b'"ses_triage_2b91"')
    path = tmp_path / "broken.json"
    path.write_bytes(text.replace(b'"ses_triage_2b91"', b'"ses_\xff_triage"', 1))
    sessions, problems = ingest_file(agentlens, path, project)
    assert problem_keys(problems) == [(text.count(b"\n", 0, at) + 1, "line")]
    assert problems.items[0].message.startswith("invalid UTF-8 at column ")
    # Its element's eventType comes after the sessionId: the elements before it are whole.
    assert sum(s.event_count for s in sessions) == text.count(b'"eventType"', 0, at)


# A syntax error in the 8th element of the pretty-printed array (a tool_call of ses_deploy_7f3a):
# (what is done to it, where the parser stops (lines after the damaged one), yajl's reason).
DAMAGE = {
    "unclosed string": (lambda e: e.replace(b'"tool_call"', b'"tool_call', 1), 0, "invalid character inside string"),
    "extra opening brace": (
        lambda e: e.replace(b'"eventType"', b'{"eventType"', 1),
        0,
        "invalid object key (must be a string)",
    ),
    "closing brace inside": (  # after the comma before it, where a key must come
        lambda e: e.replace(b'"eventType"', b'}"eventType"', 1),
        0,
        "invalid object key (must be a string)",
    ),
    "missing comma inside": (
        lambda e: e.replace(b'"tool_call",', b'"tool_call"', 1),
        1,
        "after key and value, inside map, I expect ',' or '}'",
    ),
}


@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
@pytest.mark.parametrize("name", list(DAMAGE))
def test_a_syntax_error_in_a_pretty_printed_array_keeps_the_elements_before_it(name, body, project, tmp_path):
    damage, lines_after, reason = DAMAGE[name]
    events = source_events("two_sessions.ndjson")
    text = orjson.dumps({"events": events} if body else events, option=orjson.OPT_INDENT_2)
    indent = b"    " if body else b"  "
    starts = [m.start() + 1 for m in re.finditer(rb"\n" + indent + rb"\{\n", text)]
    begin, end = starts[7], starts[8]
    data = text[:begin] + damage(text[begin:end]) + text[end:]
    damaged_line = data.count(b"\n", 0, data.index(b"tool_call", begin)) + 1
    path = tmp_path / "damaged.json"
    path.write_bytes(data)
    sessions, problems = ingest_file(agentlens, path, project)
    assert problem_keys(problems) == [(damaged_line + lines_after, "line")]
    message = problems.items[0].message
    assert message.startswith("malformed JSON at column ") and message.endswith(
        f": {reason}; the rest of the document could not be read"
    ), message
    stored = [orjson.loads(e.raw) for s in sessions for e in rows(s)]
    assert sorted(stored, key=lambda e: e["id"]) == events[:7]


@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
@pytest.mark.parametrize("element", [0, 7, 23])
def test_a_syntax_error_in_a_one_line_array_is_reported_at_its_column(element, body, tmp_path):
    events = source_events("two_sessions.ndjson")
    parts = [orjson.dumps(event) for event in events]
    parts[element] = parts[element].replace(b'","', b'" "', 1)  # a comma lost between two members
    opening = b'{"events": [' if body else b"["
    data = opening + b", ".join(parts) + (b"]}" if body else b"]") + b"\n"
    path = tmp_path / "damaged.json"
    path.write_bytes(data)
    problems = Problems()
    records = list(iter_records(Source(path=path), problems, body_keys=("events",)))
    assert [r.value for r in records] == events[:element]
    assert {r.line for r in records} <= {1}
    (problem,) = problems.items
    damaged_from = len(opening) + sum(len(part) + 2 for part in parts[:element])
    column = int(re.match(r"malformed JSON at column (\d+): ", problem.message).group(1))
    assert (problem.line, problem.field) == (1, "line")
    assert damaged_from < column <= damaged_from + len(parts[element])


def test_any_one_damaged_byte_of_a_one_line_array_keeps_every_element_before_it():
    # 600 damages with a fixed seed: a byte deleted or doubled, or a brace or quote inserted. The
    # bytes before the damage are the start of a valid document, so the parser cannot stop there.
    events = source_events("two_sessions.ndjson")
    ends, text = [], b"["
    for n, event in enumerate(events):
        text += (b", " if n else b"") + orjson.dumps(event)
        ends.append(len(text))
    text += b"]\n"
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
        problems = Problems()
        with tempfile.NamedTemporaryFile(suffix=".json") as handle:
            handle.write(bytes(data))
            handle.flush()
            values = [r.value for r in iter_records(Source(path=Path(handle.name)), problems, body_keys=("events",))]
        whole_before = sum(1 for end in ends if end <= at)
        assert values[:whole_before] == events[:whole_before], (at, how)
        # At most one problem ends the document, the last; the others are elements that the
        # damage made into something else than an object.
        ending = [p for p in problems.items if p.message.endswith("could not be read")]
        assert ending in ([], problems.items[-1:]), (at, how, problems.to_list())
        for problem in ending:
            column = re.search(r"at column (\d+)", problem.message)
            if column:
                assert int(column.group(1)) > at, (at, how, problem)


def test_a_bare_nan_in_a_json_document_is_null_there_and_the_document_goes_on(tmp_path):
    # Python's NaN is read as null in a document as on a JSON line; it had ended the document.
    path = tmp_path / "nan.json"
    path.write_bytes(b'[{"id": 1}, {"id": 2, "v": NaN}, {"id": 3}]\n')
    problems = Problems()
    records = list(iter_records(Source(path=path), problems, body_keys=("events",)))
    assert [r.value for r in records] == [{"id": 1}, {"id": 2, "v": None}, {"id": 3}]
    assert [(p.line, p.message) for p in problems.items] == [(1, "NaN: JSON has no such number; read as null")]


def test_a_valid_element_with_a_nested_line_at_its_own_indentation_reads_whole():
    events = source_events("two_sessions.ndjson")[:3]
    events[1]["payload"]["note"] = "}" * 20
    middle = orjson.dumps(events[1]).replace(b'"payload":', b'"payload":\n  ')
    data = b"[\n  " + orjson.dumps(events[0]) + b",\n  " + middle + b",\n  " + orjson.dumps(events[2]) + b"\n]\n"
    with tempfile.NamedTemporaryFile(suffix=".json") as handle:
        handle.write(data)
        handle.flush()
        problems = Problems()
        records = list(iter_records(Source(path=Path(handle.name)), problems))
    assert [(r.line, r.value) for r in records] == [(2, events[0]), (3, events[1]), (5, events[2])]
    assert problems.count == 0


def test_a_syntax_error_in_an_ingest_body_keeps_the_events_before_it(project, tmp_path):
    events = source_events("two_sessions.ndjson")
    body = orjson.dumps({"events": events}, option=orjson.OPT_INDENT_2)
    broken = body.replace(b'"eventType": "approval_requested"', b'"eventType": "approval_requested', 1)
    path = tmp_path / "body.json"
    path.write_bytes(broken)
    sessions, problems = ingest_file(agentlens, path, project)
    at = broken.index(b"approval_requested")
    before = broken.count(b'"eventType"', 0, at) - 1  # the damaged one's own came first
    assert sum(s.event_count for s in sessions) == before
    assert problem_keys(problems) == [(broken.count(b"\n", 0, at) + 1, "line")]
    assert problems.items[0].message.startswith("malformed JSON at column ")


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
    # In the file's line order (the reader's and the converter's problems together).
    assert [(p["line"], p["field"]) for p in outcome.problems] == [
        (1, "line"), (2, "payload"), (2, "payload.callId"), (3, "line"), (4, "payload.usage.totalTokens"),
        (4, "payload.costUsd"), (5, "eventType"), (6, "sessionId"), (8, "line"), (9, "payload.durationMs"),
        (10, "timestamp"), (11, "line"),
    ]  # fmt: skip


def test_elements_with_unbalanced_braces_in_strings_or_many_objects_read_whole(tmp_path):
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
    records = list(iter_records(Source(path=path), problems, body_keys=("events",)))
    assert [r.value for r in records] == events
    assert problems.count == 0


def test_remembered_calls_stay_bounded_and_recent_ones_still_pair(monkeypatch):
    monkeypatch.setattr(agentlens, "MAX_REMEMBERED", 4)
    converter = agentlens.Converter()
    base = {"sessionId": "s", "agentId": "a", "severity": "info", "timestamp": "2026-02-08T10:30:00Z"}
    for n in range(10):
        call = {
            **base,
            "eventType": "tool_call",
            "payload": {"toolName": "t", "callId": f"c{n}", "arguments": {"n": n}},
        }
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
    live = [
        (e.kind, e.tool, e.pair_id, e.pair_seq, e.cost_usd, e.tokens, e.step_pos, e.fail_streak) for e in rows(session)
    ]
    filed = [
        (e.kind, e.tool, e.pair_id, e.pair_seq, e.cost_usd, e.tokens, e.step_pos, e.fail_streak) for e in rows(imported)
    ]
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

    monkeypatch.setattr(formats, "READ_BLOCK", 64)  # every line is longer than a block
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
        {"type": "text", "text": ""}, {"type": "text", "text": " now"},
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
    # The text parts a line apart, empty ones left out (a space between them doubled spaces).
    assert step_state(response)["action_rationale"] == "Ship it\n now"
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


def test_one_agentlens_line_in_another_formats_file_does_not_take_the_file(project, tmp_path):
    from sessions_app.ingest.importing import import_file

    from .builders_rlm import record_full_session

    path = tmp_path / "mixed.jsonl"
    record_full_session(path, steps=3)
    lines = path.read_bytes().splitlines(keepends=True)
    stray = orjson.dumps(source_events("two_sessions.ndjson")[1]) + b"\n"
    path.write_bytes(b"".join([*lines[:4], stray, *lines[4:]]))
    assert detect(Source(path=path)) == "rlm_native"
    (outcome,) = import_file(path=path, project=project)
    assert outcome.error is None and outcome.format == "rlm_native"
    assert outcome.events == len(lines) and outcome.steps == 3
    assert [p["line"] for p in outcome.problems] == [5], outcome.problems
    # Most lines AgentLens's, one of another format: AgentLens's, the odd line reported.
    events = b"".join(orjson.dumps(e) + b"\n" for e in source_events("two_sessions.ndjson"))
    path.write_bytes(lines[0] + events)
    assert detect(Source(path=path)) == "agentlens"
    # Its events without their sessionId count as its (reported and skipped at import).
    bare = [orjson.dumps({k: v for k, v in e.items() if k != "sessionId" or n >= 6}) + b"\n"
            for n, e in enumerate(source_events("two_sessions.ndjson")[:10])]  # fmt: skip
    path.write_bytes(b"".join(bare))
    assert detect(Source(path=path)) == "agentlens"
