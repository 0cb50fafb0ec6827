"""Roles, through the real API and pages: what a viewer, a reviewer, a maintainer and an admin of a
project may do, what a superuser sees, and how a key narrows (or loses) its user's rights."""

from __future__ import annotations

import re

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from sessions_app import teams
from sessions_app.access import Actor
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session, set_checkpoint
from sessions_app.models import ApiKey, AuditEntry, Checkpoint, ImportJob, Membership, Project, Role, Session

from .builders_teams import UPLOAD, acme, key_of, member, other  # noqa: F401  (fixtures)
from .conftest import synthetic_events


def recorded(project: Project, task: str) -> Session:
    session = create_session(project=project, source_format="canonical", meta=SessionMeta(task=task))
    append_events(session=session, events=synthetic_events(10))
    finish_session(session=session)
    session.refresh_from_db()
    return session


@pytest.fixture
def ours(acme) -> Session:
    return recorded(acme, "ACME-TASK")


@pytest.fixture
def theirs(other) -> Session:
    return recorded(other, "OTHER-TASK")


def api_as(user, **limits) -> Client:
    """A client sending a new key of `user` (narrowed by `limits`: project=, read_only=)."""
    return Client(HTTP_AUTHORIZATION=f"Bearer {key_of(user, **limits)}")


def page_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post_json(client: Client, url: str, body: dict) -> HttpResponse:
    return client.post(url, orjson.dumps(body), content_type="application/json")


def upload(client: Client, project: str = "acme") -> HttpResponse:
    return client.post("/api/imports", {"file": SimpleUploadedFile("up.jsonl", UPLOAD), "project": project})


def dashboard_upload(client: Client, project: str = "acme") -> HttpResponse:
    return client.post(
        reverse("sessions:upload"), {"files": [SimpleUploadedFile("up.jsonl", UPLOAD)], "project": project}
    )


def role_of(project: Project, username: str) -> str | None:
    return Membership.objects.filter(project=project, user__username=username).values_list("role", flat=True).first()


# --- a viewer reads, exports and verifies; nothing more -------------------------------------


def test_a_viewer_cannot_delete_upload_checkpoint_or_start_a_live_session_through_the_api(acme, ours):
    api = api_as(member("vic", acme, Role.VIEWER))
    set_checkpoint(session=ours, name="kept", seq=1)
    assert api.delete(f"/api/sessions/{ours.pk}").status_code == 403
    assert upload(api).status_code == 403
    assert upload(api, project="").status_code == 403  # no project of theirs to write to
    assert post_json(api, f"/api/sessions/{ours.pk}/checkpoints", {"name": "cp", "seq": 1}).status_code == 403
    assert api.delete(f"/api/sessions/{ours.pk}/checkpoints/kept").status_code == 403
    assert post_json(api, "/api/sessions", {"project": "acme", "task": "live"}).status_code == 403
    assert post_json(api, f"/api/sessions/{ours.pk}/events", {"events": []}).status_code == 403
    assert Session.objects.filter(project=acme).count() == 1
    assert list(Checkpoint.objects.values_list("name", flat=True)) == ["kept"]
    assert not ImportJob.objects.exists()


def test_a_viewer_cannot_upload_or_checkpoint_in_the_dashboard(acme, ours):
    page = page_as(member("vic", acme, Role.VIEWER))
    assert dashboard_upload(page).status_code == 403
    checkpoint = page.post(reverse("sessions:checkpoint", args=[ours.pk]), {"name": "cp", "step": "1"})
    assert checkpoint.status_code == 403
    assert not ImportJob.objects.exists() and not Checkpoint.objects.exists()


def test_a_refusal_names_its_reason_on_a_page_and_in_a_panel(acme, ours, theirs):
    page = page_as(member("vin", acme, Role.VIEWER))
    url = reverse("sessions:checkpoint", args=[ours.pk])
    whole = page.post(url, {"name": "cp", "step": "1"})
    assert whole.status_code == 403
    html = whole.content.decode()
    assert f"session {ours.pk}: this needs the maintainer role in its project" in html
    assert "<main>" in html  # the site's page, with its navigation, not Django's bare one
    # To htmx only the #refusal partial, which base.html's responseHandling swaps into the panel.
    panel = page.post(url, {"name": "cp", "step": "1"}, headers={"HX-Request": "true"})
    assert panel.status_code == 403
    fragment = panel.content.decode().strip()
    assert fragment.startswith('<p id="refusal"') and "<main>" not in fragment
    assert "needs the maintainer role" in fragment
    # Another project's session: the same words as for a session that does not exist.
    hidden = page.get(reverse("sessions:player", args=[theirs.pk]), headers={"HX-Request": "true"})
    missing = page.get(reverse("sessions:player", args=[10**9]), headers={"HX-Request": "true"})
    assert hidden.status_code == missing.status_code == 404
    assert f"session {theirs.pk} not found" in hidden.content.decode()
    assert f"session {10**9} not found" in missing.content.decode()


