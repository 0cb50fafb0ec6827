"""Builders for the dashboard's page and browser tests: a logged-in client, and small sessions
with the features a page shows (errors, turns, child agents, hostile payloads)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sessions_app.canonical import CanonicalEvent, Kind, SessionMeta, StateChange
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import Project, Session

from .builders_teams import member
from .conftest import T0

PASSWORD = "correct horse battery staple"
XSS_SCRIPT = "<script>window.__pwned = 1</script>"
XSS_IMG = '<img src="x" onerror="window.__pwned = 2">'


@pytest.fixture
def user(db):
    # A maintainer of the default project, where build_session puts sessions.
    return member("analyst")


@pytest.fixture
def logged_in(client: Client, user) -> Client:
    client.force_login(user)
    return client


def _event(i: int, kind: str, **fields: Any) -> CanonicalEvent:
    payload = fields.pop("payload", {"text": f"{kind} {i}"})
    return CanonicalEvent(
        kind=kind, source_type=fields.pop("source_type", kind),
        raw=orjson.dumps({"i": i, "kind": kind, "payload": payload}).decode(), payload=payload,
        timestamp=fields.pop("timestamp", T0 + timedelta(seconds=i)), line=i + 1, **fields,
    )  # fmt: skip


def build_session(events: list[CanonicalEvent], *, finish: bool = True, **meta: Any) -> Session:
    session = create_session(
        project=Project.get_default(), source_format=meta.pop("source_format", "canonical"),
        meta=SessionMeta(**meta),
    )  # fmt: skip
    append_events(session=session, events=events)
    if finish:
        finish_session(session=session)
    session.refresh_from_db()
    return session


def conversation_events(turns: int = 3, replies: int = 4) -> list[CanonicalEvent]:
    """Turns of a conversation: a user message, then LLM calls/responses and a tool call that
    fails in the second turn, closed by a step. Seqs are predictable: each turn is
    1 + 2 * replies + 3 events."""
    events: list[CanonicalEvent] = []
    i = 0
    for turn in range(turns):
        events.append(_event(i, Kind.USER_MESSAGE, payload={"text": f"question {turn}"}))
        i += 1
        for r in range(replies):
            events.append(_event(i, Kind.LLM_CALL, pair_id=f"c{turn}-{r}", tool="gpt-4o",
                                 payload={"messages": [{"role": "user", "content": f"ask {turn}.{r}"}]}))  # fmt: skip
            i += 1
            events.append(_event(i, Kind.LLM_RESPONSE, pair_id=f"c{turn}-{r}", tool="gpt-4o", cost_usd=0.01,
                                 tokens=100, payload={"completion": f"answer {turn}.{r}"}))  # fmt: skip
            i += 1
        failed = turn == 1
        events.append(_event(i, Kind.TOOL_CALL, pair_id=f"t{turn}", tool="search", payload={"arguments": {"q": turn}}))
        i += 1
        events.append(_event(i, Kind.TOOL_ERROR if failed else Kind.TOOL_RESPONSE, pair_id=f"t{turn}", tool="search",
                             is_error=failed, failed=failed, payload={"result": "boom" if failed else "ok"}))  # fmt: skip
        i += 1
        events.append(_event(i, Kind.STEP_END, reward=1.0, tokens=5, step=turn,
                             step_state={"step": turn, "action_type": "code", "action_code": f"x = {turn}\nprint(x)",
                                         "success": not failed, "output": f"out {turn}", "error": "bad" if failed else "",
                                         "reward": 1.0, "tokens_used": 5},
                             state_change=StateChange(variables={f"v{turn}": turn}, memory=[f"note {turn}"])))  # fmt: skip
        i += 1
    return events


def turn_length(replies: int = 4) -> int:
    return 1 + 2 * replies + 3


def hostile_events() -> list[CanonicalEvent]:
    """Events whose payloads, tool names and step code hold markup that must show as text."""
    return [
        _event(0, Kind.USER_MESSAGE, payload={"text": f"hi {XSS_SCRIPT} {XSS_IMG}"}),
        _event(1, Kind.TOOL_CALL, pair_id="x", tool="<b>tool</b>", payload={"arguments": XSS_IMG}),
        _event(2, Kind.TOOL_RESPONSE, pair_id="x", tool="<b>tool</b>", payload={"result": XSS_SCRIPT}),
        _event(
            3,
            Kind.STEP_END,
            step=0,
            reward=0.5,
            step_state={
                "step": 0,
                "action_type": "code",
                "action_code": f"print('{XSS_SCRIPT}')",
                "success": True,
                "output": XSS_IMG,
                "error": "",
                "reward": 0.5,
                "tokens_used": 1,
            },
            state_change=StateChange(variables={"html": XSS_IMG}, memory=[XSS_SCRIPT]),
        ),  # fmt: skip
    ]


def child_agent_events() -> list[CanonicalEvent]:
    """A parent that spawns a child; the child's LLM call costs $0.25 between spawn and result."""
    return [
        _event(0, Kind.SESSION_START, payload={"task": "parent"}),
        _event(1, Kind.LLM_RESPONSE, cost_usd=0.10, tokens=10, tool="gpt-4o", payload={"completion": "plan"}),
        _event(
            2, Kind.CHILD_SPAWN, pair_id="kid-1", child_id="kid-1", payload={"task": "look it up", "child_id": "kid-1"}
        ),
        _event(
            3,
            Kind.LLM_RESPONSE,
            depth=1,
            agent_id="kid-1",
            parent_id="parent",
            cost_usd=0.25,
            tokens=30,
            tool="gpt-4o",
            payload={"completion": "found it"},
        ),  # fmt: skip
        _event(4, Kind.CHILD_RESULT, pair_id="kid-1", child_id="kid-1", payload={"result_preview": "42"}),
        _event(5, Kind.LLM_RESPONSE, cost_usd=0.05, tokens=5, tool="gpt-4o", payload={"completion": "done"}),
    ]
