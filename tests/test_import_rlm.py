"""Conformance: files written by rlm-code itself, imported by us, compared with rlm-code's own
`load_session(...).get_summary()` and step list. Every deliberate difference (docs/formats.md)
is asserted explicitly."""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rlm_code.rlm.session_replay import SessionRecorder, SessionReplayer, SessionStore, load_session

from sessions_app.canonical import Kind
from sessions_app.ingest.importing import import_file
from sessions_app.models import Checkpoint, Event, Session
from sessions_app.replay.state import step_state_at

from .builders_rlm import (
    record_failing_session,
    record_full_session,
    write_documented_trajectory,
    write_runner_steps,
    write_sink_folder,
    write_steps_only_session,
    write_trajectory_logger_session,
)

STEP_FIELDS = (
    "step", "timestamp", "action_type", "action_code", "action_rationale", "success", "output",
    "error", "reward", "cumulative_reward", "duration_ms", "tokens_used", "raw_action",
    "raw_observation",
)  # fmt: skip


def imported_steps(session: Session) -> list[dict]:
    rows = (
        Event.objects.filter(session=session, step_pos__isnull=False)
        .order_by("step_pos")
        .values_list("step_pos", "step_state")
    )
    steps = []
    for position, (step_pos, text) in enumerate(rows):
        assert step_pos == position
        steps.append(orjson.loads(text))
    return steps


def state_at_steps(session: Session) -> list[dict]:
    """Variables and memory at each step end, replayed from the stored state changes."""
    variables: dict = {}
    memory: list = []
    states = []
    for change, step_pos in (
        Event.objects.filter(session=session).order_by("seq").values_list("state_change", "step_pos")
    ):
        if change:
            change = orjson.loads(change)
            if "memory" in change:
                memory = change["memory"]
            if "variables" in change:
                variables = dict(change["variables"]) if change.get("replace") else {**variables, **change["variables"]}
        if step_pos is not None:
            states.append({"variables": variables, "memory": memory})
    return states


def assert_summary_matches(session: Session, replayer: SessionReplayer, *, tokens_divisor: int = 1) -> None:
    summary = replayer.get_summary()
    assert session.source_session_id == summary["session_id"]
    assert session.run_id == summary["run_id"]
    assert session.task[:100] == summary["task"]
    assert session.environment == summary["environment"]
    assert session.model == summary["model"]
    assert session.completed == summary["completed"]
    assert session.step_count == summary["total_steps"]
    assert session.reward == pytest.approx(summary["total_reward"])
    assert session.tokens * tokens_divisor == summary["total_tokens"]
    assert session.duration_seconds == pytest.approx(summary["duration_seconds"], abs=1e-6)
    assert session.success_rate == pytest.approx(summary["success_rate"])
    assert session.step_error_count == summary["error_count"]


def assert_steps_match(session: Session, replayer: SessionReplayer) -> list[dict]:
    ours = imported_steps(session)
    theirs = replayer.snapshot.steps
    assert len(ours) == len(theirs)
    for position, (mine, reference) in enumerate(zip(ours, theirs)):
        expected = reference.to_dict()
        for name in STEP_FIELDS:
            assert mine[name] == expected[name], (position, name)
        assert "variables" not in mine and "memory_notes" not in mine
    return ours


def import_one(path: Path, project, **kwargs) -> Session:
    outcomes = import_file(path=path, project=project, **kwargs)
    assert len(outcomes) == 1, [o.to_dict() for o in outcomes]
    assert outcomes[0].error is None, outcomes[0].error
    return outcomes[0].session


def test_native_session_matches_rlm_summary_and_every_step(project, tmp_path):
    path = tmp_path / "full.jsonl"
    recorder = record_full_session(path)
    replayer = load_session(path)

    session = import_one(path, project)

    assert session.source_format == "rlm_native"
    # Deliberate difference: rlm-code adds step_result's and step_end's tokens_used.
    assert_summary_matches(session, replayer, tokens_divisor=2)
    assert session.tokens == sum(150 + step for step in range(1, 7)) == recorder._total_tokens
    assert session.task == recorder.task  # the full task is kept; the summary cuts it at 100
    assert session.final_answer == "The answer is 42 — 答案"
    assert session.status == Session.Status.COMPLETED
    assert_steps_match(session, replayer)


