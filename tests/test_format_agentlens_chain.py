"""AgentLens's own hash chain, checked at import: every event's `hash` recomputed the way
AgentLens computes it and every `prevHash` linked to the event before it, as AgentLens's
verifyChain does (agentkitai/agentlens packages/core/src/hash.ts: computeEventHash,
verifyChain, verifyRecords). The first break is an import problem naming its line and event,
and the session's metadata, the API's session dict and the player's chain badge say so.

The exports here are hashed by `agentlens_export` below, an independent transcription of
computeEventHash for payloads JSON.stringify writes as Python's json does (no fractional
numbers, no integer-like keys); `test_the_hash_is_computeEventHash_run_by_node` holds
`agentlens.source_hash` to AgentLens's own code on the cases where the two serialisations differ.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from django.urls import reverse

from sessions_app.canonical import Problems, SessionMeta
from sessions_app.formats import agentlens
from sessions_app.ingest.live import append_batch, create_live_session

from .builders_dashboard import logged_in, user  # noqa: F401  (fixtures)
from .builders_formats import ingest_file, problem_keys, rows
from .builders_replay import api, get_json  # noqa: F401  (fixture)


def compute_event_hash(event: dict) -> str:
    """computeEventHash (HASH_VERSION 2): SHA-256 of JSON.stringify of these members, in this
    order; for the plain payloads below JSON.stringify writes what json.dumps writes compactly."""
    canonical = {
        "v": 2, "id": event["id"], "timestamp": event["timestamp"], "sessionId": event["sessionId"],
        "agentId": event["agentId"], "eventType": event["eventType"], "severity": event["severity"],
        "payload": event["payload"], "metadata": event["metadata"], "prevHash": event["prevHash"],
    }  # fmt: skip
    text = json.dumps(canonical, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def agentlens_export(*, chained: bool = True) -> list[dict]:
    """Six events of one session hashed as AgentLens's ingest hashes them (routes/events.ts):
    each prevHash the previous event's hash; unchained (OTLP) events all have prevHash null."""
    specs = [
        ("session_started", {"agentName": "bot", "tags": ["prod"]}),
        ("llm_call", {"callId": "c1", "provider": "openai", "model": "gpt-4o",
                      "messages": [{"role": "user", "content": "Résumé, s'il vous plaît"}]}),
        ("llm_response", {"callId": "c1", "provider": "openai", "model": "gpt-4o", "completion": "Voilà",
                          "finishReason": "stop", "usage": {"input": 10, "output": 5, "total": 15},
                          "latencyMs": 900}),
        ("tool_call", {"callId": "t1", "toolName": "search", "arguments": {"q": "x"}}),
        ("tool_response", {"callId": "t1", "toolName": "search", "result": {"hits": 3}, "durationMs": 40}),
        ("session_ended", {"reason": "completed"}),
    ]  # fmt: skip
    events = []
    previous = None
    for i, (event_type, payload) in enumerate(specs):
        event = {
            "id": f"evt_{i:03}", "timestamp": f"2026-02-08T10:30:0{i}.000Z", "sessionId": "ses_chain",
            "agentId": "bot", "eventType": event_type, "severity": "info", "payload": payload,
            "metadata": {"sdk": "python"}, "prevHash": previous if chained else None,
        }  # fmt: skip
        event["hash"] = previous = compute_event_hash(event)
        events.append(event)
    return events


