"""Pairing in replay: call <-> response, tool errors, approvals (and what is still pending),
child spawn <-> result, partners outside the page."""

from __future__ import annotations

import pytest

from sessions_app import replay
from sessions_app.canonical import Kind

from .builders_replay import event, recorded_session, session_of

pytestmark = pytest.mark.django_db


def test_llm_call_and_response_point_at_each_other_with_the_duration():
    session = session_of(
        [
            event(Kind.LLM_CALL, 0, pair_id="call_001", tool="gpt-4o"),
            event(Kind.TOOL_CALL, 100, pair_id="t1", tool="read_file"),
            event(Kind.LLM_RESPONSE, 1200, pair_id="call_001", tool="gpt-4o"),
            event(Kind.TOOL_ERROR, 1500, pair_id="t1", tool="read_file", is_error=True, failed=True),
        ]
    )
    steps = replay.replay_page(session=session, offset=0, limit=10)["steps"]
    call, tool_call, response, tool_error = steps
    assert call["pairedEvent"] == {
        "seq": 2,
        "kind": "llm_response",
        "eventType": "llm_response",
        "timestamp": "2026-02-08T10:30:01.200000Z",
        "isError": False,
    }
    assert response["pairedEvent"]["seq"] == 0
    assert call["pairDurationMs"] == response["pairDurationMs"] == 1200.0
    assert tool_call["pairedEvent"]["seq"] == 3 and tool_call["pairedEvent"]["isError"] is True
    assert tool_error["pairDurationMs"] == 1400.0


def test_a_partner_outside_the_page_is_still_given():
    events = [event(Kind.LLM_CALL, 0, pair_id="far", tool="m")]
    events += [event(Kind.NOTE, 10 + i) for i in range(20)]
    events.append(event(Kind.LLM_RESPONSE, 5000, pair_id="far", tool="m"))
    session = session_of(events)
    first = replay.replay_page(session=session, offset=0, limit=5)["steps"][0]
    assert first["pairedEvent"]["seq"] == 21 and first["pairDurationMs"] == 5000.0
    last = replay.replay_page(session=session, offset=21, limit=5)["steps"][0]
    assert last["pairedEvent"]["seq"] == 0


def test_an_approval_is_pending_from_its_request_until_its_decision():
    session = session_of(
        [
            event(Kind.APPROVAL_REQUESTED, 0, pair_id="req1", payload={"action": "deploy"}),
            event(Kind.APPROVAL_REQUESTED, 10, pair_id="req2", payload={"action": "delete"}),
            event(Kind.NOTE, 20),
            event(Kind.APPROVAL_GRANTED, 30, pair_id="req1"),
            event(Kind.NOTE, 40),
        ]
    )
    page = replay.replay_page(session=session, offset=0, limit=10)
    pending = [s["context"]["pendingApprovals"] for s in page["steps"]]
    assert pending == [[0], [0, 1], [0, 1], [1], [1]]
    assert page["steps"][0]["pairedEvent"]["kind"] == "approval_granted"
    inline = replay.context_at(session=session, seq=2)["pendingApprovals"]
    assert [(a["seq"], a["payload"]["action"]) for a in inline] == [(0, "deploy"), (1, "delete")]
    # A later page still knows about the request made before it.
    later = replay.replay_page(session=session, offset=2, limit=1)
    assert later["steps"][0]["context"]["pendingApprovals"] == [0, 1]
    assert set(later["approvals"]) == {0, 1}


def test_child_spawn_and_result_are_paired_in_a_recorded_session(tmp_path):
    session, _, _ = recorded_session(tmp_path, steps=4)
    page = replay.replay_page(session=session, offset=0, limit=1000, event_types=["child_spawn"])
    spawns = page["steps"]
    assert len(spawns) == 2
    for spawn in spawns:
        assert spawn["pairedEvent"]["kind"] == "child_result"
        assert spawn["event"]["childId"] in {"child_001", "child_002"}
    # rlm-code gives LLM responses no id: each answers the oldest open request.
    llm = replay.replay_page(session=session, offset=0, limit=1000, event_types=["llm_call"])["steps"]
    assert all(s["pairedEvent"]["kind"] == "llm_response" for s in llm)


@pytest.mark.parametrize("batch_rows", [1000, 2], ids=["one-batch", "across-batches"])
def test_a_tool_result_recorded_before_its_call_still_pairs_with_it(monkeypatch, batch_rows):
    # Writers reorder (a tool answers before its call is logged, clocks differ): pair by id.
    monkeypatch.setattr("sessions_app.ingest.writer.BATCH_ROWS", batch_rows)
    session = session_of(
        [
            event(Kind.TOOL_RESPONSE, 0, pair_id="t1", tool="read_file", failed=False),
            event(Kind.NOTE, 10),
            event(Kind.NOTE, 20),
            event(Kind.TOOL_CALL, 30, pair_id="t1", tool="read_file"),
        ]
    )
    from sessions_app.models import Event
    from sessions_app.verification import verify_session

    pairs = dict(Event.objects.filter(session=session).values_list("seq", "pair_seq"))
    assert pairs[0] == 3 and pairs[3] == 0
    call = replay.replay_page(session=session, offset=3, limit=1)["steps"][0]
    assert call["context"]["warnings"] == []  # no "call without a response"
    assert verify_session(session=session).valid


def test_the_players_context_from_its_window_is_the_context_read_alone():
    # The player hands context_at the rows of its window (the event and often its partner), so
    # they are not read twice; what it answers must not depend on where the rows came from.
    events = [event(Kind.LLM_CALL, 0, pair_id="far", tool="m")]
    events += [event(Kind.TOOL_CALL, 10 + 3 * i, pair_id=f"t{i}", tool="read_file") for i in range(4)]
    events += [
        event(Kind.TOOL_ERROR, 12 + 3 * i, pair_id=f"t{i}", tool="read_file", is_error=True, failed=True)
        for i in range(4)
    ]
    events.append(event(Kind.LLM_RESPONSE, 5000.25, pair_id="far", tool="m"))
    session = session_of(events)
    compared = 0
    for kinds in (None, [Kind.TOOL_CALL]):
        for seq in range(session.event_count):
            window = replay.navigation.window_rows(session=session, seq=seq, kinds=kinds, before=4, after=4)
            read = {row.seq: row for row in window.rows}
            alone = replay.context_at(session=session, seq=seq, shown=3)
            assert replay.context_at(session=session, seq=seq, shown=3, read=read) == alone
            compared += seq in read and alone["pairedEvent"] is not None and alone["pairedEvent"]["seq"] in read
    assert compared >= 4  # some contexts really took both rows from the window