def test_a_total_reward_the_session_end_states_wins_over_the_steps_sum_as_in_rlm_code(project, tmp_path):
    """FORMATS.md: session_end's total_reward overrides the running total. Every recorded file
    states the same total as its steps add up to, so the override is shown on an edited one."""
    from django.conf import settings

    lines = (Path(settings.BASE_DIR) / "demo" / "rlm_success.jsonl").read_bytes().splitlines()
    edited = []
    for line in lines:
        record = json.loads(line)
        if record.get("event_type") == "session_end":
            record["data"]["total_reward"] = 9.0
        edited.append(json.dumps(record).encode())
    path = tmp_path / "stated.jsonl"
    path.write_bytes(b"\n".join(edited) + b"\n")
    replayer = load_session(path)
    assert replayer.get_summary()["total_reward"] == 9.0  # the reference's own reading

    session = import_one(path, project)

    assert session.reward == 9.0
    last = Event.objects.filter(session=session).order_by("-seq").values_list("reward_total", flat=True).first()
    assert last != 9.0  # the steps alone add up to something else: the stated total won
    assert_summary_matches(session, replayer, tokens_divisor=2)


def test_native_keeps_variables_and_memory_that_rlm_drops(project, tmp_path):
    path = tmp_path / "full.jsonl"
    recorder = record_full_session(path)
    replayer = load_session(path)

    session = import_one(path, project)

    states = state_at_steps(session)
    assert len(states) == len(recorder._steps)
    for state, recorded, reference in zip(states, recorder._steps, replayer.snapshot.steps):
        assert state["variables"] == recorded.variables != {}
        assert reference.variables == {}  # what rlm-code's loader gives
        assert state["memory"] == recorded.memory_notes == reference.memory_notes


def test_native_pairs_llm_calls_and_child_spawns(project, tmp_path):
    path = tmp_path / "full.jsonl"
    record_full_session(path)

    session = import_one(path, project)

    calls = list(Event.objects.filter(session=session, kind=Kind.LLM_CALL).order_by("seq"))
    responses = {e.seq: e for e in Event.objects.filter(session=session, kind=Kind.LLM_RESPONSE)}
    assert len(calls) == 6 == session.llm_calls
    for call in calls:
        response = responses[call.pair_seq]
        assert response.pair_id == call.pair_id
        assert response.seq == call.seq + 1
        assert response.pair_duration_ms == 412.5
        assert call.tool == response.tool == "gpt-4o-mini"
        # tokens_in/out stay in the payload: the step already counts them
        assert response.tokens is None and orjson.loads(response.payload)["tokens_in"] > 100
    assert session.models_used == ["gpt-4o-mini"]
    spawns = list(Event.objects.filter(session=session, kind=Kind.CHILD_SPAWN).order_by("seq"))
    assert [s.child_id for s in spawns] == ["child_001", "child_002"]
    for spawn in spawns:
        result = Event.objects.get(session=session, seq=spawn.pair_seq)
        assert result.kind == Kind.CHILD_RESULT and result.child_id == spawn.child_id


def test_native_error_events_are_flagged_but_not_step_errors(project, tmp_path):
    path = tmp_path / "failing.jsonl"
    record_failing_session(path)
    replayer = load_session(path)

    session = import_one(path, project)

    assert_summary_matches(session, replayer, tokens_divisor=2)
    assert session.error_count == 3  # the three `error` events
    assert session.step_error_count == replayer.get_summary()["error_count"] == 3
    assert session.completed is False and session.status == Session.Status.FAILED
    errors = Event.objects.filter(session=session, is_error=True)
    assert set(errors.values_list("kind", flat=True)) == {Kind.ERROR}
    assert_steps_match(session, replayer)


def test_native_checkpoint_event_becomes_a_named_checkpoint(project, tmp_path):
    path = tmp_path / "full.jsonl"
    record_full_session(path, checkpoint_at=2)

    session = import_one(path, project)

    checkpoint = Checkpoint.objects.get(session=session)
    event = Event.objects.get(session=session, seq=checkpoint.seq)
    assert checkpoint.name == "before_refactor"
    assert event.kind == Kind.CHECKPOINT
    assert checkpoint.step_pos == 1  # after the second step closed


