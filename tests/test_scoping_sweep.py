"""Every URL pattern and every API operation, walked as outsiders of a project and as its viewer.

The endpoints are enumerated from the URL resolver and from the OpenAPI schema, so a new page
or operation is walked without anyone remembering to add it:

- A non-member (a user in no project, a viewer of another project, a maintainer of another
  project, and that maintainer's API key) gets 404 from everything that names the project's
  objects, and no response of any endpoint holds the project's data.
- The project's own viewer gets 403 from what needs a higher role (ROLE_NEEDED) and an answer
  from the rest.
- A refusal (404 or 403) leaves every row of Replay's tables and of the job queue as it was: a
  view that acts before it asks access.py is caught though it answers the right status.

A new endpoint fails here until it is declared: its role in ROLE_NEEDED, and, if it names no
object of a project (a list, a form, making a project), its place in NAMES_NO_OBJECT.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

import orjson
import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django_q.models import OrmQ

from sessions_app import audit, comments, sharing, teams
from sessions_app.access import Actor
from sessions_app.canonical import CanonicalEvent, Kind, SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session, set_checkpoint
from sessions_app.models import ImportJob, Membership, Project, Role, Session, ShareLink, Tour, TourStop

from .builders_teams import key_of, member
from .conftest import T0

# What the other project holds; none of it may reach an outsider.
MARKERS = (
    "THEIRS-SECRET-TASK", "THEIRS-EVENT-PAYLOAD", "Theirs Secret Name", "theirs-checkpoint",
    "theirs-upload.jsonl", "theirs-admin", "theirs-source-id", "THEIRS-ANSWER", "THEIRS-COMMENT",
    "THEIRS-SHARE-NOTE", "theirs-tour", "THEIRS-NARRATION",
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
    ("GET", "/imports/"), ("GET", "/search/"),
    # One's own password (a wrong old password is a form error).
    ("GET", "/accounts/password/"), ("POST", "/accounts/password/"), ("GET", "/accounts/password/done/"),
    ("GET", "/admin/password_change/"), ("POST", "/admin/password_change/"),  # the same page, where the admin links
    # OTLP/HTTP export: it writes only to the key's own project (tests/test_otlp_ingest.py).
    ("POST", "/v1/traces"),
}  # fmt: skip

# A health check answers 503 while a part of the server is down (here: no job worker ran).
MAY_BE_UNAVAILABLE = {("GET", "/healthz")}

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
    ("POST", "/api/sessions/{session_id}/verify"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/reviews"): Role.VIEWER,
    ("POST", "/api/sessions/{session_id}/reviews"): Role.REVIEWER,
    ("GET", "/api/sessions/{session_id}/bundle"): Role.VIEWER,
    ("POST", "/api/sessions"): Role.MAINTAINER,
    ("POST", "/api/sessions/{session_id}/events"): Role.MAINTAINER,
    ("POST", "/api/sessions/{session_id}/end"): Role.MAINTAINER,
    ("POST", "/api/events"): Role.MAINTAINER,  # AgentLens's ingest, into ?project=
    ("GET", "/api/sessions/{session_id}/stream"): Role.VIEWER,
    ("GET", "/api/sessions/{session_id}/tail"): Role.VIEWER,
    ("GET", "/sessions/{session_id}/tail/"): Role.VIEWER,
    ("GET", "/sessions/{session_id}/chain-badge/"): Role.VIEWER,
    ("POST", "/api/imports"): Role.MAINTAINER,
    ("GET", "/api/imports/{job_id}"): Role.VIEWER,
    ("GET", "/api/projects/{slug}/members"): Role.VIEWER,
    ("POST", "/api/projects/{slug}/members"): Role.ADMIN,
    ("DELETE", "/api/projects/{slug}/members/{username}"): Role.ADMIN,
    ("GET", "/api/projects/{slug}/audit"): Role.REVIEWER,
    ("GET", "/api/projects/{slug}/audit/export"): Role.REVIEWER,
    ("GET", "/api/projects/{slug}/audit/verify"): Role.REVIEWER,
    ("GET", "/api/projects/{slug}/redaction"): Role.ADMIN,
    ("PUT", "/api/projects/{slug}/redaction"): Role.ADMIN,
    ("POST", "/api/projects/{slug}/redaction/try"): Role.ADMIN,
    ("GET", "/projects/{slug}/redaction/"): Role.ADMIN,
    ("POST", "/projects/{slug}/redaction/"): Role.ADMIN,
    ("POST", "/projects/{slug}/redaction/try/"): Role.ADMIN,
    ("POST", "/sessions/upload/"): Role.MAINTAINER,
    ("GET", "/sessions/{session_id}/"): Role.VIEWER,
    ("GET", "/sessions/{session_id}/search/"): Role.VIEWER,
    ("POST", "/sessions/{session_id}/checkpoints/"): Role.MAINTAINER,
    ("POST", "/sessions/{session_id}/checkpoints/{checkpoint_id}/rename/"): Role.MAINTAINER,
    ("POST", "/sessions/{session_id}/checkpoints/{checkpoint_id}/delete/"): Role.MAINTAINER,
    ("POST", "/sessions/{session_id}/verify/"): Role.VIEWER,
    ("POST", "/sessions/{session_id}/delete/"): Role.MAINTAINER,
    ("GET", "/sessions/{session_id}/redactions/"): Role.VIEWER,
    ("POST", "/sessions/{session_id}/redact/"): Role.MAINTAINER,
    ("POST", "/sessions/{session_id}/redact-rules/"): Role.MAINTAINER,
    ("GET", "/api/sessions/{session_id}/redactions"): Role.VIEWER,
    ("POST", "/api/sessions/{session_id}/redactions"): Role.MAINTAINER,
    ("POST", "/api/sessions/{session_id}/redactions/apply-rules"): Role.MAINTAINER,
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
    ("GET", "/sessions/{session_id}/export/"): Role.VIEWER,
    ("GET", "/sessions/{session_id}/share-links/"): Role.MAINTAINER,
    ("POST", "/sessions/{session_id}/share-links/"): Role.MAINTAINER,
    ("GET", "/tours/{tour_id}/share-links/"): Role.MAINTAINER,
    ("POST", "/tours/{tour_id}/share-links/"): Role.MAINTAINER,
    ("POST", "/share-links/{link_id}/revoke/"): Role.MAINTAINER,
    ("GET", "/api/sessions/{session_id}/share-links"): Role.MAINTAINER,
    ("POST", "/api/sessions/{session_id}/share-links"): Role.MAINTAINER,
    ("GET", "/api/tours/{tour_id}/share-links"): Role.MAINTAINER,
    ("POST", "/api/tours/{tour_id}/share-links"): Role.MAINTAINER,
    ("DELETE", "/api/share-links/{link_id}"): Role.MAINTAINER,
    # A share link is named by its secret token, not by a project object: the walk's token is one
    # nobody was given, a 404 to everyone (test_a_share_links_visitor_... walks a real one).
    ("GET", "/s/{token}"): None,
    ("GET", "/imports/{job_id}/"): Role.VIEWER,
    ("GET", "/sessions/{session_id}/compare-with/"): Role.VIEWER,
    ("GET", "/api/projects/{slug}/tours"): Role.VIEWER,
    ("POST", "/api/projects/{slug}/tours"): Role.MAINTAINER,
    ("GET", "/api/tours/{tour_id}"): Role.VIEWER,
    ("PATCH", "/api/tours/{tour_id}"): Role.MAINTAINER,
    ("DELETE", "/api/tours/{tour_id}"): Role.MAINTAINER,
    ("PUT", "/api/tours/{tour_id}/stops"): Role.MAINTAINER,
    ("GET", "/projects/{slug}/learn/"): Role.VIEWER,
    ("POST", "/projects/{slug}/tours/"): Role.MAINTAINER,
    ("GET", "/tours/{tour_id}/"): Role.VIEWER,
    ("GET", "/tours/{tour_id}/play/"): Role.VIEWER,
    ("POST", "/tours/{tour_id}/edit/"): Role.MAINTAINER,
    ("POST", "/tours/{tour_id}/delete/"): Role.MAINTAINER,
    ("POST", "/tours/{tour_id}/stops/{stop_id}/edit/"): Role.MAINTAINER,
    ("POST", "/tours/{tour_id}/stops/{stop_id}/move/"): Role.MAINTAINER,
    ("POST", "/tours/{tour_id}/stops/{stop_id}/delete/"): Role.MAINTAINER,
    ("POST", "/sessions/{session_id}/tour-stops/"): Role.MAINTAINER,
    # A key is its user's, not a project's: someone else's key is 404 to everyone else.
    ("POST", "/account/keys/{key_id}/revoke/"): None,
}

# Pages anyone may ask for without signing in that still name something secret (a share link's
# token): to a key's bearer, nobody on a page, they answer as to anyone (404 for the walk's token).
NEEDS_NO_SIGN_IN = {("GET", "/s/{token}")}


@dataclass
class Theirs:
    project: Project
    a: int  # session ids
    b: int
    job: int
    key: int  # their admin's key id
    comment: int  # a comment on session a
    checkpoint: int  # session a's checkpoint
    tour: int  # a tour with one stop, on session a
    stop: int  # that stop
    link: int  # a share link to session a
    token: str  # its token (the walks use BOGUS_TOKEN; the visitor's walk opens this one)


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
    tour = Tour.objects.create(project=project, title="theirs-tour")
    stop = TourStop.objects.create(tour=tour, position=0, session_id=ids[0], seq=1, title="theirs-stop",
                                   narration="THEIRS-NARRATION")  # fmt: skip
    link, token = sharing.create_link(actor=actor, session=Session.objects.get(pk=ids[0]), note="THEIRS-SHARE-NOTE")
    return Theirs(project=project, a=ids[0], b=ids[1], job=job.pk, key=key.pk, comment=comment.pk,
                  checkpoint=checkpoint_ids[0], tour=tour.pk, stop=stop.pk, link=link.pk, token=token)  # fmt: skip


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


# A share token nobody was given (the shape of a real one).
BOGUS_TOKEN = "x" * 43


def _path_values(t: Theirs) -> dict[str, object]:
    return {"session_id": t.a, "job_id": t.job, "name": "theirs-checkpoint", "index": 0, "slug": "theirs",
            "username": "theirs-admin", "key_id": t.key, "comment_id": t.comment,
            "checkpoint_id": t.checkpoint, "tour_id": t.tour, "stop_id": t.stop, "link_id": t.link,
            "token": BOGUS_TOKEN}  # fmt: skip


def _query(route: str, t: Theirs) -> dict[str, object]:
    return {
        "/api/sessions/{session_id}/context": {"seq": 0},
        "/api/sessions/{session_id}/stream": {"pacing": 0},
        "/api/compare": {"a": t.a, "b": t.b},
        "/compare/": {"a": t.a, "b": t.b},
        "/api/sessions": {"project": "theirs"},
        "/api/events": {"project": "theirs"},
        "/sessions/": {"project": "theirs"},
        "/imports/": {"project": "theirs"},
        "/search/": {"q": "THEIRS", "project": "theirs"},
        "/sessions/{session_id}/compare-with/": {"q": "theirs"},
        "/sessions/{session_id}/export/": {"format": "jsonl"},
    }.get(route, {})


def _body(method: str, route: str) -> dict | list:
    """A body the operation would accept from a member, so a refusal is the scoping's."""
    return {
        ("POST", "/api/sessions"): {"project": "theirs", "task": "sweep"},
        ("POST", "/api/sessions/{session_id}/checkpoints"): {"name": "sweep", "seq": 1},
        ("POST", "/api/sessions/{session_id}/comments"): {"seq": 1, "body": "sweep"},
        ("PATCH", "/api/sessions/{session_id}/comments/{comment_id}"): {"body": "sweep"},
        ("POST", "/api/sessions/{session_id}/events"): {"events": [{"kind": "user_message", "payload": {}}]},
        ("POST", "/api/sessions/{session_id}/end"): {"status": "completed"},
        ("POST", "/api/events"): {"events": [{"sessionId": "s", "agentId": "a", "eventType": "custom", "payload": {}}]},
        ("POST", "/api/sessions/{session_id}/reviews"): {"verdict": "approved", "note": "sweep"},
        ("POST", "/api/projects"): {"name": "Sweep project", "slug": "sweep-project"},
        ("POST", "/api/projects/{slug}/members"): {"username": "theirs-viewer", "role": "reviewer"},
        ("POST", "/sessions/{session_id}/checkpoints/"): {"name": "sweep", "step": 1},
        ("POST", "/sessions/{session_id}/checkpoints/{checkpoint_id}/rename/"): {"name": "sweep-renamed"},
        ("POST", "/sessions/{session_id}/comments/"): {"seq": 1, "body": "sweep"},
        ("POST", "/sessions/{session_id}/comments/{comment_id}/edit/"): {"body": "sweep"},
        ("POST", "/sessions/{session_id}/reviews/"): {"verdict": "approved", "note": "sweep"},
        ("POST", "/projects/{slug}/members/"): {"username": "theirs-viewer", "role": "reviewer"},
        ("POST", "/projects/{slug}/members/remove/"): {"username": "theirs-admin"},
        ("POST", "/projects/{slug}/settings/"): {"retention_days": "30"},
        ("POST", "/sessions/{session_id}/redact/"): {"text": "THEIRS-EVENT-PAYLOAD", "seq": "1", "label": "sweep"},
        ("POST", "/api/sessions/{session_id}/redactions"): {"text": "THEIRS-EVENT-PAYLOAD", "seq": 1, "label": "sweep"},
        ("PUT", "/api/projects/{slug}/redaction"): {"detectors": {"email": True}},
        ("POST", "/api/projects/{slug}/redaction/try"): {"detectors": {"email": True}, "text": "a@example.org"},
        ("POST", "/projects/{slug}/redaction/"): {"detectors": "email"},
        ("POST", "/projects/{slug}/redaction/try/"): {"detectors": "email", "sample": "a@example.org"},
        ("POST", "/projects/"): {"name": "Sweep page project", "slug": "sweep-page-project"},
        ("POST", "/account/keys/"): {"name": "sweep", "project": "theirs"},
        ("POST", "/accounts/login/"): {"username": "sweeper", "password": "wrong"},
        ("POST", "/sessions/{session_id}/share-links/"): {"expires_in_days": "7", "note": "sweep"},
        ("POST", "/tours/{tour_id}/share-links/"): {"expires_in_days": "7", "note": "sweep"},
        ("POST", "/api/sessions/{session_id}/share-links"): {"expires_in_days": 7, "note": "sweep"},
        ("POST", "/api/tours/{tour_id}/share-links"): {"expires_in_days": 7, "note": "sweep"},
        ("POST", "/api/projects/{slug}/tours"): {"title": "sweep"},
        ("PATCH", "/api/tours/{tour_id}"): {"title": "sweep"},
        ("PUT", "/api/tours/{tour_id}/stops"): [],
        ("POST", "/projects/{slug}/tours/"): {"title": "sweep"},
        ("POST", "/tours/{tour_id}/edit/"): {"title": "sweep"},
        ("POST", "/tours/{tour_id}/stops/{stop_id}/edit/"): {"title": "sweep"},
        ("POST", "/tours/{tour_id}/stops/{stop_id}/move/"): {"direction": "down"},
        ("POST", "/sessions/{session_id}/tour-stops/"): {"step": 1, "new_tour": "sweep", "title": "sweep"},
    }.get((method, route), {})


