"""The audit log: one entry (action, actor, target, address, key) for each action, read newest
first through the API with filters and keyset pages, exported as chained JSON lines, and
verified: a changed or removed entry is found at its seq, and each project's log is its own chain."""

from __future__ import annotations

import io
import re
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db import models
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from sessions_app import audit, jobs
from sessions_app.canonical import SessionMeta
from sessions_app.chain import GENESIS_HASH
from sessions_app.ingest.writer import append_events, create_session, finish_session, set_checkpoint
from sessions_app.models import ApiKey, AuditEntry, Checkpoint, Project, Role, Session
from sessions_app.models.audit import SITE_LOG

from .builders_teams import UPLOAD, acme, key_of, member, other  # noqa: F401  (fixtures)
from .conftest import synthetic_events

IP = "203.0.113.7"


@pytest.fixture
def ours(acme) -> Session:
    session = create_session(project=acme, source_format="canonical", meta=SessionMeta(task="ACME-SECRET-TASK"))
    append_events(session=session, events=synthetic_events(10))
    finish_session(session=session)
    session.refresh_from_db()
    return session


@pytest.fixture
def mia(acme):
    return member("mia", acme, Role.MAINTAINER)


@pytest.fixture
def mia_key(mia) -> str:
    return key_of(mia)


@pytest.fixture
def api(mia_key) -> Client:
    """mia's API key, from a known address."""
    return Client(HTTP_AUTHORIZATION=f"Bearer {mia_key}", REMOTE_ADDR=IP)


@pytest.fixture
def page(mia) -> Client:
    """mia signed in to the dashboard, from a known address."""
    client = Client(REMOTE_ADDR=IP)
    client.force_login(mia)
    return client


def post_json(client: Client, url: str, body: dict) -> HttpResponse:
    return client.post(url, orjson.dumps(body), content_type="application/json")


def only(project: Project | None, action: str) -> AuditEntry:
    """The one entry of `action` in the project's log (or the site's)."""
    found = AuditEntry.objects.filter(action=action)
    found = found.of_project(project) if project is not None else found.filter(log=SITE_LOG)
    entries = list(found)
    assert len(entries) == 1, [(e.action, e.target) for e in entries]
    return entries[0]


def who(entry: AuditEntry) -> tuple[str, str, str | None, str]:
    return entry.actor, entry.target, entry.ip, entry.key_prefix


def detail(entry: AuditEntry) -> dict:
    return orjson.loads(entry.detail)


# --- one entry per action ---------------------------------------------------------------------


def test_an_api_upload_is_session_import_with_the_key_it_came_through(acme, api, mia_key):
    response = api.post("/api/imports", {"file": SimpleUploadedFile("up.jsonl", UPLOAD), "project": "acme"})
    assert response.status_code == 202
    entry = only(acme, "session.import")
    assert who(entry) == ("mia", f"import:{response.json()['job']}", IP, mia_key[:10])
    assert detail(entry) == {"file": "up.jsonl", "bytes": len(UPLOAD)}


def test_a_dashboard_upload_is_session_import_without_a_key(acme, page):
    assert page.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("page.jsonl", UPLOAD)],
                                                  "project": "acme"}).status_code == 302  # fmt: skip
    entry = only(acme, "session.import")
    assert who(entry)[0::2] == ("mia", IP) and entry.key_prefix == "" and entry.target.startswith("import:")
    assert detail(entry)["file"] == "page.jsonl"


def test_a_refused_upload_records_nothing(acme, ours):
    viewer = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('vic', acme, Role.VIEWER))}")
    assert viewer.post("/api/imports", {"file": SimpleUploadedFile("up.jsonl", UPLOAD)}).status_code == 403
    assert viewer.delete(f"/api/sessions/{ours.pk}").status_code == 403
    assert not AuditEntry.objects.of_project(acme).exists()


