"""daycare histories (FORMATS.md section 4, seed 001): the old and new assistant_message shapes,
run_python blocks as steps with their inner tool calls, and the recovery phase of a history
that ends mid-block (vm_start / tool_call / error), decided as daycare's
agentLoopPendingPhaseResolve decides it.

Fixtures under fixtures/daycare/: complete_new (two blocks: the first fails on its second inner
call, the second succeeds), complete_old (the oldest `{text}` shape with a <run_python> tag),
pending_vm_start, pending_tool_call, pending_error and bad_input.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime

import orjson
import pytest

from sessions_app.canonical import Kind
from sessions_app.formats import Head, Source, daycare, detect
from sessions_app.formats.daycare import extract_run_python
from sessions_app.models import Role

from .builders_formats import FIXTURES, ingest_file, payload, problem_keys, rows, step_state
from .builders_teams import member

DIR = FIXTURES / "daycare"
AT0 = 1760520000000


def imported(name: str, project):
    sessions, problems = ingest_file(daycare, DIR / name, project)
    assert problems.count == 0, problems.to_list()
    (session,) = sessions
    return session, rows(session)


def history(name: str) -> list[dict]:
    return [orjson.loads(line) for line in (DIR / name).read_bytes().splitlines()]


def write(tmp_path, records: list[dict], name: str = "history.jsonl"):
    path = tmp_path / name
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    return path


@pytest.mark.parametrize(
    "name",
    [
        "complete_new.jsonl",
        "complete_old.jsonl",
        "pending_vm_start.jsonl",
        "pending_tool_call.jsonl",
        "pending_error.jsonl",
    ],
)
def test_daycare_is_detected_by_content_whatever_the_file_name(name, tmp_path):
    renamed = tmp_path / "agent.txt"
    shutil.copy(DIR / name, renamed)
    assert detect(Source(path=renamed)) == "daycare"


def test_other_formats_are_not_taken_for_daycare():
    for other in ("agentlens/two_sessions.ndjson", "flux0/support_chat.jsonl", "agentlens/two_sessions_array.json"):
        assert not daycare.sniff(Head.of(Source(path=FIXTURES / other)))


def test_a_history_is_one_session_named_after_its_file(project):
    session, events = imported("complete_new.jsonl", project)
    assert session.source_session_id == "complete_new"
    assert session.task == "How many open PRs does daycare have? Post the count to #eng."
    assert session.model == "claude-sonnet-4-5"
    assert session.started_at == datetime.fromtimestamp(AT0 / 1000, tz=UTC)  # `at` is epoch ms
    assert session.ended_at == datetime.fromtimestamp((AT0 + 10600) / 1000, tz=UTC)
    assert [e.ts for e in events] == sorted(e.ts for e in events)


def test_new_assistant_messages_bring_text_tokens_model_and_native_tool_calls(project):
    session, events = imported("complete_new.jsonl", project)
    messages = [e for e in events if e.kind == Kind.AGENT_MESSAGE]
    assert [payload(m)["text"] for m in messages] == [
        "Let me check.", "", "There are 7 open PRs; I posted the count to #eng.",
    ]  # fmt: skip
    assert [m.tokens for m in messages] == [4206, 4410, 4600]  # tokens.size.total
    assert all(m.cost_unpriced and m.cost_usd is None for m in messages)  # no price in a history
    assert [payload(m).get("model") for m in messages] == ["claude-sonnet-4-5"] * 3
    assert session.tokens == 4206 + 4410 + 4600
    # Each native tool call becomes a tool_call next to its message (same line and record).
    outer_calls = [e for e in events if e.source_type == "assistant_message.toolCall"]
    assert [(c.pair_id, c.tool) for c in outer_calls] == [("toolu_01", "run_python"), ("toolu_02", "run_python")]
    assert (outer_calls[0].line, outer_calls[0].raw) == (messages[0].line, messages[0].raw)
    assert payload(outer_calls[0])["arguments"]["description"] == "Count open PRs and post"


def test_old_assistant_text_with_a_run_python_tag_is_read_as_a_block(project):
    session, events = imported("complete_old.jsonl", project)
    assert [e.kind for e in events] == [
        "user_message", "agent_message", "step_start", "tool_call", "tool_response", "step_end",
        "user_message", "agent_message",
    ]  # fmt: skip
    message = events[1]
    assert payload(message)["run_python_blocks"] == 1
    assert message.tokens is None and not message.cost_unpriced
    (step,) = [e for e in events if e.step_pos is not None]
    state = step_state(step)
    assert state["action_code"] == "rows = read_csv(path='sales.csv')\nsum(r['total'] for r in rows)"
    assert (state["success"], state["output"], state["error"]) == (True, "18234.5", "")
    assert state["duration_ms"] == 590
    assert session.metadata["pending_phase"] is None


def test_run_python_tags_are_extracted_like_daycare_does():
    text = "a <RUN_PYTHON>\n x = 1 \n</run_python> b <run_python id='2'>y()</run_python > <run_python>open"
    assert extract_run_python(text) == ["x = 1", "y()"]


def test_each_run_python_block_is_a_step_with_code_output_and_error(project):
    session, events = imported("complete_new.jsonl", project)
    steps = [e for e in events if e.step_pos is not None]
    assert [e.source_type for e in steps] == ["rlm_complete", "rlm_complete"]
    failed, passed = (step_state(e) for e in steps)
    source = history("complete_new.jsonl")
    assert failed["action_type"] == "run_python"
    assert failed["action_code"] == source[3]["code"]
    assert failed["action_rationale"] == "Count open PRs and post"
    assert (failed["success"], failed["error"]) == (False, "ToolError: channel_not_found: #eng")
    assert failed["duration_ms"] == 1200  # rlm_start -> rlm_complete
    assert failed["tokens_used"] == 4206  # the issuing message's tokens, on its first block
    assert failed["raw_observation"] == {
        "printOutput": ["7"],
        "toolCallCount": 2,
        "innerTools": ["github_search", "send_message"],
    }
    assert (passed["success"], passed["output"], passed["error"], passed["step"]) == (True, "posted", "", 2)
    assert session.step_count == 2
    assert (session.step_error_count, session.step_success_count) == (1, 1)
    # Every event of a block carries its step number.
    assert [e.step for e in events if e.step is not None] == [1, 1, 1, 1, 1, 1, 2, 2, 2, 2]


def test_inner_tool_calls_pair_by_tool_call_id_and_count(project):
    _, events = imported("complete_new.jsonl", project)
    inner = [e for e in events if e.source_type in ("rlm_tool_call", "rlm_tool_result")]
    assert [(e.kind, e.tool, e.pair_id) for e in inner] == [
        ("tool_call", "github_search", "toolu_01#0"),
        ("tool_response", "github_search", "toolu_01#0"),
        ("tool_call", "send_message", "toolu_01#1"),
        ("tool_error", "send_message", "toolu_01#1"),
        ("tool_call", "send_message", "toolu_02#0"),
        ("tool_response", "send_message", "toolu_02#0"),
    ]
    for call, result in zip(inner[::2], inner[1::2]):
        assert call.pair_seq == result.seq
        assert call.pair_duration_ms == (result.ts - call.ts).total_seconds() * 1000
    assert payload(inner[0])["toolArgs"] == {"query": "is:pr is:open repo:ex3ndr/daycare"}
    # The VM snapshot (base64) stays in the raw record; the payload notes its size.
    assert "snapshot" not in payload(inner[0]) and payload(inner[0])["snapshot_chars"] == 536
    assert orjson.loads(inner[0].raw)["snapshot"].startswith("bW9udHk")
    assert [e.fail_streak for e in inner[1::2]] == [0, 1, 0]


def test_the_outer_run_python_call_pairs_with_its_tool_result_and_fails_once(project):
    session, events = imported("complete_new.jsonl", project)
    results = [e for e in events if e.source_type == "tool_result"]
    assert [(e.kind, e.pair_id, e.tool) for e in results] == [
        ("tool_error", "toolu_01", "run_python"), ("tool_response", "toolu_02", "run_python"),
    ]  # fmt: skip
    calls = {e.pair_id: e for e in events if e.source_type == "assistant_message.toolCall"}
    assert calls["toolu_01"].pair_seq == results[0].seq
    # One failure chain: the inner tool error and the failed block; the outer result repeats it.
    assert [e.source_type for e in events if e.is_error] == ["rlm_tool_result", "rlm_complete"]
    assert session.error_count == 2
    completes = [e for e in events if e.source_type == "rlm_complete"]
    assert [(e.tool, e.fail_streak) for e in completes] == [("run_python", 1), ("run_python", 0)]


def test_a_complete_history_has_no_pending_phase(project):
    for name in ("complete_new.jsonl", "complete_old.jsonl"):
        session, _ = imported(name, project)
        assert session.metadata["pending_phase"] is None
        assert session.completed is True
        assert session.status == "completed"


def test_a_run_python_call_with_no_rlm_start_is_pending_at_vm_start(project):
    session, events = imported("pending_vm_start.jsonl", project)
    meta = session.metadata
    assert meta["pending_phase"] == "vm_start"
    assert meta["pending_tool_call_id"] == "toolu_a"
    assert (meta["pending_block_index"], meta["pending_blocks"]) == (0, 2)
    assert meta["pending_line"] == 3
    assert events[meta["pending_event_index"]].kind == Kind.AGENT_MESSAGE
    assert "from VM start" in meta["pending_action"]
    assert session.completed is False
    assert session.status == "interrupted"
    assert session.step_count == 0  # a block that never started is not a step


def test_an_rlm_start_with_a_snapshot_and_no_complete_is_pending_at_tool_call(project):
    session, events = imported("pending_tool_call.jsonl", project)
    meta = session.metadata
    assert meta["pending_phase"] == "tool_call"
    assert meta["pending_tool_call_id"] == "toolu_c"
    assert (meta["pending_snapshot"], meta["pending_snapshot_line"]) == ("snap_c2", 6)  # the latest
    assert meta["pending_line"] == 3
    assert events[meta["pending_event_index"]].source_type == "rlm_start"
    assert "Process was restarted" in meta["pending_action"]
    # The interrupted block still shows as a (failed) step, closed on its last record.
    (step,) = [e for e in events if e.step_pos is not None]
    assert step.seq == len(events) - 1 and step.source_type == "rlm_tool_call"
    state = step_state(step)
    assert state["success"] is False
    assert state["error"].startswith("interrupted (tool_call phase)")
    assert state["raw_observation"]["pending_phase"] == "tool_call"
    assert state["action_code"].startswith("for n in (301, 300, 299):")
    assert state["duration_ms"] == 400  # rlm_start -> the last record of the block
    assert session.completed is False
    assert session.status == "interrupted"


def test_records_after_the_interrupted_block_do_not_hide_its_step(project, tmp_path):
    records = history("pending_tool_call.jsonl")
    after = [{"type": "note", "at": AT0 + 2500, "text": "worker restarted"}, {"type": "start", "at": AT0 + 9000}]
    sessions, _ = ingest_file(daycare, write(tmp_path, records + after), project)
    events = rows(sessions[0])
    (step,) = [e for e in events if e.step_pos is not None]
    assert step.source_type == "rlm_tool_call" and step.line == 6
    assert [e.source_type for e in events[-2:]] == ["note", "start"]  # order unchanged


def test_an_rlm_start_with_neither_snapshot_nor_complete_is_pending_at_error(project):
    session, events = imported("pending_error.jsonl", project)
    meta = session.metadata
    assert meta["pending_phase"] == "error"
    assert meta["pending_tool_call_id"] == "toolu_d"
    assert "pending_snapshot" not in meta
    assert "Process was restarted before any tool call" in meta["pending_action"]
    (step,) = [e for e in events if e.step_pos is not None]
    assert step.source_type == "rlm_start"
    assert step_state(step)["error"].startswith("interrupted (error phase)")
    assert session.status == "interrupted"


def test_the_latest_unfinished_block_is_the_pending_one(project, tmp_path):
    records = history("pending_tool_call.jsonl")
    # An older block that never completed (no snapshot), then a later one with a snapshot.
    older = {"type": "rlm_start", "at": AT0 + 100, "toolCallId": "toolu_old", "code": "a()", "preamble": ""}
    sessions, _ = ingest_file(daycare, write(tmp_path, [older, *records]), project)
    assert sessions[0].metadata["pending_tool_call_id"] == "toolu_c"
    assert sessions[0].metadata["pending_phase"] == "tool_call"
    # The same older block recorded *later* than the other wins, and it has no snapshot.
    older["at"] = AT0 + 9000
    sessions, _ = ingest_file(daycare, write(tmp_path, [*records, older], "b.jsonl"), project)
    assert sessions[0].metadata["pending_tool_call_id"] == "toolu_old"
    assert sessions[0].metadata["pending_phase"] == "error"


def test_run_python_calls_answered_by_a_later_rlm_start_are_not_pending(project, tmp_path):
    records = history("pending_vm_start.jsonl")
    done = [
        {
            "type": "rlm_start",
            "at": AT0 + 3000,
            "toolCallId": "toolu_a",
            "code": "exec_command(cmd='rm -rf /tmp/cache')",
            "preamble": "",
        },
        {
            "type": "rlm_complete",
            "at": AT0 + 3100,
            "toolCallId": "toolu_a",
            "output": "",
            "printOutput": [],
            "toolCallCount": 0,
            "isError": False,
        },
    ]
    sessions, _ = ingest_file(daycare, write(tmp_path, records + done), project)
    # daycare only asks whether any rlm_start came after the latest run_python message.
    assert sessions[0].metadata["pending_phase"] is None
    assert sessions[0].completed is True


def test_the_pending_block_index_follows_the_call_id_in_its_message(project, tmp_path):
    records = history("pending_vm_start.jsonl")
    start_b = {
        "type": "rlm_start",
        "at": AT0 + 3000,
        "toolCallId": "toolu_b",
        "code": "exec_command(cmd='df -h /')",
        "preamble": "",
    }
    sessions, _ = ingest_file(daycare, write(tmp_path, records + [start_b]), project)
    meta = sessions[0].metadata
    assert (meta["pending_phase"], meta["pending_tool_call_id"], meta["pending_block_index"]) == ("error", "toolu_b", 1)


def test_bad_records_are_reported_by_line_and_field_and_the_good_ones_import(project):
    sessions, problems = ingest_file(daycare, DIR / "bad_input.jsonl", project)
    assert problem_keys(problems) == [
        (1, "line"),  # BOM
        (3, "line"),  # malformed JSON
        (4, "tokens.size.total"),  # "lots"
        (5, "type"),  # unknown type "teleport"
        (6, "at"),  # null
        (7, "line"),  # invalid UTF-8
        (8, "snapshot"),  # neither snapshot nor snapshotId
        (9, "toolIsError"),  # "no"
        (10, "toolCallCount"),  # "one"
        (11, "line"),  # truncated last line
    ]
    messages = {(p.line, p.field): p.message for p in problems.items}
    assert messages[(4, "tokens.size.total")] == "not a number: lots (ignored)"
    assert messages[(6, "at")] == "null where epoch milliseconds were expected"
    assert messages[(9, "toolIsError")] == "not a boolean: no (taken as false)"
    (session,) = sessions
    events = rows(session)
    assert [e.line for e in events] == [1, 2, 4, 4, 5, 6, 8, 9, 10]
    assert events[4].kind == Kind.CUSTOM and events[4].source_type == "teleport"
    assert events[5].ts is None
    assert events[2].tokens is None  # the total was unusable and no input/output fallback applies
    (step,) = [e for e in events if e.step_pos is not None]
    assert step_state(step)["output"] == "up"


@pytest.mark.parametrize("name", ["complete_new.jsonl", "pending_vm_start.jsonl"])
def test_each_source_line_is_stored_once_in_order_so_the_original_can_be_written_back(name, project):
    _, events = imported(name, project)
    written, last_line = [], None
    for event in events:  # what the original export does: one record per source line
        if event.line != last_line:
            written.append(event.raw)
        last_line = event.line
    assert "\n".join(written) + "\n" == (DIR / name).read_text()


def test_import_file_detects_a_history_and_records_its_pending_phase(project):
    from sessions_app.ingest.importing import import_file

    (outcome,) = import_file(path=DIR / "pending_tool_call.jsonl", project=project)
    assert (outcome.format, outcome.events, outcome.steps, outcome.error) == ("daycare", 7, 1, None)
    assert outcome.session.metadata["pending_phase"] == "tool_call"
    assert outcome.session.source_session_id == "pending_tool_call"
    (bad,) = import_file(path=DIR / "bad_input.jsonl", project=project)
    assert (bad.format, bad.events, len(bad.problems)) == ("daycare", 9, 10)


def test_a_text_full_of_unclosed_run_python_tags_imports_without_blocks(project, tmp_path):
    # ~200 KB of "<run_python " with no ">" after it: the tag search used to rescan the rest of
    # the text from every one of them (quadratic, about a minute at this size).
    flood = "<run_python " * 17000
    records = [
        {"type": "user_message", "at": AT0, "text": "hi"},
        {"type": "assistant_message", "at": AT0 + 100, "text": flood},
        {"type": "assistant_message", "at": AT0 + 200, "text": flood + "<run_python>x = 1</run_python>"},
        {"type": "user_message", "at": AT0 + 300, "text": "bye"},
    ]
    sessions, problems = ingest_file(daycare, write(tmp_path, records), project)
    assert problems.count == 0, problems.to_list()
    events = rows(sessions[0])
    assert [(e.line, e.kind) for e in events] == [
        (1, "user_message"), (2, "agent_message"), (3, "agent_message"), (4, "user_message"),
    ]  # fmt: skip
    assert payload(events[1])["text"] == flood and "run_python_blocks" not in payload(events[1])
    # A ">" later on still closes the first tag, as daycare's own tag extraction reads it.
    assert payload(events[2])["run_python_blocks"] == 1
    assert extract_run_python(flood + "<run_python>x = 1</run_python>") == ["x = 1"]
    assert extract_run_python(flood) == []


def test_an_assistant_messages_text_blocks_join_a_line_apart_skipping_empty_ones(project, tmp_path):
    # daycare's messageContentExtractText (engine/messages/): the text blocks that are not
    # empty, joined by "\n"; a tool call between them is no text.
    content = [{"type": "text", "text": "Part one."}, {"type": "text", "text": ""},
               {"type": "toolCall", "id": "t1", "name": "search", "arguments": {"q": "x"}},
               {"type": "text", "text": "Part two."}]  # fmt: skip
    records = [{"type": "user_message", "at": AT0, "text": "go", "files": []},
               {"type": "assistant_message", "at": AT0 + 1, "content": content, "tokens": None}]  # fmt: skip
    sessions, problems = ingest_file(daycare, write(tmp_path, records), project)
    assert problems.count == 0, problems.to_list()
    assert payload(rows(sessions[0])[1])["text"] == "Part one.\nPart two."


def test_a_steps_rationale_is_its_run_python_calls_description_when_rlm_start_has_none(project, tmp_path):
    # daycare's rlmExecute.ts writes rlm_start with no description; the call's arguments hold it.
    call = {"type": "toolCall", "id": "tc1", "name": "run_python",
            "arguments": {"code": "x = 1\nprint(x)", "description": "Set x"}}  # fmt: skip
    records = [{"type": "user_message", "at": AT0, "text": "go", "files": []},
               {"type": "assistant_message", "at": AT0 + 1, "content": [call], "tokens": None},
               {"type": "rlm_start", "at": AT0 + 2, "toolCallId": "tc1", "code": "x = 1\nprint(x)", "preamble": ""},
               {"type": "rlm_complete", "at": AT0 + 3, "toolCallId": "tc1", "output": "1", "printOutput": ["1"],
                "toolCallCount": 0, "isError": False}]  # fmt: skip
    sessions, problems = ingest_file(daycare, write(tmp_path, records), project)
    assert problems.count == 0, problems.to_list()
    [step] = [step_state(e) for e in rows(sessions[0]) if e.step_state]
    assert step["action_rationale"] == "Set x" and step["action_code"] == "x = 1\nprint(x)"
    # A block no call of the message runs (another id, other code) borrows none.
    stranger = [*records[:2], {**records[2], "toolCallId": "tc9", "code": "y = 2"}]
    sessions, _ = ingest_file(daycare, write(tmp_path, stranger, "stranger.jsonl"), project)
    assert [step_state(e)["action_rationale"] for e in rows(sessions[0]) if e.step_state] == [""]
    # Its own description, when it has one, is the rationale.
    records[2]["description"] = "Set x to one"
    sessions, _ = ingest_file(daycare, write(tmp_path, records, "own.jsonl"), project)
    assert [step_state(e)["action_rationale"] for e in rows(sessions[0]) if e.step_state] == ["Set x to one"]


# assistant_rewrite and the recovery view, as daycare's own code does them:
# agentHistoryContext.ts (the rebuilt conversation) and agentLoopPendingPhaseResolve.ts (what a
# restart takes up), packages/daycare/sources/engine/agents/ops/.


def rewrite_history() -> list[dict]:
    """daycare's own case (agentHistoryContext.spec.ts): a rewrite naming the older of two
    assistant messages by its `at`."""
    return [
        {"type": "user_message", "at": 1, "text": "go", "files": []},
        {"type": "assistant_message", "at": 10, "content": [{"type": "text", "text": "first raw"}], "tokens": None},
        {"type": "assistant_message", "at": 20, "content": [{"type": "text", "text": "second untouched"}], "tokens": None},
        {"type": "assistant_rewrite", "at": 30, "assistantAt": 10, "text": "first rewritten", "reason": "run_python_failure_trim"},
        {"type": "note", "at": 40, "text": "after"},
    ]  # fmt: skip


def conversation_at(session, seq: int) -> list[tuple[int, str]]:
    from sessions_app.replay.frames import frame_at

    return [(m["seq"], m["text"]) for m in frame_at(session=session, seq=seq, kinds=[]).conversation]


def test_assistant_rewrite_replaces_the_text_of_the_message_it_names_from_then_on(project, tmp_path):
    sessions, problems = ingest_file(daycare, write(tmp_path, rewrite_history()), project)
    assert problems.count == 0
    (session,) = sessions
    events = rows(session)
    rewrite = events[3]
    assert payload(rewrite)["rewrites"] == {"seq": 1, "line": 2}
    assert payload(events[1])["text"] == "first raw"  # the recorded message stays as recorded
    assert conversation_at(session, 2) == [(0, "go"), (1, "first raw"), (2, "second untouched")]
    assert conversation_at(session, 4) == [(0, "go"), (1, "first rewritten"), (2, "second untouched")]


def test_assistant_rewrite_naming_no_message_rewrites_the_latest_and_keeps_tool_calls(project, tmp_path):
    records = rewrite_history()
    records[3]["assistantAt"] = 999  # no message at that time: daycare takes the latest
    records[2]["content"].append({"type": "toolCall", "id": "t1", "name": "say", "arguments": {}})
    (session,), _ = ingest_file(daycare, write(tmp_path, records), project)
    assert payload(rows(session)[4])["rewrites"]["seq"] == 2
    assert conversation_at(session, 6)[-1] == (2, "first rewritten")

    only_calls = rewrite_history()[:2] + [
        {"type": "assistant_message", "at": 20, "content": [{"type": "toolCall", "id": "t1", "name": "say", "arguments": {}}]},
        {"type": "assistant_rewrite", "at": 30, "assistantAt": 20, "text": "never shown", "reason": "run_python_failure_trim"},
    ]  # fmt: skip
    (session,), _ = ingest_file(daycare, write(tmp_path, only_calls, "b.jsonl"), project)
    rewrite = next(e for e in rows(session) if e.source_type == "assistant_rewrite")
    assert "rewrites" not in payload(rewrite)  # a message without text is left as it is


def test_the_recovery_lists_the_pending_blocks_with_their_call_ids_and_message(project):
    session, events = imported("pending_vm_start.jsonl", project)
    meta = session.metadata
    message = events[meta["pending_assistant"]["event_index"]]
    assert message.kind == Kind.AGENT_MESSAGE and meta["pending_assistant"]["line"] == 3
    assert meta["pending_assistant"]["text"] == "Two steps."
    assert [(b["index"], b["tool_call_id"], b["state"], b["assistant_event_index"]) for b in meta["pending_run_python"]] == [
        (0, "toolu_a", "not started", message.seq), (1, "toolu_b", "not started", message.seq),
    ]  # fmt: skip
    assert "pending_deferred" not in meta  # only a resumed block can hold deferred entries


def test_the_tool_call_phase_counts_the_deferred_entries_its_block_persisted(project, tmp_path):
    # persistedDeferredEntries: every rlm_tool_result of the pending block with a deferredPayload.
    records = history("pending_tool_call.jsonl")
    records[4]["deferredPayload"] = {"connector": "telegram", "text": "Crash on resume"}
    records.append({**records[4], "at": records[4]["at"] + 1, "deferredPayload": None})
    records.append({**records[3], "at": records[3]["at"] + 500, "toolCallCount": 2, "snapshotId": "snap_c3"})
    other = {"type": "rlm_tool_result", "at": AT0 + 3000, "toolCallId": "toolu_other", "toolName": "say",
             "toolResult": "", "toolIsError": False, "deferredPayload": {"text": "not this block"}}  # fmt: skip
    (session,), _ = ingest_file(daycare, write(tmp_path, records + [other]), project)
    meta = session.metadata
    assert meta["pending_phase"] == "tool_call" and meta["pending_deferred"] == 2
    assert [(b["tool_call_id"], b["state"]) for b in meta["pending_run_python"]] == [("toolu_c", "interrupted")]


def test_the_recovery_text_follows_a_rewrite_of_exactly_its_message(project, tmp_path):
    records = history("pending_vm_start.jsonl")
    at = records[2]["at"]
    records.append({"type": "assistant_rewrite", "at": at + 10, "assistantAt": at, "text": "Trimmed.",
                    "reason": "run_python_failure_trim"})  # fmt: skip
    (session,), _ = ingest_file(daycare, write(tmp_path, records), project)
    assert session.metadata["pending_assistant"]["text"] == "Trimmed."
    records[-1]["assistantAt"] = at + 1  # no message at that time: the recovery text stays
    (session,), _ = ingest_file(daycare, write(tmp_path, records, "b.jsonl"), project)
    assert session.metadata["pending_assistant"]["text"] == "Two steps."


def test_the_player_shows_what_a_restart_would_do(client, django_user_model, project, tmp_path):
    from django.urls import reverse

    records = history("pending_tool_call.jsonl")
    records[4]["deferredPayload"] = {"text": "Crash on resume"}
    (session,), _ = ingest_file(daycare, write(tmp_path, records), project)
    client.force_login(member("viewer", role=Role.VIEWER))
    html = client.get(reverse("sessions:player", args=[session.pk])).content.decode()
    plan = html[html.index('id="recovery-plan"') : html.index("</details>", html.index('id="recovery-plan"'))]
    # The assistant message the block belongs to: seq 1, shown 1-based as #2.
    assert "<code>toolu_c</code> · interrupted · of message #2" in plan
    assert 'data-seq="1">#2</a>' in plan
    assert "1 persisted deferred entry" in plan