def _call(client: Client, method: str, route: str, t: Theirs, headers: dict[str, str]):
    response = _request(client, method, route, t, headers)
    return response.status_code, _text(response)


def _text(response) -> str:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return body.decode("utf-8", "replace")


def _request(client: Client, method: str, route: str, t: Theirs, headers: dict[str, str], *,
             own: dict[str, object] | None = None, query: dict[str, object] | None = None):  # fmt: skip
    """The request the walk makes; `own`: path values of the caller's own objects instead of
    theirs (a session, a tour), `query`: other query parameters (the mixed walks')."""
    url = route.format(**(_path_values(t) | (own or {})))
    query = _query(route, t) if query is None else query
    if method == "GET":
        response = client.get(url, query, headers=headers)
    elif method == "POST" and route in ("/api/imports", "/sessions/upload/"):
        upload = SimpleUploadedFile("sweep.jsonl", b'{"kind": "user_message", "payload": {}}\n')
        field = "file" if route.startswith("/api/") else "files"
        response = client.post(url, {field: upload, "project": "theirs"}, headers=headers)
    elif route.startswith("/api/"):
        data = orjson.dumps(_body(method, route)) if method != "DELETE" else None
        url += f"?{urlencode(query)}" if query else ""  # POST /api/events names its project there
        response = client.generic(method, url, data or b"", content_type="application/json", headers=headers)
    elif method == "POST":
        response = client.post(url, _body(method, route), headers=headers)
    else:  # PUT, PATCH, DELETE on a page: a view that takes them must be walked too
        response = client.generic(method, url, urlencode(_body(method, route)),
                                  content_type="application/x-www-form-urlencoded", headers=headers)  # fmt: skip
    return response


