"""The player's context reads only the history entries it shows (context_at's `shown`): the
entries it shows and the counts it gives are those of the full context, at every kind of event."""

from __future__ import annotations

import pytest

from sessions_app import replay
from sessions_app.canonical import Kind

from .builders_replay import event, session_of
from .conftest import synthetic_events

pytestmark = pytest.mark.django_db

HISTORIES = ("llmHistory", "toolResults", "pendingApprovals")


def _same_as_full(session, seq: int, shown: int) -> None:
    full = replay.context_at(session=session, seq=seq)
    lean = replay.context_at(session=session, seq=seq, shown=shown)
    for name in HISTORIES:
        assert lean["historyCounts"][name] == len(full[name]), (seq, name)
        assert lean[name] == full[name][max(0, len(full[name]) - shown) :], (seq, name)
    rest = {k: v for k, v in lean.items() if k not in HISTORIES and k != "historyCounts"}
    assert rest == {k: v for k, v in full.items() if k not in HISTORIES}


def test_shown_entries_and_counts_match_the_full_context(make_session):
    # 400 events of LLM calls and responses, tool calls, responses and errors: past
    # HISTORY_LIMIT (50) of each history, so the counts are capped and the windows move.
    session = make_session(events=400)
    assert session.kind_counts[Kind.LLM_CALL] > 50 and session.kind_counts[Kind.TOOL_ERROR] > 0
    for seq in (0, 1, 3, 7, 60, 120, 249, 250, 251, 399):
        _same_as_full(session, seq, shown=20)
    _same_as_full(session, 399, shown=1)


def test_pending_approvals_are_counted_in_full():
    requests = [event(Kind.APPROVAL_REQUESTED, i, pair_id=f"r{i}", payload={"n": i}) for i in range(30)]
    decisions = [event(Kind.APPROVAL_GRANTED, 100 + i, pair_id=f"r{i}") for i in range(0, 30, 3)]
    session = session_of([*requests, *decisions, event(Kind.LLM_CALL, 200, pair_id="c", tool="m")])
    for seq in (5, 29, 35, 40):
        _same_as_full(session, seq, shown=4)
    lean = replay.context_at(session=session, seq=40, shown=4)
    assert lean["historyCounts"]["pendingApprovals"] == 20 and len(lean["pendingApprovals"]) == 4