def test_a_viewer_can_read_export_and_verify(acme, ours):
    viewer = member("vic", acme, Role.VIEWER)
    api = api_as(viewer)
    detail = api.get(f"/api/sessions/{ours.pk}")
    assert detail.status_code == 200 and detail.json()["session"]["id"] == ours.pk
    export = api.get(f"/api/sessions/{ours.pk}/export", {"format": "jsonl"})
    assert export.status_code == 200 and len(b"".join(export.streaming_content).splitlines()) >= 10
    verified = api.get(f"/api/sessions/{ours.pk}/verify")
    assert verified.status_code == 200 and verified.json()["chainValid"] is True
    assert api.post(f"/api/sessions/{ours.pk}/verify").status_code == 200
    page = page_as(viewer)
    assert page.get(reverse("sessions:player", args=[ours.pk])).status_code == 200
    assert page.post(reverse("sessions:verify", args=[ours.pk])).status_code == 302


# --- members: admins only, and the last admin stays -------------------------------------------


def test_a_reviewer_cannot_manage_members(acme):
    api = api_as(member("rita", acme, Role.REVIEWER))
    member("vic", acme, Role.VIEWER)
    get_user_model().objects.create_user(username="newcomer", password="x")
    assert post_json(api, "/api/projects/acme/members", {"username": "newcomer", "role": "viewer"}).status_code == 403
    assert post_json(api, "/api/projects/acme/members", {"username": "rita", "role": "admin"}).status_code == 403
    assert api.delete("/api/projects/acme/members/vic").status_code == 403
    assert api.get("/api/projects/acme/members").status_code == 200  # seeing the team is fine
    assert (role_of(acme, "newcomer"), role_of(acme, "rita"), role_of(acme, "vic")) == (None, "reviewer", "viewer")


def test_the_last_admin_can_be_neither_removed_nor_demoted(acme):
    api = api_as(member("ada", acme, Role.ADMIN))
    removed = api.delete("/api/projects/acme/members/ada")
    assert removed.status_code == 400 and "last admin" in removed.json()["detail"]
    demoted = post_json(api, "/api/projects/acme/members", {"username": "ada", "role": "maintainer"})
    assert demoted.status_code == 400 and "last admin" in demoted.json()["detail"]
    assert role_of(acme, "ada") == Role.ADMIN
    # With a second admin the same requests go through: the refusal was about being the last.
    member("bea", acme, Role.ADMIN)
    assert post_json(api, "/api/projects/acme/members", {"username": "ada", "role": "maintainer"}).status_code == 200
    assert role_of(acme, "ada") == Role.MAINTAINER


# --- a maintainer writes ----------------------------------------------------------------------


def test_a_maintainer_can_upload_checkpoint_start_live_sessions_and_delete(acme, ours):
    mia = member("mia", acme, Role.MAINTAINER)
    api = api_as(mia)
    assert upload(api).status_code == 202
    created = post_json(api, f"/api/sessions/{ours.pk}/checkpoints", {"name": "cp", "seq": 2})
    assert created.status_code == 201
    assert api.delete(f"/api/sessions/{ours.pk}/checkpoints/cp").status_code == 204
    live = post_json(api, "/api/sessions", {"project": "acme", "task": "live"})
    assert live.status_code == 201 and Session.objects.get(pk=live.json()["id"]).project_id == acme.pk
    page = page_as(mia)
    assert dashboard_upload(page).status_code == 302
    assert (
        page.post(reverse("sessions:checkpoint", args=[ours.pk]), {"name": "page-cp", "step": "3"}).status_code == 302
    )
    assert list(Checkpoint.objects.filter(session=ours).values_list("name", "seq")) == [("page-cp", 3)]
    assert ImportJob.objects.filter(project=acme, created_by="mia").count() == 2
    assert api.delete(f"/api/sessions/{ours.pk}").status_code == 204
    assert not Session.objects.filter(pk=ours.pk).exists()


# --- superusers, keys -------------------------------------------------------------------------