# Every route is tried with each: one that does not take a method answers 405 before any
# lookup, and is skipped. Not the schema's list for the API: an operation left out of it
# (include_in_schema=False) on a documented path is walked all the same.
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _endpoints(client: Client) -> list[tuple[str, str]]:
    """Every (method, route) of every URL the resolver has (pages and API alike)."""
    operations = _operations(client)
    schema_routes = {route for _, route in operations}
    routes = set(_walk(get_resolver().url_patterns))
    api_routes = {r for r in routes if r.startswith("/api/")}
    # Every API URL is in the schema (or is the schema and its docs): none escapes the walk.
    assert api_routes - schema_routes <= {"/api/openapi.json", "/api/docs", "/api/"}, api_routes - schema_routes
    walked = [(m, r) for r in sorted(routes - {"/api/"}) for m in METHODS]
    return [endpoint for endpoint in walked if endpoint not in NOT_WALKED]


def _answered(statuses: dict[tuple[str, str], int]) -> None:
    """Each route answered some method: one that answers 405 to all of them takes a method the
    walk does not try, which is then never checked."""
    routes = {route for _, route in statuses} - {route for _, route in NOT_WALKED}
    silent = sorted(r for r in routes if all(statuses.get((m, r)) == 405 for m in METHODS if (m, r) in statuses))
    assert not silent, f"these routes answered 405 to every method tried ({', '.join(METHODS)}): {silent}"


