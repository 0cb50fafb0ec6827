"""flux0 recordings (FORMATS.md section 3): agent messages rebuilt from JSON Patch chunks, user
messages as turn anchors, statuses, tool calls from patch documents, bad input.

fixtures/flux0/support_chat.jsonl is one recording (`NFoW8vKYTo`, source session `t2Ykiruy65`)
of two user turns: a plain answer streamed in 5 text chunks, then a refund done through a tool
call whose name and JSON arguments are streamed as patches, its result, and a 3-chunk answer.
"""

from __future__ import annotations

import shutil
from datetime import datetime

import orjson
import pytest

from sessions_app.canonical import Kind
from sessions_app.formats import Head, Source, detect, flux0
from sessions_app.formats.flux0 import PatchError, apply_operation, content_text

from .builders_formats import FIXTURES, ingest_file, payload, problem_keys, rows, step_state

DIR = FIXTURES / "flux0"
CHAT = DIR / "support_chat.jsonl"


def records() -> list[dict]:
    return [orjson.loads(line) for line in CHAT.read_bytes().splitlines()]


def imported(project):
    sessions, problems = ingest_file(flux0, CHAT, project)
    assert problems.count == 0
    (session,) = sessions
    return session, rows(session)


def test_flux0_is_detected_by_content_whatever_the_file_name(tmp_path):
    renamed = tmp_path / "recording.log"
    shutil.copy(CHAT, renamed)
    assert detect(Source(path=renamed)) == "flux0"
    for other in ("agentlens/two_sessions.ndjson", "daycare/complete_new.jsonl"):
        assert not flux0.sniff(Head.of(Source(path=FIXTURES / other)))


def test_one_recording_is_one_session_named_by_its_source_session(project):
    session, events = imported(project)
    assert session.source_session_id == "t2Ykiruy65"
    assert session.run_id == "NFoW8vKYTo"
    assert session.metadata["recording_id"] == "NFoW8vKYTo"
    assert session.metadata["turns"] == 2
    assert session.task == "Hi, my order #4411 hasn't arrived yet."
    assert session.agent_id == "k75P208WN6"
    assert session.completed is True
    assert events[0].kind == Kind.SESSION_START
    assert session.started_at.isoformat() == "2025-08-24T18:20:18.001821+00:00"


def test_every_record_is_kept_with_its_exact_text_and_recorded_time(project):
    _, events = imported(project)
    source = CHAT.read_text().splitlines()
    originals = [
        e for e in events if e.source_type not in ("rebuilt_message", "rebuilt_tool_call", "rebuilt_tool_result")
    ]
    assert [e.line for e in originals] == list(range(1, len(source) + 1))
    for event in originals:
        assert event.raw == source[event.line - 1]
        created = orjson.loads(event.raw)["created_at"]
        assert event.ts == datetime.fromisoformat(created)


def test_chunks_stay_events_at_their_recorded_pace(project):
    _, events = imported(project)
    chunks = [e for e in events if e.kind == Kind.CHUNK]
    assert len(chunks) == 12
    first_turn = chunks[:5]
    gaps = [(b.ts - a.ts).total_seconds() * 1000 for a, b in zip(first_turn, first_turn[1:])]
    assert gaps == [85.0, 85.0, 85.0, 85.0]
    assert [payload(c)["patches"][0]["value"] for c in first_turn] == [
        "Sorry", " to hear", " that! ", "Order #4411 ", "shipped on Monday and arrives tomorrow.",
    ]  # fmt: skip
    assert all(c.agent_id == "k75P208WN6" for c in chunks)