def test_a_live_session_is_session_create_live(acme, api, mia_key):
    response = post_json(api, "/api/sessions", {"project": "acme", "source_session_id": "agent-7"})
    assert response.status_code == 201
    entry = only(acme, "session.create_live")
    assert who(entry) == ("mia", f"session:{response.json()['id']}", IP, mia_key[:10])
    assert detail(entry) == {"source_session_id": "agent-7"}
    # Ending it is recorded once (a retry of the same end is no second entry), without the answer.
    sid = response.json()["id"]
    for _ in range(2):
        ended = post_json(api, f"/api/sessions/{sid}/end", {"status": "completed", "final_answer": "I DEPLOYED"})
        assert ended.status_code == 200, ended.content
    entry = only(acme, "session.end")
    assert who(entry) == ("mia", f"session:{sid}", IP, mia_key[:10])
    assert detail(entry) == {"status": "completed", "final_answer": True}


def test_deleting_a_session_is_session_delete_with_its_event_count(acme, ours, api, mia_key):
    assert api.delete(f"/api/sessions/{ours.pk}").status_code == 204
    entry = only(acme, "session.delete")
    assert who(entry) == ("mia", f"session:{ours.pk}", IP, mia_key[:10])
    assert detail(entry)["events"] == 10
    assert "ACME-SECRET-TASK" not in entry.detail


def test_exporting_is_session_export_with_its_format(acme, ours, api, mia_key):
    assert api.get(f"/api/sessions/{ours.pk}/export", {"format": "snapshot"}).status_code == 200
    entry = only(acme, "session.export")
    assert who(entry) == ("mia", f"session:{ours.pk}", IP, mia_key[:10])
    assert detail(entry) == {"format": "snapshot"}


def test_verifying_through_the_api_and_the_dashboard_button_is_session_verify(acme, ours, api, page, mia_key):
    assert api.get(f"/api/sessions/{ours.pk}/verify").status_code == 200  # a read: recorded nowhere
    assert api.post(f"/api/sessions/{ours.pk}/verify").status_code == 200
    assert page.post(reverse("sessions:verify", args=[ours.pk])).status_code == 302
    entries = list(AuditEntry.objects.of_project(acme).filter(action="session.verify").order_by("seq"))
    assert [who(e) for e in entries] == [
        ("mia", f"session:{ours.pk}", IP, mia_key[:10]), ("mia", f"session:{ours.pk}", IP, ""),
    ]  # fmt: skip
    assert all(detail(e) == {"valid": True, "first_broken_seq": None} for e in entries)


def test_checkpoints_made_through_the_api_and_the_dashboard_and_deleted(acme, ours, api, page, mia_key):
    assert post_json(api, f"/api/sessions/{ours.pk}/checkpoints", {"name": "api-cp", "seq": 2}).status_code == 201
    assert (
        page.post(reverse("sessions:checkpoint", args=[ours.pk]), {"name": "page-cp", "step": "4"}).status_code == 302
    )
    assert api.delete(f"/api/sessions/{ours.pk}/checkpoints/api-cp").status_code == 204
    made = list(AuditEntry.objects.of_project(acme).filter(action="checkpoint.create").order_by("seq"))
    page_cp = Checkpoint.objects.get(session=ours, name="page-cp").pk
    api_cp = detail(made[0])["checkpoint"]
    assert api_cp != page_cp and [(who(e), detail(e)) for e in made] == [
        (("mia", f"session:{ours.pk}", IP, mia_key[:10]), {"checkpoint": api_cp, "seq": 2}),
        (("mia", f"session:{ours.pk}", IP, ""), {"checkpoint": page_cp, "seq": 4}),
    ]
    deleted = only(acme, "checkpoint.delete")
    assert who(deleted) == ("mia", f"session:{ours.pk}", IP, mia_key[:10])
    assert detail(deleted) == {"checkpoint": api_cp, "seq": 2}
    # The names are text someone wrote: the log, never rewritten, holds none of them.
    assert not AuditEntry.objects.filter(detail__contains="-cp").exists()