# Signing out ends the walking persona's session; it names nothing (tests/test_signin.py).
NOT_WALKED = {("POST", "/accounts/logout/")}


def _declared(method: str, route: str) -> bool:
    return (method, route) in NAMES_NO_OBJECT or (method, route) in ROLE_NEEDED


# --- what a refusal must leave as it was ----------------------------------------------------

# A key's last use is noted on every request it makes, refused or not (docs/teams.md).
CHANGES_ON_ANY_REQUEST = {("sessions_app.ApiKey", "last_used_at")}


def _rows() -> dict[str, list[tuple]]:
    """Every row of Replay's tables and of the job queue (a job queued before a refusal would
    act later), as plain values."""
    tables = [*apps.get_app_config("sessions_app").get_models(), OrmQ]
    rows = {}
    for model in tables:
        label = model._meta.label
        kept = [f.attname for f in model._meta.concrete_fields if (label, f.attname) not in CHANGES_ON_ANY_REQUEST]
        rows[label] = list(model.objects.order_by("pk").values_list(*kept))
    return rows


class _Unchanged:
    """Rows compared across the walk's requests: each refused one must have changed none."""

    def __init__(self) -> None:
        self.before = _rows()

    def after(self, where: str, *, status: int, refused: bool) -> None:
        if status == 405:
            return  # the route does not take the method: answered before any view ran
        now = _rows()
        if refused:
            changed = sorted(label for label in now if now[label] != self.before[label])
            assert not changed, f"{where} was refused but changed rows of {changed}"
        self.before = now


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
    # Their own admin, through a key limited to another project they also belong to: the key's
    # limit, not the user's memberships, must decide (Actor.narrow).
    admin = get_user_model().objects.get(username="theirs-admin")
    Membership.objects.get_or_create(project=ours, user=admin, defaults={"role": Role.ADMIN})
    limited = key_of(admin, name="limited to ours", project=ours)
    people.append(("their admin's key limited to another project", Client(), {"authorization": f"Bearer {limited}"}))
    return people


