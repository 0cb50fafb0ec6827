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