def test_a_recorded_checkpoint_name_has_its_hidden_characters_written_out_and_is_composed(project, tmp_path):
    # A name a person types with a direction override is refused; one an agent recorded is kept,
    # but shown with the override written out, so the panel cannot list it as another name.
    path = tmp_path / "full.jsonl"
    record_full_session(path, checkpoint_at=2)
    spoofed = json.dumps("Cafe\u0301 \u202egnp.exe\u200b")  # "e" plus a combining accent
    path.write_text(path.read_text().replace('"before_refactor"', spoofed), encoding="utf-8")

    session = import_one(path, project)

    assert Checkpoint.objects.get(session=session).name == "Caf\u00e9 \\u202egnp.exe\\u200b"


def test_native_large_unicode_output_survives_byte_for_byte(project, tmp_path):
    path = tmp_path / "full.jsonl"
    record_full_session(path, large_output_at=2)
    raw_lines = path.read_text(encoding="utf-8").splitlines()

    session = import_one(path, project)

    step = imported_steps(session)[1]
    assert step["output"] == "grand résultat " * 20_000
    stored_raw = list(Event.objects.filter(session=session).order_by("seq").values_list("raw", flat=True))
    assert stored_raw == raw_lines


def test_file_appended_with_two_sessions_yields_two_sessions(project, tmp_path):
    path = tmp_path / "appended.jsonl"
    first = record_full_session(path, run_id="run_one", steps=3)
    second = record_failing_session(path, run_id="run_two")
    combined = load_session(path)  # rlm-code merges both into one session

    outcomes = import_file(path=path, project=project)

    assert [o.session.source_session_id for o in outcomes] == ["run_one", "run_two"]
    one, two = (o.session for o in outcomes)
    assert one.step_count == len(first._steps) and two.step_count == len(second._steps)
    assert one.step_count + two.step_count == combined.total_steps
    assert one.task == first.task and two.task == second.task
    assert one.completed is True and two.completed is False
    # Each session matches what rlm-code reads from its own lines alone.
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    starts = [n for n, line in enumerate(lines) if '"session_start"' in line]
    assert len(starts) == 2
    for session, part in zip((one, two), (lines[: starts[1]], lines[starts[1] :])):
        alone = tmp_path / f"{session.source_session_id}.jsonl"
        alone.write_text("".join(part), encoding="utf-8")
        assert_summary_matches(session, load_session(alone), tokens_divisor=2)
        assert_steps_match(session, load_session(alone))


def test_step_end_fields_fill_in_when_no_action_or_result_came(project, tmp_path):
    path = tmp_path / "ends_only.jsonl"
    write_steps_only_session(path)
    replayer = load_session(path)

    session = import_one(path, project)
    ours = imported_steps(session)
    theirs = [s.to_dict() for s in replayer.snapshot.steps]

    assert len(ours) == len(theirs) == 2
    # Deliberate difference: rlm-code ignores step_end's own action/output/error/duration.
    assert [s["action_type"] for s in theirs] == ["", ""]
    assert [s["action_type"] for s in ours] == ["run_python", "submit"]
    assert [s["action_code"] for s in ours] == ["a = 1", ""]
    assert [s["output"] for s in ours] == ["done", ""]
    assert [s["error"] for s in ours] == ["", "boom"]
    assert [s["duration_ms"] for s in ours] == [7.0, 3.0]
    assert [s["duration_ms"] for s in theirs] == [0.0, 0.0]
    # ...while the fields rlm-code does read from step_end agree.
    for name in ("step", "timestamp", "success", "reward", "cumulative_reward", "tokens_used"):
        assert [s[name] for s in ours] == [s[name] for s in theirs], name
    # Without step_result the step_end tokens are the only count: no double counting to undo.
    assert session.tokens == replayer.get_summary()["total_tokens"] == 44
    assert session.step_error_count == 1 and replayer.get_summary()["error_count"] == 0


