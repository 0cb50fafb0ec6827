"""Every URL pattern and every API operation, walked as outsiders of a project and as its viewer.

The endpoints are enumerated from the URL resolver and from the OpenAPI schema, so a new page
or operation is walked without anyone remembering to add it:

- A non-member (a user in no project, a viewer of another project, a maintainer of another
  project, and that maintainer's API key) gets 404 from everything that names the project's
  objects, and no response of any endpoint holds the project's data.
- The project's own viewer gets 403 from what needs a higher role (ROLE_NEEDED) and an answer
  from the rest.

A new endpoint fails here until it is declared: its role in ROLE_NEEDED, and, if it names no
object of a project (a list, a form, making a project), its place in NAMES_NO_OBJECT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from sessions_app import audit, comments, teams
from sessions_app.access import Actor
from sessions_app.canonical import CanonicalEvent, Kind, SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session, set_checkpoint
from sessions_app.models import ImportJob, Project, Role, Session

from .builders_teams import key_of, member
from .conftest import T0

# What the other project holds; none of it may reach an outsider.
MARKERS = (
    "THEIRS-SECRET-TASK", "THEIRS-EVENT-PAYLOAD", "Theirs Secret Name", "theirs-checkpoint",
    "theirs-upload.jsonl", "theirs-admin", "theirs-source-id", "THEIRS-ANSWER", "THEIRS-COMMENT",
)  # fmt: skip

# (method, route) of operations and pages that name no object of a project: outsiders get an
# answer (2xx, a redirect, a form error), never holding another project's data.
NAMES_NO_OBJECT = {
    ("GET", "/accounts/login/"), ("POST", "/accounts/login/"), ("POST", "/accounts/logout/"),
    ("GET", "/api/openapi.json"), ("GET", "/api/docs"),
    ("GET", "/api/sessions"), ("GET", "/api/projects"), ("POST", "/api/projects"),
    ("GET", "/"), ("GET", "/sessions/"), ("GET", "/sessions/imports/"), ("GET", "/projects/"),
    ("POST", "/projects/"), ("GET", "/account/keys/"), ("POST", "/account/keys/"),
    ("GET", "/api/signing-key"), ("GET", "/about/"), ("GET", "/healthz"),
}  # fmt: skip

# The role each operation on a project's objects needs (docs/teams.md). (method, route).
ROLE_NEEDED = {
    ("GET", "/api/sessions/{session_id}"): Role.VIEWER,
    ("DELETE", "/api/sessions/{session_id}"): Role.MAINTAINER,
    ("GET", "/api/sessions/{session_id}/summary"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/replay"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/steps"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/steps/{index}"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/context"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/search"): Role.VIEWER,
    ("GET", "/api/compare"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/checkpoints"): Role.VIEWER,
    ("POST", "/api/sessions/{session_id}/checkpoints"): Role.MAINTAINER,
    ("GET", "/api/sessions/{session_id}/checkpoints/{name}"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/comments"): Role.VIEWER,
    ("POST", "/api/sessions/{session_id}/comments"): Role.REVIEWER,
    ("PATCH", "/api/sessions/{session_id}/comments/{comment_id}"): Role.REVIEWER,
    ("DELETE", "/api/sessions/{session_id}/comments/{comment_id}"): Role.REVIEWER,
    ("POST", "/api/sessions/{session_id}/comments/{comment_id}/resolve"): Role.REVIEWER,
    ("DELETE", "/api/sessions/{session_id}/checkpoints/{name}"): Role.MAINTAINER,
    ("GET", "/api/sessions/{session_id}/export"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/verify"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/reviews"): Role.VIEWER,
    ("POST", "/api/sessions/{session_id}/reviews"): Role.REVIEWER,
    ("GET", "/api/sessions/{session_id}/bundle"): Role.VIEWER,
    ("POST", "/api/sessions"): Role.MAINTAINER,
    ("POST", "/api/sessions/{session_id}/events"): Role.MAINTAINER,
    ("POST", "/api/sessions/{session_id}/end"): Role.MAINTAINER,
    ("GET", "/api/sessions/{session_id}/stream"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/tail"): Role.VIEWER,
    ("POST", "/api/imports"): Role.MAINTAINER,
    ("GET", "/api/imports/{job_id}"): Role.VIEWER,
    ("GET", "/api/projects/{slug}/members"): Role.VIEWER,
    ("POST", "/api/projects/{slug}/members"): Role.ADMIN,
    ("DELETE", "/api/projects/{slug}/members/{username}"): Role.ADMIN,
    ("GET", "/api/projects/{slug}/audit"): Role.REVIEWER,
    ("GET", "/api/projects/{slug}/audit/export"): Role.REVIEWER,
    ("GET", "/api/projects/{slug}/audit/verify"): Role.REVIEWER,
    ("POST", "/sessions/upload/"): Role.MAINTAINER,
    ("GET", "/sessions/{session_id}/"): Role.VIEWER,
    ("GET", "/sessions/{session_id}/search/"): Role.VIEWER,
    ("POST", "/sessions/{session_id}/checkpoints/"): Role.MAINTAINER,
    ("POST", "/sessions/{session_id}/checkpoints/{checkpoint_id}/rename/"): Role.MAINTAINER,
    ("POST", "/sessions/{session_id}/checkpoints/{checkpoint_id}/delete/"): Role.MAINTAINER,
    ("POST", "/sessions/{session_id}/verify/"): Role.VIEWER,
    ("GET", "/sessions/{session_id}/charts/"): Role.VIEWER,
    ("POST", "/sessions/{session_id}/comments/"): Role.REVIEWER,
    ("POST", "/sessions/{session_id}/comments/{comment_id}/edit/"): Role.REVIEWER,
    ("POST", "/sessions/{session_id}/comments/{comment_id}/delete/"): Role.REVIEWER,
    ("POST", "/sessions/{session_id}/comments/{comment_id}/resolve/"): Role.REVIEWER,
    ("POST", "/sessions/{session_id}/reviews/"): Role.REVIEWER,
    ("GET", "/compare/"): Role.VIEWER,
    ("GET", "/projects/{slug}/"): Role.VIEWER,
    ("POST", "/projects/{slug}/members/"): Role.ADMIN,
    ("POST", "/projects/{slug}/members/remove/"): Role.ADMIN,
    ("POST", "/projects/{slug}/settings/"): Role.ADMIN,
    ("GET", "/projects/{slug}/audit/"): Role.REVIEWER,
    ("GET", "/projects/{slug}/audit/export/"): Role.REVIEWER,
    ("POST", "/projects/{slug}/audit/verify/"): Role.REVIEWER,
    # A key is its user's, not a project's: someone else's key is 404 to everyone else.
    ("POST", "/account/keys/{key_id}/revoke/"): None,
}


@dataclass
class Theirs:
    project: Project
    a: int  # session ids
    b: int
    job: int
    key: int  # their admin's key id
    comment: int  # a comment on session a
    checkpoint: int  # session a's checkpoint


@pytest.fixture
def theirs(db) -> Theirs:
    project = Project.objects.create(name="Theirs Secret Name", slug="theirs")
    admin = member("theirs-admin", project, Role.ADMIN)
    ids, checkpoint_ids = [], []
    for n in range(2):
        session = create_session(project=project, source_format="canonical", meta=SessionMeta(
            task="THEIRS-SECRET-TASK", source_session_id=f"theirs-source-id-{n}"))  # fmt: skip
        append_events(session=session, events=[
            CanonicalEvent(kind=Kind.USER_MESSAGE if i % 2 == 0 else Kind.STEP_END, source_type="user", raw=None,
                           payload={"text": "THEIRS-EVENT-PAYLOAD"},
                           step_state={"step": i, "output": "THEIRS-EVENT-PAYLOAD"} if i % 2 else None,
                           timestamp=T0 + timedelta(seconds=i), line=i + 1, step=i)
            for i in range(6)
        ])  # fmt: skip
        finish_session(session=session, final_answer="THEIRS-ANSWER")
        checkpoint = set_checkpoint(session=session, name="theirs-checkpoint", seq=2, created_by="theirs-admin")
        checkpoint_ids.append(checkpoint.pk)
        ids.append(session.pk)
    job = ImportJob.objects.create(project=project, original_name="theirs-upload.jsonl", stored_path="",
                                   created_by="theirs-admin")  # fmt: skip
    actor = Actor(user=admin)
    key, _ = teams.create_key(actor=actor, user=admin, name="theirs-admin's key")
    teams.set_member(actor=actor, project=project, username=member("theirs-viewer").get_username(),
                     role=Role.VIEWER)  # fmt: skip
    audit.record(action="session.export", actor=actor, project=project, target=f"session:{ids[0]}")
    comment = comments.create_comment(actor=actor, session=Session.objects.get(pk=ids[0]), seq=1,
                                      body="THEIRS-COMMENT")  # fmt: skip
    return Theirs(project=project, a=ids[0], b=ids[1], job=job.pk, key=key.pk, comment=comment.pk,
                  checkpoint=checkpoint_ids[0])


# --- the endpoints --------------------------------------------------------------------------


def _walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if pattern.namespace == "admin":
                continue  # Django's admin: staff only, checked by Django itself
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", prefix + str(pattern.pattern))


def _operations(client: Client) -> set[tuple[str, str]]:
    paths = client.get("/api/openapi.json").json()["paths"]
    return {(method.upper(), path) for path, ops in paths.items() for method in ops}


def _pages() -> set[str]:
    return {route for route in _walk(get_resolver().url_patterns) if not route.startswith("/api/")}


def _path_values(t: Theirs) -> dict[str, object]:
    return {"session_id": t.a, "job_id": t.job, "name": "theirs-checkpoint", "index": 0, "slug": "theirs",
            "username": "theirs-admin", "key_id": t.key, "comment_id": t.comment,
            "checkpoint_id": t.checkpoint}  # fmt: skip


def _query(route: str, t: Theirs) -> dict[str, object]:
    return {
        "/api/sessions/{session_id}/context": {"seq": 0},
        "/api/sessions/{session_id}/stream": {"pacing": 0},
        "/api/compare": {"a": t.a, "b": t.b},
        "/compare/": {"a": t.a, "b": t.b},
        "/api/sessions": {"project": "theirs"},
        "/sessions/": {"project": "theirs"},
    }.get(route, {})


def _body(method: str, route: str) -> dict:
    """A body the operation would accept from a member, so a refusal is the scoping's."""
    return {
        ("POST", "/api/sessions"): {"project": "theirs", "task": "sweep"},
        ("POST", "/api/sessions/{session_id}/checkpoints"): {"name": "sweep", "seq": 1},
        ("POST", "/api/sessions/{session_id}/comments"): {"seq": 1, "body": "sweep"},
        ("PATCH", "/api/sessions/{session_id}/comments/{comment_id}"): {"body": "sweep"},
        ("POST", "/api/sessions/{session_id}/events"): {"events": [{"kind": "user_message", "payload": {}}]},
        ("POST", "/api/sessions/{session_id}/end"): {"status": "completed"},
        ("POST", "/api/sessions/{session_id}/reviews"): {"verdict": "approved", "note": "sweep"},
        ("POST", "/api/projects"): {"name": "Sweep project", "slug": "sweep-project"},
        ("POST", "/api/projects/{slug}/members"): {"username": "theirs-viewer", "role": "reviewer"},
        ("POST", "/sessions/{session_id}/checkpoints/"): {"name": "sweep", "step": 1},
        ("POST", "/sessions/{session_id}/checkpoints/{checkpoint_id}/rename/"): {"name": "sweep-renamed"},
        ("POST", "/sessions/{session_id}/comments/"): {"seq": 1, "body": "sweep"},
        ("POST", "/sessions/{session_id}/comments/{comment_id}/edit/"): {"body": "sweep"},
        ("POST", "/sessions/{session_id}/reviews/"): {"verdict": "approved", "note": "sweep"},
        ("POST", "/projects/{slug}/members/"): {"username": "theirs-viewer", "role": "reviewer"},
        ("POST", "/projects/{slug}/members/remove/"): {"username": "theirs-viewer"},
        ("POST", "/projects/{slug}/settings/"): {"retention_days": "30"},
        ("POST", "/projects/"): {"name": "Sweep page project", "slug": "sweep-page-project"},
        ("POST", "/account/keys/"): {"name": "sweep", "project": "theirs"},
        ("POST", "/accounts/login/"): {"username": "sweeper", "password": "wrong"},
    }.get((method, route), {})