def test_members_added_changed_and_removed(acme):
    ada = member("ada", acme, Role.ADMIN)
    key = key_of(ada)
    admin = Client(HTTP_AUTHORIZATION=f"Bearer {key}", REMOTE_ADDR=IP)
    get_user_model().objects.create_user(username="bob", password="x")
    assert post_json(admin, "/api/projects/acme/members", {"username": "bob", "role": "viewer"}).status_code == 201
    assert post_json(admin, "/api/projects/acme/members", {"username": "bob", "role": "reviewer"}).status_code == 200
    assert admin.delete("/api/projects/acme/members/bob").json() == {"username": "bob", "linksRevoked": 0}
    entries = list(AuditEntry.objects.of_project(acme).order_by("seq"))
    assert [(e.action, detail(e)) for e in entries] == [
        ("member.add", {"role": "viewer"}), ("member.change", {"from": "viewer", "role": "reviewer"}),
        ("member.remove", {"role": "reviewer"}),
    ]  # fmt: skip
    assert {who(e) for e in entries} == {("ada", "user:bob", IP, key[:10])}


def test_keys_created_and_revoked_in_the_dashboard(acme, page):
    response = page.post(reverse("sessions:keys"), {"name": "ci", "project": "acme", "read_only": "on"})
    assert response.status_code == 200
    api_key = ApiKey.objects.get(name="ci")
    made = only(acme, "key.create")
    assert who(made) == ("mia", f"key:{api_key.key_prefix}", IP, "")
    assert detail(made) == {"name": "ci", "user": "mia", "read_only": True}
    assert response.context["new_key"] not in made.detail  # the key itself is never logged
    assert page.post(reverse("sessions:key_revoke", args=[api_key.pk])).status_code == 302
    revoked = only(acme, "key.revoke")
    assert who(revoked) == ("mia", f"key:{api_key.key_prefix}", IP, "") and detail(revoked) == {"name": "ci"}


def test_a_key_for_all_projects_is_logged_in_the_sites_log(mia, page):
    page.post(reverse("sessions:keys"), {"name": "everywhere"})
    api_key = ApiKey.objects.get(name="everywhere")
    page.post(reverse("sessions:key_revoke", args=[api_key.pk]))
    assert who(only(None, "key.create")) == ("mia", f"key:{api_key.key_prefix}", IP, "")
    assert who(only(None, "key.revoke")) == ("mia", f"key:{api_key.key_prefix}", IP, "")
    assert audit.verify_log(project=None).valid


def test_keys_created_and_revoked_by_management_command(acme, mia):
    out = io.StringIO()
    call_command("create_api_key", "deploy", "--user", "mia", "--project", "acme", stdout=out, stderr=io.StringIO())
    key = out.getvalue().strip().splitlines()[-1]
    call_command("revoke_api_key", key[:10], stdout=io.StringIO())
    made, revoked = only(acme, "key.create"), only(acme, "key.revoke")
    assert who(made) == ("manage.py", f"key:{key[:10]}", None, "") and key not in made.detail
    assert who(revoked) == ("manage.py", f"key:{key[:10]}", None, "")
    assert made.seq < revoked.seq


def test_a_retention_run_is_retention_run_by_retention(acme, ours, settings):
    settings.RETENTION_DAYS = None
    acme.retention_days = 5
    acme.save()
    Session.objects.filter(pk=ours.pk).update(created_at=timezone.now() - timedelta(days=6))
    jobs.run_cleanup(dry_run=True)
    assert not AuditEntry.objects.of_project(acme).filter(action="retention.run").exists()
    jobs.run_cleanup()
    entry = only(acme, "retention.run")
    assert who(entry) == ("retention", "project:acme", None, "")
    assert {k: detail(entry)[k] for k in ("days", "sessions", "events")} == {"days": 5, "sessions": 1, "events": 10}
    assert "ACME-SECRET-TASK" not in entry.detail


def test_making_a_project_is_project_create_by_its_maker(mia, mia_key, api):
    response = post_json(api, "/api/projects", {"name": "Red team", "slug": "red"})
    assert response.status_code == 201
    entry = only(Project.objects.get(slug="red"), "project.create")
    assert who(entry) == ("mia", "project:red", IP, mia_key[:10]) and detail(entry) == {"name": "Red team"}


# --- reading the log through the API ----------------------------------------------------------