def test_outsiders_get_404_from_every_endpoint_naming_a_project_object_and_never_its_data(theirs, db):
    walked = 0
    outsiders = _outsiders(db)
    rows = _Unchanged()
    for who, client, headers in outsiders:
        statuses: dict[tuple[str, str], int] = {}
        for method, route in _endpoints(client):
            on_page = not route.startswith("/api/")
            if headers and on_page and method != "GET":
                continue  # a key opens only the API; its bearer is nobody on a page (below)
            status, body = _call(client, method, route, theirs, headers)
            statuses[method, route] = status
            refused = status in (403, 404) and (method, route) not in NAMES_NO_OBJECT
            rows.after(f"{who}: {method} {route}", status=status, refused=refused)
            leaked = [m for m in MARKERS if m in body]
            assert not leaked, f"{who}: {method} {route} answered {status} with {leaked}"
            if headers and on_page:
                anyones = (method, route) in NAMES_NO_OBJECT or ((method, route) in NEEDS_NO_SIGN_IN and status == 404)
                assert status in (302, 405) or anyones, f"{who}: {route}: {status}"
                continue
            if status == 405:
                continue  # the pattern does not take this method; it answered before any lookup
            walked += 1
            assert _declared(method, route), f"{method} {route} is new: declare its role in ROLE_NEEDED"
            if (method, route) in NAMES_NO_OBJECT:
                assert status < 500 or (status == 503 and (method, route) in MAY_BE_UNAVAILABLE), (
                    f"{who}: {method} {route} answered {status}"
                )
            else:
                assert status == 404, f"{who}: {method} {route} answered {status}, not 404"
        if not headers:
            _answered(statuses)
    assert walked > 150  # every persona walked every endpoint, not a handful


def _session_slots(route: str, t: Theirs) -> list[str]:
    """Where the walk's request for `route` names a session: "path" and query parameters."""
    slots = ["path"] if "{session_id}" in route else []
    return slots + [name for name, value in _query(route, t).items() if value in (t.a, t.b)]


def test_outsiders_naming_their_own_session_beside_another_projects_get_404(theirs, db):
    """An endpoint naming two sessions (a comparison) looks each up through access.py: every
    slot is tried with another project's session while the others hold the caller's own."""
    outsiders = _outsiders(db)  # made first: it makes their project, "ours"
    own = create_session(project=Project.objects.get(slug="ours"), source_format="canonical",
                         meta=SessionMeta(task="ours"))  # fmt: skip
    append_events(session=own, events=[CanonicalEvent(kind=Kind.USER_MESSAGE, source_type="user", raw=None,
                                                      payload={"text": "ours"}, timestamp=T0, line=1)])  # fmt: skip
    finish_session(session=own)
    mixed = set()
    rows = _Unchanged()
    for who, client, headers in outsiders[1:]:  # members of "ours" (a person, a key)
        for method, route in _endpoints(client):
            slots = _session_slots(route, theirs)
            if len(slots) < 2 or (headers and not route.startswith("/api/")):
                continue
            for theirs_in in slots:
                query = {name: (value if name == theirs_in else own.pk) if name in slots else value
                         for name, value in _query(route, theirs).items()}  # fmt: skip
                response = _request(client, method, route, theirs, headers, query=query,
                                    own=None if theirs_in == "path" else {"session_id": own.pk})  # fmt: skip
                if response.status_code == 405:
                    continue
                body = _text(response)
                where = f"{who}: {method} {route} with theirs in {theirs_in}"
                rows.after(where, status=response.status_code, refused=True)
                assert not [m for m in MARKERS if m in body], f"{where} answered with their data"
                assert response.status_code == 404, f"{where} answered {response.status_code}, not 404"
                mixed.add((method, route))
    assert {route for _, route in mixed} >= {"/api/compare", "/compare/"}


