"""Values at the edge of what JSON and the database hold, posted to AgentLens's `POST /api/events`
and to the live ingest (`POST /api/sessions/{id}/events`): each is stored, or refused with a 400
naming the event and its field, never a 500 (an AgentLens SDK retries a 5xx for ever). A security
review against a running server found each of these answered 500.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from django.test import Client

from sessions_app.ingest.agentlens_events import INGEST_MARK
from sessions_app.models import Project, Session

from .builders_teams import maintainer_key


def keyed() -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {maintainer_key()}")


def agentlens_event(payload: bytes = b"{}", timestamp: str = "2026-02-08T10:30:00Z", **members: str) -> bytes:
    """One AgentLens event as JSON text: the payload as written (NaN and lone surrogate escapes
    are no Python values orjson writes)."""
    fields = {"sessionId": "ses_edge", "agentId": "a", "eventType": "custom", **members}
    head = orjson.dumps(fields)[:-1]
    return head + b',"payload":' + payload + b',"timestamp":' + orjson.dumps(timestamp) + b"}"


def post_agentlens(*events: bytes):
    return keyed().post("/api/events", b'{"events":[' + b",".join(events) + b"]}", content_type="application/json")


def post_live(format: str, *events: bytes):
    client = keyed()
    created = client.post("/api/sessions", {"project": Project.get_default().slug}, content_type="application/json")
    assert created.status_code == 201, created.content
    body = b'{"format":' + orjson.dumps(format) + b',"events":[' + b",".join(events) + b"]}"
    response = client.post(created.json()["events_url"], body, content_type="application/json")
    return response, Session.objects.get(pk=created.json()["id"])


def kept(source_id: str = "ses_edge") -> Session:
    return Session.objects.get(source_session_id=source_id, metadata__ingest=INGEST_MARK)


LAST = datetime.max.replace(tzinfo=UTC)


# --- times at the end of the year 9999 ---------------------------------------------------------


@pytest.mark.parametrize("timestamp", ["9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999999"])
def test_an_agentlens_event_at_the_last_microsecond_of_9999_is_stored_and_ends_its_session(db, timestamp):
    # Its time in milliseconds rounds to the year 10000, where the session's start and end were
    # computed from: a 500.
    response = post_agentlens(agentlens_event(timestamp=timestamp), agentlens_event(timestamp=timestamp,
                              eventType="session_ended"))  # fmt: skip
    assert response.status_code == 201, response.content
    session = kept()
    assert session.event_count == 2 and session.status == Session.Status.COMPLETED
    assert session.started_at == LAST and session.ended_at == LAST


@pytest.mark.parametrize(
    ("format", "record"),
    [
        ("canonical", b'{"kind":"custom","payload":{},"timestamp":"9999-12-31T23:59:59.999999Z"}'),
        ("rlm_native", b'{"event_type":"iteration_start","data":{},"timestamp":"9999-12-31T23:59:59.999999"}'),
        ("agentlens", agentlens_event(timestamp="9999-12-31T23:59:59.99999Z")),
    ],
)
def test_a_live_event_at_the_end_of_9999_is_stored_and_its_session_ends(db, format, record):
    response, session = post_live(format, record)
    assert response.status_code == 200, response.content
    session.refresh_from_db()
    assert session.event_count == 1 and session.started_at == LAST
    ended = keyed().post(f"/api/sessions/{session.pk}/end", {"status": "completed"}, content_type="application/json")
    assert ended.status_code == 200, ended.content
    session.refresh_from_db()
    assert session.ended_at == LAST


# --- numbers JSON has no double for, lone surrogates, deep nesting ----------------------------

BIG = b"99999999999999999999999999"  # past 64 bits: orjson reads it as the double 1e26
NAN_AND_BIG = b'{"a":NaN,"n":' + BIG + b"}"  # the NaN sends the body to the standard json module


def payloads(session: Session) -> list[dict]:
    return [orjson.loads(event.payload) for event in session.events.order_by("seq")]


def test_an_integer_past_64_bits_beside_a_nan_is_stored_as_either_is_alone(db):
    # Alone each was stored; together the integer stayed whole and could not be written: a 500.
    response = post_agentlens(
        agentlens_event(b'{"a":NaN}', "2026-02-08T10:30:00Z"),
        agentlens_event(b'{"n":' + BIG + b"}", "2026-02-08T10:30:01Z"),
        agentlens_event(NAN_AND_BIG, "2026-02-08T10:30:02Z"),
        agentlens_event(b'{"n":-1' + b"0" * 400 + b"}", "2026-02-08T10:30:03Z"),  # past any double
    )
    assert response.status_code == 201, response.content
    stored = payloads(kept())
    assert [p["a"] for p in (stored[0], stored[2])] == [None, None]
    assert stored[1]["n"] == stored[2]["n"] == 1e26
    assert stored[3]["n"] is None  # JavaScript's -Infinity, which JSON.stringify writes as null
    assert len({e["hash"] for e in response.json()["events"]}) == 4


@pytest.mark.parametrize(
    ("format", "record"),
    [
        ("canonical", b'{"kind":"custom","payload":' + NAN_AND_BIG + b',"timestamp":"2026-02-08T10:30:00Z"}'),
        ("rlm_native", b'{"event_type":"iteration_start","data":' + NAN_AND_BIG + b',"timestamp":"2026-02-08"}'),
        ("agentlens", agentlens_event(NAN_AND_BIG)),
    ],
)
@pytest.mark.parametrize("idempotency_key", [None, "k1"])
def test_a_live_batch_with_an_integer_past_64_bits_beside_a_nan_is_stored(db, format, record, idempotency_key):
    client = keyed()
    created = client.post("/api/sessions", {"project": Project.get_default().slug}, content_type="application/json")
    body = b'{"format":' + orjson.dumps(format) + b',"idempotency_key":' + orjson.dumps(idempotency_key)
    body += b',"events":[' + record + b"]}"
    for _ in range(2):  # the retry answers as the first time
        response = client.post(created.json()["events_url"], body, content_type="application/json")
        assert response.status_code == 200, response.content
    session = Session.objects.get(pk=created.json()["id"])
    assert session.event_count == (1 if idempotency_key else 2)
    assert orjson.loads(session.events.get(seq=0).raw).get("payload", {}).get("n", 1e26) == 1e26


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        (b'{"a":1,"s":"ab\\ud800"}', "events.1.payload.s"),
        (b'{"k\\udfff":1}', "events.1.payload.k\\udfff"),
        (b'{"list":[1,"\\ud800",' + BIG + b"]}", "events.1.payload.list[1]"),
        (b'{},"metadata":{"m":{"n":"\\udc00"}}', "events.1.metadata.m.n"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_its_event_and_field_and_nothing_is_stored(db, payload, path):
    # orjson refuses the escape, the standard json module reads it, no UTF-8 text holds it: a 500.
    response = post_agentlens(agentlens_event(), agentlens_event(payload, "2026-02-08T10:30:01Z"))
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["details"][0]["path"] == path and "lone surrogate" in body["details"][0]["message"]
    assert body["errors"][0]["index"] == 1 and body["error"].startswith("events[1].")
    assert not Session.objects.filter(source_session_id="ses_edge").exists()


def nested(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


def test_a_payload_nested_past_what_can_be_stored_is_a_400_naming_its_event_and_200_levels_are_stored(db):
    response = post_agentlens(agentlens_event(), agentlens_event(nested(300), "2026-02-08T10:30:01Z"))
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["details"] == [
        {"path": "events.1.payload", "message": "cannot be stored: nested deeper than 254 levels"}
    ]
    assert not Session.objects.filter(source_session_id="ses_edge").exists()
    assert post_agentlens(agentlens_event(nested(200))).status_code == 201
    assert kept().event_count == 1


@pytest.mark.parametrize(
    ("format", "record", "field"),
    [
        ("canonical", b'{"kind":"custom","payload":%s,"timestamp":"2026-02-08T10:30:00Z"}', "payload"),
        ("rlm_native", b'{"event_type":"iteration_start","data":%s,"timestamp":"2026-02-08"}', "data"),
        ("agentlens", agentlens_event(b"%s"), "payload"),
    ],
)
def test_a_live_record_that_cannot_be_stored_is_a_400_naming_its_index_and_field(db, format, record, field):
    for value, problem, where in [
        (nested(300), "nested deeper than 254 levels", field),
        (b'{"s":"\\ud800","n":' + BIG + b"}", "lone surrogate", f"{field}.s"),
    ]:
        response, session = post_live(format, record % b"{}", record % value)
        assert response.status_code == 400, response.content
        assert response.json()["errors"][0]["index"] == 1 and response.json()["errors"][0]["field"] == where
        assert problem in response.json()["errors"][0]["message"]
        session.refresh_from_db()
        assert session.event_count == 0


# --- what a new session and session_started say of the session ----------------------------------


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b'"task":"ab\\ud800"', 400, "task"),
        (b'"metadata":{"k":["\\udc00"]}', 400, "metadata.k[0]"),
        (b'"metadata":{"k":' + nested(300) + b"}", 400, "metadata.k"),
        (b'"metadata":{"k":NaN,"n":' + BIG + b',"i":-Infinity}', 201, None),
    ],
)
def test_a_new_live_sessions_fields_are_stored_or_a_400_naming_the_field(db, body, status, field):
    # Each answered 500: the request's digest could not be written, or the database's JSON check
    # refused the NaN Django's JSONField wrote.
    project = b'{"project":' + orjson.dumps(Project.get_default().slug) + b","
    response = keyed().post("/api/sessions", project + body + b"}", content_type="application/json")
    assert response.status_code == status, response.content
    if field is None:
        metadata = Session.objects.get().metadata
        # (PostgreSQL's jsonb gives 1e26 back as the integer it equals: the same JSON number.)
        assert metadata["k"] is None and metadata["i"] is None and float(metadata["n"]) == 1e26
    else:
        assert response.json()["errors"][0]["field"] == field and not Session.objects.exists()


def test_session_started_tags_holding_nan_are_kept_as_null_in_the_sessions_metadata(db):
    # The database's JSON check refused the NaN Django's JSONField wrote: a 500.
    started = agentlens_event(b'{"agentName":"bot","tags":[NaN,"prod",Infinity]}', eventType="session_started")
    ended = agentlens_event(b"{}", "2026-02-08T10:30:01Z", eventType="session_ended")
    response = post_agentlens(started, ended)
    assert response.status_code == 201, response.content
    session = kept()
    assert session.metadata["agentlens"]["tags"] == [None, "prod", None]
    assert session.metadata["agentlens"]["agentName"] == "bot" and session.status == Session.Status.COMPLETED


# --- amounts below zero ------------------------------------------------------------------------


def test_a_negative_cost_token_count_or_latency_is_a_warning_and_adds_nothing(db):
    # An SDK bug's -5 dollars would otherwise be subtracted from the session's spend.
    call = agentlens_event(b'{"callId":"c1","model":"m","messages":[]}', eventType="llm_call")
    answer = agentlens_event(
        b'{"callId":"c1","model":"m","completion":"ok","costUsd":-5,"latencyMs":-5,'
        b'"usage":{"inputTokens":-100,"outputTokens":17}}',
        timestamp="2026-02-08T10:30:01Z", eventType="llm_response",
    )  # fmt: skip
    response = post_agentlens(call, answer)
    assert response.status_code == 201, response.content
    said = {(w["field"], w["message"]) for w in response.json()["warnings"]}
    assert said >= {
        ("payload.costUsd", "a negative amount: -5 (ignored)"),
        ("payload.latencyMs", "a negative amount: -5 (ignored)"),
        ("payload.usage.inputTokens", "a negative amount: -100 (ignored)"),
    }, said
    session = kept()
    assert session.cost_usd == 0 and session.tokens == 17
    assert session.events.get(seq=1).cost_usd is None


@pytest.mark.parametrize(("event_type", "key", "id_key"), [("tool_call", "arguments", "callId"),
                                                          ("approval_requested", "params", "requestId")])  # fmt: skip
def test_an_open_call_whose_arguments_hold_nan_is_stored_and_answered_later(db, event_type, key, id_key):
    # The open call's arguments are remembered between batches (its step's raw_action): a NaN in
    # them reached the saved JSON state, which the database refused (a 500, retried for ever).
    payload = b'{"' + id_key.encode() + b'":"c1","toolName":"t","action":"a","' + key.encode() + b'":{"a":NaN,"b":1}}'
    response = post_agentlens(agentlens_event(payload, eventType=event_type))
    assert response.status_code == 201, response.content
    answer_type, answer = (("tool_response", b'{"callId":"c1","toolName":"t","result":"ok"}') if event_type == "tool_call"
                           else ("approval_granted", b'{"requestId":"c1","action":"a","decidedBy":"ada"}'))  # fmt: skip
    response = post_agentlens(agentlens_event(answer, "2026-02-08T10:30:01Z", eventType=answer_type))
    assert response.status_code == 201, response.content
    (closing,) = [e for e in kept().events.all() if e.step_state]
    raw_action = orjson.loads(closing.step_state)["raw_action"]
    assert raw_action["arguments" if key == "arguments" else "params"] == {"a": None, "b": 1}


def test_a_search_never_quotes_content_its_sender_flagged_redacted(db):
    # Stored as received (a live batch keeps its records), shown "[REDACTED]": a search's snippet
    # quoted it from the record, to anyone who may search, a link's visitor too (review).
    from sessions_app import replay

    call = agentlens_event(b'{"callId":"c1","provider":"p","model":"m","messages":[{"role":"user",'
                           b'"content":"my ssn is 078-05-1120"}],"redacted":true}', eventType="llm_call")  # fmt: skip
    answer = agentlens_event(b'{"callId":"c1","provider":"p","model":"m","completion":"the password is hunter2",'
                             b'"redacted":true,"costUsd":0.1,"usage":{"totalTokens":5}}',
                             "2026-02-08T10:30:01Z", eventType="llm_response")  # fmt: skip
    assert post_agentlens(call, answer).status_code == 201
    session = kept()
    for secret in ("hunter2", "078-05-1120"):
        snippets = [hit["snippet"] for hit in replay.search(session=session, q=secret)["results"]]
        assert snippets and not any(secret in snippet for snippet in snippets), snippets