def log(project: Project, *, action: str = "session.export", actor: str = "bob", at: datetime | None = None,
        monkeypatch: pytest.MonkeyPatch | None = None) -> AuditEntry:  # fmt: skip
    """One entry; `at` fixes its time (audit.record stamps entries with timezone.now())."""
    if at is not None:
        monkeypatch.setattr(audit.timezone, "now", lambda: at)
    entry = audit.record(action=action, actor=actor, project=project, target="session:1", ip="10.0.0.1")
    if at is not None:
        monkeypatch.undo()
    return entry


@pytest.fixture
def reviewer(acme) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('rita', acme, Role.REVIEWER))}")


def test_entries_come_newest_first_with_every_field(acme, reviewer):
    first = log(acme, action="member.add", actor="ada")
    second = log(acme, action="session.export", actor="bob")
    body = reviewer.get("/api/projects/acme/audit").json()
    assert [e["seq"] for e in body["entries"]] == [second.seq, first.seq] and body["next"] is None
    top = body["entries"][0]
    assert {k: top[k] for k in ("actor", "action", "target", "ip", "key", "hash")} == {
        "actor": "bob", "action": "session.export", "target": "session:1", "ip": "10.0.0.1", "key": "",
        "hash": second.hash,
    }  # fmt: skip
    assert datetime.fromisoformat(top["at"]) == second.at


def test_entries_filter_by_actor_action_and_since(acme, reviewer, page, monkeypatch):
    day = datetime(2026, 3, 1, 12, tzinfo=UTC)
    log(acme, action="member.add", actor="ada", at=day, monkeypatch=monkeypatch)
    log(acme, action="session.export", actor="bob", at=day + timedelta(days=1), monkeypatch=monkeypatch)
    log(acme, action="session.export", actor="ada", at=day + timedelta(days=2), monkeypatch=monkeypatch)
    url = "/api/projects/acme/audit"

    def seqs(**query) -> list[int]:
        response = reviewer.get(url, query)
        assert response.status_code == 200, response.content
        return [e["seq"] for e in response.json()["entries"]]

    assert seqs() == [2, 1, 0]
    assert seqs(actor="ada") == [2, 0]
    assert seqs(action="session.export") == [2, 1]
    assert seqs(actor="ada", action="session.export") == [2]
    assert seqs(since=(day + timedelta(hours=1)).isoformat()) == [2, 1]
    assert seqs(since=(day + timedelta(days=2)).isoformat()) == [2]
    assert seqs(actor="nobody") == []
    # Without an offset a time or date is in UTC: Django had warned of a naive datetime, and
    # under another TIME_ZONE the database had read it in that zone.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with override_settings(TIME_ZONE="Pacific/Kiritimati"):
            assert seqs(since="2026-03-02T12:00:00") == [2, 1]
            assert seqs(since="2026-03-02T12:00:01") == [2]
            assert seqs(until="2026-03-02T12:00:00", since="2026-03-01") == [0]
    # A date as `until` includes its day, as the page's "until" does: the same dates give the
    # same entries on both.
    assert seqs(since=day.date().isoformat(), until=day.date().isoformat()) == [0]
    assert seqs(until=(day + timedelta(days=1)).date().isoformat()) == [1, 0]
    assert seqs(until=(day - timedelta(days=1)).date().isoformat()) == []
    assert seqs(until="9999-12-31") == [2, 1, 0]
    days = {"since": day.date().isoformat(), "until": (day + timedelta(days=1)).date().isoformat()}
    assert re.findall(r'data-seq="(\d+)"', page.get("/projects/acme/audit/", days).content.decode()) == ["1", "0"]


def test_dates_at_the_ends_of_time_filter_or_are_refused_naming_the_parameter(acme, reviewer, page, monkeypatch):
    log(acme, action="member.add", actor="ada", at=datetime(2026, 3, 1, tzinfo=UTC), monkeypatch=monkeypatch)
    api = "/api/projects/acme/audit"
    refused = reviewer.get(api, {"since": "0001-01-01T00:00:00+14:00"})
    assert refused.status_code == 400 and refused.json()["detail"].startswith("since: out of range")
    until = reviewer.get(api, {"until": "9999-12-31T23:59:59-12:00"})
    assert until.status_code == 400 and until.json()["detail"].startswith("until: out of range")
    assert [e["seq"] for e in reviewer.get(api, {"since": "0001-01-01T00:00:00Z"}).json()["entries"]] == [0]
    # The page: "until 9999-12-31" includes every day there is.
    shown = page.get("/projects/acme/audit/", {"until": "9999-12-31", "since": "0001-01-01"})
    assert shown.status_code == 200 and 'data-seq="0"' in shown.content.decode()


