"""AgentLens-compatible ingest (issue 21 item 3): `POST /api/events` takes what AgentLens's SDKs
send to AgentLens's own server (agentkitai/agentlens packages/server/src/routes/events.ts), so an
agent changes only its base URL and key.

The batches here come from AgentLens's own Python SDK (`agentlensai`, pinned in pyproject.toml):
its client and framework plugin posting to a live test server, and its payload builder
(`build_llm_call_events`) posted through the test client. What they store must replay with the
same context, step by step, as the same events stored by AgentLens and imported from a file.
"""

from __future__ import annotations

import threading
from datetime import datetime
from types import SimpleNamespace

import httpx
import orjson
import pytest
from agentlensai import AgentLensClient, LlmMessage, LogLlmCallParams, TokenUsage
from agentlensai._utils import build_llm_call_events
from agentlensai.exceptions import AuthenticationError
from agentlensai.integrations.autogen import AgentLensAutoGenHandler
from django.db import connection
from django.test import Client

from sessions_app import replay
from sessions_app.formats import agentlens
from sessions_app.ingest.agentlens_events import INGEST_MARK
from sessions_app.models import AuditEntry, Event, Project, ReceivedEvent, Role, Session

from .builders_formats import ingest_file, rows
from .builders_teams import key_of, maintainer_key, member

URL = "/api/events"


def post(client: Client, events: list | dict, *, query: str = "", **headers: str):
    body = events if isinstance(events, dict) else {"events": events}
    return client.post(URL + query, orjson.dumps(body), content_type="application/json", headers=headers)


def keyed(key: str | None = None) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key or maintainer_key()}")


def kept(source_id: str) -> Session:
    return Session.objects.get(source_session_id=source_id, metadata__ingest=INGEST_MARK)


def llm_params(completion: str, *, cost: float = 0.002, tokens: tuple[int, int] = (120, 40)) -> LogLlmCallParams:
    return LogLlmCallParams(
        provider="anthropic", model="claude-sonnet-4-20250514",
        messages=[LlmMessage(role="user", content=f"Next step? ({completion})")], system_prompt="Ship carefully.",
        completion=completion, finish_reason="stop",
        usage=TokenUsage(input_tokens=tokens[0], output_tokens=tokens[1], total_tokens=sum(tokens)),
        cost_usd=cost, latency_ms=850,
    )  # fmt: skip


def sdk_llm_events(session_id: str, call_id: str, timestamp: str, completion: str = "done") -> list[dict]:
    """The batch AgentLens's SDK posts for one LLM call (AgentLensClient.log_llm_call)."""
    return build_llm_call_events(session_id, "deploy-bot", llm_params(completion), call_id, timestamp)


def event(session_id: str, event_type: str, payload: dict, timestamp: str, **members) -> dict:
    """An event as the SDK's framework plugins build them."""
    return {"sessionId": session_id, "agentId": "deploy-bot", "eventType": event_type, "severity": "info",
            "payload": payload, "metadata": {"source": "tests"}, "timestamp": timestamp, **members}  # fmt: skip


def stored_as_agentlens(exchanges: list[tuple[list[dict], list[dict]]]) -> list[dict]:
    """The events as AgentLens's server stores them (and exports them), from what was posted
    and what the server answered: each batch in time order, its ids and hashes from the answer,
    each prevHash the hash before it; members AgentLens does not know are dropped."""
    stored, prev = [], None
    for posted, answered in exchanges:
        in_time_order = sorted(posted, key=lambda e: datetime.fromisoformat(e["timestamp"]))
        for sent, got in zip(in_time_order, answered, strict=True):
            stored.append({
                "id": got["id"], "timestamp": sent["timestamp"], "sessionId": sent["sessionId"],
                "agentId": sent["agentId"], "eventType": sent["eventType"], "severity": sent.get("severity", "info"),
                "payload": sent["payload"], "metadata": sent.get("metadata", {}), "prevHash": prev, "hash": got["hash"],
            })  # fmt: skip
            prev = got["hash"]
    return stored