# Routes naming a parent and its child: the child must be looked up inside the parent.
PARENTS = {"session_id": ("comment_id", "checkpoint_id", "name"), "tour_id": ("stop_id",)}


def test_outsiders_naming_their_own_parent_and_another_projects_child_get_404(theirs, db):
    """`/sessions/{own}/comments/{theirs}/edit/`: the parent is the caller's own, which they may
    act on (an admin of it), the child another project's; each must be not found."""
    outsiders = _outsiders(db)
    ours = Project.objects.get(slug="ours")
    admin = member("our-admin", ours, Role.ADMIN)
    session = create_session(project=ours, source_format="canonical", meta=SessionMeta(task="ours"))
    append_events(session=session, events=[CanonicalEvent(kind=Kind.USER_MESSAGE, source_type="user", raw=None,
                                                          payload={"text": "ours"}, timestamp=T0, line=1)])  # fmt: skip
    finish_session(session=session)
    own = {"session_id": session.pk, "tour_id": Tour.objects.create(project=ours, title="our tour").pk}
    client = Client()
    client.force_login(admin)
    people = [("an admin of another project", client, {}), ("the API key of that admin", Client(),
              {"authorization": f"Bearer {key_of(admin)}"}), *outsiders[2:]]  # fmt: skip
    rows = _Unchanged()
    walked = set()
    for who, client, headers in people:
        for method, route in _endpoints(client):
            parents = [p for p, children in PARENTS.items() if f"{{{p}}}" in route
                       and any(f"{{{c}}}" in route for c in children)]  # fmt: skip
            if not parents or (headers and not route.startswith("/api/")):
                continue
            response = _request(client, method, route, theirs, headers, own={p: own[p] for p in parents})
            if response.status_code == 405:
                continue
            where = f"{who}: {method} {route} with their child in our parent"
            rows.after(where, status=response.status_code, refused=True)
            echoed = {"theirs-checkpoint"} if "{name}" in route else set()  # the name asked for, said back
            assert not [m for m in MARKERS if m in _text(response) and m not in echoed], f"{where}: their data"
            assert response.status_code == 404, f"{where} answered {response.status_code}, not 404"
            walked.add((method, route))
    assert {route for _, route in walked} >= {
        "/sessions/{session_id}/comments/{comment_id}/edit/", "/api/sessions/{session_id}/comments/{comment_id}",
        "/tours/{tour_id}/stops/{stop_id}/move/",
    }, walked  # fmt: skip


def test_the_projects_viewer_gets_403_where_a_higher_role_is_needed_and_an_answer_elsewhere(theirs, db):
    client = Client()
    client.force_login(get_user_model().objects.get(username="theirs-viewer"))
    checked = 0
    rows = _Unchanged()
    for method, route in _endpoints(client):
        if (method, route) in NAMES_NO_OBJECT:
            continue
        status, _ = _call(client, method, route, theirs, {})
        rows.after(f"viewer: {method} {route}", status=status, refused=status in (403, 404))
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


def test_a_member_one_role_below_what_an_operation_needs_gets_403(theirs, db):
    """The viewer's walk above cannot tell a reviewer's operation from a maintainer's: a member
    one role below each declared role is refused (403) by every operation needing it. Refusals
    change nothing, so one walk serves every role."""
    below = {Role.MAINTAINER: Role.REVIEWER, Role.ADMIN: Role.MAINTAINER}
    clients = {}
    for role in below.values():
        client = Client()
        client.force_login(member(f"theirs-{role.value}", theirs.project, role))
        clients[role] = client
    checked = Counter()
    rows = _Unchanged()
    for (method, route), needed in ROLE_NEEDED.items():
        if needed not in below:
            continue
        status, _ = _call(clients[below[needed]], method, route, theirs, {})
        rows.after(f"{below[needed].label}: {method} {route}", status=status, refused=True)
        assert status == 403, f"{below[needed].label}: {method} {route} needs {needed.label} but answered {status}"
        checked[needed] += 1
    assert checked[Role.MAINTAINER] > 10 and checked[Role.ADMIN] > 5, checked


# The reads above a viewer's role: a read-only key keeps its user's role for them (it writes
# nothing by reading), and only for them.
READ_ONLY_KEY_READS = {
    ("GET", "/api/projects/{slug}/audit"),
    ("GET", "/api/projects/{slug}/audit/export"),
    ("GET", "/api/projects/{slug}/audit/verify"),
}


