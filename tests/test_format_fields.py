"""The readers several formats share for one field (a record's type, its payload, an object in
it) and the StepState of formats without rewards: each unusable value is a problem on its line
and field, worded the same in every format that shares the reader."""

from __future__ import annotations

from sessions_app.canonical import Kind, Problems
from sessions_app.formats.fields import payload_object, record_kind
from sessions_app.formats.rlm_native import legacy_kind, mapping_at
from sessions_app.formats.step_state import STEP_DEFAULTS, STEP_TEXT_LIMIT, unrewarded_step_state

KINDS = {"tool_call": Kind.TOOL_CALL}


def messages(problems: Problems) -> list[tuple[int | None, str, str]]:
    return [(p.line, p.field, p.message) for p in problems.items]


def test_a_missing_or_unknown_record_type_is_reported_and_kept_as_a_custom_event():
    problems = Problems()
    assert record_kind({"type": "tool_call"}, "type", KINDS, 1, problems) == ("tool_call", Kind.TOOL_CALL)
    assert record_kind({"type": 5}, "type", KINDS, 2, problems) == ("", Kind.CUSTOM)
    assert record_kind({"eventType": "dream"}, "eventType", KINDS, 3, problems) == ("dream", Kind.CUSTOM)
    assert messages(problems) == [
        (2, "type", "missing type: kept as a custom event"),
        (3, "eventType", "unknown eventType 'dream': kept as a custom event"),
    ]


def test_a_legacy_record_without_a_type_is_skipped_and_an_unknown_one_kept():
    problems = Problems()
    assert legacy_kind({}, "event_type", KINDS, 1, problems) is None
    assert legacy_kind({"event_type": "x" * 80}, "event_type", KINDS, 2, problems) == ("x" * 80, Kind.CUSTOM)
    assert messages(problems) == [
        (1, "event_type", "missing event_type; line skipped"),
        (2, "event_type", f"unknown event_type {'x' * 60!r}; kept as a custom event"),
    ]


def test_a_payload_that_is_no_object_is_reported_and_kept_under_value():
    problems = Problems()
    assert payload_object({"a": 1}, 1, problems) == {"a": 1}
    assert payload_object(None, 2, problems) == {}
    assert payload_object([1], 3, problems) == {"value": [1]}
    assert messages(problems) == [
        (2, "payload", "null payload (taken as empty)"),
        (3, "payload", "payload is a list, not an object"),
    ]


def test_an_absent_object_is_empty_and_one_of_another_type_is_reported():
    problems = Problems()
    assert mapping_at({"data": {"a": 1}}, "data", "data", 1, problems) == {"a": 1}
    assert mapping_at({}, "data", "data", 2, problems) == {}
    assert mapping_at({"data": None}, "data", "data", 3, problems) == {}
    assert mapping_at({"data": [1]}, "data", "data", 4, problems) == {}
    assert messages(problems) == [
        (3, "data", "expected an object, got null"),
        (4, "data", "expected an object, got a list"),
    ]


def test_an_unrewarded_step_has_every_step_field_and_clips_its_texts():
    state = unrewarded_step_state(
        step=3, timestamp="2026-02-08T10:00:00Z", action_type="tool_call", action_code="f()", success=False,
        output="o" * (STEP_TEXT_LIMIT + 5), error="boom", duration_ms=None, tokens=7,
        raw_action={"callId": "c1"}, raw_observation={},
    )  # fmt: skip
    assert list(state) == list(STEP_DEFAULTS)
    assert state["output"] == "o" * STEP_TEXT_LIMIT + "… [5 more characters]"
    assert (state["reward"], state["cumulative_reward"], state["duration_ms"]) == (0.0, 0.0, 0.0)
    assert (state["action_rationale"], state["error"], state["tokens_used"]) == ("", "boom", 7)