def same_replay(posted: Session, imported: Session) -> None:
    """Both sessions replay alike: the context at every step, and every page of the replay
    (bar the session's own id and creation time)."""
    assert posted.event_count == imported.event_count
    for name in ("status", "completed", "cost_usd", "tokens", "error_count", "step_count", "agent_id", "model",
                 "started_at", "ended_at", "elapsed_ms", "kind_counts", "models_used", "tools_used"):  # fmt: skip
        assert getattr(posted, name) == getattr(imported, name), name
    assert posted.metadata["source_chain"] == imported.metadata["source_chain"] == {"valid": True, "chained": True}
    for seq in range(posted.event_count):
        assert replay.context_at(session=posted, seq=seq) == replay.context_at(session=imported, seq=seq), seq
    for offset, limit in ((0, 100), (3, 4), (9, 6)):
        pages = [replay.replay_page(session=s, offset=offset, limit=limit) for s in (posted, imported)]
        for page in pages:
            del page["session"]["id"], page["session"]["createdAt"]
        assert pages[0] == pages[1], (offset, limit)


# --- AgentLens's own SDK, against a live server -------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_agentlens_sdk_records_a_session_that_replays_as_its_file_import(live_server, tmp_path):
    project = Project.get_default()
    client = AgentLensClient(live_server.url, api_key=maintainer_key("sdk"))
    exchanges: list[tuple[list[dict], list[dict]]] = []

    def keep(response: httpx.Response) -> None:
        response.read()
        assert response.status_code == 201, response.text  # the plugins swallow errors: seen here
        exchanges.append((orjson.loads(response.request.content)["events"], response.json()["events"]))

    client._client.event_hooks["response"].append(keep)
    plugin = AgentLensAutoGenHandler(client=client, agent_id="deploy-bot", session_id="ses_sdk")
    plugin.on_conversation_start(SimpleNamespace(name="deploy-bot"), [SimpleNamespace(name="reviewer")])
    client.log_llm_call("ses_sdk", "deploy-bot", llm_params("Read the deploy config first."))
    plugin._send_tool_call("read_file", "tc_1", {"path": "deploy.yaml"})
    plugin._send_tool_response("read_file", "tc_1", "replicas: 3", 12.5)
    client.log_llm_call("ses_sdk", "deploy-bot", llm_params("Run the smoke tests.", cost=0.004))
    plugin._send_tool_call("run_tests", "tc_2", {"suite": "smoke"})
    plugin._send_tool_error("run_tests", "tc_2", "exit status 1", 3000.0)
    plugin._send_tool_call("run_tests", "tc_3", {"suite": "smoke"})
    plugin._send_tool_error("run_tests", "tc_3", "exit status 1", 2900.0)
    plugin._send_custom_event("agent_message", {"content": "retrying once more"})
    client.log_llm_call("ses_sdk", "deploy-bot", llm_params("Roll back.", tokens=(300, 20)))
    plugin.on_conversation_end("rolled back")
    client.close()
    assert len(exchanges) == 12

    posted = kept("ses_sdk")
    path = tmp_path / "ses_sdk.ndjson"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in stored_as_agentlens(exchanges)))
    (imported,), problems = ingest_file(agentlens, path, project)
    assert problems.count == 0, problems.items
    assert (posted.event_count, posted.status, round(posted.cost_usd, 6)) == (15, "completed", 0.008)
    assert posted.error_count == 2 and imported.pk != posted.pk
    same_replay(posted, imported)
    # The session's counts are named as AgentLens names its types, both ways.
    last = replay.context_at(session=posted, seq=14)
    assert last["eventCounts"] == {"session_started": 1, "llm_call": 3, "llm_response": 3, "tool_call": 3,
                                   "tool_response": 1, "tool_error": 2, "custom": 1, "session_ended": 1}  # fmt: skip


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_first_batches_of_one_session_make_one_session_with_an_unbroken_chain(live_server):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only (run through .ci/with_postgres.py): SQLite takes writers one at a time")
    key, failures = maintainer_key("agents"), []

    def agent(n: int) -> None:
        with AgentLensClient(live_server.url, api_key=key) as client:
            for i in range(5):
                try:
                    client.log_llm_call("ses_many", f"agent-{n}", llm_params(f"{n}.{i}"))
                except Exception as exc:  # noqa: BLE001  (reported below, by thread)
                    failures.append(repr(exc))

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    end = event("ses_many", "session_ended", {"reason": "completed"}, "2099-01-01T00:00:00Z")
    assert post(keyed(key), [end]).status_code == 201
    session = kept("ses_many")
    assert Session.objects.filter(source_session_id="ses_many").count() == 1
    assert session.event_count == 41 and [e.seq for e in rows(session)] == list(range(41))
    assert session.metadata["source_chain"] == {"valid": True, "chained": True}