def test_gzipped_upper_case_extension_imports_like_the_plain_file(project, tmp_path):
    plain = tmp_path / "full.jsonl"
    record_full_session(plain)
    packed = tmp_path / "FULL.JSONL.GZ"
    with plain.open("rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)

    session = import_one(packed, project)

    replayer = load_session(plain)
    assert_summary_matches(session, replayer, tokens_divisor=2)
    assert_steps_match(session, replayer)


def test_documented_trajectory_dialect_matches_rlm(project, tmp_path):
    path = tmp_path / "trajectory.jsonl"
    write_documented_trajectory(path)
    replayer = load_session(path)

    session = import_one(path, project)

    assert session.source_format == "rlm_trajectory"
    assert replayer.total_steps == 3
    # rlm-code adds iteration_output's and iteration_end's tokens_used, as with native files.
    assert_summary_matches(session, replayer, tokens_divisor=2)
    assert_steps_match(session, replayer)
    assert session.final_answer == "done"
    sub = Event.objects.get(session=session, source_type="sub_llm_request")
    assert sub.kind == Kind.LLM_CALL and sub.step_state is None


def test_trajectory_logger_iterations_without_iteration_start_are_steps_as_its_viewer_groups_them(project, tmp_path):
    # rlm-code's own docs log an iteration with `log_iteration` alone, which writes no
    # iteration_start: such a file imported with 0 steps, and with one started later, 1.
    from rlm_code.rlm.trajectory import TrajectoryLogger, TrajectoryViewer

    path = tmp_path / "demo.jsonl"
    with TrajectoryLogger(path, run_id="demo") as logger:
        logger.log_run_start("Count the words", context_length=10, model="gpt-4o")
        logger.log_iteration(1, reasoning="look", code="print(1)", output="1\n", duration_ms=5.0, tokens_used=7)
        logger.log_llm_call("sub", "answer", tokens_in=3, tokens_out=1, is_sub_llm=True)
        logger.log_iteration(2, reasoning="count", code="print(2)", output="2\n", duration_ms=6.0, tokens_used=8)
        logger.log_iteration_start(3)
        logger.log_iteration(3, reasoning="check", code="print(3)", output="3\n", duration_ms=7.0, tokens_used=9)
        logger.log_final("3 words")
        logger.log_run_end(success=True, answer="3 words", total_tokens=30)
    viewer = TrajectoryViewer(path)
    by_viewer = [[e.data.get("code") for e in it if e.data.get("code")] for it in viewer.iterations()]

    steps = imported_steps(import_one(path, project))

    assert [s["step"] for s in steps] == [1, 2, 3]
    assert [[s["action_code"]] for s in steps] == [codes for codes in by_viewer if codes] == [
        ["print(1)"], ["print(2)"], ["print(3)"]
    ]  # fmt: skip
    assert [s["action_rationale"] for s in steps] == ["look", "count", "check"]
    assert [s["output"] for s in steps] == ["1\n", "2\n", "3\n"]
    assert [s["tokens_used"] for s in steps] == [7, 8, 9] and all(s["success"] for s in steps)


def test_trajectory_logger_dialect_loads_the_steps_rlm_misses(project, tmp_path):
    path = tmp_path / "logger.jsonl"
    write_trajectory_logger_session(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    replayer = load_session(path)
    assert replayer.total_steps == 0  # rlm-code's loader finds no step in its own logger's files

    session = import_one(path, project)
    steps = imported_steps(session)

    assert session.source_format == "rlm_trajectory"
    assert session.source_session_id == session.run_id == "traj_logger"
    assert session.task == "Summarise the report — résumé"
    assert session.model == "gpt-4o"
    assert session.event_count == len(lines)  # nothing dropped
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert [s["action_code"] for s in steps] == ["print(1)", "print(2)", "print(3)"]
    assert [s["action_rationale"] for s in steps] == ["think 1", "think 2", "think 3"]
    assert [s["output"] for s in steps] == ["1\n", "2\n", "3\n"]
    assert [s["tokens_used"] for s in steps] == [61, 62, 63]
    assert [s["duration_ms"] for s in steps] == [12.0, 12.0, 12.0]
    assert all(s["success"] for s in steps) and session.success_rate == 1.0
    assert session.tokens == 61 + 62 + 63
    assert steps[0]["timestamp"].endswith("+00:00")  # epoch seconds shown as ISO text
    assert session.completed is True and session.final_answer == "Report summarised"
    assert session.error_count == 1 and session.step_error_count == 0
    # Each step closes on its own output line, before the next iteration starts.
    closing = list(
        Event.objects.filter(session=session, step_pos__isnull=False).order_by("seq").values_list("source_type", "line")
    )
    assert [source for source, _ in closing] == ["iteration_output"] * 3
    starts = list(
        Event.objects.filter(session=session, source_type="iteration_start")
        .order_by("seq")
        .values_list("line", flat=True)
    )
    assert closing[0][1] < starts[1] and closing[1][1] < starts[2]
    # LLM calls pair with their responses, sub-LLM calls apart from the agent's own.
    for call in Event.objects.filter(session=session, kind=Kind.LLM_CALL):
        response = Event.objects.get(session=session, seq=call.pair_seq)
        assert response.kind == Kind.LLM_RESPONSE
        assert response.source_type.startswith("sub_") == call.source_type.startswith("sub_")
    assert Event.objects.filter(session=session, source_type="context_load", kind=Kind.CONTEXT).count() == 1


def test_runner_step_file_matches_rlm_except_the_task_it_ignores(project, tmp_path):
    path = tmp_path / "runner.jsonl"
    write_runner_steps(path)
    replayer = load_session(path)
    summary = replayer.get_summary()

    session = import_one(path, project)

    assert session.source_format == "rlm_steps"
    assert_steps_match(session, replayer)
    assert session.source_session_id == summary["session_id"] == "runner_1"
    assert session.step_count == summary["total_steps"] == 4
    assert session.tokens == summary["total_tokens"] == sum(110 * i for i in range(1, 5))
    assert session.reward == summary["total_reward"] == 1.0
    assert session.completed is summary["completed"] is True
    assert session.success_rate == summary["success_rate"] == 0.75
    assert session.step_error_count == summary["error_count"] == 1
    assert session.final_answer == "runner answer"
    # Deliberate differences: rlm-code reads task/environment only from a session_start these
    # files never have, and so has no start time for a duration either.
    assert summary["task"] == "" and session.task == "Runner task ✓"
    assert summary["environment"] == "" and session.environment == "pure_rlm"
    assert summary["duration_seconds"] == 0.0 and session.duration_seconds == 8.0
    assert Event.objects.filter(session=session, kind=Kind.CONTEXT).count() == 1
    cumulative = [s["cumulative_reward"] for s in imported_steps(session)]
    assert cumulative == [0.5, 1.0, 0.5, 1.0]


def test_snapshot_json_matches_rlm_and_keeps_each_steps_variables(project, tmp_path):
    recorder = record_full_session(tmp_path / "full.jsonl", end=False)
    snapshot = recorder.get_snapshot()
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot.to_dict(), indent=2), encoding="utf-8")
    replayer = load_session(path)

    session = import_one(path, project)

    assert session.source_format == "rlm_snapshot"
    # A snapshot states its totals once: no double counting to undo.
    assert_summary_matches(session, replayer)
    assert session.final_answer == snapshot.final_answer
    assert_steps_match(session, replayer)
    states = state_at_steps(session)
    assert [s["variables"] for s in states] == [step.variables for step in snapshot.steps]
    assert [s["memory"] for s in states] == [step.memory_notes for step in snapshot.steps]
    raw = Event.objects.filter(session=session).order_by("seq").values_list("raw", flat=True)
    assert orjson.loads(raw[0]) == json.loads(json.dumps(snapshot.steps[0].to_dict()))