def _call(client: Client, method: str, route: str, t: Theirs, headers: dict[str, str]):
    url = route.format(**_path_values(t))
    query = _query(route, t)
    if method == "GET":
        response = client.get(url, query, headers=headers)
    elif route in ("/api/imports", "/sessions/upload/"):
        upload = SimpleUploadedFile("sweep.jsonl", b'{"kind": "user_message", "payload": {}}\n')
        field = "file" if route.startswith("/api/") else "files"
        response = client.post(url, {field: upload, "project": "theirs"}, headers=headers)
    elif route.startswith("/api/"):
        data = orjson.dumps(_body(method, route)) if method != "DELETE" else None
        response = client.generic(method, url, data or b"", content_type="application/json", headers=headers)
    else:
        response = client.post(url, _body(method, route), headers=headers)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, body.decode("utf-8", "replace")


def _endpoints(client: Client) -> list[tuple[str, str]]:
    """Every (method, route): API operations from the schema, pages by trying GET and POST."""
    operations = _operations(client)
    schema_routes = {route for _, route in operations}
    api_routes = {r for r in _walk(get_resolver().url_patterns) if r.startswith("/api/")}
    # Every API URL is in the schema (or is the schema and its docs): none escapes the walk.
    assert api_routes - schema_routes <= {"/api/openapi.json", "/api/docs", "/api/"}, api_routes - schema_routes
    pages = [(m, r) for r in sorted(_pages()) for m in ("GET", "POST")]
    walked = sorted(operations) + pages + [("GET", "/api/openapi.json"), ("GET", "/api/docs")]
    return [endpoint for endpoint in walked if endpoint not in NOT_WALKED]


