"""The lookups every request makes, read by SQL built once (sessions_app/models/fixed_lookup.py):
the access check's object with its project and role, an API key with its user, the browser's
login session. They give what the ORM gave, scope as before, and compile nothing per request."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session as LoginSession
from django.db.models.sql.compiler import SQLCompiler
from django.test import Client
from django.utils import timezone

from sessions_app import access
from sessions_app.models import ApiKey, Project, Role, Session

from .builders_teams import PASSWORD, key_of, member

pytestmark = pytest.mark.django_db


def _fields(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


@pytest.fixture
def compilations(monkeypatch) -> list[str]:
    """The ORM queries compiled while the test runs."""
    seen: list[str] = []
    original = SQLCompiler.as_sql

    def counting(self, *args, **kwargs):
        sql = original(self, *args, **kwargs)
        seen.append(sql[0])
        return sql

    monkeypatch.setattr(SQLCompiler, "as_sql", counting)
    return seen


def test_session_for_gives_what_the_orm_gave(make_session, compilations):
    session = make_session(events=3, task="look me up")
    viewer = member("vera", role=Role.VIEWER)
    actor = access.Actor(user=viewer)
    expected = access._with_role(Session.objects.select_related("project"), actor, "project_id").get(pk=session.pk)
    compilations.clear()

    found = access.session_for(actor, session.pk)

    assert compilations == []  # nothing compiled through the ORM
    assert _fields(found) == _fields(expected) and found.metadata == expected.metadata
    assert {k: type(v) for k, v in _fields(found).items()} == {k: type(v) for k, v in _fields(expected).items()}
    assert found.member_role == expected.member_role == Role.VIEWER
    assert _fields(found.project) == _fields(expected.project)
    assert not found._state.adding and found._state.db == "default"
    with pytest.raises(access.PermissionDenied):
        access.session_for(actor, session.pk, need=Role.MAINTAINER)


def test_session_for_still_scopes(make_session):
    session = make_session(events=1)
    other = Project.objects.create(name="Elsewhere", slug="elsewhere")
    outsider = member("olga", project=other)
    with pytest.raises(access.NotVisible):
        access.session_for(access.Actor(user=outsider), session.pk)
    with pytest.raises(access.NotVisible):  # an id past 64 bits names nothing: a 404, not a driver error
        access.session_for(access.Actor(user=outsider), 2**70)
    boss = get_user_model().objects.create_superuser(username="root", password=PASSWORD)
    found = access.session_for(access.Actor(user=boss), session.pk, need=Role.ADMIN)
    assert found.pk == session.pk and not hasattr(found, "member_role")


def test_an_api_key_is_looked_up_with_its_user(compilations):
    user = member("kim")
    key = key_of(user)
    compilations.clear()
    found = ApiKey.authenticate(key)
    assert found is not None and found.user == user and found.user.username == "kim"
    assert not any("sessions_app_apikey" in sql and sql.lstrip().startswith("SELECT") for sql in compilations)
    ApiKey.objects.filter(pk=found.pk).update(revoked_at=timezone.now())
    assert ApiKey.authenticate(key) is None
    orphan, orphan_key = ApiKey.create_key(name="orphan", user=user)
    ApiKey.objects.filter(pk=orphan.pk).update(user=None)
    assert ApiKey.authenticate(orphan_key) is None  # a key of no user: its user is None, refused


def test_a_login_session_ends_when_it_ends(make_session):
    session = make_session(events=1)
    member("lena", role=Role.VIEWER)
    client = Client()
    sign_in = {"username": "lena", "password": PASSWORD}
    assert client.post("/accounts/login/", sign_in).status_code == 302
    url = f"/sessions/{session.pk}/"
    assert client.get(url).status_code == 200
    # Expired in the database: the next request is anonymous at once (sent to sign in).
    LoginSession.objects.update(expire_date=timezone.now() - timedelta(seconds=1))
    assert client.get(url).status_code == 302
    assert client.post("/accounts/login/", sign_in).status_code == 302
    assert client.get(url).status_code == 200
    cookie = client.cookies["sessionid"].value
    client.post("/accounts/logout/")
    client.cookies["sessionid"] = cookie  # a copy of the cookie kept from before signing out
    assert client.get(url).status_code == 302