def test_agent_messages_are_rebuilt_from_their_patch_chunks(project):
    _, events = imported(project)
    messages = [e for e in events if e.kind == Kind.AGENT_MESSAGE]
    assert [payload(m)["text"] for m in messages] == [
        "Sorry to hear that! Order #4411 shipped on Monday and arrives tomorrow.",
        "Done — I refunded the €4.99 shipping fee.",
    ]
    first = payload(messages[0])
    # The streamed pieces stay a list, as recorded; `text` is them joined, as flux0 finalises it.
    pieces = ["Sorry", " to hear", " that! ", "Order #4411 ", "shipped on Monday and arrives tomorrow."]
    assert first["messages"] == [{"event_id": "run_a1", "text": first["text"], "chunks": 5, "content": pieces}]
    assert first["correlation_id"] == "corr_01"
    assert (first["agent_id"], first["agent_name"]) == ("k75P208WN6", "support-agent")
    # The rebuilt message sits right after its correlation's `completed` status, on its line.
    completed = events[events.index(messages[0]) - 1]
    assert (completed.kind, payload(completed)["status"]) == (Kind.STATUS, "completed")
    assert (messages[0].line, messages[0].raw, messages[0].ts) == (completed.line, completed.raw, completed.ts)


def test_user_messages_anchor_turns_and_each_turn_closes_a_step(project):
    session, events = imported(project)
    users = [e for e in events if e.kind == Kind.USER_MESSAGE]
    assert [payload(u)["text"] for u in users] == [
        "Hi, my order #4411 hasn't arrived yet.", "It's a gift, can you refund the shipping fee?",
    ]  # fmt: skip
    assert [u.step for u in users] == [1, 2]
    steps = [e for e in events if e.step_pos is not None]
    assert [e.kind for e in steps] == [Kind.AGENT_MESSAGE, Kind.AGENT_MESSAGE]
    first, second = (step_state(e) for e in steps)
    assert (first["step"], second["step"]) == (1, 2)
    assert first["action_type"] == "agent_turn"
    assert first["action_rationale"] == "Hi, my order #4411 hasn't arrived yet."
    assert second["output"] == "Done — I refunded the €4.99 shipping fee."
    assert first["success"] and second["success"]
    assert first["duration_ms"] == 1330.0  # user message 18:20:23.2018 -> completed 18:20:24.5318
    assert second["duration_ms"] == 3410.0
    assert session.step_count == 2
    # Every event of a turn carries the turn number, so "step N" finds its chunks too.
    assert {e.step for e in events if e.seq > users[1].seq} == {2}


def test_statuses_become_status_events_in_order(project):
    _, events = imported(project)
    statuses = [payload(e)["status"] for e in events if e.kind == Kind.STATUS]
    assert statuses == [
        "processing", "typing", "ready", "completed",
        "processing", "ready", "ready", "processing", "typing", "ready", "completed",
    ]  # fmt: skip


def test_tool_call_patches_rebuild_the_call_with_parsed_arguments_and_pair_with_its_result(project):
    session, events = imported(project)
    call = next(e for e in events if e.kind == Kind.TOOL_CALL)
    result = next(e for e in events if e.kind == Kind.TOOL_RESPONSE)
    assert (call.tool, call.pair_id) == ("refund_shipping", "call_r1")
    assert payload(call)["args"] == {"order_id": "4411", "amount": 4.99}  # streamed in two pieces
    assert payload(result)["tool_call"]["data"] == {"result": "refunded 4.99 EUR to card ending 0042"}
    assert (result.tool, result.pair_id, result.is_error) == ("refund_shipping", "call_r1", False)
    assert call.pair_seq == result.seq and result.pair_seq == call.seq
    assert session.tools_used == ["refund_shipping"]
    message = next(e for e in events if e.kind == Kind.AGENT_MESSAGE and e.step == 2)
    assert call.seq < result.seq < message.seq


def test_a_recording_cut_mid_turn_keeps_the_partial_answer(project, tmp_path):
    lines = CHAT.read_bytes().splitlines()
    path = tmp_path / "cut.jsonl"
    path.write_bytes(b"\n".join(lines[:23]) + b"\n")  # stops after two of the last 3 chunks
    sessions, problems = ingest_file(flux0, path, project)
    assert problems.count == 0
    session = sessions[0]
    last = rows(session)[-1]
    assert last.kind == Kind.AGENT_MESSAGE
    assert payload(last)["text"] == "Done — I refunded the €4.99 "
    assert payload(last)["unfinished"] is True
    assert step_state(last)["raw_observation"] == {"unfinished": True}
    assert (last.line, last.raw) == (23, lines[22].decode())
    # Its status says so too: it had read "completed" beside completed false.
    assert session.completed is False and session.status == "interrupted"
    whole, _ = ingest_file(flux0, CHAT, project)
    assert (whole[0].status, whole[0].completed) == ("completed", True)
    failing = records()
    failing[-1]["payload"]["data"]["status"] = "failed"  # the last turn's status
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in failing) + b"\n")
    failed, _ = ingest_file(flux0, path, project)
    assert (failed[0].status, failed[0].completed) == ("failed", False)