# Signing out ends the walking persona's session; it names nothing (tests/test_signin.py).
NOT_WALKED = {("POST", "/accounts/logout/")}


def _declared(method: str, route: str) -> bool:
    return (method, route) in NAMES_NO_OBJECT or (method, route) in ROLE_NEEDED


# --- the sweep ------------------------------------------------------------------------------


def _outsiders(db) -> list[tuple[str, Client, dict[str, str]]]:
    ours, _ = Project.objects.get_or_create(slug="ours", defaults={"name": "Ours"})
    people = []
    nobody, _ = get_user_model().objects.get_or_create(username="nobody")
    for name, user in (("a user in no project", nobody),
                       ("a viewer of another project", member("our-viewer", ours, Role.VIEWER)),
                       ("a maintainer of another project", member("our-maintainer", ours, Role.MAINTAINER))):  # fmt: skip
        client = Client()
        client.force_login(user)
        people.append((name, client, {}))
    key = key_of(get_user_model().objects.get(username="our-maintainer"))
    people.append(("the API key of a maintainer of another project", Client(), {"authorization": f"Bearer {key}"}))
    return people


def test_outsiders_get_404_from_every_endpoint_naming_a_project_object_and_never_its_data(theirs, db):
    walked = 0
    for who, client, headers in _outsiders(db):
        for method, route in _endpoints(client):
            on_page = not route.startswith("/api/")
            if headers and on_page and method != "GET":
                continue  # a key opens only the API; its bearer is nobody on a page (below)
            status, body = _call(client, method, route, theirs, headers)
            leaked = [m for m in MARKERS if m in body]
            assert not leaked, f"{who}: {method} {route} answered {status} with {leaked}"
            if headers and on_page:
                assert status in (302, 405) or (method, route) in NAMES_NO_OBJECT, f"{who}: {route}: {status}"
                continue
            if status == 405:
                continue  # the pattern does not take this method; it answered before any lookup
            walked += 1
            assert _declared(method, route), f"{method} {route} is new: declare its role in ROLE_NEEDED"
            if (method, route) in NAMES_NO_OBJECT:
                assert status < 500, f"{who}: {method} {route} answered {status}"
            else:
                assert status == 404, f"{who}: {method} {route} answered {status}, not 404"
    assert walked > 150  # every persona walked every endpoint, not a handful


