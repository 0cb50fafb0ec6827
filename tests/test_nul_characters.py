"""U+0000 in what an agent wrote. JSON allows it (`\\u0000`), PostgreSQL's text and jsonb refuse
it (SQLite keeps it): it is stored as U+FFFD on both databases, the original record keeps it
byte for byte (the hash chain and the export cover the original), and no request or import fails
on it."""

from __future__ import annotations

import orjson
import pytest
from rlm_code.rlm.session_replay import SessionRecorder

from sessions_app.models import Checkpoint, Event, Snapshot
from sessions_app.verification import verify_session

from .builders_replay import api, get_json, import_one  # noqa: F401  (fixture)

NUL = "\x00"
SHOWN = "\ufffd"


def record_with_nul(path) -> None:
    recorder = SessionRecorder(
        session_id=f"s{NUL}1", run_id=f"run{NUL}nul", task=f"find the {NUL} byte", environment=f"env{NUL}",
        model=f"model{NUL}", output_path=path,
    )  # fmt: skip
    recorder.record_step_start(1)
    recorder.record_llm_request(f"prompt {NUL}", model=f"gpt{NUL}")
    recorder.record_llm_response(f"answer {NUL}", tokens_in=3, tokens_out=4)
    action = {"action": f"run{NUL}", "code": f"print('{NUL}')"}
    recorder.record_action(action)
    recorder.record_result({"success": False, "stderr": f"bad {NUL} byte"}, reward=0.0, success=False)
    recorder.record_variable_update(f"name{NUL}", {f"k{NUL}": [f"v{NUL}"]})
    recorder.record_memory_update([f"note {NUL}"])
    for n in range(300):  # enough changes of state for a keyframe (a full copy of the state)
        recorder.record_variable_update(f"v{n}{NUL}", f"value {NUL}")
    recorder.record_child_spawn(f"child{NUL}", f"sub task {NUL}", depth=1)
    recorder.record_error(f"error {NUL}")
    recorder.record_step_end(action, {"success": False}, reward=0.0, success=False)
    recorder.create_checkpoint(f"check{NUL}point")
    recorder.record_final(f"final {NUL}", completed=True)
    recorder.end_session()


def test_an_rlm_session_full_of_nul_characters_imports_whole_on_either_database(db, tmp_path):
    path = tmp_path / "nul.jsonl"
    record_with_nul(path)
    session = import_one(path)
    lines = [line for line in path.read_text().splitlines() if line]
    assert session.event_count == len(lines)
    assert (session.task, session.run_id, session.model) == (
        f"find the {SHOWN} byte",
        f"run{SHOWN}nul",
        f"model{SHOWN}",
    )
    assert session.final_answer == f"final {SHOWN}"
    events = list(Event.objects.filter(session=session).order_by("seq"))
    assert [e.raw for e in events] == lines  # the originals, \\u0000 and all
    assert any("\\u0000" in e.raw for e in events)
    assert verify_session(session=session).valid is True
    texts = [getattr(e, f) for e in events for f in ("agent_id", "parent_id", "child_id", "tool", "pair_id")]
    assert NUL not in "".join(texts) and f"child{SHOWN}" in texts
    keyframes = Snapshot.objects.filter(session=session)
    assert keyframes.exists()
    for snapshot in keyframes:
        assert NUL not in orjson.dumps([snapshot.variables, snapshot.memory_notes]).decode("unicode_escape")
    assert {c.name for c in Checkpoint.objects.filter(session=session)} == {f"check{SHOWN}point"}


def test_nul_characters_in_requests_are_answered_not_crashed(api, tmp_path):
    path = tmp_path / "nul.jsonl"
    record_with_nul(path)
    session = import_one(path)
    for url in ("/api/sessions?q=%00", "/api/sessions?format=x%00", f"/api/sessions/{session.pk}/search?q=a%00b"):
        assert "NUL character" in get_json(api, url, 400)["detail"]
    created = api.post(
        f"/api/sessions/{session.pk}/checkpoints",
        data=orjson.dumps({"name": f"mine{NUL}", "seq": 1, "note": f"n{NUL}"}),
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["checkpoint"]["name"] == f"mine{SHOWN}"


@pytest.mark.parametrize("query", ["q=%00", "model=%00&format=%00&status=%00"])
def test_nul_characters_in_the_dashboards_filters_are_answered(client, admin_user, tmp_path, query):
    path = tmp_path / "nul.jsonl"
    record_with_nul(path)
    session = import_one(path)
    client.force_login(admin_user)
    for url in (f"/sessions/?{query}", f"/sessions/{session.pk}/search/?{query}"):
        answer = client.get(url)
        assert answer.status_code == 400 and b"NUL character" in answer.content
        # The site's refusal page, under its content security policy, not a bare line of text.
        assert answer["Content-Type"].startswith("text/html") and "script-src" in answer["Content-Security-Policy"]
        assert b'<h1 id="refusal-title">Bad request</h1>' in answer.content
        # To htmx (a filter changed in place) only the partial saying why, swapped where it asked.
        partial = client.get(url, headers={"HX-Request": "true"})
        assert partial.status_code == 400 and partial.content.lstrip().startswith(b'<p id="refusal" class="error"')
    # Addresses for programs keep a line of text (the API: JSON).
    for url in ("/v1/traces?x=%00", "/mcp?x=%00"):
        answer = client.post(url, b"{}", content_type="application/json")
        assert answer.status_code == 400 and answer["Content-Type"].startswith("text/plain"), url
        assert answer.content.startswith(b"the query string holds a NUL character")


def test_live_ingest_of_events_holding_nul_characters_is_stored(api):
    created = api.post(
        "/api/sessions", data=orjson.dumps({"task": f"live {NUL}", "model": f"m{NUL}"}), content_type="application/json"
    )
    assert created.status_code == 201, created.content
    session_id = created.json()["id"]
    events = [
        {"kind": "tool_call", "payload": {"cmd": f"rm {NUL}"}, "tool": f"sh{NUL}", "pair_id": f"c{NUL}1"},
        {"kind": "tool_response", "payload": {"out": NUL}, "tool": f"sh{NUL}", "pair_id": f"c{NUL}1"},
        {"kind": "state", "payload": {}, "state_change": {"variables": {f"x{NUL}": NUL}, "memory": [NUL]}},
    ]
    answer = api.post(
        f"/api/sessions/{session_id}/events", data=orjson.dumps({"events": events}), content_type="application/json"
    )
    assert answer.status_code in (200, 201), answer.content
    stored = list(Event.objects.filter(session_id=session_id).order_by("seq"))
    assert [e.tool for e in stored[:2]] == [f"sh{SHOWN}"] * 2
    assert stored[0].pair_seq == 1  # paired on the stored id
    assert orjson.loads(stored[0].raw)["tool"] == f"sh{NUL}"