def test_entries_page_by_next(acme, reviewer):
    for _ in range(5):
        log(acme)
    seen, cursor = [], None
    for _ in range(5):
        query = {"limit": 2} | ({"before": cursor} if cursor is not None else {})
        body = reviewer.get("/api/projects/acme/audit", query).json()
        seen.append([e["seq"] for e in body["entries"]])
        cursor = body["next"]
        if cursor is None:
            break
    assert seen == [[4, 3], [2, 1], [0]]


def test_a_reviewer_reads_the_log_a_viewer_gets_403_and_a_non_member_404(acme, other, reviewer):
    log(acme)
    viewer = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('vic', acme, Role.VIEWER))}")
    outsider = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('olga', other, Role.ADMIN))}")
    for path in ("/api/projects/acme/audit", "/api/projects/acme/audit/export", "/api/projects/acme/audit/verify"):
        assert reviewer.get(path).status_code == 200, path
        assert viewer.get(path).status_code == 403, path
        response = outsider.get(path)
        assert response.status_code == 404 and b"session:1" not in response.content, path


# --- the chain --------------------------------------------------------------------------------


def export(client: Client, slug: str = "acme") -> list[dict]:
    response = client.get(f"/api/projects/{slug}/audit/export")
    assert response.status_code == 200
    return [orjson.loads(line) for line in b"".join(response.streaming_content).splitlines()]


def _recipe_from_the_docs() -> str:
    """The offline check docs/teams.md gives, as written there."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "teams.md").read_text()
    return re.search(r"it is checked without the server.*?```python\n(.*?)```", text, re.S).group(1)


def test_the_export_is_checked_without_the_server_by_the_docs_recipe(acme, reviewer, tmp_path, monkeypatch):
    """The walkthrough recomputed no hash from the documented formula: `at`, `detail` and the
    project's id were hashed in forms the export did not give or say."""
    audit.record(action="member.add", actor="bob", project=acme, target="user:zoë", ip="10.0.0.1",
                 detail={"user": "zoë", "role": "viewer", "b": [1, 2.5]})  # fmt: skip
    audit.record(action="session.export", actor="mia", project=acme, target="session:1")
    lines = b"".join(reviewer.get("/api/projects/acme/audit/export").streaming_content)
    (tmp_path / "audit-acme.jsonl").write_bytes(lines)
    monkeypatch.chdir(tmp_path)
    exec(_recipe_from_the_docs(), {})  # raises on the first line that does not hash
    # One character changed anywhere is caught.
    (tmp_path / "audit-acme.jsonl").write_bytes(lines.replace(b"viewer", b"admin!"))
    with pytest.raises(AssertionError):
        exec(_recipe_from_the_docs(), {})


def test_the_jsonl_export_parses_and_chains_oldest_first(acme, reviewer):
    for action in ("member.add", "session.import", "session.export", "session.delete"):
        log(acme, action=action)
    lines = export(reviewer)
    assert [line["seq"] for line in lines] == [0, 1, 2, 3]
    assert [line["action"] for line in lines] == ["member.add", "session.import", "session.export", "session.delete"]
    assert lines[0]["prev_hash"] == GENESIS_HASH
    for before, after in zip(lines, lines[1:]):
        assert after["prev_hash"] == before["hash"]
    assert len({line["hash"] for line in lines}) == 4
    assert reviewer.get("/api/projects/acme/audit/verify").json() == {
        "valid": True, "entries": 4, "firstBrokenSeq": None, "why": "", "head": lines[-1]["hash"],
    }  # fmt: skip


# Every stored column of an entry, from the model's own list (a new one cannot be left out), but
# its row id (the database's, shown nowhere).
AUDIT_COLUMNS = [f.name for f in AuditEntry._meta.concrete_fields if not f.primary_key]