def test_a_read_only_key_of_the_projects_admin_gets_403_from_every_operation_above_a_viewers(theirs, db):
    key = key_of(get_user_model().objects.get(username="theirs-admin"), name="read only", read_only=True)
    headers = {"authorization": f"Bearer {key}"}
    rows = _Unchanged()
    checked = reads = 0
    for (method, route), needed in ROLE_NEEDED.items():
        if not route.startswith("/api/") or needed in (None, Role.VIEWER):
            continue
        status, _ = _call(Client(), method, route, theirs, headers)
        rows.after(
            f"read-only key: {method} {route}", status=status, refused=(method, route) not in READ_ONLY_KEY_READS
        )
        if (method, route) in READ_ONLY_KEY_READS:
            assert status == 200, f"read-only key: {method} {route} is a read its user may make, answered {status}"
            reads += 1
            continue
        assert status == 403, f"read-only key: {method} {route} needs {needed.label} but answered {status}"
        checked += 1
    assert checked > 20 and reads == len(READ_ONLY_KEY_READS)


# --- a share link's visitor -----------------------------------------------------------------

# What a visitor of a link to session a may open of it, and how each answers (a plain form
# post of verify goes back to the player). The export page is 403: the link allows no exports.
VISITOR_OPENS = {
    ("GET", "/sessions/{session_id}/"): 200,
    ("GET", "/sessions/{session_id}/search/"): 200,
    ("GET", "/sessions/{session_id}/charts/"): 200,
    ("GET", "/sessions/{session_id}/tail/"): 200,  # the player's own tail (the recording, as it grows)
    ("GET", "/sessions/{session_id}/chain-badge/"): 200,  # the badge a visitor's player shows
    ("POST", "/sessions/{session_id}/verify/"): 302,
    ("GET", "/sessions/{session_id}/export/"): 403,
}
# Of session a, a visitor may read the recording; never who works on it, what they wrote about
# it, the project, the other session or the link's own note.
NEVER_TO_A_VISITOR = ("Theirs Secret Name", "theirs-upload.jsonl", "theirs-admin", "THEIRS-COMMENT",
                      "THEIRS-SHARE-NOTE", "theirs-source-id-1")  # fmt: skip
PUBLIC_API = {"/api/openapi.json", "/api/docs"}


def _walk_as_visitor(visitor: Client, t: Theirs, *, session: int, tour_pages: bool = False) -> int:
    """Walk every endpoint with session_id = `session`. When it is the link's own session (a),
    what VISITOR_OPENS names answers as it says there; every API operation is 401; everything
    else is a 404 or the sign-in page, and holds none of the project's data. `tour_pages`: the
    visitor came by a link to the tour, whose pages may open to it (a redirect into the player
    of session a, or the page), never showing what NEVER_TO_A_VISITOR names."""
    walked = 0
    for method, route in _endpoints(visitor):
        response = _request(visitor, method, route, dataclasses.replace(t, a=session), {})
        status, body, location = response.status_code, _text(response), response.get("Location", "")
        own = session == t.a and (method, route) in VISITOR_OPENS
        tour_page = tour_pages and "{tour_id}" in route and status in (200, 302)
        leaked = [m for m in (NEVER_TO_A_VISITOR if own or tour_page else MARKERS) if m in body]
        assert not leaked, f"visitor: {method} {route} (session {session}) answered {status} with {leaked}"
        if status == 405:
            continue
        walked += 1
        what = f"visitor: {method} {route} (session {session}) answered {status}"
        if own:
            assert status == VISITOR_OPENS[method, route], what
        elif route.startswith("/api/") and route not in PUBLIC_API:
            assert status == 401, f"{what}, not 401"
        elif (method, route) in NAMES_NO_OBJECT or route in PUBLIC_API:
            # Their answers are the outsiders' walk's to check; here: no data (above), no way past sign-in.
            assert status != 302 or location.startswith("/accounts/login/"), f"{what} to {location}"
        elif tour_page:
            assert status == 200 or location.startswith(("/accounts/login/", f"/sessions/{t.a}/")), what
        elif status == 302:
            assert location.startswith("/accounts/login/"), f"{what} to {location}"
        else:
            assert status == 404, f"{what}, not 404"
    return walked


def _visitor_of(token: str) -> Client:
    visitor = Client()
    opened = visitor.get(f"/s/{token}")
    assert opened.status_code == 302
    return visitor


def test_a_share_links_visitor_reads_its_session_and_nothing_else(theirs, db):
    visitor = _visitor_of(theirs.token)
    assert visitor.get(f"/sessions/{theirs.a}/").status_code == 200  # the grant holds
    walked = _walk_as_visitor(visitor, theirs, session=theirs.a)
    walked += _walk_as_visitor(visitor, theirs, session=theirs.b)
    assert walked > 150
    # Every visit so far used the link once (a walk never opens it: its token is BOGUS_TOKEN).
    assert ShareLink.objects.get(pk=theirs.link).use_count == 1


