"""Promises of verification, search, the diff and the warnings that no test held: each test
here was written after a mutation of the product code it guards went unnoticed by the suite (a
test-honesty read, eighteenth session)."""

from __future__ import annotations

import pytest

from sessions_app import replay
from sessions_app.canonical import Kind
from sessions_app.models import Session, Snapshot
from sessions_app.replay import compare as diffing
from sessions_app.verification import verify_session

from .builders_replay import event, import_one, record_variant, session_of

pytestmark = pytest.mark.django_db


def _first_keyframe(session: Session) -> Snapshot:
    keyframe = Snapshot.objects.filter(session=session, kind=Snapshot.Kind.KEYFRAME).order_by("seq").first()
    assert keyframe is not None
    return keyframe


# --- verification: the state keyframes and the head -------------------------------------------


def test_a_deleted_keyframe_is_found_at_its_seq(make_session):
    # The player's state between keyframes is read from the nearest one: one gone changes it.
    session = make_session(events=1500)
    keyframe = _first_keyframe(session)
    Snapshot.objects.filter(pk=keyframe.pk).delete()
    result = verify_session(session=session)
    assert result.valid is False and result.first_broken_seq == keyframe.seq, result.findings


@pytest.mark.parametrize("field", ["memory_notes", "step_pos"])
def test_an_edited_keyframes_memory_or_step_position_is_found_at_its_seq(make_session, field):
    session = make_session(events=1500)
    keyframe = _first_keyframe(session)
    forged = ["forged"] if field == "memory_notes" else (keyframe.step_pos or 0) + 1
    Snapshot.objects.filter(pk=keyframe.pk).update(**{field: forged})
    result = verify_session(session=session)
    assert result.valid is False and result.first_broken_seq == keyframe.seq, result.findings


def test_an_edited_chain_head_is_found(make_session):
    # Sign-offs and bundles bind to the head: it is checked against the last event's link.
    session = make_session(events=50)
    assert verify_session(session=session).valid
    Session.objects.filter(pk=session.pk).update(head_hash="a" * 64)
    assert verify_session(session=session).valid is False


# --- search: the original record ---------------------------------------------------------------


def test_text_only_in_the_original_record_is_found():
    # builders_replay.event keeps its fields as the record's text: "zebra-tool" is in `raw` and
    # the tool column, not in the payload or a step.
    session = session_of([event(Kind.NOTE, 0, payload={"text": "nothing"}, tool="zebra-tool"),
                          event(Kind.NOTE, 10, payload={"text": "x"})])  # fmt: skip
    stored = session.events.get(seq=0)
    assert "zebra" not in stored.payload and "zebra" in (stored.raw or "") and not stored.step_state
    assert [r["seq"] for r in replay.search(session=session, q="zebra")["results"]] == [0]


# --- the diff ----------------------------------------------------------------------------------


def test_a_divergence_past_the_first_chunk_read_is_found_at_its_step(tmp_path, monkeypatch):
    record_variant(tmp_path / "a.jsonl", run_id="a", steps=10)
    record_variant(tmp_path / "b.jsonl", run_id="b", steps=10, change_at=5, change="code")
    a, b = import_one(tmp_path / "a.jsonl"), import_one(tmp_path / "b.jsonl")
    monkeypatch.setattr(diffing, "CHUNK", 2)
    assert diffing.diff_sessions(a=a, b=b, limit=3)["first_divergence_step"] == 5


def test_a_rows_flags_name_exactly_the_fields_that_differ():
    a = {"action_type": "run", "action_code": "x", "success": True, "output": "1", "error": "", "reward": 0.5}
    row = diffing.align(0, a, {**a, "output": "2", "error": "E", "reward": 0.0}, None)
    assert row["same"] is True  # the same action and outcome: not a divergence
    assert row["differs"] == {"actionType": False, "actionCode": False, "success": False, "output": True,
                              "error": True, "reward": True}  # fmt: skip
    assert diffing.align(0, a, dict(a), None)["differs"] == dict.fromkeys(row["differs"], False)


def test_a_steps_texts_are_cut_at_200_characters():
    summary = diffing.step_summary({"action_code": "c" * 500, "output": "o" * 201, "error": "e" * 200})
    assert summary["actionCode"] == "c" * 200 + "…" and summary["output"] == "o" * 200 + "…"
    assert summary["error"] == "e" * 200


# --- warnings ----------------------------------------------------------------------------------


def test_a_cost_warns_only_over_the_threshold(settings):
    settings.WARN_STEP_COST_USD = 0.5
    session = session_of([event(Kind.COST, 0, cost_usd=0.5), event(Kind.COST, 10, cost_usd=0.5001)])
    assert [w["type"] for w in replay.context_at(session=session, seq=0)["warnings"]] == []
    assert [w["type"] for w in replay.context_at(session=session, seq=1)["warnings"]] == ["cost"]


# --- verification: a pairing where there is none -----------------------------------------------


@pytest.mark.parametrize(
    ("events", "seq", "forged"),
    [
        # A note between a call and its answer, shown as paired with the call, 99 s apart.
        (
            [(Kind.TOOL_CALL, "t"), (Kind.NOTE, ""), (Kind.TOOL_RESPONSE, "t")],
            1,
            {"pair_seq": 0, "pair_duration_ms": 99_000.0},
        ),
        ([(Kind.NOTE, ""), (Kind.NOTE, "")], 1, {"pair_duration_ms": 99_000.0}),
        # A call never answered, shown as answered.
        ([(Kind.LLM_CALL, "lost"), (Kind.NOTE, ""), (Kind.NOTE, "")], 0, {"pair_seq": 2}),
    ],
)
def test_a_pairing_forged_on_an_event_without_one_is_found_at_its_seq(events, seq, forged):
    # Verification carried the stored pairing of an unpaired event into what it derived, so it
    # compared the forgery with itself (test read, a mutation of nothing: a product bug).
    session = session_of([event(kind, 10 * i, pair_id=pair, tool="t" if pair else "") for i, (kind, pair) in
                          enumerate(events)])  # fmt: skip
    assert verify_session(session=session).valid
    session.events.filter(seq=seq).update(**forged)
    result = verify_session(session=session)
    assert result.valid is False and result.first_broken_seq == seq, result.findings


def test_text_with_quotes_or_backslashes_is_found_as_typed():
    # The fields are searched as stored JSON text, where a quote or a backslash is escaped.
    session = session_of([event(Kind.NOTE, 0, payload={"text": 'he said "stop" now'}),
                          event(Kind.NOTE, 10, payload={"text": "C:\\temp\\x"})])  # fmt: skip
    found = replay.search(session=session, q='said "stop"')["results"]
    assert [r["seq"] for r in found] == [0] and '\\"stop\\"' in found[0]["snippet"]
    assert [r["seq"] for r in replay.search(session=session, q="C:\\temp")["results"]] == [1]
