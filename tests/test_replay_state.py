"""Point-in-time state: StepState at N, variables/memory at any seq, pages of steps."""

from __future__ import annotations

import orjson
import pytest
from rlm_code.rlm.session_replay import load_session

from sessions_app import replay
from sessions_app.canonical import Kind, StateChange
from sessions_app.models import KEYFRAME_EVERY, Event, Snapshot

from .builders_replay import event, recorded_session, session_of

pytestmark = pytest.mark.django_db


def brute_force_state(session, seq: int) -> dict:
    """The state at seq by applying every change from the first event (the slow truth)."""
    variables: dict = {}
    memory: list = []
    for change in (
        Event.objects.filter(session=session, seq__lte=seq).order_by("seq").values_list("state_change", flat=True)
    ):
        if change:
            change = orjson.loads(change)
            if change.get("memory") is not None:
                memory = change["memory"]
            if "variables" in change:
                variables = dict(change["variables"]) if change.get("replace") else {**variables, **change["variables"]}
    return {"variables": variables, "memory_notes": memory}


def test_step_state_at_every_position_equals_rlm_codes_step_state(tmp_path):
    session, recorder, path = recorded_session(tmp_path, steps=6)
    loaded = load_session(path)
    assert session.step_count == loaded.total_steps == len(recorder._steps) == 6
    for index in range(session.step_count):
        ours = replay.step_state_at(session=session, index=index)
        # rlm-code's loader gives the step as the file describes it but drops variables; its
        # recorder's own StepState holds the variables with full values at that step.
        expected = {**loaded.goto_step(index).to_dict(), "variables": recorder._steps[index].variables}
        assert ours == expected
        assert ours["memory_notes"] == recorder._steps[index].memory_notes


def test_step_states_keep_variables_as_they_were_at_each_step(tmp_path):
    session, recorder, _ = recorded_session(tmp_path, steps=5)
    variables = [replay.step_state_at(session=session, index=i)["variables"] for i in range(5)]
    assert variables[0] == {"x_1": 2, "table": {"rows": [0], "name": "données"}}
    assert "x_5" not in variables[3] and variables[4]["x_5"] == 10
    assert variables[2]["table"]["rows"] == [0, 1, 2]


def test_step_state_outside_the_step_list_is_none(make_session):
    session = make_session(events=50)
    assert replay.step_state_at(session=session, index=-1) is None
    assert replay.step_state_at(session=session, index=session.step_count) is None
    assert replay.step_state_at(session=session, index=session.step_count - 1) is not None


@pytest.mark.parametrize("seq", [0, 3, 4, 255, 256, 257, 700, 1023, 1999])
def test_state_at_any_seq_equals_replaying_every_change(make_session, seq):
    session = make_session(events=2000)
    assert replay.state_at(session=session, seq=seq) == brute_force_state(session, seq)


def test_state_long_after_the_last_change_comes_from_the_keyframe(db, django_assert_num_queries):
    events = [
        event(Kind.MEMORY_UPDATE, 0, state_change=StateChange(memory=["first"], variables={"a": 1})),
        event(Kind.VARIABLE_UPDATE, 1, state_change=StateChange(variables={"b": 2})),
    ]
    events += [event(Kind.NOTE, 2 + i) for i in range(3000)]
    session = session_of(events)
    keyframes = list(Snapshot.objects.filter(session=session).values_list("seq", flat=True))
    assert keyframes and max(keyframes) <= KEYFRAME_EVERY
    with django_assert_num_queries(1):  # the keyframe and the changes after it: never a scan
        state = replay.state_at(session=session, seq=3001)
    assert state == {"variables": {"a": 1, "b": 2}, "memory_notes": ["first"]}
    assert state == brute_force_state(session, 3001)


def test_single_step_is_one_query_anywhere(make_session, django_assert_num_queries):
    session = make_session(events=5000)
    for index in (0, 500, session.step_count - 1):
        with django_assert_num_queries(1):  # the step row, its keyframe and changes: one statement
            replay.step_state_at(session=session, index=index)


@pytest.mark.parametrize("offset,limit", [(0, 7), (95, 30), (190, 10)])
def test_steps_page_equals_single_steps(make_session, offset, limit):
    session = make_session(events=1000)
    page = replay.steps_page(session=session, offset=offset, limit=limit)
    assert page["total"] == session.step_count == 200
    expected = [
        replay.step_state_at(session=session, index=i) for i in range(offset, min(offset + limit, session.step_count))
    ]
    assert page["steps"] == expected


def test_steps_page_reads_a_fixed_number_of_queries(make_session, django_assert_num_queries):
    session = make_session(events=5000)
    for offset in (0, 400, 900):
        with django_assert_num_queries(3):  # the steps, the state before them, the changes in between
            page = replay.steps_page(session=session, offset=offset, limit=100)
        assert len(page["steps"]) == 100


def test_steps_page_rejects_a_bad_window(make_session):
    session = make_session(events=10)
    with pytest.raises(replay.ReplayParameterError, match="limit"):
        replay.steps_page(session=session, offset=0, limit=0)
    with pytest.raises(replay.ReplayParameterError, match="offset"):
        replay.steps_page(session=session, offset=-1, limit=5)


def test_context_at_inlines_history_state_and_the_current_step(make_session):
    session = make_session(events=600)
    context = replay.context_at(session=session, seq=502)
    assert context["eventIndex"] == 502 and context["totalEvents"] == 600
    llm_seqs = [entry["seq"] for entry in context["llmHistory"]]
    expected = list(
        Event.objects.filter(session=session, kind__in=["llm_call", "llm_response"], seq__lte=502)
        .order_by("-seq")
        .values_list("seq", flat=True)[:50]
    )[::-1]
    assert llm_seqs == expected
    assert all(entry["payload"]["i"] == entry["seq"] for entry in context["llmHistory"])
    assert [e["seq"] for e in context["toolResults"]] == list(
        Event.objects.filter(session=session, kind__in=["tool_response", "tool_error"], seq__lte=502)
        .order_by("-seq")
        .values_list("seq", flat=True)[:50]
    )[::-1]
    assert {"variables": context["variables"], "memory_notes": context["memoryNotes"]} == brute_force_state(
        session, 502
    )
    # Event 502 is inside step 100 (closed by the step_end at 504).
    assert context["stepIndex"] == 100 and context["stepSeq"] == 504
    assert context["step"] == replay.step_state_at(session=session, index=100)
    row = Event.objects.get(session=session, seq=502)
    assert context["cumulativeCostUsd"] == pytest.approx(row.cost_total)
    assert context["errorCount"] == row.errors_total
    assert context["eventCounts"] == orjson.loads(row.kind_counts)


def test_context_outside_the_session_is_none(make_session):
    session = make_session(events=5)
    assert replay.context_at(session=session, seq=5) is None
    assert replay.context_at(session=session, seq=-1) is None
