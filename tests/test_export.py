"""Exports: rlm-code native JSONL and snapshot JSON that rlm-code itself loads with our summary,
and the original records exactly as received."""

from __future__ import annotations

import pytest
from rlm_code.rlm.session_replay import SessionReplayer, load_session

from sessions_app import replay
from sessions_app.models import Project
from sessions_app.replay import exports as exporting

from .builders_replay import import_one, recorded_session

pytestmark = pytest.mark.django_db

RLM_KEYS = (
    "session_id", "run_id", "task", "environment", "model", "completed", "total_steps",
    "total_reward", "total_tokens", "duration_seconds", "success_rate", "error_count",
)  # fmt: skip


def write(path, chunks) -> None:
    with path.open("wb") as out:
        for chunk in chunks:
            out.write(chunk)


def rlm_summary(session) -> dict:
    summary = replay.get_summary(session=session)
    return {key: summary[key] for key in RLM_KEYS}


def test_native_export_round_trips_through_rlm_codes_load_session(tmp_path):
    session, _, original = recorded_session(tmp_path, steps=6)
    exported = tmp_path / "exported.jsonl"
    write(exported, exporting.export_native_jsonl(session=session))

    loaded = load_session(exported)
    assert loaded.get_summary() == rlm_summary(session)
    # Against rlm-code's reading of the original file, only the token count differs: it adds
    # each step's tokens twice (step_result and step_end), our export carries them once.
    reference = load_session(original).get_summary()
    assert {**reference, "total_tokens": reference["total_tokens"] // 2} == loaded.get_summary()

    for index in range(session.step_count):
        ours = replay.step_state_at(session=session, index=index)
        theirs = loaded.goto_step(index).to_dict()
        # rlm-code reads a step's duration only from step_result (not written, see exporting.py)
        # and never reads variables back; everything else is the same step.
        assert theirs == {**ours, "duration_ms": 0.0, "variables": {}}


def test_native_export_imports_back_into_the_same_session(tmp_path):
    session, _, _ = recorded_session(tmp_path, steps=5)
    exported = tmp_path / "again.jsonl"
    write(exported, exporting.export_native_jsonl(session=session))
    again = import_one(exported, Project.objects.create(name="Round trip", slug="round-trip"))
    assert rlm_summary(again) == rlm_summary(session)
    for index in range(session.step_count):
        assert replay.step_state_at(session=again, index=index) == replay.step_state_at(session=session, index=index)


def test_native_export_writes_each_held_event_at_its_own_step(tmp_path):
    # An LLM call or a variable update inside step N was written with the step before's number.
    import orjson

    session, _, original = recorded_session(tmp_path, steps=4)
    exported = tmp_path / "steps.jsonl"
    write(exported, exporting.export_native_jsonl(session=session))

    def held(path):
        records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        kinds = ("llm_request", "llm_response", "variable_update")
        return [(r["event_type"], r["step"]) for r in records if r["event_type"] in kinds]

    ours, recorded = held(exported), held(original)
    assert {step for _, step in recorded} - {0}, "the recording holds events inside steps"
    assert ours == recorded


def test_native_export_of_a_session_from_another_format_loads_in_rlm_code(make_session, tmp_path):
    session = make_session(events=500, source_session_id="agentlens-ses-1", task="Agent task")
    exported = tmp_path / "canonical.jsonl"
    write(exported, exporting.export_native_jsonl(session=session))
    loaded = load_session(exported)
    summary = loaded.get_summary()
    ours = rlm_summary(session)
    assert summary["total_steps"] == ours["total_steps"] == 100
    assert summary["session_id"] == "agentlens-ses-1" and summary["task"] == "Agent task"
    for key in ("total_reward", "success_rate", "error_count", "duration_seconds", "completed"):
        assert summary[key] == pytest.approx(ours[key]), key
    # rlm-code only adds up step tokens; this session also has tokens on LLM responses.
    assert summary["total_tokens"] == 3 * 100 < ours["total_tokens"]
    assert loaded.goto_step(7).memory_notes == replay.step_state_at(session=session, index=7)["memory_notes"]


def test_snapshot_export_loads_in_rlm_code_with_the_same_summary_and_steps(tmp_path):
    session, recorder, _ = recorded_session(tmp_path, steps=6)
    exported = tmp_path / "snapshot.json"
    write(exported, exporting.export_snapshot(session=session))
    loaded = load_session(exported)
    assert isinstance(loaded, SessionReplayer)
    assert loaded.get_summary() == rlm_summary(session)
    steps = [step.to_dict() for step in loaded.snapshot.steps]
    assert steps == [replay.step_state_at(session=session, index=i) for i in range(session.step_count)]
    assert loaded.snapshot.variables == recorder._variables
    assert loaded.snapshot.memory_notes == recorder._memory_notes


def test_snapshot_of_a_session_without_steps_is_valid(make_session, tmp_path):
    session = make_session(events=0)
    exported = tmp_path / "empty.json"
    write(exported, exporting.export_snapshot(session=session))
    assert load_session(exported).get_summary()["total_steps"] == 0


def test_original_export_gives_back_the_file_byte_for_byte(tmp_path):
    session, _, original = recorded_session(tmp_path, steps=4)
    assert b"".join(exporting.export_original(session=session)) == original.read_bytes()


def test_exports_stream_a_chunk_of_events_at_a_time(make_session, monkeypatch):
    monkeypatch.setattr(exporting, "CHUNK", 100)
    session = make_session(events=1000)
    assert len(list(exporting.export_original(session=session))) == 10
    assert len(list(exporting.export_native_jsonl(session=session))) >= 10


@pytest.mark.parametrize(
    "demo", ["agentlens_deploy_review.json", "daycare_interrupted.jsonl", "flux0_support_chat.jsonl"]
)
def test_a_snapshot_export_of_every_format_imports_back_by_detection(tmp_path, demo):
    # The snapshot of an AgentLens session is one line holding "eventType" in its steps: the
    # sniffer took that for a JSON-lines session's event and refused the file.
    from pathlib import Path

    from sessions_app.ingest.importing import import_file

    session = import_one(Path(__file__).parent.parent / "demo" / demo)
    exported = tmp_path / "snapshot.json"
    write(exported, exporting.export_snapshot(session=session))
    [again] = import_file(path=exported, project=Project.get_default())
    assert again.error is None and again.session.source_format == "rlm_snapshot"
    assert again.session.step_count == session.step_count


def test_a_json_lines_file_whose_first_line_holds_a_nan_is_not_taken_for_a_snapshot(tmp_path):
    # The top-level keys were read with ijson, which stops at a bare NaN: the event's own key
    # after it went unseen, and snapshot-like words further on made the file a snapshot of nothing.
    from sessions_app.formats import Source, detect

    line = (
        b'{"elapsed": NaN, "event_type": "session_start", "timestamp": "2026-02-08T10:00:00+00:00", "step": 0,'
        b' "data": {"task": "t", "config": {"snapshot_id": 1, "session_id": "s", "total_steps": 3}}, "run_id": "r1"}'
    )
    path = tmp_path / "session.jsonl"
    path.write_bytes(line + b"\n")
    assert detect(Source(path=path)) == "rlm_native"
