"""Idempotency keys (issue 20 item 4): the same key with the same request answers as the first
time and stores nothing; the same key with another request is a 409 naming the key, never the
first answer with the new data silently dropped."""

from __future__ import annotations

import orjson
import pytest
from django.test import Client

from sessions_app.models import Event, IngestBatch, Session

from .builders_ingest import canonical_records
from .builders_teams import acme, maintainer_key  # noqa: F401  (fixture)


@pytest.fixture
def api(db) -> Client:
    return Client(headers={"authorization": f"Bearer {maintainer_key('agent')}"})


def post(api: Client, url: str, body: dict | bytes):
    return api.post(url, data=body if isinstance(body, bytes) else orjson.dumps(body), content_type="application/json")


@pytest.fixture
def session_id(api, project) -> int:
    return post(api, "/api/sessions", {"task": "keys"}).json()["id"]


def test_a_batch_sent_again_with_its_key_gets_the_first_answer_and_stores_nothing(api, session_id):
    url = f"/api/sessions/{session_id}/events"
    records = list(canonical_records(6))
    first = post(api, url, {"events": records, "idempotency_key": "b-1"})
    # The same batch, its keys written in another order: the same request.
    reordered = (
        b'{"idempotency_key": "b-1", "events": ' + orjson.dumps([dict(reversed(r.items())) for r in records]) + b"}"
    )
    again = post(api, url, reordered)
    assert first.status_code == again.status_code == 200
    a, b = first.json(), again.json()
    assert (a["replayed"], b["replayed"]) == (False, True)
    assert [a[k] for k in ("stored", "first_seq", "event_count", "head_hash")] == [
        b[k] for k in ("stored", "first_seq", "event_count", "head_hash")
    ]
    assert Event.objects.filter(session_id=session_id).count() == 6


def test_a_key_reused_with_another_batch_is_a_409_and_the_new_events_are_not_taken_for_stored(api, session_id):
    url = f"/api/sessions/{session_id}/events"
    assert post(api, url, {"events": list(canonical_records(6)), "idempotency_key": "b-1"}).status_code == 200
    other = list(canonical_records(4, start=6))
    refused = post(api, url, {"events": other, "idempotency_key": "b-1"})
    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert "idempotency_key 'b-1' was used for a different batch" in detail and "seqs 0-5" in detail
    assert post(api, url, {"events": other, "idempotency_key": "b-1", "format": "canonical"}).status_code == 409
    assert Event.objects.filter(session_id=session_id).count() == 6
    # Under a key of their own they are stored after the first six.
    stored = post(api, url, {"events": other, "idempotency_key": "b-2"}).json()
    assert (stored["stored"], stored["first_seq"]) == (4, 6)


def test_a_batch_stored_before_digests_were_kept_still_answers_its_retry(api, session_id):
    url = f"/api/sessions/{session_id}/events"
    assert post(api, url, {"events": list(canonical_records(3)), "idempotency_key": "old"}).status_code == 200
    IngestBatch.objects.update(body_digest="")
    retry = post(api, url, {"events": list(canonical_records(3)), "idempotency_key": "old"})
    assert retry.status_code == 200 and retry.json()["replayed"] is True


def test_a_key_names_a_session_in_its_own_project_only(api, project, acme):
    """Two projects' agents may pick the same key: each gets a session of its own project, never
    the other's (its id would let it read and append there)."""
    body = {"task": "deploy", "idempotency_key": "s-1"}
    first = post(api, "/api/sessions", body)
    theirs = Client(headers={"authorization": f"Bearer {maintainer_key('acme-agent', acme)}"})
    second = post(theirs, "/api/sessions", {**body, "project": acme.slug})
    assert (first.status_code, second.status_code) == (201, 201), second.content
    assert first.json()["id"] != second.json()["id"]
    assert Session.objects.get(pk=second.json()["id"]).project_id == acme.pk
    assert Session.objects.get(pk=first.json()["id"]).project_id == project.pk


def test_a_session_created_again_with_its_key_is_the_same_session_and_another_request_a_409(api, project):
    body = {"task": "deploy", "model": "gpt-4o", "metadata": {"team": "a"}, "idempotency_key": "s-1"}
    first = post(api, "/api/sessions", body)
    again = post(api, "/api/sessions", dict(reversed(body.items())))
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    refused = post(api, "/api/sessions", {**body, "task": "another task"})
    assert refused.status_code == 409
    assert f"created session {first.json()['id']} with a different request" in refused.json()["detail"]
    assert Session.objects.count() == 1
    # What the stream later fills in (a task, a format) does not turn the retry into another request.
    url = first.json()["events_url"]
    assert post(api, url, {"events": list(canonical_records(2)), "idempotency_key": "e"}).status_code == 200
    assert post(api, "/api/sessions", body).status_code == 200