# --- the SDK's batches through the test client --------------------------------------------


def test_batches_append_to_one_session_in_order_and_each_event_is_chained_as_agentlens_chains(db):
    api = keyed()
    first = post(api, [event("ses_a", "session_started", {"agentName": "deploy-bot", "tags": ["prod"]},
                             "2026-02-08T10:30:00.000Z")] + sdk_llm_events("ses_a", "c1", "2026-02-08T10:30:01.000Z"))  # fmt: skip
    second = post(api, sdk_llm_events("ses_a", "c2", "2026-02-08T10:30:05.000Z", "second"))
    assert (first.status_code, second.status_code) == (201, 201)
    body = second.json()
    assert body["ingested"] == 2 and body["warnings"] == []
    assert body["sessions"] == [{"sessionId": "ses_a", "id": kept("ses_a").pk, "created": False, "stored": 2,
                                 "status": "live"}]  # fmt: skip
    session = kept("ses_a")
    assert session.source_format == "agentlens" and session.agent_id == "deploy-bot"
    stored = [orjson.loads(e.raw) for e in rows(session)]
    assert [e["eventType"] for e in stored] == ["session_started", "llm_call", "llm_response", "llm_call",
                                               "llm_response"]  # fmt: skip
    answered = first.json()["events"] + body["events"]
    assert [{"id": e["id"], "hash": e["hash"]} for e in stored] == answered
    # AgentLens's own chain across both batches: each hash computeEventHash, each prevHash the last.
    assert [e["prevHash"] for e in stored] == [None] + [e["hash"] for e in stored[:-1]]
    assert all(agentlens.source_hash(e) == e["hash"] for e in stored)
    assert all(len(e["id"]) == 26 for e in stored)  # ULIDs, as AgentLens gives
    assert session.metadata["agentlens"] == {"agentName": "deploy-bot", "tags": ["prod"]}
    assert AuditEntry.objects.filter(action="session.create_live", target=f"session:{session.pk}").count() == 1


def test_a_batch_of_several_sessions_puts_each_in_time_order_and_answers_in_that_order(db):
    late, early = (
        sdk_llm_events("ses_x", "c1", "2026-02-08T10:30:09.000Z"),
        sdk_llm_events("ses_x", "c0", "2026-02-08T10:30:01.000Z"),
    )
    other = [event("ses_y", "custom", {"type": "note", "data": {}}, "2026-02-08T09:00:00Z")]
    response = post(keyed(), late + other + early)
    assert response.status_code == 201
    body = response.json()
    assert [s["sessionId"] for s in body["sessions"]] == ["ses_x", "ses_y"] and body["ingested"] == 5
    x, y = ([orjson.loads(e.raw) for e in rows(kept(name))] for name in ("ses_x", "ses_y"))
    assert [e["payload"]["callId"] for e in x] == ["c0", "c0", "c1", "c1"]
    assert [e["id"] for e in body["events"]] == [e["id"] for e in x + y]


def test_a_retried_batch_is_stored_once_and_answered_with_the_same_ids(db):
    api = keyed()
    batch = sdk_llm_events("ses_r", "c1", "2026-02-08T10:30:01.000Z")
    first = post(api, batch)
    again = post(api, batch)  # the SDK retries a request whose answer it lost, body unchanged
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["events"] == first.json()["events"] and again.json()["ingested"] == 0
    assert kept("ses_r").event_count == 2 and ReceivedEvent.objects.filter(session=kept("ses_r")).count() == 2


def test_events_naming_their_own_ids_are_stored_once_when_a_retry_carries_new_ones_too(db):
    api = keyed()
    one, two, three = (
        event("ses_i", "custom", {"type": "n", "data": {"i": i}}, f"2026-02-08T10:30:0{i}Z", id=f"evt-{i}")
        for i in (1, 2, 3)
    )
    assert post(api, [one, two]).status_code == 201
    response = post(api, [two, three, three])  # a retry of two, and three sent twice in one batch
    assert response.status_code == 201 and response.json()["ingested"] == 1
    stored = [orjson.loads(e.raw) for e in rows(kept("ses_i"))]
    assert [e["id"] for e in stored] == ["evt-1", "evt-2", "evt-3"]
    assert [e["id"] for e in response.json()["events"]] == ["evt-2", "evt-3", "evt-3"]
    assert stored[2]["prevHash"] == stored[1]["hash"] == response.json()["events"][0]["hash"]