def _forged(entry: AuditEntry, name: str) -> object:
    field = AuditEntry._meta.get_field(name)
    value = getattr(entry, field.attname)
    if isinstance(field, models.DateTimeField):
        return value - timedelta(days=1)
    if isinstance(field, models.ForeignKey):
        return Project.objects.create(name="Elsewhere", slug="elsewhere").pk
    if isinstance(field, models.BigIntegerField):
        return value + 100
    if name == "detail":
        return '{"role": "admin"}'
    return ("f" * 64 if name.endswith("hash") else "mallory")[: field.max_length]


@pytest.mark.parametrize("field", AUDIT_COLUMNS)
def test_a_tampered_entry_is_found_at_its_seq(acme, reviewer, field):
    for _ in range(4):
        log(acme, action="member.add")
    entry = AuditEntry.objects.of_project(acme).get(seq=2)
    value = _forged(entry, field)
    assert value != getattr(entry, AuditEntry._meta.get_field(field).attname)
    AuditEntry.objects.filter(pk=entry.pk).update(**{AuditEntry._meta.get_field(field).attname: value})
    found = audit.verify_log(project=acme)
    assert (found.valid, found.first_broken_seq) == (False, 2)
    # Moved out of its place (another log, another seq), its link changed, or its values.
    expected = {
        "log": "seq 2 is missing",
        "seq": "seq 2 is missing",
        "prev_hash": "is not the hash of the entry before",
    }
    assert expected.get(field, "stored values do not hash to its link") in found.why
    body = reviewer.get("/api/projects/acme/audit/verify").json()
    assert (body["valid"], body["firstBrokenSeq"]) == (False, 2)


def test_a_deleted_last_entry_is_found_because_the_head_no_longer_matches(acme, reviewer):
    for _ in range(3):
        log(acme)
    assert audit.verify_log(project=acme).valid
    AuditEntry.objects.of_project(acme).filter(seq=2).delete()
    found = audit.verify_log(project=acme)
    assert (found.valid, found.first_broken_seq, found.entries) == (False, 2, 2)
    assert "removed" in found.why
    assert reviewer.get("/api/projects/acme/audit/verify").json()["firstBrokenSeq"] == 2


def test_a_deleted_middle_entry_is_found_at_its_seq(acme):
    for _ in range(4):
        log(acme)
    AuditEntry.objects.of_project(acme).filter(seq=1).delete()
    found = audit.verify_log(project=acme)
    assert (found.valid, found.first_broken_seq) == (False, 1)


def test_two_projects_logs_are_separate_chains(acme, other):
    for project in (acme, other, acme, other, acme):
        log(project)
    for project, count in ((acme, 3), (other, 2)):
        entries = list(AuditEntry.objects.of_project(project).order_by("seq"))
        assert [e.seq for e in entries] == list(range(count))
        assert entries[0].prev_hash == GENESIS_HASH
        assert all(after.prev_hash == before.hash for before, after in zip(entries, entries[1:]))
    AuditEntry.objects.of_project(acme).filter(seq=0).update(actor="mallory")
    assert audit.verify_log(project=acme).first_broken_seq == 0
    assert audit.verify_log(project=other).valid  # the other chain does not depend on it