def test_a_recording_ending_on_an_unanswered_user_message_is_not_completed(project, tmp_path):
    # The first turn's `completed` (line 11) says nothing of the turn line 12 opens: flux0's
    # session then waits on the agent (docs/formats.md, "End of a correlation").
    lines = CHAT.read_bytes().splitlines()
    assert b'"completed"' in lines[10] and b'"source":"user"' in lines[11].replace(b" ", b"")
    whole, _ = ingest_file(flux0, CHAT, project)
    assert whole[0].completed is True
    path = tmp_path / "unanswered.jsonl"
    path.write_bytes(b"\n".join(lines[:12]) + b"\n")
    sessions, problems = ingest_file(flux0, path, project)
    assert problems.count == 0
    assert rows(sessions[0])[-1].kind == Kind.USER_MESSAGE
    assert sessions[0].completed is False
    # The turn before's `completed` recorded after the new question is not this turn's.
    late = [*lines[:10], lines[11], lines[10]]
    path.write_bytes(b"\n".join(late) + b"\n")
    sessions, _ = ingest_file(flux0, path, project)
    assert sessions[0].completed is False


def test_two_recordings_in_one_file_become_two_sessions(project, tmp_path):
    first = records()
    second = [{**r, "recording_id": "Other12345"} for r in first[:11]]
    second[0]["payload"] = {"source_session_id": "s_other"}
    path = tmp_path / "two.jsonl"
    mixed = first[:5] + second + first[5:]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in mixed) + b"\n")
    sessions, problems = ingest_file(flux0, path, project)
    assert [s.source_session_id for s in sessions] == ["t2Ykiruy65", "s_other"]
    assert [s.event_count for s in sessions] == [30, 12]  # 26 records + 4 rebuilt; 11 + 1
    assert problems.count == 0


def test_json_patch_add_and_replace_follow_rfc_6902_on_the_paths_flux0_uses():
    doc = apply_operation(None, {"op": "add", "path": "/-", "value": "Hel"})
    doc = apply_operation(doc, {"op": "add", "path": "/-", "value": "lo"})
    assert content_text(doc) == "Hello"
    doc = apply_operation(doc, {"op": "add", "path": "/0", "value": ">"})
    doc = apply_operation(doc, {"op": "replace", "path": "/2", "value": "LO"})
    assert doc == [">", "Hel", "LO"]
    tools = apply_operation(None, {"op": "add", "path": "/tool_calls/0", "value": {"tool_name": "", "args": []}})
    tools = apply_operation(tools, {"op": "replace", "path": "/tool_calls/0/tool_name", "value": "search"})
    tools = apply_operation(tools, {"op": "add", "path": "/tool_calls/0/args/-", "value": '{"q": 1}'})
    assert tools == {"tool_calls": [{"tool_name": "search", "args": ['{"q": 1}']}]}
    keyed = apply_operation({}, {"op": "add", "path": "/a~1b/c~0d", "value": 1})
    assert keyed == {"a/b": {"c~d": 1}}
    assert apply_operation({"x": 1}, {"op": "replace", "path": "", "value": "whole"}) == "whole"
    value = {"nested": [1]}
    doc = apply_operation({}, {"op": "add", "path": "/v", "value": value})
    doc["v"]["nested"].append(2)
    assert value == {"nested": [1]}  # the chunk's own payload is never changed