def test_snapshot_final_state_differing_from_last_step_becomes_a_state_event(project, tmp_path):
    recorder = record_full_session(tmp_path / "full.jsonl", end=False, steps=2)
    recorder.record_variable_update("late", "after the last step")
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(recorder.get_snapshot().to_dict()), encoding="utf-8")

    session = import_one(path, project)

    last = Event.objects.filter(session=session).order_by("-seq").first()
    assert last.kind == Kind.STATE and last.step_pos is None
    assert orjson.loads(last.state_change)["variables"]["late"] == "after the last step"
    assert session.step_count == 2


def test_session_store_folder_becomes_sessions_with_named_checkpoints(project, tmp_path):
    recorder = record_full_session(tmp_path / "full.jsonl", end=False, steps=4, checkpoint_at=None)
    store_dir = tmp_path / "store"
    store = SessionStore(base_dir=store_dir)
    early = recorder.get_snapshot()
    early.steps = early.steps[:2]
    early.total_steps = 2
    store.save_checkpoint(early, name="after_two")
    store.save_snapshot(early)  # an older, shorter snapshot of the same session
    store.save_snapshot(recorder.get_snapshot())
    other = record_failing_session(tmp_path / "other.jsonl")
    store.save_checkpoint(other.get_snapshot(), name="only_a_checkpoint")

    outcomes = import_file(path=store_dir, project=project)

    assert all(o.error is None for o in outcomes), [o.to_dict() for o in outcomes]
    sessions = {o.session.source_session_id: o.session for o in outcomes}
    assert set(sessions) == {"session_run_full", "session_run_failing"}
    full = sessions["session_run_full"]
    assert full.source_format == "rlm_snapshot" and full.step_count == 4
    checkpoint = Checkpoint.objects.get(session=full)
    assert checkpoint.name == "after_two" and checkpoint.step_pos == 1
    assert Event.objects.get(session=full, seq=checkpoint.seq).step_pos == 1
    failing = sessions["session_run_failing"]
    assert failing.step_count == 3
    assert list(Checkpoint.objects.filter(session=failing).values_list("name", flat=True)) == ["only_a_checkpoint"]