def test_an_event_without_a_timestamp_gets_the_time_of_arrival_and_a_new_id_each_time(db):
    api = keyed()
    ping = {"sessionId": "ses_t", "agentId": "a", "eventType": "custom", "payload": {"type": "ping", "data": {}}}
    first, second = post(api, [ping]), post(api, [ping])  # no time of its own: no evidence of a retry
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["events"][0]["id"] != second.json()["events"][0]["id"]
    stored = orjson.loads(rows(kept("ses_t"))[0].raw)
    assert stored["timestamp"].endswith("Z") and stored["severity"] == "info" and stored["metadata"] == {}


def test_session_ended_ends_the_session_and_later_new_events_are_a_409(db):
    api = keyed()
    end = event("ses_e", "session_ended", {"reason": "error", "summary": "tests failed"}, "2026-02-08T10:31:00Z")
    assert post(api, sdk_llm_events("ses_e", "c1", "2026-02-08T10:30:00Z") + [end]).status_code == 201
    session = kept("ses_e")
    assert session.status == Session.Status.FAILED and session.ended_at.isoformat() == "2026-02-08T10:31:00+00:00"
    assert session.metadata["agentlens"]["endReason"] == "error"
    assert session.metadata["source_chain"] == {"valid": True, "chained": True}
    assert post(api, [end]).status_code == 200  # a retry of the end is answered, not refused
    late = post(api, [event("ses_e", "custom", {"type": "late", "data": {}}, "2026-02-08T10:32:00Z")])
    assert late.status_code == 409
    assert late.json()["details"] == [{"path": "events.0.sessionId", "message": f"session {session.pk} is failed"}]
    assert "has ended" in late.json()["error"] and kept("ses_e").event_count == 3


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "path", "message"),
    [
        ({"agentId": None}, "events.1.agentId", "string"),
        ({"sessionId": ""}, "events.1.sessionId", "at least 1 character"),
        ({"timestamp": "yesterday"}, "events.1.timestamp", "not an ISO 8601 date-time"),
        ({"severity": "fatal"}, "events.1.severity", "'debug', 'info', 'warn', 'error' or 'critical'"),
        ({"payload": [1, 2]}, "events.1.payload", "dictionary"),
        ({"metadata": "x"}, "events.1.metadata", "dictionary"),
        ({"eventType": 7}, "events.1.eventType", "string"),
        ({"id": ""}, "events.1.id", "at least 1 character"),
        ({"sessionId": "a\x00b"}, "events.1.sessionId", "NUL"),
        ({"id": "abc\x00def"}, "events.1.id", "an id may not hold NUL characters"),
    ],
)
def test_a_bad_event_is_a_400_naming_its_index_and_field_and_nothing_is_stored(db, bad, path, message):
    good = sdk_llm_events("ses_bad", "c1", "2026-02-08T10:30:00Z")
    response = post(keyed(), [good[0], {**good[1], **bad}])
    assert response.status_code == 400
    body = response.json()
    assert body["status"] == 400 and body["error"] == body["detail"] and body["error"].startswith(path)
    assert body["details"][0]["path"] == path and message in body["details"][0]["message"]
    assert body["errors"][0]["index"] == 1
    assert not Session.objects.filter(source_session_id="ses_bad").exists()


@pytest.mark.parametrize(
    ("body", "path"),
    [({"events": []}, "events"), ({"events": [3]}, "events.0"), ({}, "events"), ({"events": {"a": 1}}, "events")],
)
def test_a_batch_that_is_no_list_of_events_is_a_400(db, body, path):
    response = post(keyed(), body)
    assert response.status_code == 400 and response.json()["details"][0]["path"] == path


def test_a_batch_over_agentlens_bound_of_1000_events_is_a_400(db):
    ping = event("ses_big", "custom", {"type": "p", "data": {}}, "2026-02-08T10:30:00Z")
    response = post(keyed(), [ping] * 1001)
    assert response.status_code == 400 and "1000" in response.json()["error"]