@pytest.mark.parametrize(
    ("doc", "operation", "message"),
    [
        ([], {"op": "remove", "path": "/0"}, "unsupported op 'remove'"),
        (["a"], {"op": "replace", "path": "/3", "value": "x"}, "index 3 does not exist"),
        (["a"], {"op": "add", "path": "/5", "value": "x"}, "past the end"),
        ({}, {"op": "replace", "path": "/missing", "value": 1}, "replace of missing key"),
        (["a"], {"op": "replace", "path": "/-", "value": 1}, "replace cannot target '-'"),
        ("text", {"op": "add", "path": "/-", "value": 1}, "cannot set '-' inside a string"),
        ({}, {"op": "add", "path": "no-slash", "value": 1}, "does not start with '/'"),
        ({}, {"op": "add", "path": "/k"}, "missing value"),
        ({}, "add", "operation is not an object"),
    ],
)
def test_json_patch_operations_it_cannot_apply_raise_patch_errors(doc, operation, message):
    with pytest.raises(PatchError, match=message):
        apply_operation(doc, operation)


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        # Far past the end: filling the gap used to append millions of empty containers.
        ({"a": []}, "/a/5000000/b", "index 5000000 is past the end of an array of 0"),
        (None, "/5000000/b", "index 5000000 is past the end of an array of 0"),
        (["x"], "/" + "9" * 5000, "past the end of an array of 1"),  # more digits than int() takes
        (["x"], "/" + "0" * 5000 + "/b", "cannot set 'b' inside a string"),  # index 0, however written
        # "²".isdigit() is true but int() refuses it: it is a key, which a list does not have.
        ({"a": []}, "/a/²/b", "segment '²' names a key of a list"),
        (["x"], "/²", "'²' is not an array index"),
    ],
)
def test_json_patch_paths_with_far_or_non_ascii_indexes_raise_patch_errors(doc, path, message):
    with pytest.raises(PatchError, match=message):
        apply_operation(doc, {"op": "add", "path": path, "value": 1})


def test_json_patch_fills_a_missing_parent_at_the_end_of_a_list_and_reads_unicode_digits_as_keys():
    assert apply_operation({"a": [{}]}, {"op": "add", "path": "/a/1/b", "value": 1}) == {"a": [{}, {"b": 1}]}
    assert apply_operation(None, {"op": "add", "path": "/a/²/b", "value": 1}) == {"a": {"²": {"b": 1}}}


def test_patches_with_unicode_digit_or_far_indexes_are_reported_and_the_rest_imports(project, tmp_path):
    lines = records()
    chunk = lines[14]  # line 15: the second piece of the refund call's arguments
    assert chunk["payload"]["patches"][0]["path"] == "/tool_calls/0/args/-"
    chunk["payload"]["patches"] += [
        {"op": "add", "path": "/tool_calls/²/args", "value": "x"},  # used to raise ValueError
        {"op": "add", "path": "/tool_calls/5000000/args", "value": "x"},  # used to fill memory
    ]
    path = tmp_path / "bad_paths.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")
    sessions, problems = ingest_file(flux0, path, project)
    assert problem_keys(problems) == [(15, "payload.patches[1]"), (15, "payload.patches[2]")]
    assert [p.message for p in problems.items] == [
        "segment '²' names a key of a list, not an object: operation skipped",
        "index 5000000 is past the end of an array of 1: operation skipped",
    ]
    (session,) = sessions
    events = rows(session)
    assert session.event_count == 30 and [e.line for e in events].count(15) == 1
    # The good operation of the same chunk still completes the call's arguments.
    call = next(e for e in events if e.kind == Kind.TOOL_CALL)
    assert (call.tool, payload(call)["args"]) == ("refund_shipping", {"order_id": "4411", "amount": 4.99})
    assert [payload(e)["text"] for e in events if e.kind == Kind.AGENT_MESSAGE][-1] == (
        "Done — I refunded the €4.99 shipping fee."
    )


