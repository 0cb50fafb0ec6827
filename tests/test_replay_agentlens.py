"""The replay of an AgentLens session says what AgentLens's own replay says
(agentkitai/agentlens packages/server/src/lib/replay/builder.ts; ../shared/FORMATS.md section 2):
eventCounts by AgentLens's event types, one llmHistory entry per llm_call completed in place by
its llm_response, and pairedEvent / pairDurationMs on the initiating step only, timed by the two
events' timestamps. `agentlens_replay` below transcribes the builder's pairing and context
steps, and every page is held to it step by step. Other formats keep canonical kinds.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import orjson
import pytest

from sessions_app import replay
from sessions_app.canonical import SessionMeta
from sessions_app.formats import agentlens
from sessions_app.ingest.live import append_batch, create_live_session
from sessions_app.models import Role
from sessions_app.replay import rows as rows_module

from .builders_formats import FIXTURES, ingest_file, rows
from .builders_replay import api, get_json, resolve_page_context  # noqa: F401  (fixture)
from .builders_teams import member

CONTEXT_ONLY = ("memoryNotes", "variables", "event", "pairedEvent", "pairDurationMs", "step", "stepSeq")


def deploy_events(*, shared_kind: bool = True) -> list[dict]:
    """The fixture's deploy session, with answers whose own durations differ from the time
    between the two events, a response no call precedes, and (`shared_kind`) a form_submitted
    beside a custom event: two AgentLens types of one kind."""
    lines = (FIXTURES / "agentlens" / "two_sessions.ndjson").read_bytes().splitlines()
    events = [e for e in map(orjson.loads, lines) if e["sessionId"] == "ses_deploy_7f3a"]
    events[13]["payload"]["latencyMs"] = 1500  # llm_02: 1,800 ms between the events
    events[9]["payload"]["durationMs"] = 3500  # tc_03: 4,000 ms between the events
    end = events.pop()
    base = {"sessionId": "ses_deploy_7f3a", "agentId": "deploy-bot", "severity": "info", "metadata": {}}
    events += [
        {**base, "id": "x1", "timestamp": "2026-02-08T10:31:15.850Z", "eventType": "llm_response",
         "payload": {"callId": "llm_lost", "provider": "anthropic", "model": "m", "completion": "orphan"}},
        {**base, "id": "x2", "timestamp": "2026-02-08T10:31:15.900Z",
         "eventType": "form_submitted" if shared_kind else "custom", "payload": {"submissionId": "f1"}},
        {**base, "id": "x3", "timestamp": "2026-02-08T10:31:15.950Z", "eventType": "custom",
         "payload": {"type": "note", "data": {}}},
        end,
    ]  # fmt: skip
    for event in events:  # edited: the source chain is not what these tests are about
        event.pop("hash", None), event.pop("prevHash", None)
    return events


def agentlens_replay(events: list[dict]) -> list[dict]:
    """builder.ts on these events, step by step: `eventCounts`, `llmHistory` as (callId,
    response) pairs, and `pair` as (paired event id, pairDurationMs) or None."""

    def ms(event: dict) -> int:
        return int(datetime.fromisoformat(event["timestamp"]).timestamp() * 1000)

    # buildPairMap: an answer pairs with the call of its id seen before it.
    pairs: dict[str, tuple[str, int]] = {}
    initiators: dict[tuple[str, str], dict] = {}
    families = {"tool_call": "tool", "llm_call": "llm", "approval_requested": "approval"}
    answers = {"tool_response": ("tool", "callId"), "tool_error": ("tool", "callId"),
               "llm_response": ("llm", "callId"), "approval_granted": ("approval", "requestId"),
               "approval_denied": ("approval", "requestId"), "approval_expired": ("approval", "requestId")}  # fmt: skip
    for event in events:
        kind, payload = event["eventType"], event["payload"]
        if kind in families:
            initiators[families[kind], payload.get("callId") or payload.get("requestId")] = event
        elif kind in answers:
            family, key = answers[kind]
            call = initiators.get((family, payload[key]))
            if call is not None:
                pairs[call["id"]] = (event["id"], ms(event) - ms(call))
    # updateContext / snapshotContext.
    counts: Counter = Counter()
    history: list[dict] = []
    steps = []
    for event in events:
        kind, payload = event["eventType"], event["payload"]
        counts[kind] += 1
        if kind == "llm_call":
            history.append({"callId": payload["callId"], "response": None})
        elif kind == "llm_response":
            entry = next((h for h in history if h["callId"] == payload["callId"]), None)
            if entry is not None:
                entry["response"] = payload.get("completion")
            else:
                history.append({"callId": payload["callId"], "response": payload.get("completion")})
        steps.append({
            "eventCounts": dict(counts),
            "llmHistory": [(h["callId"], h["response"]) for h in history],
            "pair": pairs.get(event["id"]),
        })  # fmt: skip
    return steps


def ours(step: dict, context: dict, ids: dict[int, str]) -> dict:
    """Our page step in the terms of agentlens_replay."""
    history = []
    for entry in context["llmHistory"]:
        answered = entry["response"] or (entry if entry["kind"] == "llm_response" else None)
        history.append((entry["payload"]["callId"], answered["payload"].get("completion") if answered else None))
    pair = (ids[step["pairedEvent"]["seq"]], step["pairDurationMs"]) if "pairedEvent" in step else None
    return {"eventCounts": context["eventCounts"], "llmHistory": history, "pair": pair}


def imported(events: list[dict], project, tmp_path):
    path = tmp_path / "deploy.ndjson"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    (session,), _ = ingest_file(agentlens, path, project)
    return session, events


@pytest.fixture
def deploy(project, tmp_path):
    return imported(deploy_events(), project, tmp_path)


def source_ids(session) -> dict[int, str]:
    return {e.seq: orjson.loads(e.payload)["_source"]["id"] for e in rows(session)}


@pytest.mark.parametrize(("offset", "limit"), [(0, 100), (0, 5), (5, 4), (13, 100)])
def test_every_step_says_what_agentlens_replay_says(project, tmp_path, offset, limit):
    # One type per kind here: each count can be named by its AgentLens type (see below).
    session, events = imported(deploy_events(shared_kind=False), project, tmp_path)
    expected = agentlens_replay(events)[offset : offset + limit]
    page = replay.replay_page(session=session, offset=offset, limit=limit)
    ids = source_ids(session)
    got = [ours(step, context, ids) for step, context in zip(page["steps"], resolve_page_context(page))]
    assert got == expected


def test_event_counts_use_agentlens_type_names_and_types_sharing_a_kind_count_together(deploy):
    session, _ = deploy
    last = replay.replay_page(session=session, offset=17, limit=1)["steps"][0]["context"]["eventCounts"]
    # form_submitted and custom are both kind `custom` here: counted together under it.
    assert last == {
        "session_started": 1, "llm_call": 2, "llm_response": 3, "cost_tracked": 1, "tool_call": 3,
        "tool_response": 1, "tool_error": 2, "approval_requested": 1, "approval_denied": 1, "custom": 2,
        "session_ended": 1,
    }  # fmt: skip


def test_llm_history_has_one_entry_per_call_completed_in_place(deploy):
    session, _ = deploy
    page = replay.replay_page(session=session, offset=0, limit=100)
    contexts = resolve_page_context(page)
    call = contexts[1]["llmHistory"]
    assert [(e["kind"], e["response"]) for e in call] == [("llm_call", None)]
    answered = contexts[2]["llmHistory"]
    assert len(answered) == 1 and answered[0]["response"]["kind"] == "llm_response"
    assert answered[0]["response"]["seq"] == 2 and page["steps"][2]["context"]["llmHistory"] == [1]


def test_pair_keys_are_on_the_initiating_step_only_timed_by_the_timestamps(deploy):
    session, events = deploy
    steps = replay.replay_page(session=session, offset=0, limit=100)["steps"]
    with_pair = [s["event"]["eventType"] for s in steps if "pairedEvent" in s]
    assert with_pair == ["llm_call", "tool_call", "tool_call", "tool_call", "approval_requested", "llm_call"]
    assert all("pairDurationMs" not in s for s in steps if "pairedEvent" not in s)
    second_llm = steps[12]
    assert second_llm["pairDurationMs"] == 1800.0  # latencyMs 1500 stays in the response's payload
    assert steps[13]["event"]["payload"]["latencyMs"] == 1500
    assert steps[8]["pairDurationMs"] == 4000.0 and steps[9]["event"]["payload"]["durationMs"] == 3500


def test_a_filtered_page_keeps_the_agentlens_context(deploy):
    session, _ = deploy
    full = replay.replay_page(session=session, offset=0, limit=100)
    filtered = replay.replay_page(session=session, offset=0, limit=100, event_types=["llm_response"])
    by_seq = {s["event"]["seq"]: (s, c) for s, c in zip(full["steps"], resolve_page_context(full))}
    for step, context in zip(filtered["steps"], resolve_page_context(filtered)):
        full_step, full_context = by_seq[step["event"]["seq"]]
        assert ({**step, "index": None}, context) == ({**full_step, "index": None}, full_context)
    assert all("pairedEvent" not in s for s in filtered["steps"])


def test_context_at_gives_each_steps_context_with_history_inlined(deploy):
    session, _ = deploy
    page = replay.replay_page(session=session, offset=0, limit=100)
    for step, context in zip(page["steps"], resolve_page_context(page)):
        single = replay.context_at(session=session, seq=step["event"]["seq"])
        assert {k: v for k, v in single.items() if k not in CONTEXT_ONLY} == context
        if "pairedEvent" in step:
            assert single["pairDurationMs"] == step["pairDurationMs"]


def test_the_api_page_of_an_agentlens_session(api, deploy):
    session, _ = deploy
    body = get_json(api, f"/api/sessions/{session.pk}/replay?offset=1&limit=2")
    call, response = body["steps"]
    assert call["pairedEvent"]["seq"] == 2 and call["pairDurationMs"] == 1150.0
    assert set(response) == {"index", "event", "context"}
    assert response["context"]["eventCounts"] == {"session_started": 1, "llm_call": 1, "llm_response": 1}
    assert response["context"]["llmHistory"] == [1]


def test_a_live_session_names_its_counts_by_the_types_it_streamed(project):
    events = deploy_events()[:3]
    events.append({**events[0], "id": "f", "eventType": "form_submitted", "payload": {"submissionId": "s1"}})
    session, _ = create_live_session(project=project, meta=SessionMeta(source_session_id="live"))
    append_batch(session_id=session.pk, records=events)
    session.refresh_from_db()
    counts = replay.replay_page(session=session, offset=3, limit=1)["steps"][0]["context"]["eventCounts"]
    assert counts == {"session_started": 1, "llm_call": 1, "llm_response": 1, "form_submitted": 1}


def test_other_formats_keep_canonical_kinds_and_both_pair_keys(make_session):
    session = make_session(events=30)
    steps = replay.replay_page(session=session, offset=0, limit=30)["steps"]
    assert all({"pairedEvent", "pairDurationMs"} <= set(s) for s in steps)
    assert steps[-1]["context"]["eventCounts"] == orjson.loads(rows(session)[-1].kind_counts)


def test_agentlens_kinds_that_stand_for_one_type_each():
    assert rows_module._AGENTLENS_NAMES == {
        "session_start": "session_started", "session_end": "session_ended", "llm_call": "llm_call",
        "llm_response": "llm_response", "tool_call": "tool_call", "tool_response": "tool_response",
        "tool_error": "tool_error", "approval_requested": "approval_requested",
        "approval_granted": "approval_granted", "approval_denied": "approval_denied",
        "approval_expired": "approval_expired", "cost": "cost_tracked", "error": "error",
    }  # fmt: skip


def test_agentlens_answers_match_their_declared_schemas(api, deploy):
    from sessions_app.api.replay import ReplayOut
    from sessions_app.api.schemas import ContextOut

    session, _ = deploy
    page = get_json(api, f"/api/sessions/{session.pk}/replay")
    ReplayOut.model_validate(page)
    context = get_json(api, f"/api/sessions/{session.pk}/context?seq=3")
    validated = ContextOut.model_validate(context)
    assert validated.llmHistory[0].response.seq == 2


def test_the_player_lists_each_call_once_with_its_answer(client, django_user_model, deploy):
    from django.urls import reverse

    session, _ = deploy
    client.force_login(member("viewer", role=Role.VIEWER))
    html = client.get(reverse("sessions:player", args=[session.pk]), {"step": 3}).content.decode()
    history = html[html.index("LLM history (") : html.index("</ol>", html.index("LLM history ("))]
    assert history.startswith("LLM history (1)")
    assert "#2 llm_call" in history and "→ I&#x27;ll read the deploy config" in history  # seq 1, shown 1-based


def test_content_flagged_redacted_is_shown_as_agentlens_shows_it(project, tmp_path):
    # builder.ts's maybeRedactEvent: a `redacted: true` llm_call's message contents and system
    # prompt, and such an llm_response's completion, read "[REDACTED]"; model, tokens, cost and
    # latency stay.
    events = deploy_events(shared_kind=False)
    call, response = events[1], events[2]
    assert (call["eventType"], response["eventType"]) == ("llm_call", "llm_response")
    call["payload"]["redacted"] = response["payload"]["redacted"] = True
    session, _ = imported(events, project, tmp_path)
    page = replay.replay_page(session=session, offset=0, limit=100)
    shown_call, shown_response = (page["steps"][i]["event"]["payload"] for i in (1, 2))
    assert [m["content"] for m in shown_call["messages"]] == ["[REDACTED]"]
    assert shown_call["messages"][0]["role"] == "user" and shown_call["systemPrompt"] == "[REDACTED]"
    assert shown_response["completion"] == "[REDACTED]"
    assert (shown_response["costUsd"], shown_response["usage"]["totalTokens"]) == (0.0048, 1280)
    assert shown_response["model"] == "claude-sonnet-4-20250514" and shown_response["latencyMs"] == 1150
    history = resolve_page_context(page)[2]["llmHistory"]
    assert history[0]["payload"]["messages"][0]["content"] == "[REDACTED]"
    assert history[0]["response"]["payload"]["completion"] == "[REDACTED]"
    # Nor in what else is shown of them: the step's prompt (rationale) and output.
    shown = "".join(e.payload + (e.step_state or "") for e in rows(session))
    for secret in ("Review the deploy plan", "careful release engineer", "read the deploy config"):
        assert secret not in shown, secret
    # The next call, not flagged, is shown whole.
    assert page["steps"][13]["event"]["payload"]["completion"] == events[13]["payload"]["completion"]