def test_a_superuser_sees_every_project_without_being_a_member(acme, other, ours, theirs):
    root = get_user_model().objects.create_superuser(username="root", password="x")
    api = api_as(root)
    listed = {(p["slug"], p["role"]) for p in api.get("/api/projects").json()}
    assert {("acme", "admin"), ("other", "admin")} <= listed
    assert listed == {(slug, "admin") for slug in Project.objects.values_list("slug", flat=True)}
    assert {s["id"] for s in api.get("/api/sessions").json()["sessions"]} == {ours.pk, theirs.pk}
    assert api.get(f"/api/sessions/{theirs.pk}").status_code == 200
    html = page_as(root).get(reverse("sessions:list")).content.decode()
    assert "ACME-TASK" in html and "OTHER-TASK" in html
    assert not Membership.objects.filter(user=root).exists()


def test_a_key_limited_to_one_project_cannot_reach_another_where_its_user_is_a_member(acme, other, ours, theirs):
    mia = member("mia", acme, Role.MAINTAINER)
    member("mia", other, Role.MAINTAINER)
    limited = api_as(mia, project=acme)
    assert limited.get(f"/api/sessions/{theirs.pk}").status_code == 404
    assert limited.delete(f"/api/sessions/{theirs.pk}").status_code == 404
    assert limited.get(f"/api/sessions/{ours.pk}").status_code == 200
    assert [p["slug"] for p in limited.get("/api/projects").json()] == ["acme"]
    assert [s["id"] for s in limited.get("/api/sessions").json()["sessions"]] == [ours.pk]
    assert upload(limited, project="other").status_code == 404
    # The user's own, unlimited key reaches both.
    assert api_as(mia).get(f"/api/sessions/{theirs.pk}").status_code == 200
    assert Session.objects.filter(pk=theirs.pk).exists()


def test_a_read_only_key_of_a_maintainer_reads_but_cannot_write(acme, ours):
    api = api_as(member("mia", acme, Role.MAINTAINER), read_only=True)
    assert api.get(f"/api/sessions/{ours.pk}").status_code == 200
    assert api.get(f"/api/sessions/{ours.pk}/export").status_code == 200
    assert api.delete(f"/api/sessions/{ours.pk}").status_code == 403
    assert upload(api).status_code == 403
    assert post_json(api, f"/api/sessions/{ours.pk}/checkpoints", {"name": "cp", "seq": 1}).status_code == 403
    assert post_json(api, "/api/sessions", {"project": "acme"}).status_code == 403
    assert post_json(api, "/api/projects", {"name": "Mine", "slug": "mine"}).status_code == 403
    assert Session.objects.filter(project=acme).count() == 1
    assert not Checkpoint.objects.exists() and not ImportJob.objects.exists()
    assert not Project.objects.filter(slug="mine").exists()


def test_a_key_of_an_inactive_user_is_refused_with_401(acme, ours):
    mia = member("mia", acme, Role.MAINTAINER)
    api = api_as(mia)
    assert api.get(f"/api/sessions/{ours.pk}").status_code == 200
    get_user_model().objects.filter(pk=mia.pk).update(is_active=False)
    assert api.get(f"/api/sessions/{ours.pk}").status_code == 401
    assert api.get("/api/sessions").status_code == 401
    assert api.delete(f"/api/sessions/{ours.pk}").status_code == 401
    assert Session.objects.filter(pk=ours.pk).exists()


def test_a_revoked_key_is_refused_with_401(acme, ours):
    mia = member("mia", acme, Role.MAINTAINER)
    key = key_of(mia)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get(f"/api/sessions/{ours.pk}").status_code == 200
    teams.revoke_key(actor=Actor(user=mia), api_key=ApiKey.objects.get(key_hash=ApiKey.hash_key(key)))
    assert api.get(f"/api/sessions/{ours.pk}").status_code == 401
    assert api.get("/api/projects").status_code == 401


def test_a_deleted_users_key_is_refused_with_401(acme, ours):
    mia = member("mia", acme, Role.MAINTAINER)
    api = api_as(mia)
    assert api.get("/api/sessions").status_code == 200
    mia.delete()
    assert api.get("/api/sessions").status_code == 401
    assert api.get(f"/api/sessions/{ours.pk}").status_code == 401


def test_a_key_left_without_a_user_is_refused_with_401(acme, ours):
    mia = member("mia", acme, Role.MAINTAINER)
    key = key_of(mia)
    ApiKey.objects.filter(key_hash=ApiKey.hash_key(key)).update(user=None)  # as keys made before users owned them
    assert Client(HTTP_AUTHORIZATION=f"Bearer {key}").get(f"/api/sessions/{ours.pk}").status_code == 401


# --- lists show only the caller's projects ----------------------------------------------------