def test_the_projects_viewer_gets_403_where_a_higher_role_is_needed_and_an_answer_elsewhere(theirs, db):
    client = Client()
    client.force_login(get_user_model().objects.get(username="theirs-viewer"))
    checked = 0
    for method, route in _endpoints(client):
        if (method, route) in NAMES_NO_OBJECT:
            continue
        status, _ = _call(client, method, route, theirs, {})
        if status == 405:
            continue
        assert (method, route) in ROLE_NEEDED, f"{method} {route} is new: declare its role in ROLE_NEEDED"
        needed = ROLE_NEEDED[method, route]
        checked += 1
        if needed is None:
            assert status == 404, f"{method} {route}: someone else's key answered {status}"
        elif needed == Role.VIEWER:
            assert status not in (403, 404) and status < 500, f"viewer: {method} {route} answered {status}"
        else:
            assert status == 403, f"viewer: {method} {route} needs {needed.label} but answered {status}"
    assert checked == len(ROLE_NEEDED)  # every declared operation exists and was walked


@pytest.fixture
def unscoped_endpoint():
    """A page added without asking access.py. It says whether a session exists, or (when
    `shows["task"]` is set) shows any session's task to anyone."""
    from django.http import JsonResponse
    from django.urls import clear_url_caches, path

    import replay_site.urls as root
    from sessions_app.models import Session

    shows = {"task": False}

    def unscoped(request, session_id: int):
        session = Session.objects.get(pk=session_id)
        return JsonResponse({"task": session.task} if shows["task"] else {"exists": True})

    saved = list(root.urlpatterns)
    root.urlpatterns.insert(0, path("sessions/<int:session_id>/unscoped/", unscoped))
    clear_url_caches()
    yield shows
    root.urlpatterns[:] = saved
    clear_url_caches()


def test_the_sweep_finds_a_new_endpoint_an_unscoped_one_and_a_leak(theirs, db, unscoped_endpoint, monkeypatch):
    sweep = test_outsiders_get_404_from_every_endpoint_naming_a_project_object_and_never_its_data
    with pytest.raises(AssertionError, match="GET /sessions/{session_id}/unscoped/ is new"):
        sweep(theirs, db)
    monkeypatch.setitem(ROLE_NEEDED, ("GET", "/sessions/{session_id}/unscoped/"), Role.VIEWER)
    with pytest.raises(AssertionError, match="unscoped/ answered 200, not 404"):
        sweep(theirs, db)
    unscoped_endpoint["task"] = True
    with pytest.raises(AssertionError, match=r"unscoped/ answered 200 with \['THEIRS-SECRET-TASK'\]"):
        sweep(theirs, db)