def test_a_snapshot_holding_infinity_and_nan_imports_whole_with_them_read_as_null(project, tmp_path):
    # `best = float('inf')` is a common idiom; rlm-code's store writes it as a bare Infinity
    # (Python's json) and loads it back. yajl has no such number: the document stopped there and
    # nothing was imported. Each is now read as null, reported on its line, as a JSON line's is.
    recorder = SessionRecorder("sess_inf", "run_inf", "search task", "env", "model")
    for step in (1, 2):
        recorder.record_step_start(step)
        recorder.record_step_end({"action": "code", "code": f"x = {step}"}, {"output": "ok"}, 0.25, True, 1, 1)
    recorder.record_step_start(3)
    recorder.record_variable_update("best", float("inf"))
    recorder.record_variable_update("worst", float("-inf"))
    recorder.record_variable_update("gap", float("nan"))
    recorder.record_variable_update("note", "NaN and Infinity in a string stay text")
    recorder.record_step_end({"action": "code", "code": "best = inf"}, {"output": "ok"}, 0.5, True, 10, 7)
    recorder.record_final("done", True)
    path = SessionStore(base_dir=tmp_path / "store").save_snapshot(recorder.end_session())
    raw = path.read_bytes()
    assert b'"best": Infinity' in raw and b'"worst": -Infinity' in raw and b'"gap": NaN' in raw
    theirs = load_session(path)

    [outcome] = import_file(path=path, project=project)

    assert outcome.error is None, outcome.to_dict()
    session = outcome.session
    assert session.step_count == theirs.total_steps == 3
    assert session.final_answer == "done"
    variables = step_state_at(session=session, index=2)["variables"]
    assert (variables["best"], variables["worst"], variables["gap"]) == (None, None, None)
    assert variables["note"] == "NaN and Infinity in a string stay text"
    lines = raw.decode().splitlines()
    said = {(p["line"], p["message"]) for p in outcome.problems}
    for word, key in (("Infinity", '"best"'), ("-Infinity", '"worst"'), ("NaN", '"gap"')):
        line = next(n for n, text in enumerate(lines, start=1) if key in text and word in text)
        assert (line, f"{word}: JSON has no such number; read as null") in said, said


