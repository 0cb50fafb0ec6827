"""Schemathesis against /api/openapi.json: every operation, with generated parameters and bodies
(valid ones and, in its negative mode, invalid ones: wrong types, numbers past their bounds,
strings where objects belong), must answer without a 5xx, with a status its schema documents,
in the schema it documents.

Bounded so `make test` stays quick: EXAMPLES per operation, derandomised (the same requests on
every run). The caller is an admin of a project with two sessions, a checkpoint, a comment, a
tour, a share link and an import, and three of every four generated ids are turned into the ids
of those objects, so the fuzzing reaches the code behind the lookups, not only their 404.

The two Server-Sent Event streams are fuzzed like the rest, on a fake clock: their sleeps only
advance it, so a paced replay or a tail ends at once instead of after minutes (their timing is
tests/test_streaming.py's).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import pytest
import schemathesis
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sessions_app.models import Project, Role
from sessions_app.models.bounds import MAX_ID
from sessions_app.replay import streaming

from .builders_teams import UPLOAD, key_of, member

EXAMPLES = 25
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())
# The key is ours (below): generated Authorization headers and cookies would only test the 401.
schema.config.generation.update(with_security_parameters=False)


@dataclass
class World:
    headers: dict[str, str]
    ids: dict[str, int]
    names: dict[str, str]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def world(db, make_session, monkeypatch, settings) -> Iterator[World]:
    # A fast hasher: the users are made again for every operation.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    project = Project.get_default()
    admin = member("fuzzer", project, Role.ADMIN)
    member("fuzz-viewer", project, Role.VIEWER)
    headers = {"Authorization": f"Bearer {key_of(admin)}"}
    client = Client(headers=headers)
    first, second = make_session(events=40), make_session(events=25)

    def made(url: str, body: dict) -> int:
        response = client.post(url, body, content_type="application/json")
        assert response.status_code == 201, (url, response.content)
        return response.json()["id"] if "id" in response.json() else 0

    made(f"/api/sessions/{first.pk}/checkpoints", {"name": "start", "seq": 3})
    comment = made(f"/api/sessions/{first.pk}/comments", {"seq": 2, "body": "look here"})
    tour = made(f"/api/projects/{project.slug}/tours", {"title": "A tour"})
    link = made(f"/api/sessions/{first.pk}/share-links", {"expires_in_days": 7})
    upload = client.post("/api/imports", {"file": SimpleUploadedFile("one.jsonl", UPLOAD), "project": project.slug})
    assert upload.status_code == 202, upload.content

    clock = FakeClock()
    monkeypatch.setattr(streaming, "paced_stream", partial(streaming.paced_stream, sleep=clock.sleep, clock=clock))
    monkeypatch.setattr(streaming, "tail_stream", partial(streaming.tail_stream, sleep=clock.sleep, clock=clock))
    settings.TAIL_MAX_SECONDS = 5
    ids = {"session_id": first.pk, "comment_id": comment, "tour_id": tour, "link_id": link,
           "job_id": upload.json()["job"], "a": first.pk, "b": second.pk}  # fmt: skip
    names = {"slug": project.slug, "name": "start", "username": "fuzz-viewer"}
    # Schemathesis calls Django's WSGI handler, which closes the database connection around each
    # request when it is inside a transaction, as the test's is (on PostgreSQL every later query
    # then fails). Django's test client leaves it open the same way, and reconnects the
    # signals after each of its own requests: so this comes after the client's requests above.
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield World(headers=headers, ids=ids, names=names)
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


def _aim(case, world: World) -> None:
    """Three of four generated ids (and a valid slug, checkpoint name or username half of the
    time) name real objects; invalid values of the negative mode stay as generated. Every third
    case, one of its integers (in turn) becomes one past 64 bits: the generator rarely reaches
    them by itself, and they are what failed with 500s (OverflowError in the database driver)."""
    body = case.body if isinstance(case.body, dict) else {}
    numbers = []
    for where in (case.path_parameters, case.query, body):
        # Path and query values come as text, body values as JSON numbers.
        typed = int if where is body else str
        for name, value in (where or {}).items():
            number = _integer(value)
            if number is not None:
                numbers.append((where, name, typed, number))
            if name in world.ids and number is not None and 1 <= number <= MAX_ID and number % 4:
                where[name] = typed(world.ids[name])
            elif name in world.names and isinstance(value, str) and len(value) % 2:
                where[name] = world.names[name]
    turn = next(_TURNS)
    if numbers and turn % 3 == 0:
        where, name, typed, number = numbers[turn // 3 % len(numbers)]
        where[name] = typed(2**64 + abs(number))


_TURNS = itertools.count()


def _integer(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 30:
        return int(value)
    return None


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    # No shrinking: a failure's report already holds the request (as curl) that failed.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_no_operation_answers_a_5xx_or_off_its_schema(case, world):
    _aim(case, world)
    case.call_and_validate(headers=world.headers, checks=CHECKS)