def test_the_site_log_is_read_by_superusers_in_the_admin_and_not_offered_in_a_project_filter(acme, client):
    """Sign-ins go to the site's log only: the walkthrough found no way to read it, and a
    project's filter offering them (which never matched)."""
    audit.record(action="auth.login", actor="ana", target="user:ana", ip="10.0.0.9")
    client.force_login(member("rita", acme, Role.REVIEWER))
    page = client.get(f"/projects/{acme.slug}/audit/").content.decode()
    assert '<option value="member.add">' in page and "auth.login" not in page
    assert client.get("/admin/sessions_app/auditentry/").status_code == 302  # not staff: the admin's sign-in
    from django.contrib.auth import get_user_model

    root = get_user_model().objects.create_superuser("root", "root@example.org", "pw-root-12345")
    client.force_login(root)
    listed = client.get("/admin/sessions_app/auditentry/", {"log__exact": "site"})
    rows = re.findall(r'<td class="field-target">([^<]*)</td>', listed.content.decode())
    assert listed.status_code == 200 and "user:ana" in rows  # a row of the table, not the filter's list
    entry = AuditEntry.objects.get(action="auth.login", actor="ana")
    # Read only: no add, no change, no delete (an edit would break the chain).
    assert client.get("/admin/sessions_app/auditentry/add/").status_code == 403
    shown = client.get(f"/admin/sessions_app/auditentry/{entry.pk}/change/")
    assert shown.status_code == 200 and 'name="_save"' not in shown.content.decode()
    assert client.post(f"/admin/sessions_app/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_the_admin_site_lets_in_superusers_only(acme, client, django_user_model):
    # Django's own check lets in any active staff user with the permissions it is given: a staff
    # viewer of one project, given "view event" and "view audit entry", read every project's
    # events and the site's sign-ins there.
    from django.contrib.auth.models import Permission

    audit.record(action="auth.login", actor="ana", target="user:ana", ip="10.0.0.9")
    vic = member("vic", acme, Role.VIEWER)
    vic.is_staff = True
    vic.save()
    vic.user_permissions.set(Permission.objects.filter(codename__in=["view_event", "view_auditentry", "add_group"]))
    client.force_login(vic)
    for page in ("/admin/", "/admin/sessions_app/event/", "/admin/sessions_app/auditentry/", "/admin/auth/group/add/"):
        response = client.get(page, {"log__exact": "site"} if "audit" in page else {})
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), page
    root = django_user_model.objects.create_superuser("root", "root@example.org", "pw-root-12345")
    client.force_login(root)
    assert client.get("/admin/sessions_app/event/").status_code == 200
    assert client.get("/admin/auth/user/").status_code == 200
    assert client.get("/admin/auth/group/").status_code == 404  # not shown: permissions are a superuser's


def test_a_log_longer_than_a_chunk_verifies_and_exports_whole(acme, monkeypatch):
    # Both read the log in keyset chunks: a mistake at a chunk's end made a long log (over 2,000
    # entries) a false tamper alarm, and its export a first chunk only.
    monkeypatch.setattr(audit, "CHUNK", 3)
    for _ in range(10):
        log(acme, action="member.add")
    found = audit.verify_log(project=acme)
    assert (found.valid, found.entries) == (True, 10), found.why
    lines = [orjson.loads(line) for line in audit.export_lines(project=acme)]
    assert [line["seq"] for line in lines] == list(range(10))
    AuditEntry.objects.of_project(acme).filter(seq=7).delete()  # and a gap past the first chunks is found
    assert (audit.verify_log(project=acme).first_broken_seq, audit.verify_log(project=acme).valid) == (7, False)


# Functions that write an audit entry and are not atomic themselves: each writes only the entry
# (sign-ins; a read that is logged: an export, a bundle, a verification, which stores its own
# result, and must not hold the write lock for as long as it reads), is called by an atomic
# function with the change it logs, or sums up work each part of which committed on its own (a
# retention run stopped half-way, a file's sessions imported one a transaction, still say what
# was done).
_ENTRY_ONLY = {
    "deletion.py:note_shortened", "signin.py:record_login", "signin.py:record_login_failed",
    "signin.py:record_logout", "stored_redaction.py:_audit", "tours.py:_record", "retention.py:_clean_project",
    "api/otlp.py:_audit_created", "ingest/importing.py:_replace",
    "api/bundles.py:bundle", "api/exports.py:export", "views/exports.py:export",
    "api/exports.py:verify_and_record", "views/player.py:verify",
    "management/commands/import_sessions.py:_import", "management/commands/setup_demo.py:handle",
}  # fmt: skip