def write_lines(path: Path, events: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return path


def test_an_export_hashed_by_agentlens_imports_with_a_valid_source_chain(project, tmp_path):
    path = write_lines(tmp_path / "export.ndjson", agentlens_export())
    (session,), problems = ingest_file(agentlens, path, project)
    assert problems.count == 0
    assert session.metadata["source_chain"] == {"valid": True, "chained": True}
    assert session.event_count == 6


def test_an_edited_payload_breaks_the_source_chain_at_that_event(project, tmp_path):
    events = agentlens_export()
    events[3]["payload"]["arguments"]["q"] = "y"  # the tool call, line 4; its hash left as it was
    path = write_lines(tmp_path / "edited.ndjson", events)
    (session,), problems = ingest_file(agentlens, path, project)
    assert problem_keys(problems) == [(4, "hash")]
    assert problems.items[0].message == (
        "source chain broken at event 3 (id evt_003): its hash does not match its content"
    )
    assert session.metadata["source_chain"] == {
        "valid": False, "broken_at": 3, "event_id": "evt_003", "line": 4, "field": "hash",
        "reason": "its hash does not match its content",
    }  # fmt: skip
    assert session.event_count == 6  # a broken chain is reported, never a reason to drop events


def test_a_rehashed_edit_breaks_the_link_of_the_next_event(project, tmp_path):
    events = agentlens_export()
    events[2]["payload"]["completion"] = "Something else"
    events[2]["hash"] = compute_event_hash(events[2])  # consistent on its own, not with event 3
    (session,), problems = ingest_file(agentlens, write_lines(tmp_path / "rehashed.ndjson", events), project)
    assert problem_keys(problems) == [(4, "prevHash")]
    assert problems.items[0].message.startswith("source chain broken at event 3 (id evt_003): ")
    assert session.metadata["source_chain"]["broken_at"] == 3


def test_a_removed_event_breaks_the_chain_where_it_was(project, tmp_path):
    events = agentlens_export()
    del events[1]
    (session,), problems = ingest_file(agentlens, write_lines(tmp_path / "gap.ndjson", events), project)
    assert problem_keys(problems) == [(2, "prevHash")]
    assert "its prevHash is not the hash of event 0" in problems.items[0].message


def test_only_the_first_break_is_reported(project, tmp_path):
    events = agentlens_export()
    for event in events[2:]:
        event["severity"] = "warn"
    (session,), problems = ingest_file(agentlens, write_lines(tmp_path / "many.ndjson", events), project)
    assert problem_keys(problems) == [(3, "hash")]


def test_unchained_events_are_checked_record_by_record_as_agentlens_checks_otlp_ones(project, tmp_path):
    events = agentlens_export(chained=False)
    (session,), problems = ingest_file(agentlens, write_lines(tmp_path / "otlp.ndjson", events), project)
    assert problems.count == 0
    assert session.metadata["source_chain"] == {"valid": True, "chained": False}

    events[4]["payload"]["result"] = {"hits": 4}
    (session,), problems = ingest_file(agentlens, write_lines(tmp_path / "otlp2.ndjson", events), project)
    assert problem_keys(problems) == [(5, "hash")]


def test_a_source_without_hashes_has_no_source_chain(project, tmp_path):
    events = agentlens_export()
    for event in events:
        del event["hash"], event["prevHash"]
    (session,), problems = ingest_file(agentlens, write_lines(tmp_path / "plain.ndjson", events), project)
    assert problems.count == 0
    assert "source_chain" not in session.metadata


def test_a_newest_first_export_is_checked_in_time_order(project, tmp_path):
    # AgentLens's event query lists newest first; the importer reads it back in time order,
    # the order AgentLens chains and verifies in.
    events = agentlens_export()[::-1]
    path = tmp_path / "newest.json"
    path.write_bytes(orjson.dumps(events, option=orjson.OPT_INDENT_2))
    (session,), problems = ingest_file(agentlens, path, project)
    assert problems.count == 0
    assert session.metadata["source_chain"]["valid"] is True


def test_the_chain_carries_across_live_batches_and_a_break_is_a_warning(project):
    events = agentlens_export()
    session, _ = create_live_session(project=project, meta=SessionMeta(source_session_id="ses_chain"))
    assert append_batch(session_id=session.pk, records=events[:3]).warnings == []
    # The tool call (event 3) never arrives: its response links to it, not to event 2.
    result = append_batch(session_id=session.pk, records=[events[4], events[5]])
    assert result.warnings == [{
        "index": 0, "field": "prevHash",
        "message": "source chain broken at event 3 (id evt_004): its prevHash is not the hash of event 2",
    }]  # fmt: skip
    assert len(rows(session)) == 5


def test_the_fixture_exports_carry_agentlens_hashes(project):
    # tests/fixtures/agentlens/rehash.py gave them; before, their hashes were made up.
    for name in ("two_sessions.ndjson", "two_sessions_array.json", "triage_newest_first.json"):
        sessions, problems = ingest_file(agentlens, Path(__file__).parent / "fixtures" / "agentlens" / name, project)
        assert problems.count == 0
        assert all(s.metadata["source_chain"]["valid"] for s in sessions)


def test_the_api_session_and_the_chain_badge_show_a_broken_source_chain(api, logged_in, project, tmp_path):
    events = agentlens_export()
    events[3]["payload"]["arguments"]["q"] = "y"
    (session,), _ = ingest_file(agentlens, write_lines(tmp_path / "edited.ndjson", events), project)
    body = get_json(api, f"/api/sessions/{session.pk}/replay?limit=1")
    assert body["session"]["sourceChain"]["valid"] is False
    assert body["session"]["sourceChain"]["broken_at"] == 3
    html = logged_in.get(reverse("sessions:player", args=[session.pk])).content.decode()
    badge = html[html.index('id="chain-badge"') : html.index("</span>", html.index("source-chain"))]
    assert "source chain broken at event 3" in badge


def test_a_valid_source_chain_is_in_the_api_session_and_absent_without_hashes(api, project, tmp_path):
    (session,), _ = ingest_file(agentlens, write_lines(tmp_path / "ok.ndjson", agentlens_export()), project)
    body = get_json(api, f"/api/sessions/{session.pk}/replay?limit=1")
    assert body["session"]["sourceChain"] == {"valid": True, "chained": True}
    events = agentlens_export()
    for event in events:
        del event["hash"], event["prevHash"]
    (plain,), _ = ingest_file(agentlens, write_lines(tmp_path / "plain.ndjson", events), project)
    assert get_json(api, f"/api/sessions/{plain.pk}/replay?limit=1")["session"]["sourceChain"] is None


# computeEventHash and JSON.stringify themselves, on what JavaScript writes differently from
# Python: integral and tiny or huge numbers, integers past 2**53, integer-like keys (listed
# first), lone surrogates, control characters, members left out.
NODE_HASH = """
const { createHash } = require('node:crypto');
function computeEventHash(event) {
  const canonical = JSON.stringify({
    v: 2, id: event.id, timestamp: event.timestamp, sessionId: event.sessionId, agentId: event.agentId,
    eventType: event.eventType, severity: event.severity, payload: event.payload,
    metadata: event.metadata, prevHash: event.prevHash,
  });
  return createHash('sha256').update(canonical).digest('hex');
}
const lines = require('fs').readFileSync(0, 'utf8').split('\\n').filter(Boolean);
console.log(JSON.stringify(lines.map((line) => computeEventHash(JSON.parse(line)))));
"""
TRICKY = [
    '{"id":"a","timestamp":"t","sessionId":"s","agentId":"x","eventType":"custom","severity":"info",'
    '"payload":{"b":1,"10":2,"2":3,"01":4,"4294967295":5,"4294967294":6,'
    '"n":[1.0,2.50,1e21,1e-7,-0.0,0.000001,123456789.125,12345678901234567890,9007199254740993,1E400]},'
    '"metadata":{"z":{"3":null,"1":true}},"prevHash":null}',
    '{"id":"b","timestamp":"t","sessionId":"s","agentId":"x","eventType":"custom","severity":"info",'
    '"payload":{"u":"h\\u00e9 \\u2028 \\u0001\\u001f\\u007f \\ud83d\\ude00 \\ud800 x\\udc00 / \\" \\\\",'
    '"k\\ud800":1},"metadata":{},"prevHash":"abc"}',
    '{"id":"c","timestamp":"t","sessionId":"s","eventType":"custom","payload":{}}',
]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run AgentLens's own code")
def test_the_hash_is_computeEventHash_run_by_node():
    done = subprocess.run(
        ["node", "-e", NODE_HASH], input="\n".join(TRICKY), capture_output=True, text=True, check=True
    )
    expected = json.loads(done.stdout)
    assert [agentlens.source_hash(json.loads(line)) for line in TRICKY] == expected


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (1.0, "1"), (2.5, "2.5"), (1e21, "1e+21"), (1e20, "100000000000000000000"), (1.5e-7, "1.5e-7"),
        (1e-6, "0.000001"), (-0.0, "0"), (float("inf"), "null"), (123456789.125, "123456789.125"),
    ],
)  # fmt: skip
def test_numbers_are_written_as_javascript_writes_them(value, written):
    assert agentlens.javascript_number(value) == written


def test_converter_state_keeps_the_source_chain_between_batches():
    events = agentlens_export()
    converter = agentlens.Converter()
    problems = Problems()
    for i, event in enumerate(events[:2]):
        converter.convert(event, orjson.dumps(event).decode(), i, problems)
    resumed = agentlens.Converter(orjson.loads(orjson.dumps(converter.state())))
    for i, event in enumerate(events[2:], start=2):
        resumed.convert(event, orjson.dumps(event).decode(), i, problems)
    resumed.finish()
    assert problems.count == 0
    assert resumed.meta.metadata["source_chain"] == {"valid": True, "chained": True}