def test_a_snapshot_holding_an_integer_past_64_bits_imports_whole(project, tmp_path):
    # An agent's variable holding factorial(25): rlm-code's store writes it exactly and loads it
    # back; yajl reads integers into 64 bits and stopped the document at it (nothing imported).
    # Two steps before it: the document is read again exactly from its start, passing over the
    # steps read already (they had come twice).
    recorder = SessionRecorder("sess_big", "run_big", "factorial task", "env", "model")
    for step in (1, 2):
        recorder.record_step_start(step)
        recorder.record_step_end({"action": "code", "code": f"x = {step}"}, {"output": "ok"}, 0.25, True, 1, 1)
    recorder.record_step_start(3)
    recorder.record_variable_update("f", math.factorial(25))
    recorder.record_step_end({"action": "code", "code": "f = factorial(25)"}, {"output": "ok"}, 0.5, True, 10, 7)
    recorder.record_step_start(4)
    recorder.record_step_end({"action": "code", "code": "print(f)"}, {"output": "done 1.25"}, 1.25, True, 5, 3)
    recorder.record_final("15511210043330985984000000", True)
    path = SessionStore(base_dir=tmp_path / "store").save_snapshot(recorder.end_session())
    assert b'"f": 15511210043330985984000000\n' in path.read_bytes()  # written exactly, unquoted
    theirs = load_session(path)

    [outcome] = import_file(path=path, project=project)

    assert outcome.error is None and outcome.problems == [], outcome.to_dict()
    session = outcome.session
    assert session.step_count == theirs.total_steps == 4
    assert session.reward == theirs.get_summary()["total_reward"]
    assert session.final_answer == "15511210043330985984000000"
    # The value as a JSON line of the same record reads (orjson: the double it rounds to).
    variables = step_state_at(session=session, index=3)["variables"]
    assert variables["f"] == float(math.factorial(25)) == orjson.loads(b"15511210043330985984000000")


def test_sink_folder_gives_one_session_per_run_where_rlm_loads_no_steps(project, tmp_path):
    base = tmp_path / "observability"
    write_sink_folder(base)
    assert load_session(base / "steps" / "sink_a.jsonl").total_steps == 0

    outcomes = import_file(path=base, project=project)

    assert [o.error for o in outcomes] == [None, None]
    sessions = {o.session.run_id: o.session for o in outcomes}
    a, b = sessions["sink_a"], sessions["sink_b"]
    assert a.source_format == "rlm_sink"
    assert (a.step_count, b.step_count) == (3, 4)
    assert a.task == "Sink task sink_a" and a.environment == "generic" and a.model == "gpt-4o"
    assert (a.completed, b.completed) == (True, False)
    assert a.reward == 0.5 and b.reward == 1.0
    steps = imported_steps(a)
    assert [s["action_type"] for s in steps] == ["run_python"] * 3
    assert [s["success"] for s in steps] == [True, False, True]
    assert [s["cumulative_reward"] for s in steps] == [0.5, 0.0, 0.5]
    assert a.step_success_count == 2
    assert Event.objects.filter(session=a, kind=Kind.SESSION_END, source_type="run_summary").count() == 1


def test_step_variables_are_exact_at_every_step_even_as_changes(project, tmp_path):
    path = tmp_path / "vars.jsonl"
    recorder = SessionRecorder(session_id="s", run_id="vars", task="t", environment="e", output_path=path)
    plan = [
        {"a": 1, "b": [1, 2]},  # first step: everything new
        {"a": True, "b": [1, 2]},  # 1 -> True is a change although Python calls them equal
        {"a": True},  # b disappeared: the whole state is replaced
        {"a": True, "c": "x"},
    ]
    for step, variables in enumerate(plan, start=1):
        recorder.record_step_start(step)
        recorder.record_variable_update("a", "preview only")  # stands in until the step end
        recorder._variables = dict(variables)
        recorder.record_step_end({"action": "run_python"}, {"output": ""}, reward=0.0, success=True)
    recorder.end_session()

    session = import_one(path, project)

    assert [s["variables"] for s in state_at_steps(session)] == plan
    assert [type(s["variables"]["a"]) for s in state_at_steps(session)] == [int, bool, bool, bool]
    changes = [
        orjson.loads(text)
        for text in Event.objects.filter(session=session, kind=Kind.STEP_END)
        .order_by("seq")
        .values_list("state_change", flat=True)
    ]
    assert changes[2] == {"variables": {"a": True}, "replace": True}
    assert changes[3] == {"variables": {"a": True, "c": "x"}}  # a was a preview again before it


