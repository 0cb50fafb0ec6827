"""Authentication (401), parameter errors as 400 with a message (never ninja's 422), and the
last-resort JSON 500."""

from __future__ import annotations

import logging

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from sessions_app.models import ApiKey, Session

from .builders_replay import api, api_key, get_json  # noqa: F401  (fixture)
from .builders_teams import member

pytestmark = pytest.mark.django_db

READ_URLS = [
    "/api/sessions",
    "/api/sessions/{id}",
    "/api/sessions/{id}/replay",
    "/api/sessions/{id}/summary",
    "/api/sessions/{id}/steps",
    "/api/sessions/{id}/steps/0",
    "/api/sessions/{id}/context?seq=0",
    "/api/sessions/{id}/search?q=x",
    "/api/sessions/{id}/checkpoints",
    "/api/sessions/{id}/export",
    "/api/sessions/{id}/verify",
    "/api/compare?a={id}&b={id}",
]


@pytest.mark.parametrize("url", READ_URLS)
def test_every_read_endpoint_needs_a_valid_key(make_session, url):
    session = make_session(events=10)
    url = url.format(id=session.pk)
    for client in (Client(), Client(HTTP_AUTHORIZATION="Bearer rpl_not-a-key"), Client(HTTP_AUTHORIZATION="Basic abc")):
        response = client.get(url)
        assert response.status_code == 401
        assert orjson.loads(response.content) == {"detail": "Unauthorized"}
    assert Client(HTTP_AUTHORIZATION=f"Bearer {api_key()}").get(url).status_code == 200


def test_a_revoked_key_is_refused(make_session):
    key = api_key("old")
    ApiKey.objects.update(revoked_at=timezone.now())
    assert Client(HTTP_AUTHORIZATION=f"Bearer {key}").get("/api/sessions").status_code == 401


def test_unknown_sessions_are_404_on_every_endpoint(api):
    for url in READ_URLS[1:-1]:
        response = api.get(url.format(id=31337))
        assert response.status_code == 404, url
        assert orjson.loads(response.content) == {"detail": "session 31337 not found"}


def test_the_dashboard_login_can_read_the_api(make_session):
    user = member("ana")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    session = make_session(events=4)
    assert client.get(f"/api/sessions/{session.pk}/summary").status_code == 200
    # Unsafe methods with the login cookie need the CSRF token.
    assert client.delete(f"/api/sessions/{session.pk}").status_code in (401, 403)
    assert Session.objects.filter(pk=session.pk).exists()


def test_validation_errors_are_400_naming_the_field(api, make_session):
    session = make_session(events=4)
    body = get_json(api, f"/api/sessions/{session.pk}/steps?offset=x&limit=0", 400)
    assert "offset: Input should be a valid integer" in body["detail"]
    assert "limit: Input should be greater than or equal to 1" in body["detail"]
    assert {e["field"] for e in body["errors"]} == {"offset", "limit"}
    assert "session_id: Input should be a valid integer" in get_json(api, "/api/sessions/abc/summary", 400)["detail"]


def test_a_bug_is_a_logged_json_500_without_traceback(api, make_session, monkeypatch, caplog):
    session = make_session(events=4)

    def broken(**kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("sessions_app.replay.get_summary", broken)
    with caplog.at_level(logging.ERROR, logger="replay.api"):
        response = api.get(f"/api/sessions/{session.pk}/summary")
    assert response.status_code == 500
    assert orjson.loads(response.content) == {"detail": "internal error; it has been logged"}
    assert b"secret" not in response.content and b"Traceback" not in response.content
    assert "secret internals" in caplog.text


def test_openapi_schema_and_docs_are_served(client):
    schema = client.get("/api/openapi.json")
    assert schema.status_code == 200
    paths = orjson.loads(schema.content)["paths"]
    for path in (
        "/api/sessions",
        "/api/sessions/{session_id}/replay",
        "/api/compare",
        "/api/sessions/{session_id}/checkpoints/{name}",
        "/api/sessions/{session_id}/verify",
    ):
        assert path in paths
    replay_params = {p["name"] for p in paths["/api/sessions/{session_id}/replay"]["get"]["parameters"]}
    assert {"offset", "limit", "eventTypes", "includeContext"} <= replay_params
    docs = client.get("/api/docs")
    assert docs.status_code == 200 and b"openapi.json" in docs.content