def test_every_change_is_logged_in_the_same_transaction_as_its_audit_entry():
    # Twice an `@transaction.atomic` slipped onto the helper above the function it guarded
    # (create_project, then create_key): the change stayed when its entry failed. Read from the
    # source, so a new function that logs is held to it too.
    import ast

    root = Path(audit.__file__).parent

    def entries(node: ast.AST, guarded: bool) -> list[bool]:
        """Whether each audit.record call under `node` runs inside an atomic block."""
        if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("audit.record"):
            return [guarded]
        # `transaction.atomic()`, or a workflow's own atomic block (ingest/uploads.accept_upload).
        atomic = ("atomic", "accept_upload(")
        if isinstance(node, ast.With) and any(a in ast.unparse(i.context_expr) for i in node.items for a in atomic):
            guarded = True
        return [g for child in ast.iter_child_nodes(node) for g in entries(child, guarded)]

    unguarded = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            decorated = any("transaction.atomic" in ast.unparse(d) for d in node.decorator_list)
            name = f"{path.relative_to(root)}:{node.name}"
            if not all(entries(node, decorated)) and name not in _ENTRY_ONLY:
                unguarded.append(name)
    assert unguarded == [], unguarded
    assert "teams.py:create_key" not in _ENTRY_ONLY


def test_a_read_only_key_reads_the_log_its_user_may_read_and_says_why_it_writes_nothing(acme):
    # An auditor's read-only key pulls the log (a read): it keeps its user's reads and loses
    # only writes (TEAMS.md). A viewer's key stays a viewer's.
    rita = member("rita", acme, Role.REVIEWER)
    key = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(rita, read_only=True)}")
    log(acme)
    for path in ("/api/projects/acme/audit", "/api/projects/acme/audit/export", "/api/projects/acme/audit/verify"):
        assert key.get(path).status_code == 200, path
    viewer = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('vic', acme, Role.VIEWER), read_only=True)}")
    refused = viewer.get("/api/projects/acme/audit")
    assert refused.status_code == 403 and "read-only" not in refused.json()["detail"]
    # A write the user's role allows is refused as the key's doing, not the role's.
    session = create_session(project=acme, source_format="canonical", meta=SessionMeta())
    append_events(session=session, events=synthetic_events(3))
    said = key.post(f"/api/sessions/{session.pk}/comments", {"seq": 0, "body": "x"}, content_type="application/json")
    assert said.status_code == 403 and "a read-only key acts as a viewer" in said.json()["detail"], said.content


@pytest.mark.parametrize("where", ["POST /api/sessions", "POST /api/events", "POST /api/imports", "upload page"])
def test_a_change_whose_entry_fails_is_not_made(db, monkeypatch, tmp_path, settings, where):
    # The session (or the upload's job and kept file) had been committed before its entry was
    # written: the entry failing left it made and logged nowhere, and a retry with the same
    # idempotency key found it made and logged nothing either.
    from django.db import DatabaseError

    from sessions_app.models import ImportJob

    from .builders_teams import maintainer_key

    settings.DATA_DIR = str(tmp_path)

    def fails(**kwargs):
        raise DatabaseError("the log could not be written")

    page = Client(raise_request_exception=False)
    page.force_login(member("mia"))  # signed in before the log fails: a sign-in is logged too
    monkeypatch.setattr(audit, "record_many", fails)
    keyed = Client(headers={"authorization": f"Bearer {maintainer_key()}"}, raise_request_exception=False)
    before = set(Session.objects.values_list("pk", flat=True))
    if where == "POST /api/sessions":
        answer = keyed.post("/api/sessions", orjson.dumps({"task": "t", "idempotency_key": "k1"}),
                            content_type="application/json")  # fmt: skip
    elif where == "POST /api/events":
        event = {"sessionId": "ses_1", "agentId": "a", "eventType": "session_started", "payload": {}}
        answer = keyed.post("/api/events", orjson.dumps({"events": [event]}), content_type="application/json")
    elif where == "POST /api/imports":
        answer = keyed.post("/api/imports", {"file": SimpleUploadedFile("one.jsonl", UPLOAD)})
    else:
        answer = page.post("/sessions/upload/", {"files": SimpleUploadedFile("one.jsonl", UPLOAD)})
    assert answer.status_code == 500
    assert set(Session.objects.values_list("pk", flat=True)) == before
    assert not ImportJob.objects.exists()
    kept = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert kept == [], kept