def test_bad_records_are_reported_by_line_and_field_and_the_good_ones_import(project):
    sessions, problems = ingest_file(flux0, DIR / "bad_input.jsonl", project)
    assert problem_keys(problems) == [
        (3, "line"),  # malformed JSON
        (9, "offset"),  # offset 3 after 8: found while the file is read, before the replay
        (10, "line"),  # invalid UTF-8
        (13, "line"),  # truncated last line
        (4, "payload.patches[0]"),  # unsupported op "remove"
        (5, "payload.patches[0]"),  # replace past the end of the rebuilt list
        (6, "kind"),  # unknown kind "snapshot"
        (7, "payload.event_id"),  # chunk without event_id
        (8, "created_at"),  # "not-a-date"
        (11, "payload"),  # null payload
        (11, "payload.source"),
        (11, "payload.type"),
    ]
    messages = {(p.line, p.field): p.message for p in problems.items}
    assert (
        messages[(4, "payload.patches[0]")]
        == "unsupported op 'remove' (flux0 streams add and replace): operation skipped"
    )
    assert (
        messages[(9, "offset")]
        == "offset 3 after 8: the recording is replayed in offset order, as flux0's store reads it"
    )
    assert messages[(13, "line")] == "truncated record (file ends mid-line)"
    (session,) = sessions
    events = rows(session)
    assert [e.line for e in events] == [1, 2, 9, 4, 5, 6, 7, 8, 11, 12, 12]  # offset 3 after offset 1
    message = events[-1]
    # The good operations of the damaged chunks still rebuild the message.
    assert payload(message)["text"] == "Hello!"
    assert payload(message)["messages"][0]["incomplete"] is True
    assert events[5].kind == Kind.CUSTOM and events[5].source_type == "snapshot"
    assert events[7].ts is None


def test_each_source_line_is_stored_once_in_order_so_the_original_can_be_written_back(project):
    _, events = imported(project)
    written, last_line = [], None
    for event in events:  # what the original export does: one record per source line
        if event.line != last_line:
            written.append(event.raw)
        last_line = event.line
    assert "\n".join(written) + "\n" == CHAT.read_text()


def test_import_file_detects_and_imports_the_recording(project, tmp_path):
    from sessions_app.ingest.importing import import_file

    path = tmp_path / "Recording.NDJSON"
    shutil.copy(CHAT, path)
    (outcome,) = import_file(path=path, project=project)
    assert (outcome.format, outcome.events, outcome.steps, outcome.error) == ("flux0", 30, 2, None)
    assert outcome.session.source_session_id == "t2Ykiruy65"
    (bad,) = import_file(path=DIR / "bad_input.jsonl", project=project)
    assert (bad.format, bad.events, len(bad.problems)) == ("flux0", 11, 12)


def test_a_json_array_of_records_is_detected_and_imported(project, tmp_path):
    path = tmp_path / "export.json"
    path.write_bytes(orjson.dumps(records(), option=orjson.OPT_INDENT_2))
    assert detect(Source(path=path)) == "flux0"
    sessions, problems = ingest_file(flux0, path, project)
    assert problems.count == 0
    assert [payload(e)["text"] for e in rows(sessions[0]) if e.kind == Kind.AGENT_MESSAGE][1] == (
        "Done — I refunded the €4.99 shipping fee."
    )


def test_a_recording_whose_first_record_is_not_its_header_is_reported_at_line_1(project, tmp_path):
    # flux0 keeps a recording under its header at offset 0 (flux0_core/recordings.py) and its
    # store refuses frames of a recording whose header it cannot find (storage/nanodb_memory.py,
    # RecordingDocumentStore._ensure_header_exists).
    lines = records()
    path = tmp_path / "headless.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in lines[1:]) + b"\n")
    sessions, problems = ingest_file(flux0, path, project)
    assert problem_keys(problems) == [(1, "kind")]
    assert problems.items[0].message.startswith("invalid recording: its first record is 'emitted', not its header")
    assert sessions[0].event_count == 29  # reported, and what it holds still imported

    # Its header written second is still first in offset order, the order flux0's store reads.
    lines[0], lines[1] = lines[1], lines[0]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")
    _, problems = ingest_file(flux0, path, project)
    assert problem_keys(problems) == [(2, "offset")]