def test_session_from_create_recorder_matches_rlm(project, tmp_path):
    from rlm_code.rlm.session_replay import create_recorder

    recorder = create_recorder("Count the words in README — ünïcode", "generic", output_dir=tmp_path)
    for step in (1, 2):
        recorder.record_step_start(step)
        action = {"action": "run_python", "code": f"len(text.split()) * {step}"}
        recorder.record_action(action, rationale="count")
        observation = {"success": True, "output": str(412 * step)}
        recorder.record_result(observation, reward=0.5, success=True, duration_ms=3.0, tokens_used=40)
        recorder.record_step_end(action, observation, reward=0.5, success=True, duration_ms=3.0, tokens_used=40)
    recorder.record_final("412 words")
    recorder.end_session()
    [path] = tmp_path.glob("session_*.jsonl")
    replayer = load_session(path)

    session = import_one(path, project)

    assert session.run_id == recorder.run_id and session.run_id.startswith("run_")
    assert_summary_matches(session, replayer, tokens_divisor=2)
    assert_steps_match(session, replayer)


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-22T05:47:01.346935+00:00",  # what rlm-code 0.1.13 writes
        "2026-11-22T05:47:01.346935",  # naive: UTC
        "2026-11-22T05:47:01+00:00",
        "2026-11-22T05:47:01.000000",  # Django writes no ".000000"
        "2026-11-22T05:47:01.346935Z",
        "2026-11-22T07:47:01.346935+02:00",
        "2026-11-22",  # a date alone: "+00:00" appended would read as a time of day
        "2026-W47-7T05:47:01.346935+00:00",  # ISO week date: same length, other shape
        "2026-11-22T05:47:01.5",
    ],
)
def test_timestamp_text_taken_from_the_source_is_what_django_stores(text):
    from datetime import UTC

    from django.db import connection

    from sessions_app.formats.rlm_native import parse_timestamp_text

    moment, stored = parse_timestamp_text(text)
    assert moment is not None and moment.tzinfo is not None
    # The text the SQLite writer stores unchanged must be what Django's own backend would write.
    django_text = connection.ops.adapt_datetimefield_value(moment) if connection.vendor == "sqlite" else None
    expected = moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ")
    assert stored is None or stored == expected
    if django_text is not None and stored is not None:
        assert stored == django_text
    if text.endswith(("+00:00", "Z")) and "W" not in text or "+" not in text and "Z" not in text:
        assert stored is not None  # the cheap path is taken where the text allows it


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_TRICKY = [
    "{'a': \"it's\"}", "{'True': True, 'x': 'None'}", "(1, 2)", "{1: 2}", "1e16", "nan", "inf", "1_000", " 5",
    '"a"', "set()", "{'a': 1, 'a': 2}", "[1.0, 1, True]", "12345678901234567890123", "{'k': 'v\\n'}", "-0.0",
    "{'a': 'Non\\u00e9'}", "[[[[]]]]", "Falsey", "{'a': b'x'}",
]  # fmt: skip


def _literal_reading(preview: str, type_name: str):
    """What a variable_update's preview stood for before the JSON fast path: literal_eval, kept
    when JSON can hold it, of a preview the recorder did not cut, of a variable not a string."""
    import ast

    if type_name == "str" or len(preview) >= 200:
        return preview
    try:
        value = ast.literal_eval(preview)
        orjson.dumps(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, orjson.JSONEncodeError):
        return preview
    return value


@given(value=_PLAIN)
@settings(max_examples=300, deadline=None, derandomize=True)  # the same examples every run
def test_variable_preview_reads_as_literal_eval_would(value):
    # The recorder writes str(value)[:200]; the fast path must give what literal_eval gives,
    # type for type (1, 1.0 and True differ), for any plain value and for a cut one.
    from sessions_app.formats.rlm_native import _preview_value

    preview = str(value)[:200]
    type_name = type(value).__name__
    assert repr(_preview_value(preview, type_name)) == repr(_literal_reading(preview, type_name))


@pytest.mark.parametrize("preview", _TRICKY)
def test_variable_preview_edge_cases_read_as_literal_eval_would(preview):
    from sessions_app.formats.rlm_native import _preview_value

    assert repr(_preview_value(preview, "dict")) == repr(_literal_reading(preview, "dict"))
