"""The write API: live sessions, event batches (idempotent, concurrent), ending, uploads."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import orjson
import pytest
from django.db import connection
from django.http import HttpResponse
from django.test import Client

from sessions_app.ingest.importing import import_file
from sessions_app.models import ApiKey, Event, ImportJob, IngestBatch, Project, Session
from sessions_app.replay.state import step_state_at
from sessions_app.verification import verify_session

from .builders_ingest import canonical_records, write_canonical_file
from .builders_rlm import record_full_session
from .builders_teams import maintainer_key, member


@pytest.fixture
def api_key(db) -> str:
    return maintainer_key("agent")


@pytest.fixture
def api(api_key) -> Client:
    return Client(headers={"authorization": f"Bearer {api_key}"})


def post_json(client: Client, url: str, body) -> HttpResponse:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    return client.post(url, data=data, content_type="application/json")


def new_session(api: Client, **fields) -> dict:
    response = post_json(api, "/api/sessions", {"task": "demo", "model": "gpt-4o", **fields})
    assert response.status_code == 201, response.content
    return response.json()


def append(api: Client, session_id: int, events: list, **fields):
    return post_json(api, f"/api/sessions/{session_id}/events", {"events": events, **fields})


def chain_of(session_id: int) -> tuple[bool, str]:
    """Verify the stored session: (it verifies, its head)."""
    result = verify_session(session=Session.objects.get(pk=session_id))
    return result.valid, result.head


# --- sessions ------------------------------------------------------------------------------------


def test_create_session_answers_201_with_its_id_and_where_to_send_events(api, project):
    body = new_session(api, run_id="run-1", environment="repl", metadata={"team": "a"})
    session = Session.objects.get(pk=body["id"])
    assert (session.status, session.task, session.run_id, session.model) == ("live", "demo", "run-1", "gpt-4o")
    assert session.metadata == {"team": "a"} and session.project == project
    assert body["events_url"] == f"/api/sessions/{session.pk}/events"
    assert body["end_url"] == f"/api/sessions/{session.pk}/end"
    assert body["stream_url"].startswith(f"/api/sessions/{session.pk}/stream")


def test_create_session_retried_with_its_key_returns_the_same_session(api, project):
    first = post_json(api, "/api/sessions", {"task": "t", "idempotency_key": "create-1"})
    again = post_json(api, "/api/sessions", {"task": "t", "idempotency_key": "create-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert Session.objects.count() == 1


def test_create_session_in_an_unknown_project_is_a_404_as_for_a_project_of_others(api, project):
    Project.objects.create(name="Theirs", slug="theirs")
    nope = post_json(api, "/api/sessions", {"project": "nope"})
    theirs = post_json(api, "/api/sessions", {"project": "theirs"})
    assert nope.status_code == theirs.status_code == 404
    assert (
        nope.json()["detail"] == "project 'nope' not found" and theirs.json()["detail"] == "project 'theirs' not found"
    )
    assert not Session.objects.exists()


def test_create_session_in_a_named_project(api, project):
    other = Project.objects.create(name="Other", slug="other")
    member("owner-of-agent", other)  # the key's user maintains both projects now
    body = new_session(api, project="other")
    assert Session.objects.get(pk=body["id"]).project == other


def test_create_session_refuses_unknown_fields(api, project):
    response = post_json(api, "/api/sessions", {"taks": "typo"})
    assert response.status_code == 400
    assert response.json()["detail"].startswith("taks:")


@pytest.mark.parametrize(
    ("started_at", "said"),
    [
        ("0001-01-01T00:00:00+05:00", "timestamp outside the years 1-9999 in UTC"),
        ("9999-12-31T23:59:59-05:00", "timestamp outside the years 1-9999 in UTC"),
        # A number was taken for epoch seconds or milliseconds, whichever pydantic guessed.
        (253402300800, "expected ISO 8601 text, got a number"),
    ],
)
def test_a_start_time_with_no_utc_instant_is_refused_on_its_field(api, project, started_at, said):
    response = post_json(api, "/api/sessions", {"started_at": started_at})
    assert response.status_code == 400
    assert response.json()["detail"] == f"started_at: {said}"
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    "method, url",
    [
        ("post", "/api/sessions"),
        ("post", "/api/sessions/1/events"),
        ("post", "/api/sessions/1/end"),
        ("post", "/api/imports"),
        ("get", "/api/imports/1"),
        ("get", "/api/sessions/1/stream"),
        ("get", "/api/sessions/1/tail"),
    ],
)
def test_every_write_endpoint_refuses_anonymous_and_wrong_keys(db, method, url):
    anonymous = getattr(Client(), method)(url)
    wrong = getattr(Client(headers={"authorization": "Bearer rpl_wrong"}), method)(url)
    assert (anonymous.status_code, wrong.status_code) == (401, 401)


def test_a_revoked_key_is_refused(api, api_key, project):
    ApiKey.objects.update(revoked_at="2026-01-01T00:00:00Z")
    assert post_json(api, "/api/sessions", {}).status_code == 401


# --- appending -----------------------------------------------------------------------------------


def test_appended_events_get_the_next_seqs_running_totals_and_chain_hashes(api, project):
    sid = new_session(api)["id"]
    records = list(canonical_records(40))
    first = append(api, sid, records[:25]).json()
    second = append(api, sid, records[25:]).json()
    assert (first["stored"], first["first_seq"], first["event_count"]) == (25, 0, 25)
    assert (second["stored"], second["first_seq"], second["event_count"]) == (15, 25, 40)
    assert first["format"] == "canonical"
    session = Session.objects.get(pk=sid)
    assert list(Event.objects.filter(session=session).values_list("seq", flat=True)) == list(range(40))
    ok, head = chain_of(sid)
    assert ok and head == second["head_hash"] == session.head_hash
    # Raw is the received element as orjson writes it: it round-trips to what was sent.
    assert [orjson.loads(raw) for raw in Event.objects.filter(session=session).values_list("raw", flat=True)] == records
    # Pairing across the two batches (call at 24, response at 25) and totals.
    call = Event.objects.get(session=session, seq=24)
    assert call.kind == "llm_call" and call.pair_seq == 25
    assert session.tokens == sum(r.get("tokens", 0) for r in records)
    assert session.step_count == 10 and session.source_format == "canonical"


def test_a_batch_retried_with_the_same_idempotency_key_is_stored_once(api, project):
    sid = new_session(api)["id"]
    records = list(canonical_records(30))
    first = append(api, sid, records, idempotency_key="batch-1")
    retry = append(api, sid, records, idempotency_key="batch-1")
    assert first.status_code == retry.status_code == 200
    a, b = first.json(), retry.json()
    assert (a["replayed"], b["replayed"]) == (False, True)
    assert {k: a[k] for k in ("stored", "first_seq", "event_count", "head_hash")} == {
        k: b[k] for k in ("stored", "first_seq", "event_count", "head_hash")
    }
    assert Event.objects.filter(session_id=sid).count() == 30
    assert IngestBatch.objects.filter(session_id=sid).count() == 1
    # A new key appends after it.
    third = append(api, sid, list(canonical_records(5, start=30)), idempotency_key="batch-2").json()
    assert (third["first_seq"], third["event_count"]) == (30, 35)


def test_an_invalid_event_is_a_400_naming_its_index_and_field_and_nothing_is_stored(api, project):
    sid = new_session(api)["id"]
    records = list(canonical_records(5))
    records[2]["kind"] = "bogus"
    records[4]["tokens"] = -3
    response = append(api, sid, records, idempotency_key="k")
    assert response.status_code == 400
    body = response.json()
    assert body["detail"].startswith("events[2].kind: 'bogus' is not a canonical kind")
    assert "and 1 more" in body["detail"]
    assert [(e["index"], e["field"]) for e in body["errors"]] == [(2, "kind"), (4, "tokens")]
    assert not Event.objects.filter(session_id=sid).exists()
    assert not IngestBatch.objects.exists()  # the key is free for the corrected batch
    records[2]["kind"], records[4]["tokens"] = "tool_call", 3
    assert append(api, sid, records, idempotency_key="k").json()["stored"] == 5


@pytest.mark.parametrize(
    "body, field",
    [
        (b"{not json", "not valid JSON"),
        ({"events": []}, "events"),
        ({"events": [{"kind": "note", "payload": {}}] * 5001}, "events"),
        ({"events": [1, 2]}, "events[0].event"),
        ({"events": [{"kind": "note", "payload": {}}], "format": "yaml"}, "format"),
        ({"events": [{"kind": "note", "timestamp": "yesterday", "payload": {}}]}, "events[0].timestamp"),
        ({"events": [{"kind": "note", "payload": {}, "cost_usd": float("nan")}]}, "events[0].cost_usd"),
        ({"events": [{"what": "is this"}]}, "format"),
        (
            {"events": [{"kind": "note", "payload": {}, "state_change": {"memory": "x"}}]},
            "events[0].state_change.memory",
        ),
        # Beyond the 64-bit columns: a 500 on the write before (found in review).
        ({"events": [{"kind": "note", "payload": {}, "depth": 2**63}]}, "events[0].depth"),
        ({"events": [{"kind": "note", "payload": {}, "step": 2**63}]}, "events[0].step"),
        ({"events": [{"kind": "llm_response", "payload": {}, "tokens": 2**63}]}, "events[0].tokens"),
        # Taken as themselves only (walkthrough of bad input: `true` was stored as 1 token, "1.5"
        # as a cost, "yes" as an error, a number as an epoch time).
        ({"events": [{"kind": "llm_response", "payload": {}, "tokens": True}]}, "events[0].tokens"),
        ({"events": [{"kind": "cost", "payload": {}, "cost_usd": "1.5"}]}, "events[0].cost_usd"),
        ({"events": [{"kind": "note", "payload": {}, "step": "3"}]}, "events[0].step"),
        ({"events": [{"kind": "error", "payload": {}, "is_error": "yes"}]}, "events[0].is_error"),
        (
            {"events": [{"kind": "note", "payload": {}, "timestamp": 1770000000}]},
            "events[0].timestamp: expected ISO 8601 text, got a number",
        ),
        (
            {"events": [{"kind": "note", "payload": {}, "state_change": {"replace": "yes"}}]},
            "events[0].state_change.replace",
        ),
        # A misspelt StepState field was dropped without a word, and the step showed empty.
        (
            {"events": [{"kind": "step_end", "payload": {}, "step_state": {"step": 1, "action_typ": "code"}}]},
            "events[0].step_state: unknown StepState field 'action_typ'; the fields are action_code,",
        ),
        # A StepState value of the wrong type: "no" counted as a success, "high" shown as a reward.
        (
            {"events": [{"kind": "step_end", "payload": {}, "step_state": {"step": 1, "success": "no"}}]},
            "events[0].step_state: StepState field 'success' should be true or false, not no",
        ),
        (
            {"events": [{"kind": "step_end", "payload": {}, "step_state": {"reward": "high", "output": 3}}]},
            "events[0].step_state: StepState field 'reward' should be a finite number, not high; StepState field "
            "'output' should be text, not 3",
        ),
        (
            {"events": [{"kind": "step_end", "payload": {}, "step_state": {"tokens_used": True}}]},
            "events[0].step_state: StepState field 'tokens_used' should be a whole number, not true",
        ),
        # What session_end says of the session, of the wrong type, was ignored without a word.
        (
            {"events": [{"kind": "session_end", "payload": {"status": "done", "total_reward": "high"}}]},
            'events[0].payload.status: neither "completed" nor "failed": done (ignored)',
        ),
    ],
)
def test_malformed_batches_are_400_never_500(api, project, body, field):
    sid = new_session(api)["id"]
    if isinstance(body, dict) and any(
        isinstance(e, dict) and isinstance(e.get("cost_usd"), float) for e in body["events"]
    ):
        body = json.dumps(body).encode()  # NaN written the way Python's json module writes it
    response = post_json(api, f"/api/sessions/{sid}/events", body)
    assert response.status_code == 400, response.content
    assert field in response.json()["detail"]
    assert not Event.objects.filter(session_id=sid).exists()


def test_a_step_states_variables_memory_and_the_events_own_fields_reach_the_step(api, project, tmp_path):
    # Accepted and then dropped: the step showed no variables, no notes, reward 0 and no time.
    event = {"kind": "step_end", "payload": {}, "timestamp": "2026-03-01T10:00:05Z", "reward": 2.0, "tokens": 9,
             "step_state": {"step": 7, "action_type": "code", "success": True,
                            "variables": {"a": 1}, "memory_notes": ["m1"]}}  # fmt: skip
    created = new_session(api)
    assert append(api, created["id"], [event]).status_code == 200
    path = tmp_path / "canonical.jsonl"
    path.write_bytes(orjson.dumps(event) + b"\n")
    [outcome] = import_file(path=path, project=project, format="canonical")
    for session in (Session.objects.get(pk=created["id"]), outcome.session):
        step = step_state_at(session=session, index=0)
        assert (step["variables"], step["memory_notes"]) == ({"a": 1}, ["m1"])
        assert (step["step"], step["reward"], step["tokens_used"]) == (7, 2.0, 9)
        assert step["timestamp"] == "2026-03-01T10:00:05+00:00" and step["success"] is True
    for session in (Session.objects.get(pk=created["id"]), outcome.session):
        assert verify_session(session=session).valid  # what the writer stored, derived again from the record
    # Both a step state's variables and a state change's: one was dropped without a word.
    both = {**event, "state_change": {"variables": {"g": 1}}}
    response = append(api, created["id"], [both])
    assert response.status_code == 400
    assert response.json()["detail"].startswith("events[0].state_change: step_state.variables also sets the variables")
    path.write_bytes(orjson.dumps(both) + b"\n")
    [refused] = import_file(path=path, project=project, format="canonical")
    assert refused.session is None and "state_change: step_state.variables also sets the variables" in refused.error


def test_a_step_states_own_values_win_and_its_variables_are_the_whole_state(api, project, tmp_path):
    # What the step state gives itself is kept; what it leaves out comes from the event; its
    # variables replace the ones before (a variable the agent deleted is gone at that step).
    first = {
        "kind": "step_end",
        "payload": {},
        "timestamp": "2026-03-01T10:00:05Z",
        "reward": 2.0,
        "tokens": 9,
        "cumulative_reward": 4.5,
        "duration_ms": 120.0,
        "step_state": {"action_type": "code", "success": True, "variables": {"a": 1, "b": 2}},
    }
    second = {"kind": "step_end", "payload": {}, "timestamp": "2026-03-01T10:00:09Z", "reward": 2.0, "step": 5,
              "step_state": {"step": 3, "reward": 5.0, "timestamp": "2026-03-01T09:59:00+00:00",
                             "action_type": "code", "success": True, "variables": {"a": 1}}}  # fmt: skip
    path = tmp_path / "canonical.jsonl"
    path.write_bytes(orjson.dumps(first) + b"\n" + orjson.dumps(second) + b"\n")
    [outcome] = import_file(path=path, project=project, format="canonical")
    assert outcome.error is None and outcome.problems == [], outcome.to_dict()
    one, two = (step_state_at(session=outcome.session, index=i) for i in (0, 1))
    assert (one["cumulative_reward"], one["duration_ms"], one["tokens_used"]) == (4.5, 120.0, 9)
    assert one["variables"] == {"a": 1, "b": 2} and two["variables"] == {"a": 1}
    assert (two["step"], two["reward"], two["timestamp"]) == (3, 5.0, "2026-03-01T09:59:00+00:00")
    assert verify_session(session=outcome.session).valid
    # Memory set twice, by the step state's notes and the state change: refused, as variables are.
    both = {**first, "step_state": {"action_type": "code", "memory_notes": ["m"]}, "state_change": {"memory": ["n"]}}
    sid = new_session(api)["id"]
    response = append(api, sid, [both])
    assert response.status_code == 400
    assert response.json()["detail"].startswith("events[0].state_change: step_state.memory_notes also sets the memory")


def test_token_totals_stop_at_the_64_bit_limit_instead_of_failing_the_write(api, project):
    sid = new_session(api)["id"]
    events = [{"kind": "llm_response", "payload": {}, "tokens": 2**62} for _ in range(3)]
    response = append(api, sid, events)
    assert response.status_code == 200, response.content
    totals = list(Event.objects.filter(session_id=sid).order_by("seq").values_list("tokens", "tokens_total"))
    assert totals == [(2**62, 2**62), (2**62, 2**63 - 1), (2**62, 2**63 - 1)]
    assert Session.objects.get(pk=sid).tokens == 2**63 - 1


def test_appending_to_an_unknown_session_is_a_404(api, project):
    response = append(api, 999999, list(canonical_records(1)))
    assert response.status_code == 404
    assert response.json()["detail"] == "session 999999 not found"


def test_appending_to_an_ended_session_is_a_409(api, project):
    sid = new_session(api)["id"]
    post_json(api, f"/api/sessions/{sid}/end", {"status": "completed"})
    response = append(api, sid, list(canonical_records(1)))
    assert response.status_code == 409
    assert "completed" in response.json()["detail"]


def test_a_final_answer_no_utf8_text_holds_is_a_400_and_the_session_stays_live(api, project):
    sid = new_session(api)["id"]
    body = b'{"status": "completed", "final_answer": "\\ud800"}'  # a lone surrogate escape
    response = api.post(f"/api/sessions/{sid}/end", body, content_type="application/json")
    assert response.status_code == 400  # was a 500 from the session's row
    assert response.json()["detail"].startswith("final_answer: cannot be stored: a lone surrogate escape")
    assert Session.objects.get(pk=sid).status == Session.Status.LIVE
    assert post_json(api, f"/api/sessions/{sid}/end", {"status": "completed", "final_answer": "ok"}).status_code == 200


def test_the_dashboard_login_may_append_with_its_csrf_token(project, django_user_model):
    user = member("ann")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/accounts/login/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = client.post("/api/sessions", data=b"{}", content_type="application/json",
                           headers={"x-csrftoken": token})  # fmt: skip
    assert response.status_code == 201
    without = Client(enforce_csrf_checks=True)
    without.force_login(user)
    assert without.post("/api/sessions", data=b"{}", content_type="application/json").status_code in (401, 403)


# --- rlm-code native and format detection -------------------------------------------------------


def test_rlm_native_batches_give_the_same_session_as_importing_the_file(api, project, tmp_path):
    path = tmp_path / "native.jsonl"
    record_full_session(path, steps=5, large_output_at=None)
    lines = path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    sid = new_session(api, task="")["id"]
    # Batches cut inside steps: the converter's state must carry across them.
    cuts = [0, 7, 8, 23, len(records)]
    for a, b in zip(cuts, cuts[1:]):
        response = append(api, sid, records[a:b])  # format detected from the records
        assert response.status_code == 200, response.content
        assert response.json()["format"] == "rlm_native"
    live = Session.objects.get(pk=sid)
    (outcome,) = import_file(path=path, project=project)
    imported = outcome.session
    assert live.source_format == "rlm_native"
    assert live.task == imported.task and live.run_id == imported.run_id
    columns = ("seq", "kind", "step", "step_pos", "tokens", "reward", "is_error", "pair_seq",
               "payload", "step_state", "state_change", "tokens_total", "reward_total", "steps_total")  # fmt: skip

    def rows(session: Session) -> list[tuple]:
        # JSON compared as values: on PostgreSQL the converter state saved between batches is
        # jsonb, which does not keep the key order of a half-built step's raw_action.
        return [
            tuple(orjson.loads(v) if c in ("payload", "step_state", "state_change") and v else v
                  for c, v in zip(columns, row))
            for row in Event.objects.filter(session=session).order_by("seq").values_list(*columns)
        ]  # fmt: skip

    live_rows, file_rows = rows(live), rows(imported)
    assert len(live_rows) == len(records) and live_rows == file_rows
    assert (live.step_count, live.tokens, live.reward) == (imported.step_count, imported.tokens, imported.reward)


def test_an_unknown_rlm_event_type_is_kept_and_reported_as_a_warning(api, project):
    sid = new_session(api)["id"]
    record = {"event_type": "telepathy", "timestamp": "2026-02-08T10:30:00+00:00", "step": 0, "data": {"x": 1}}
    body = append(api, sid, [record]).json()
    assert body["stored"] == 1
    assert body["warnings"][0]["index"] == 0 and body["warnings"][0]["field"] == "event_type"
    assert Event.objects.get(session_id=sid).kind == "custom"


def test_an_rlm_record_without_event_type_is_refused_when_the_format_is_given(api, project):
    sid = new_session(api)["id"]
    response = append(api, sid, [{"timestamp": "2026-02-08T10:30:00+00:00", "data": {}}], format="rlm_native")
    assert response.status_code == 400
    assert response.json()["errors"][0] == {
        "index": 0,
        "field": "event_type",
        "message": "missing event_type, or not a string; line skipped",
    }


# --- ending --------------------------------------------------------------------------------------


def test_ending_a_session_sets_its_status_and_final_answer(
    api, project, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    monkeypatch.setattr("sessions_app.jobs.enqueue_verify", lambda *, session_ids: queued.extend(session_ids))
    sid = new_session(api)["id"]
    append(api, sid, list(canonical_records(8)))
    with django_capture_on_commit_callbacks(execute=True):
        response = post_json(api, f"/api/sessions/{sid}/end", {"status": "failed", "final_answer": "gave up"})
    assert response.status_code == 200
    assert response.json()["status"] == "failed"
    session = Session.objects.get(pk=sid)
    # Ending queues a verification; until it runs the session is not called verified.
    assert (session.status, session.final_answer, session.chain_state) == ("failed", "gave up", "unverified")
    assert queued == [sid]
    assert session.ended_at is not None
    # Repeating the same end is harmless (a client retrying); another status is a conflict.
    assert post_json(api, f"/api/sessions/{sid}/end", {"status": "failed"}).status_code == 200
    assert post_json(api, f"/api/sessions/{sid}/end", {"status": "completed"}).status_code == 409


def test_ending_with_an_unknown_status_is_a_400(api, project):
    sid = new_session(api)["id"]
    response = post_json(api, f"/api/sessions/{sid}/end", {"status": "done"})
    assert response.status_code == 400 and response.json()["detail"].startswith("status:")
    assert post_json(api, "/api/sessions/424242/end", {"status": "completed"}).status_code == 404


# --- concurrency ---------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_clients_appending_at_once_never_duplicate_or_skip_a_seq(api_key):
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers need PostgreSQL (the SQLite test database is in memory)")
    Project.get_default()
    sid = new_session(Client(headers={"authorization": f"Bearer {api_key}"}))["id"]
    batches, size = 12, 50
    failures: list[str] = []
    barrier = threading.Barrier(3)

    def writer(name: str) -> None:
        client = Client(headers={"authorization": f"Bearer {api_key}"})
        try:
            barrier.wait()
            for b in range(batches):
                records = list(canonical_records(size, tag=f"{name}{b}-"))
                response = append(client, sid, records, idempotency_key=f"{name}-{b}")
                if response.status_code != 200:
                    failures.append(f"{name}-{b}: {response.status_code} {response.content[:200]!r}")
            # Both writers also send one batch under the same key at the same moment.
            response = append(client, sid, list(canonical_records(size, tag="shared-")), idempotency_key="shared")
            if response.status_code != 200:
                failures.append(f"{name}-shared: {response.status_code}")
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures
    expected = 3 * batches * size + size  # the shared batch once
    seqs = list(Event.objects.filter(session_id=sid).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(expected))
    ok, head = chain_of(sid)
    session = Session.objects.get(pk=sid)
    assert ok and head == session.head_hash and session.event_count == expected
    assert IngestBatch.objects.filter(session_id=sid).count() == 3 * batches + 1
    # Every batch's events are contiguous: a batch is appended whole, never interleaved.
    for batch in IngestBatch.objects.filter(session_id=sid):
        tags = {orjson.loads(p)["text"].split("event")[0] for p in
                Event.objects.filter(session_id=sid, seq__gte=batch.first_seq,
                                     seq__lt=batch.first_seq + batch.count).values_list("payload", flat=True)}  # fmt: skip
        assert len(tags) == 1


# --- uploads -------------------------------------------------------------------------------------


@pytest.fixture
def data_dir(settings, tmp_path) -> Path:
    settings.DATA_DIR = tmp_path / "data"
    return settings.DATA_DIR


def test_upload_answers_202_with_a_status_url_that_reports_the_import(
    api, project, data_dir, tmp_path, django_capture_on_commit_callbacks
):
    source = write_canonical_file(tmp_path / "up.jsonl", sessions=2, events=12)
    with source.open("rb") as handle, django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/imports", {"file": handle})
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status_url"] == f"/api/imports/{body['job']}" and body["status"] == "queued"
    job = ImportJob.objects.get(pk=body["job"])
    assert job.original_name == "up.jsonl" and job.created_by == "owner-of-agent"

    from sessions_app.jobs import run_import

    run_import(job_id=job.pk)  # what the worker does (a real qcluster: tests/test_jobs.py)
    status = api.get(body["status_url"]).json()
    assert status["status"] == "done" and status["detected_format"] == "canonical"
    assert status["sessions_done"] == 2 and status["events_done"] == 28
    assert status["bytes_done"] == status["bytes_total"] == source.stat().st_size
    assert sorted(s["session"] for s in status["sessions"]) == sorted(Session.objects.values_list("pk", flat=True))


def test_upload_status_lists_problems_by_line(api, project, data_dir, tmp_path):
    source = write_canonical_file(tmp_path / "bad.jsonl", events=6)
    lines = source.read_bytes().splitlines()
    lines[3] = b'{"kind": "llm_call", "payload": {}, "tokens": "many"}'
    lines.insert(5, b"{broken")
    source.write_bytes(b"\n".join(lines) + b"\n")
    with source.open("rb") as handle:
        job_id = api.post("/api/imports", {"file": handle, "format": "canonical"}).json()["job"]
    from sessions_app.jobs import run_import

    run_import(job_id=job_id)
    status = api.get(f"/api/imports/{job_id}").json()
    assert status["status"] == "done" and status["problem_count"] == 2
    assert [(p["line"], p["field"]) for p in status["problems"]] == [(4, "tokens"), (6, "line")]


def test_upload_larger_than_the_limit_is_a_413_before_the_body_is_read(api, project, data_dir, settings, tmp_path):
    settings.MAX_UPLOAD_MB = 1
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * (2 * 1024 * 1024))
    with big.open("rb") as handle:
        response = api.post("/api/imports", {"file": handle})
    assert response.status_code == 413
    assert "REPLAY_MAX_UPLOAD_MB" in response.json()["detail"]
    assert not ImportJob.objects.exists() and not data_dir.exists()


def test_upload_without_a_file_or_with_an_unknown_format_is_a_400_and_an_unknown_project_a_404(
    api, project, data_dir, tmp_path
):
    assert api.post("/api/imports", {}).status_code == 400
    source = write_canonical_file(tmp_path / "x.jsonl", events=2)
    with source.open("rb") as handle:
        unknown_format = api.post("/api/imports", {"file": handle, "format": "yaml"})
    with source.open("rb") as handle:
        unknown_project = api.post("/api/imports", {"file": handle, "project": "nope"})
    assert unknown_format.status_code == 400 and unknown_project.status_code == 404
    assert "yaml" in unknown_format.json()["detail"] and "nope" in unknown_project.json()["detail"]
    assert not ImportJob.objects.exists()


def test_status_of_an_unknown_import_is_a_404(api, project):
    assert api.get("/api/imports/31337").status_code == 404


def test_a_checkpoint_event_names_its_position_and_keeps_the_session(api, project):
    from sessions_app.models import Checkpoint

    sid = new_session(api)["id"]
    append(api, sid, list(canonical_records(5)))
    batch = list(canonical_records(3, start=5))
    batch.insert(2, {"kind": "checkpoint", "payload": {"name": "before retry", "note": "why"}})
    append(api, sid, batch)
    checkpoint = Checkpoint.objects.get(session_id=sid)
    assert (checkpoint.name, checkpoint.seq, checkpoint.note) == ("before retry", 7, "why")
    assert Event.objects.get(session_id=sid, seq=7).kind == "checkpoint"


def test_a_live_checkpoint_name_has_its_hidden_characters_written_out(api, project):
    from sessions_app.models import Checkpoint

    sid = new_session(api)["id"]
    batch = list(canonical_records(2))
    batch.append({"kind": "checkpoint", "payload": {"name": "ok\u202etxt.exe"}})
    assert append(api, sid, batch).status_code == 200
    assert Checkpoint.objects.get(session_id=sid).name == "ok\\u202etxt.exe"


def test_agentlens_batches_give_the_same_events_as_importing_the_file(api, project):
    path = Path(__file__).parent / "fixtures" / "agentlens" / "two_sessions.ndjson"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    first_id = records[0]["sessionId"]
    mine = [r for r in records if r["sessionId"] == first_id]
    sid = new_session(api, source_session_id=first_id)["id"]
    half = len(mine) // 2
    for part in (mine[:half], mine[half:]):
        response = append(api, sid, part)
        assert response.status_code == 200, response.content
        assert response.json()["format"] == "agentlens" and response.json()["warnings"] == []
    imported = next(o.session for o in import_file(path=path, project=project)
                    if o.session.source_session_id == first_id)  # fmt: skip
    columns = ("kind", "source_type", "tool", "pair_seq", "cost_usd", "tokens", "is_error",
               "step_pos", "cost_total", "tokens_total", "errors_total")  # fmt: skip
    live_rows = list(Event.objects.filter(session_id=sid).order_by("seq").values_list(*columns))
    file_rows = list(Event.objects.filter(session=imported).order_by("seq").values_list(*columns))
    assert len(live_rows) == len(mine) and live_rows == file_rows
    assert [orjson.loads(p) for p in Event.objects.filter(session_id=sid).order_by("seq").values_list("payload", flat=True)] == [
        orjson.loads(p) for p in Event.objects.filter(session=imported).order_by("seq").values_list("payload", flat=True)]  # fmt: skip


def test_a_live_sessions_original_without_payloads_imports_again_as_canonical(api, project, tmp_path):
    # `payload` is optional: a client that sends none made an original export that detection
    # did not recognise as canonical events ("unknown format"). A kind unknown in a file is a
    # problem on its line, not a file of no format.
    sid = new_session(api)["id"]
    events = [{"kind": "user_message"}, {"kind": "llm_call", "tool": "gpt-4o", "tokens": 3}, {"kind": "final"}]
    assert append(api, sid, events).status_code == 200
    response = api.get(f"/api/sessions/{sid}/export?format=original")
    assert response.status_code == 200
    original = b"".join(response.streaming_content)
    assert [orjson.loads(line) for line in original.splitlines()] == events
    path = tmp_path / "again.jsonl"
    path.write_bytes(original)
    outcome = import_file(path=path, project=project)[0]
    assert (outcome.error, outcome.format, outcome.events, outcome.problems) == (None, "canonical", 3, [])
    kinds = list(Event.objects.filter(session=outcome.session).order_by("seq").values_list("kind", flat=True))
    assert kinds == ["user_message", "llm_call", "final"]
    path.write_bytes(original + b'{"kind": "thought"}\n' + original)
    outcome = import_file(path=path, project=project)[0]
    assert (outcome.format, outcome.events) == ("canonical", 6)
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(4, "kind")], outcome.problems


@pytest.mark.parametrize("answered_at", ["later batch", "nowhere"])
def test_a_verify_while_the_next_batch_answers_a_call_finds_no_break(api, project, monkeypatch, answered_at):
    # Verify counts the events, then reads them chunk by chunk; a live session's next batch
    # stored a call's answer meanwhile and set the call's pair_seq past the count: the intact
    # session was stored as broken at the call (a concurrency test). A pair past every event
    # stored is no answer, and still found.
    from sessions_app import verification

    sid = new_session(api)["id"]
    call = {"kind": "tool_call", "tool": "search", "pair_id": "c1", "payload": {"q": "x"}}
    assert append(api, sid, [{"kind": "user_message", "payload": {"text": "hi"}}, call]).status_code == 200
    read = verification._read
    appended = []

    def read_after_the_next_batch(*args, **kwargs):
        if not appended:
            answer = {"kind": "tool_response", "tool": "search", "pair_id": "c1", "payload": {"r": 1}}
            assert append(api, sid, [answer]).status_code == 200
            appended.append(True)
            if answered_at == "nowhere":
                Event.objects.filter(session_id=sid, seq=1).update(pair_seq=7)
        return read(*args, **kwargs)

    monkeypatch.setattr(verification, "_read", read_after_the_next_batch)
    result = verify_session(session=Session.objects.get(pk=sid))
    assert Event.objects.filter(session_id=sid).count() == 3
    if answered_at == "later batch":
        assert result.valid and Session.objects.get(pk=sid).chain_broken_seq is None, result
        assert chain_of(sid)[0]  # and verified whole once counted
    else:
        assert not result.valid and result.first_broken_seq == 1, result


@pytest.mark.parametrize("number", ["NaN", "Infinity", "1e400"])
def test_a_non_finite_number_in_a_live_variable_is_stored_as_null(api, project, number):
    # Python's json read NaN, Infinity and 1e400 as floats the session's stored state (a JSON
    # column) refuses: a 500, on SQLite and PostgreSQL.
    sid = new_session(api)["id"]
    body = (
        '{"format": "rlm_native", "events": [{"event_type": "step_end", "step": 1, "run_id": "r",'
        ' "timestamp": "2026-02-08T10:00:00+00:00", "data": {"action": {}, "observation": {},'
        ' "variables": {"g": {"a": ' + number + ', "b": 2}}}}]}'
    ).encode()
    response = post_json(api, f"/api/sessions/{sid}/events", body)
    assert response.status_code == 200, response.content
    stored = Event.objects.get(session_id=sid)
    assert orjson.loads(stored.state_change)["variables"] == {"g": {"a": None, "b": 2}}