def test_a_tour_links_visitor_reads_the_tours_sessions_and_nothing_else(theirs, db):
    tour = Tour.objects.get(pk=theirs.tour)
    _, token = sharing.create_link(actor=Actor(user=get_user_model().objects.get(username="theirs-admin")), tour=tour)
    visitor = _visitor_of(token)
    assert visitor.get(f"/sessions/{theirs.a}/").status_code == 200  # the session of its one stop
    _walk_as_visitor(visitor, theirs, session=theirs.a, tour_pages=True)
    _walk_as_visitor(visitor, theirs, session=theirs.b, tour_pages=True)


@pytest.fixture
def unscoped_endpoint():
    """A page added without asking access.py. It says whether a session exists, or (when
    `shows["task"]` is set) shows any session's task to anyone."""
    from django.http import JsonResponse

    from sessions_app.models import Session

    shows = {"task": False}

    def unscoped(request, session_id: int):
        session = Session.objects.get(pk=session_id)
        return JsonResponse({"task": session.task} if shows["task"] else {"exists": True})

    with _route_added("sessions/<int:session_id>/unscoped/", unscoped):
        yield shows


@contextmanager
def _route_added(route: str, view) -> Iterator[None]:
    """The site's URLs with one more page (a new endpoint a change might add), for a while."""
    from django.urls import clear_url_caches, path

    import replay_site.urls as root

    saved = list(root.urlpatterns)
    root.urlpatterns.insert(0, path(route, view))
    clear_url_caches()
    try:
        yield
    finally:
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


@pytest.fixture
def delete_only_endpoint():
    """A page taking only DELETE that deletes any session: a walk trying GET and POST alone
    never called it (each answered 405)."""
    from django.http import HttpResponse
    from django.views.decorators.http import require_http_methods

    from sessions_app.models import Session

    @require_http_methods(["DELETE"])
    def zap(request, session_id: int):
        Session.objects.filter(pk=session_id).delete()
        return HttpResponse("gone")

    with _route_added("sessions/<int:session_id>/zap/", zap):
        yield


def test_the_sweep_walks_every_method_a_route_takes(theirs, db, delete_only_endpoint, monkeypatch):
    sweep = test_outsiders_get_404_from_every_endpoint_naming_a_project_object_and_never_its_data
    with pytest.raises(AssertionError, match="DELETE /sessions/{session_id}/zap/ is new"):
        sweep(theirs, db)
    monkeypatch.setitem(ROLE_NEEDED, ("DELETE", "/sessions/{session_id}/zap/"), Role.MAINTAINER)
    with pytest.raises(AssertionError, match="DELETE /sessions/{session_id}/zap/ answered 200, not 404"):
        sweep(theirs, db)


@pytest.fixture
def acts_first_endpoint():
    """A page that deletes a session's comments and only then asks access.py: every caller is
    refused with the right status, after the harm."""
    from django.views.decorators.http import require_POST

    from sessions_app import access
    from sessions_app.models import Comment

    @require_POST
    def wipe(request, session_id: int):
        Comment.objects.filter(session_id=session_id).delete()
        access.session_for(request, session_id, need=Role.MAINTAINER)

    with _route_added("sessions/<int:session_id>/wipe-comments/", wipe):
        yield


def test_the_sweep_finds_a_change_made_before_the_refusal(theirs, db, acts_first_endpoint, monkeypatch):
    monkeypatch.setitem(ROLE_NEEDED, ("POST", "/sessions/{session_id}/wipe-comments/"), Role.MAINTAINER)
    walks = (
        test_outsiders_get_404_from_every_endpoint_naming_a_project_object_and_never_its_data,
        test_the_projects_viewer_gets_403_where_a_higher_role_is_needed_and_an_answer_elsewhere,
        test_a_member_one_role_below_what_an_operation_needs_gets_403,
    )
    for walk in walks:
        with transaction.atomic():  # each walk finds the comment there: its harm is rolled back
            with pytest.raises(AssertionError, match=r"POST /sessions/{session_id}/wipe-comments/ was refused but "
                                                     r"changed rows of \['sessions_app.Comment'\]"):  # fmt: skip
                walk(theirs, db)
            transaction.set_rollback(True)


def test_every_api_operation_that_needs_more_than_a_viewer_documents_its_403(client):
    """docs/api.md: the schema lists every error an operation can answer. A role too low is a
    403 (access.py), so each operation above the viewer's role must list one."""
    paths = orjson.loads(client.get("/api/openapi.json").content)["paths"]
    missing = [
        f"{method} {path}"
        for (method, path), role in ROLE_NEEDED.items()
        if path.startswith("/api/") and role not in (None, Role.VIEWER)
        and "403" not in paths[path][method.lower()]["responses"]
    ]  # fmt: skip
    assert not missing, missing