def test_payload_problems_are_stored_with_warnings_naming_the_events_place_in_the_request(db):
    no_call_id = event("ses_w", "tool_call", {"toolName": "search", "arguments": {}}, "2026-02-08T10:30:00Z")
    earlier = event("ses_w", "session_started", {}, "2026-02-08T09:00:00Z")
    response = post(keyed(), [no_call_id, earlier])  # stored in time order: the tool_call second
    assert response.status_code == 201
    assert response.json()["warnings"] == [
        {"index": 0, "field": "payload.callId", "message": "tool_call without callId: it cannot be paired"}
    ]
    assert [e.source_type for e in rows(kept("ses_w"))] == ["session_started", "tool_call"]


# --- keys and projects --------------------------------------------------------------------


def test_the_agentlens_sdk_is_refused_without_a_valid_key(db, live_server):
    client = AgentLensClient(live_server.url, api_key="als_not_a_key")
    with pytest.raises(AuthenticationError):
        client.log_llm_call("ses_k", "bot", llm_params("x"))
    assert post(Client(), sdk_llm_events("ses_k", "c", "2026-02-08T10:30:00Z")).status_code == 401
    assert not Session.objects.filter(source_session_id="ses_k").exists()


def test_events_go_to_the_keys_project_and_a_role_below_maintainer_is_refused(db):
    acme = Project.objects.create(name="Acme", slug="acme")
    owner = member("owner", acme, Role.MAINTAINER)
    member("owner", Project.get_default(), Role.MAINTAINER)
    batch = sdk_llm_events("ses_p", "c1", "2026-02-08T10:30:00Z")
    two_projects = post(keyed(key_of(owner)), batch)
    assert two_projects.status_code == 400 and "project" in two_projects.json()["error"]
    assert post(keyed(key_of(owner)), batch, query="?project=acme").status_code == 201
    assert post(keyed(key_of(owner, project=acme, name="acme-only")), batch).status_code == 200  # the same events
    assert kept("ses_p").project == acme
    assert post(keyed(key_of(owner, project=acme, read_only=True)), batch).status_code == 403
    viewer = member("viewer", acme, Role.VIEWER)
    assert post(keyed(key_of(viewer)), batch, query="?project=acme").status_code == 403
    outsider = member("outsider", Project.objects.create(name="Other", slug="other"), Role.MAINTAINER)
    assert post(keyed(key_of(outsider)), batch, query="?project=acme").status_code == 404
    assert Event.objects.filter(session__project=acme).count() == 2


def test_a_file_imported_with_the_same_session_id_is_never_appended_to(db, tmp_path):
    path = tmp_path / "one.ndjson"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in sdk_llm_events("ses_f", "c1", "2026-02-08T10:30:00Z")))
    (imported,), _ = ingest_file(agentlens, path, Project.get_default())
    assert post(keyed(), sdk_llm_events("ses_f", "c2", "2026-02-08T10:31:00Z")).status_code == 201
    imported.refresh_from_db()
    assert imported.event_count == 2 and kept("ses_f").pk != imported.pk and kept("ses_f").event_count == 2


def test_agentlens_observation_types_are_kept_as_custom_events_without_a_warning(db):
    observations = [
        event("ses_o", "retrieval", {"query": "deploy docs", "resultCount": 3}, "2026-02-08T10:30:00Z"),
        event("ses_o", "embedding", {"model": "e5", "inputCount": 2}, "2026-02-08T10:30:01Z"),
        event("ses_o", "chain_step", {"name": "plan"}, "2026-02-08T10:30:02Z"),
    ]
    response = post(keyed(), observations)
    assert response.status_code == 201 and response.json()["warnings"] == []
    assert [(e.kind, e.source_type) for e in rows(kept("ses_o"))] == [
        ("custom", "retrieval"), ("custom", "embedding"), ("custom", "chain_step"),
    ]  # fmt: skip


def test_deleting_the_session_takes_its_received_ids_with_it(db):
    api = keyed()
    batch = sdk_llm_events("ses_d", "c1", "2026-02-08T10:30:00Z")
    assert post(api, batch).status_code == 201
    session = kept("ses_d")
    assert api.delete(f"/api/sessions/{session.pk}").status_code == 204
    assert not ReceivedEvent.objects.filter(session_id=session.pk).exists()
    again = post(api, batch)  # the same sessionId now starts a session of its own
    assert again.status_code == 201 and again.json()["sessions"][0]["created"] and kept("ses_d").event_count == 2