def test_a_recording_out_of_offset_order_replays_as_the_same_recording_in_order(project, tmp_path):
    # flux0's store reads a recording's frames sorted by offset; Replay applied them in file
    # order: the rebuilt text came out scrambled, the task from the wrong message.
    lines = records()
    ordered, shuffled = tmp_path / "ordered.jsonl", tmp_path / "shuffled.jsonl"
    ordered.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")
    shuffled.write_bytes(b"\n".join(orjson.dumps(r) for r in [lines[0], *reversed(lines[1:])]) + b"\n")
    (first,), _ = ingest_file(flux0, ordered, project)
    (second,), problems = ingest_file(flux0, shuffled, project)
    assert [p.field for p in problems.items] == ["offset"]  # said once, at the first step back
    assert second.task == first.task and second.event_count == first.event_count
    shown = [(e.kind, payload(e)) for e in rows(second)]
    assert shown == [(e.kind, payload(e)) for e in rows(first)]


def test_content_recorded_as_pieces_stays_a_list_and_reads_joined(project, tmp_path):
    from sessions_app.replay.frames import message_text

    lines = records()
    lines[1]["payload"]["data"]["parts"][0]["content"] = ["Hi, my order ", "#4411 hasn't arrived yet."]
    path = tmp_path / "pieces.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")
    (session,), problems = ingest_file(flux0, path, project)
    assert problems.count == 0
    user = next(e for e in rows(session) if e.kind == Kind.USER_MESSAGE)
    stored = payload(user)
    assert stored["data"]["parts"][0]["content"] == ["Hi, my order ", "#4411 hasn't arrived yet."]
    assert stored["text"] == "Hi, my order #4411 hasn't arrived yet."
    assert orjson.loads(user.raw) == lines[1]  # exported as recorded
    del stored["text"]  # what the player reads without the converter's text
    assert message_text(stored) == "Hi, my order #4411 hasn't arrived yet."


def test_a_reasoning_document_is_kept_apart_from_the_reply_it_preceded(project, tmp_path):
    # flux0's store finalises a document whose chunks say metadata kind "reasoning" as a
    # ReasoningPart, not as the reply's content (MemoryEventStore.finalize_event).
    lines = records()
    thought = {"correlation_id": "corr_01", "event_id": "rsn_1", "seq": 0,
               "patches": [{"op": "add", "path": "/-", "value": "The customer is upset; check the order."}],
               "metadata": {"agent_id": "k75P208WN6", "agent_name": "support-agent", "kind": "reasoning"}}  # fmt: skip
    lines.insert(4, {"id": "rsn", "recording_id": "NFoW8vKYTo", "offset": 4, "kind": "chunk",
                     "created_at": "2025-08-24T18:20:24.031821+00:00", "payload": thought})  # fmt: skip
    for offset, record in enumerate(lines):
        record["offset"] = offset
    path = tmp_path / "reasoning.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")
    (session,), problems = ingest_file(flux0, path, project)
    assert problems.count == 0
    events = rows(session)
    first = payload(next(e for e in events if e.kind == Kind.AGENT_MESSAGE))
    reply = "Sorry to hear that! Order #4411 shipped on Monday and arrives tomorrow."
    assert first["text"] == reply
    assert [(m["event_id"], m.get("reasoning", False)) for m in first["messages"]] == [
        ("rsn_1", True),
        ("run_a1", False),
    ]
    assert first["messages"][0]["text"] == "The customer is upset; check the order."
    # The turn's step says the reply, not the thought.
    closing = next(e for e in events if e.step_state and "Order #4411" in e.step_state)
    assert "The customer is upset" not in step_state(closing)["output"]


@pytest.mark.parametrize(
    "data, said", [(None, "null"), ([1], "a list"), ("x", "a string")], ids=["null", "list", "text"]
)
def test_an_emitted_events_data_that_is_no_object_is_reported_and_the_event_kept(project, tmp_path, data, said):
    # `data: null` was taken as no data, unsaid (flux0's emitted events all carry theirs).
    lines = records()
    lines[1]["payload"]["data"] = data
    path = tmp_path / "null_data.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")
    sessions, problems = ingest_file(flux0, path, project)
    assert [(p.line, p.field, p.message) for p in problems.items] == [
        (2, "payload.data", f"data is {said}, not an object")
    ]
    (session,) = sessions
    assert [e.line for e in rows(session)][:2] == [1, 2]
