"""Who may call the API: an API key, or the dashboard's login (with CSRF on writes)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sessions_app.models import ApiKey

from .builders_teams import key_of, maintainer_key, member


@pytest.fixture
def csrf_client() -> Client:
    return Client(enforce_csrf_checks=True)


def test_a_wrong_key_on_a_write_is_401_not_a_csrf_403(db, csrf_client):
    response = csrf_client.post(
        "/api/sessions",
        {"task": "x"},
        content_type="application/json",
        headers={"Authorization": "Bearer rpl_not-a-key"},
    )
    assert response.status_code == 401


def test_no_credentials_at_all_is_401(db, csrf_client):
    assert csrf_client.get("/api/sessions").status_code == 401
    assert csrf_client.post("/api/sessions", {}, content_type="application/json").status_code == 401


def test_a_valid_key_writes_without_csrf(db, csrf_client):
    key = maintainer_key("ci")
    response = csrf_client.post(
        "/api/sessions",
        {"task": "x"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 201


def test_a_logged_in_write_without_csrf_token_is_refused(db, csrf_client):
    csrf_client.force_login(member("ana"))
    assert csrf_client.get("/api/sessions").status_code == 200
    response = csrf_client.post("/api/sessions", {"task": "x"}, content_type="application/json")
    assert response.status_code == 403


def test_a_revoked_key_is_refused(db, csrf_client):
    from django.utils import timezone

    api_key, key = ApiKey.create_key(name="old", user=member("ana"))
    ApiKey.objects.filter(pk=api_key.pk).update(revoked_at=timezone.now())
    response = csrf_client.get("/api/sessions", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 401


def test_keys_are_stored_hashed(db):
    api_key, key = ApiKey.create_key(name="stored", user=member("ana"))
    api_key.refresh_from_db()
    assert key not in (api_key.key_hash, api_key.key_prefix)
    assert api_key.key_hash == ApiKey.hash_key(key)


def test_last_used_is_recorded_without_a_write_per_request(db, csrf_client, django_assert_num_queries):
    api_key, key = ApiKey.create_key(name="busy", user=member("ana"))
    headers = {"Authorization": f"Bearer {key}"}
    assert csrf_client.get("/api/sessions", headers=headers).status_code == 200
    api_key.refresh_from_db()
    first_use = api_key.last_used_at
    assert first_use is not None
    assert ApiKey.authenticate(key).last_used_at == first_use  # within the minute: no new write
    with django_assert_num_queries(1):  # the lookup (with its user) only
        ApiKey.authenticate(key)


def test_a_keys_writes_are_attributed_to_its_user(make_session):
    key = key_of(member("ana"), name="ci")
    session = make_session(events=5)
    response = Client().post(
        f"/api/sessions/{session.pk}/checkpoints",
        {"name": "here", "seq": 2},
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 201 and response.json()["checkpoint"]["createdBy"] == "ana"


def test_a_logged_in_users_writes_are_attributed_to_them(make_session):
    client = Client()
    client.force_login(member("ana"))
    session = make_session(events=5)
    response = client.post(
        f"/api/sessions/{session.pk}/checkpoints", {"name": "here", "seq": 2}, content_type="application/json"
    )
    assert response.status_code == 201 and response.json()["checkpoint"]["createdBy"] == "ana"


def test_a_key_made_before_keys_had_users_is_refused(db, csrf_client):
    api_key, key = ApiKey.create_key(name="legacy", user=member("ana"))
    ApiKey.objects.filter(pk=api_key.pk).update(user=None)
    assert csrf_client.get("/api/sessions", headers={"Authorization": f"Bearer {key}"}).status_code == 401