def test_the_projects_quotas_hold_for_agentlens_sessions_and_batches(db):
    api, project = keyed(), Project.get_default()
    project.max_sessions = 1
    project.save()
    assert post(api, sdk_llm_events("ses_q1", "c1", "2026-02-08T10:30:00Z")).status_code == 201
    second = post(api, sdk_llm_events("ses_q2", "c1", "2026-02-08T10:30:00Z"))
    assert second.status_code == 409 and "quota of 1 sessions" in second.json()["error"]
    assert post(api, sdk_llm_events("ses_q1", "c2", "2026-02-08T10:31:00Z")).status_code == 201  # its own: room
    project.max_stored_bytes = 100
    project.save()
    too_big = post(api, sdk_llm_events("ses_q1", "c3", "2026-02-08T10:32:00Z"))
    assert too_big.status_code == 413 and "storage quota" in too_big.json()["error"]
    assert kept("ses_q1").event_count == 4 and not Session.objects.filter(source_session_id="ses_q2").exists()


# --- the same id with other content (issue 20: a reused key with another body is a 409) ---------


def numbered(i: int, data: object, **members) -> dict:
    return event("ses_c", "custom", {"type": "n", "data": data}, f"2026-02-08T10:30:0{i}Z", id=f"evt-{i}", **members)


def test_an_exact_retry_is_quiet_and_the_same_id_with_other_content_is_a_409_naming_index_and_id(db):
    api = keyed()
    assert post(api, [numbered(1, "a"), numbered(2, "b")]).status_code == 201
    retry = post(api, [numbered(1, "a"), numbered(2, "b")])
    assert retry.status_code == 200 and retry.json()["ingested"] == 0 and retry.json()["warnings"] == []
    # A retry of 1, new 3, and 2 under its old id with changed data: nothing of the batch is stored.
    changed = post(api, [numbered(1, "a"), numbered(3, "c"), numbered(2, "changed")])
    assert changed.status_code == 409, changed.content
    body = changed.json()
    assert body["errors"] == [{"index": 2, "field": "id", "message": "id 'evt-2' was received with other content"}]
    assert body["details"] == [{"path": "events.2.id", "message": "id 'evt-2' was received with other content"}]
    assert body["detail"].startswith("events[2]: an event with id 'evt-2' was already received")
    stored = [orjson.loads(e.raw) for e in rows(kept("ses_c"))]
    assert [(e["id"], e["payload"]["data"]) for e in stored] == [("evt-1", "a"), ("evt-2", "b")]
    assert ReceivedEvent.objects.filter(session=kept("ses_c")).count() == 2
    # Nothing lost: the new event sent again on its own (or under a new id) is stored.
    assert post(api, [numbered(3, "c")]).status_code == 201
    assert [orjson.loads(e.raw)["id"] for e in rows(kept("ses_c"))] == ["evt-1", "evt-2", "evt-3"]


def test_other_metadata_or_severity_under_a_received_id_is_also_a_409(db):
    api = keyed()
    assert post(api, [numbered(1, "a")]).status_code == 201
    assert post(api, [numbered(1, "a", severity="error")]).status_code == 409
    assert post(api, [numbered(1, "a", metadata={"source": "other"})]).status_code == 409
    assert post(api, [numbered(1, "a")]).status_code == 200
    assert kept("ses_c").event_count == 1


def test_one_id_twice_in_a_batch_with_different_content_is_a_409_and_nothing_is_stored(db):
    response = post(keyed(), [numbered(1, "a"), numbered(1, "b")])
    assert response.status_code == 409 and response.json()["errors"][0]["index"] == 1
    assert not Session.objects.filter(source_session_id="ses_c", event_count__gt=0).exists()
    assert not ReceivedEvent.objects.exists()


def test_an_event_received_before_digests_were_kept_is_still_answered_as_a_retry(db):
    # Rows from before migration 0023 have no digest: any content under their id is a retry, as then.
    api = keyed()
    assert post(api, [numbered(1, "a")]).status_code == 201
    ReceivedEvent.objects.filter(session=kept("ses_c")).update(content_digest="")
    again = post(api, [numbered(1, "other")])
    assert again.status_code == 200 and again.json()["ingested"] == 0
    assert kept("ses_c").event_count == 1