def test_lists_show_only_the_callers_projects(acme, other, ours, theirs):
    vic = member("vic", acme, Role.VIEWER)
    member("olga", other, Role.ADMIN)
    api = api_as(vic)
    listed = api.get("/api/sessions").json()
    assert [s["id"] for s in listed["sessions"]] == [ours.pk] and listed["total"] == 1
    assert api.get("/api/projects").json() == [{"slug": "acme", "name": "Acme", "role": "viewer"}]
    html = page_as(vic).get(reverse("sessions:list")).content.decode()
    assert f'data-session="{ours.pk}"' in html and "ACME-TASK" in html
    assert f'data-session="{theirs.pk}"' not in html and "OTHER-TASK" not in html


def test_comparing_with_a_session_of_another_project_is_a_404(acme, other, ours, theirs):
    vic = member("vic", acme, Role.VIEWER)
    mine_too = recorded(acme, "ACME-SECOND")
    api, page = api_as(vic), page_as(vic)
    assert api.get("/api/compare", {"a": ours.pk, "b": mine_too.pk}).status_code == 200
    for a, b in ((ours.pk, theirs.pk), (theirs.pk, ours.pk)):
        response = api.get("/api/compare", {"a": a, "b": b})
        assert response.status_code == 404 and b"OTHER-TASK" not in response.content
        response = page.get(reverse("sessions:diff"), {"a": a, "b": b})
        assert response.status_code == 404 and b"OTHER-TASK" not in response.content
    assert page.get(reverse("sessions:diff"), {"a": ours.pk, "b": mine_too.pk}).status_code == 200


def test_a_key_of_all_projects_writes_where_its_user_chose_whatever_they_join_later(acme, other):  # noqa: F811
    """The sweep: anyone may make a project and add anyone to it, which made a victim's
    project-less writes ambiguous (400s: an exporter's data lost). The key's user chooses, on the
    keys page, where such writes go: none unless chosen."""
    ana = member("ana", acme, Role.MAINTAINER)
    page = Client()
    page.force_login(ana)
    form = page.get(reverse("sessions:keys")).content.decode()
    offered = form.split('name="writes_to"')[1].split("</select>")[0]
    assert '<option value="acme">Acme</option>' in offered and '<option value="" selected>' in offered
    made = page.post(reverse("sessions:keys"), {"name": "exporter", "writes_to": "acme"})
    key = re.search(r'id="new-key-value">(rpl_[^<]+)<', made.content.decode()).group(1)
    assert ApiKey.objects.get(name="exporter").default_project == acme
    made_entry = AuditEntry.objects.filter(action="key.create").latest("pk")
    assert orjson.loads(made_entry.detail)["writes_to"] == "acme"  # the site's log says where it writes
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    def create() -> HttpResponse:
        return client.post("/api/sessions", {"task": "t"}, content_type="application/json")

    teams.set_member(actor="mallory", project=other, username="ana", role=Role.MAINTAINER)
    created = create()
    assert created.status_code == 201 and Session.objects.get(pk=created.json()["id"]).project == acme
    # None chosen: with two projects to write to, a write must name one, as before.
    _, second = teams.create_key(actor="tests", user=ana, name="second")
    asked = Client(HTTP_AUTHORIZATION=f"Bearer {second}").post("/api/sessions", {}, content_type="application/json")
    assert asked.status_code == 400 and "name one of your projects" in asked.json()["detail"]
    # A project the user may not write to cannot be chosen.
    Membership.objects.filter(user=ana, project=other).update(role=Role.VIEWER)
    with pytest.raises(teams.TeamError, match="writes_to: ana may not write to project 'other'"):
        teams.create_key(actor="tests", user=ana, name="third", default_project=other)
    # Where its user may no longer write, it says so rather than writing elsewhere.
    Membership.objects.filter(user=ana, project=acme).update(role=Role.VIEWER)
    refused = create()
    assert refused.status_code == 400
    assert "this key writes to project 'acme' when none is named" in refused.json()["detail"]
    assert Session.objects.filter(project=other).count() == 0
    assert "writes to Acme when none is named" in page.get(reverse("sessions:keys")).content.decode()


def test_a_key_limited_to_one_project_may_not_create_another(acme):
    # docs/teams.md: a project-limited key acts in its project only; a new project is outside it.
    api = api_as(member("ada", acme, Role.ADMIN), project=acme)
    answer = post_json(api, "/api/projects", {"name": "Elsewhere", "slug": "elsewhere"})
    assert answer.status_code == 403 and not Project.objects.filter(slug="elsewhere").exists()
    unlimited = api_as(member("ada", acme, Role.ADMIN))
    assert post_json(unlimited, "/api/projects", {"name": "Elsewhere", "slug": "elsewhere"}).status_code == 201
