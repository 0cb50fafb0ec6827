"""Builders for teams: users with a role in a project, their API keys and signed-in clients, and
recorded sessions to act on."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import ApiKey, Membership, Project, Role, Session

from .conftest import synthetic_events

PASSWORD = "correct horse battery staple"
# One canonical event, as a file to upload.
UPLOAD = b'{"kind": "llm_call", "timestamp": "2026-02-08T10:30:00Z", "payload": {}}\n'


def member(username: str, project: Project | None = None, role: str = Role.MAINTAINER, **fields) -> object:
    """A user (made if missing, with PASSWORD) holding `role` in `project` (the default one)."""
    users = get_user_model().objects
    user = users.filter(username=username).first() or users.create_user(username=username, password=PASSWORD, **fields)
    Membership.objects.update_or_create(project=project or Project.get_default(), user=user, defaults={"role": role})
    return user


def signed_in(username: str, project: Project, role: str) -> Client:
    """A client signed in as `username` (made if missing) holding `role` in `project`."""
    client = Client()
    client.force_login(member(username, project, role))
    return client


def recorded(project: Project, name: str = "run-7", events: int = 12, **meta) -> Session:
    """A finished canonical session of `events` synthetic events, its source id `name`."""
    session = create_session(project=project, source_format="canonical",
                             meta=SessionMeta(source_session_id=name, **meta))  # fmt: skip
    append_events(session=session, events=synthetic_events(events))
    finish_session(session=session)
    session.refresh_from_db()
    return session


def key_of(user, *, name: str = "tests", project: Project | None = None, read_only: bool = False) -> str:
    """A new API key of `user`, optionally narrowed; the key itself. A name the user's active
    keys hold already gets a number (a user's active key names are distinct, whatever the case)."""
    held = {held.lower() for held in ApiKey.objects.active().filter(user=user).values_list("name", flat=True)}
    numbered = (f"{name}-{i}" for i in itertools.count(2))
    free = next(n for n in itertools.chain([name], numbered) if n.lower() not in held)
    return ApiKey.create_key(name=free, user=user, project=project, read_only=read_only)[1]


def maintainer_key(name: str = "tests", project: Project | None = None) -> str:
    """The key of a maintainer of `project` (the default one): what most API tests act as."""
    return key_of(member(f"owner-of-{name}", project), name=name)


@pytest.fixture
def acme(db) -> Project:
    return Project.objects.create(name="Acme", slug="acme")


@pytest.fixture
def other(db) -> Project:
    return Project.objects.create(name="Other", slug="other")


# Acme's maintainer and viewer, signed in (the tour and session-page tests act as them).
@pytest.fixture
def mia(acme) -> Client:
    return signed_in("mia", acme, Role.MAINTAINER)


@pytest.fixture
def vic(acme) -> Client:
    return signed_in("vic", acme, Role.VIEWER)
