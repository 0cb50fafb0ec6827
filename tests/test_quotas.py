"""Per-project quotas (issue 20 item 4): stored bytes and sessions, refused before any work with
a 413 (bytes) or 409 (sessions); the 413 of an oversized upload before its body is read, also
over a real socket; the project page sets the quotas and shows what the project holds."""

from __future__ import annotations

import gzip
import http.client
import re
import socket
import time
from pathlib import Path

import orjson
import pytest
from django.http.multipartparser import MultiPartParser
from django.test import Client
from django.urls import reverse

from sessions_app import jobs
from sessions_app.formats import size_text
from sessions_app.ingest.importing import import_file
from sessions_app.ingest.quotas import usage_of
from sessions_app.models import AuditEntry, ImportJob, Project, Role, Session

from .builders_ingest import canonical_records, write_canonical_file
from .builders_teams import key_of, member
from .test_serving import migrated, served  # noqa: F401  (fixtures)

KIB = 1024


@pytest.fixture(autouse=True)
def _no_worker(monkeypatch):
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")


@pytest.fixture
def maintainer(project):
    return member("mia", project, Role.MAINTAINER)


@pytest.fixture
def api(maintainer) -> Client:
    return Client(headers={"authorization": f"Bearer {key_of(maintainer)}"})


@pytest.fixture
def unread_body(monkeypatch) -> list[str]:
    """Fails the test if a multipart body is parsed: what `refused before the body is read` means."""
    parsed: list[str] = []

    def parse(self):
        parsed.append("parsed")
        raise AssertionError("the multipart body was read")

    monkeypatch.setattr(MultiPartParser, "parse", parse)
    return parsed


def kept_files(settings) -> list[Path]:
    uploads = Path(settings.DATA_DIR) / "uploads"
    return [p for p in uploads.rglob("*") if p.is_file()] if uploads.exists() else []


def upload(api: Client, path: Path, query: str = "", **fields):
    with path.open("rb") as handle:
        return api.post(f"/api/imports{query}", {"file": handle, **fields})


def post_json(client: Client, url: str, body) -> object:
    return client.post(url, data=orjson.dumps(body), content_type="application/json")


def test_an_upload_past_the_storage_quota_is_a_413_before_its_body_is_read(api, project, settings, tmp_path,
                                                                            unread_body):  # fmt: skip
    project.max_stored_bytes = 40 * KIB
    project.save()
    path = write_canonical_file(tmp_path / "run.jsonl", events=400)  # ~100 KiB
    for query in ("?project=default", ""):  # named in the URL, or the caller's only project
        response = upload(api, path, query)
        assert response.status_code == 413, response.content
        detail = response.json()["detail"]
        assert "storage quota" in detail and "project default" in detail and "40.0 KiB" in detail
    assert unread_body == [] and not ImportJob.objects.exists() and kept_files(settings) == []


def test_a_gzip_upload_is_checked_at_the_size_it_holds_not_its_compressed_one(maintainer, project, settings, tmp_path):
    # 100 KiB of records in a few KiB of gzip passed a 40 KiB quota, then stored the 100 KiB
    # (security sweep: 52 MiB held of a 30 MiB quota).
    project.max_stored_bytes = 40 * KIB
    project.save()
    plain = write_canonical_file(tmp_path / "run.jsonl", events=400)
    packed = tmp_path / "run.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert packed.stat().st_size < 20 * KIB < 40 * KIB < plain.stat().st_size
    api = Client(headers={"authorization": f"Bearer {key_of(maintainer)}"})
    response = upload(api, packed, project="default")
    assert response.status_code == 413, response.content
    assert f"({size_text(plain.stat().st_size)})" in response.json()["detail"]
    assert not ImportJob.objects.exists() and kept_files(settings) == []
    # A gzip of several members states only its last one's size (an empty one: 0): its import
    # checks what it holds before storing anything (review).
    packed.write_bytes(gzip.compress(plain.read_bytes()) + gzip.compress(b""))
    response = upload(api, packed, project="default")
    assert response.status_code == 202, response.content
    job = ImportJob.objects.get()
    jobs.run_import(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.FAILED and "storage quota" in job.error, job.error
    assert not Session.objects.exists()


def test_an_upload_naming_its_project_only_in_the_form_is_refused_before_anything_is_stored(
    maintainer, project, settings, tmp_path
):
    other = Project.objects.create(name="Other", slug="other", max_stored_bytes=40 * KIB)
    member("mia", other, Role.MAINTAINER)  # two projects to write to: the form must say which
    api = Client(headers={"authorization": f"Bearer {key_of(maintainer)}"})
    path = write_canonical_file(tmp_path / "run.jsonl", events=400)
    response = upload(api, path, project="other")
    assert response.status_code == 413 and "project other" in response.json()["detail"]
    assert not ImportJob.objects.exists() and kept_files(settings) == []
    assert upload(api, path, project="default").status_code == 202  # the other one has no quota
    assert upload(api, path, "?project=default", project="other").status_code == 400


def test_stored_bytes_count_sessions_records_and_uploads_not_yet_imported(api, project, tmp_path):
    path = write_canonical_file(tmp_path / "run.jsonl", events=40)
    size = path.stat().st_size
    assert upload(api, path).status_code == 202
    assert usage_of(project=project).stored_bytes == size  # queued: its original counts
    job = ImportJob.objects.get()
    jobs.run_import(job_id=job.pk)
    session = Session.objects.get()
    # Imported, the session holds the records (their text as read, without line breaks).
    assert 0.9 * size < session.record_bytes < size
    assert usage_of(project=project).stored_bytes == session.record_bytes
    ImportJob.objects.filter(pk=job.pk).update(status=ImportJob.Status.FAILED)  # kept until cleaned up
    assert usage_of(project=project).stored_bytes == session.record_bytes + size


def test_a_project_at_its_sessions_quota_refuses_uploads_and_live_sessions_with_409(api, project, tmp_path,
                                                                                   unread_body):  # fmt: skip
    first = post_json(api, "/api/sessions", {"task": "one", "idempotency_key": "k1"})
    assert first.status_code == 201
    project.max_sessions = 1
    project.save()
    refused = post_json(api, "/api/sessions", {"task": "two"})
    assert refused.status_code == 409
    assert "quota of 1 sessions" in refused.json()["detail"] and "(1 held)" in refused.json()["detail"]
    retry = post_json(api, "/api/sessions", {"task": "one", "idempotency_key": "k1"})  # the same request again
    assert retry.status_code == 200 and retry.json()["id"] == first.json()["id"]
    response = upload(api, write_canonical_file(tmp_path / "run.jsonl", events=8))
    assert response.status_code == 409 and "The upload would exceed" in response.json()["detail"]
    assert unread_body == [] and Session.objects.count() == 1 and not ImportJob.objects.exists()


def test_the_servers_quotas_apply_to_projects_without_their_own(api, project, settings):
    settings.QUOTA_SESSIONS = 1
    assert post_json(api, "/api/sessions", {"task": "one"}).status_code == 201
    assert post_json(api, "/api/sessions", {"task": "two"}).status_code == 409
    # The server's is a ceiling: a project's own above it (set before the server's) counts as the server's.
    project.max_sessions = 5
    project.save()
    assert post_json(api, "/api/sessions", {"task": "two"}).status_code == 409
    settings.QUOTA_SESSIONS = 3
    assert post_json(api, "/api/sessions", {"task": "two"}).status_code == 201
    project.max_sessions = 2  # a project's own below it counts
    project.save()
    assert post_json(api, "/api/sessions", {"task": "three"}).status_code == 409


def test_admins_cannot_set_a_quota_above_the_servers(client, project, settings):
    """Any signed-in user may make a project and be its admin: the operator's quotas must hold."""
    settings.QUOTA_STORED_BYTES, settings.QUOTA_SESSIONS = 100 * 1024 * 1024, 50
    client.force_login(member("ada", project, Role.ADMIN))
    url = reverse("sessions:project_settings", args=[project.slug])
    refused = client.post(url, {"quota_mb": "101", "max_sessions": "51"})
    html = refused.content.decode()
    assert refused.status_code == 400 and html.count("the server&#x27;s quota") >= 2
    assert "at most 100: the server&#x27;s quota (REPLAY_QUOTA_STORED_MB)" in html
    assert "at most 50: the server&#x27;s quota (REPLAY_QUOTA_SESSIONS)" in html
    project.refresh_from_db()
    assert (project.max_stored_bytes, project.max_sessions) == (None, None)
    assert client.post(url, {"quota_mb": "100", "max_sessions": "50"}).status_code == 302
    page = client.get(project.get_absolute_url()).content.decode()
    assert 'max="100"' in page and 'max="50"' in page
    # A quota of its own stored above a ceiling lowered since is shown as what holds, the ceiling,
    # so saving the form (for its retention, say) is not refused for a value no one typed.
    settings.QUOTA_SESSIONS = 20
    page = client.get(project.get_absolute_url()).content.decode()
    assert re.search(r'name="max_sessions" value="20"[^>]*max="20"', page)


def test_a_live_batch_past_the_storage_quota_is_a_413_before_its_body_is_read(api, project, monkeypatch):
    created = post_json(api, "/api/sessions", {"task": "live"}).json()
    events = list(canonical_records(20))
    assert post_json(api, created["events_url"], {"events": events[:10]}).status_code == 200
    session = Session.objects.get(pk=created["id"])
    assert session.record_bytes == sum(len(orjson.dumps(e)) for e in events[:10])
    project.max_stored_bytes = session.record_bytes + 1024
    project.save()
    from sessions_app.api import live

    monkeypatch.setattr(live, "read_body", lambda *a, **k: pytest.fail("the body was read"))
    refused = post_json(api, created["events_url"], {"events": events[10:]})
    assert refused.status_code == 413 and "The batch" in refused.json()["detail"]
    session.refresh_from_db()
    assert session.event_count == 10


def test_an_import_stops_adding_sessions_at_the_quota_with_a_problem(project, tmp_path):
    project.max_sessions = 2
    project.save()
    outcomes = import_file(path=write_canonical_file(tmp_path / "three.jsonl", sessions=3, events=4), project=project)
    assert Session.objects.count() == 2 and len([o for o in outcomes if o.session]) == 2
    problems = outcomes[0].problems
    assert [(p["field"], p["message"]) for p in problems] == [
        ("session", "file-session-2 not imported: project default's sessions quota is reached")
    ]


def test_a_file_already_stored_is_said_so_at_the_quota_not_refused(project, tmp_path):
    # The same file twice is one session (README): at the quota too, it is found stored, not
    # refused as a session more. A new session of the same file still meets the quota.
    path = write_canonical_file(tmp_path / "two.jsonl", sessions=2, events=4)
    first = import_file(path=path, project=project)
    assert [o.duplicate for o in first] == [False, False]
    project.max_sessions = 2
    project.save()
    again = import_file(path=path, project=project)
    assert [(o.session.pk, o.duplicate) for o in again] == [(o.session.pk, True) for o in first]
    assert again[0].problems == [] and Session.objects.count() == 2
    grown = write_canonical_file(tmp_path / "three.jsonl", sessions=3, events=4)
    outcomes = import_file(path=grown, project=project)
    assert [o.duplicate for o in outcomes] == [True, True] and Session.objects.count() == 2
    assert [(p["field"], p["message"]) for p in outcomes[0].problems] == [
        ("session", "file-session-2 not imported: project default's sessions quota is reached")
    ]


def stored_then_capped(project: Project, tmp_path: Path, *, sessions: int, quota: int) -> set[int]:
    """The ids of `sessions` sessions of a file imported, then the project's quota set."""
    path = write_canonical_file(tmp_path / "stored.jsonl", sessions=sessions, events=4)
    stored = {o.session.pk for o in import_file(path=path, project=project)}
    project.max_sessions = quota
    project.save()
    return stored


def test_a_replacing_import_at_the_quota_replaces_one_by_one(project, tmp_path):
    # Replacing deletes the session it supersedes as it adds its successor: at the quota, the
    # count stays within it. One that supersedes nothing is still one more, and refused.
    before = stored_then_capped(project, tmp_path, sessions=2, quota=2)
    changed = write_canonical_file(tmp_path / "changed.jsonl", sessions=3, events=5)
    outcomes = import_file(path=changed, project=project, replace=True)
    stored = [o for o in outcomes if o.session is not None]
    assert len(stored) == 2 and not any(o.duplicate for o in stored)
    assert sorted(pk for o in stored for pk in o.replaced) == sorted(before)
    assert set(Session.objects.values_list("pk", flat=True)) == {o.session.pk for o in stored}
    assert [(p["field"], p["message"]) for p in outcomes[0].problems] == [
        ("session", "file-session-2 not imported: project default's sessions quota is reached")
    ]


def test_a_replacement_takes_its_place_in_a_project_already_past_a_lowered_quota(project, tmp_path):
    # A quota lowered below what the project holds: replacing one session keeps the count, so it
    # is no session more.
    before = stored_then_capped(project, tmp_path, sessions=3, quota=2)
    changed = write_canonical_file(tmp_path / "one.jsonl", sessions=1, events=5)
    (outcome,) = import_file(path=changed, project=project, replace=True)
    assert outcome.session is not None and len(outcome.replaced) == 1 and outcome.replaced[0] in before
    assert outcome.problems == [] and Session.objects.count() == 3


def test_a_replacement_that_would_be_kept_beside_at_the_quota_is_refused_saying_only_that(project, tmp_path):
    # A session people commented on is kept, and its replacement would be stored beside it: one
    # more than the quota allows. Refused, and said once (not "stored beside" and then refused).
    from sessions_app.models import Comment

    (first,) = import_file(path=write_canonical_file(tmp_path / "one.jsonl", sessions=1, events=4), project=project)
    Comment.objects.create(session=first.session, seq=1, author_name="rita", body="keep me")
    project.max_sessions = 1
    project.save()
    changed = write_canonical_file(tmp_path / "changed.jsonl", sessions=1, events=5)
    (outcome,) = import_file(path=changed, project=project, replace=True)
    assert outcome.session is None and Session.objects.get().pk == first.session.pk
    assert [(p["field"], p["message"]) for p in outcome.problems] == [
        ("session", "file-session-0 not imported: project default's sessions quota is reached")
    ]


# --- the upload page and the project page ---------------------------------------------------


@pytest.fixture
def page(client, maintainer) -> Client:
    client.force_login(maintainer)
    return client


def test_the_upload_page_names_the_quota_an_upload_would_pass(page, project, tmp_path):
    project.max_stored_bytes = 40 * KIB
    project.save()
    path = write_canonical_file(tmp_path / "big-run.jsonl", events=400)
    with path.open("rb") as handle:
        response = page.post(reverse("sessions:upload"), {"files": [handle]}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and 'id="upload-errors"' in html
    assert "big-run.jsonl: The upload" in html and "storage quota" in html
    assert not ImportJob.objects.exists()


def test_admins_set_the_quotas_on_the_project_page_which_shows_what_it_holds(client, project, make_session):
    admin = member("ada", project, Role.ADMIN)
    client.force_login(admin)
    make_session(events=10)
    url = reverse("sessions:project_settings", args=[project.slug])
    assert client.post(url, {"retention_days": "", "quota_mb": "5", "max_sessions": "3"}).status_code == 302
    project.refresh_from_db()
    assert (project.max_stored_bytes, project.max_sessions) == (5 * 1024 * 1024, 3)
    entry = AuditEntry.objects.filter(action="project.change").latest("seq")
    assert orjson.loads(entry.detail) == {"max_sessions": {"from": None, "to": 3},
                            "max_stored_bytes": {"from": None, "to": 5 * 1024 * 1024}}  # fmt: skip
    html = client.get(project.get_absolute_url()).content.decode()
    assert 'id="project-usage"' in html and "of 5.0\xa0MB" in html and "1 session of 3" in html
    refused = client.post(url, {"quota_mb": "0", "max_sessions": "x"})
    assert refused.status_code == 400 and project.max_sessions == 3


def test_a_maintainer_cannot_change_the_quotas(page, project):
    url = reverse("sessions:project_settings", args=[project.slug])
    assert page.post(url, {"quota_mb": "1"}).status_code == 403
    project.refresh_from_db()
    assert project.max_stored_bytes is None


# --- a 413 before the body is read, over a real socket ---------------------------------------


def _ask(host: str, port: int, path: str) -> tuple[http.client.HTTPResponse, bytes, float]:
    """Send headers declaring a 10 GiB body and only its first kilobyte over a plain socket;
    the answer, its body, and how long its head took to arrive."""
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: multipart/form-data; boundary=xyz\r\n"
        f"Content-Length: {10 * 1024**3}\r\n\r\n"
    ).encode()
    body = b"--xyz\r\n" + b"x" * 1024
    with socket.create_connection((host, port), timeout=10) as conn:
        started = time.monotonic()
        conn.sendall(request + body)
        answer = http.client.HTTPResponse(conn)
        answer.begin()  # the status line and headers (a timeout here: the server waits for the body)
        seconds = time.monotonic() - started
        return answer, answer.read(), seconds


@pytest.mark.parametrize("path", ["/api/imports", "/sessions/upload/"])
def test_a_declared_body_past_the_upload_limit_is_answered_413_at_once_unread(live_server, settings, path):
    settings.MAX_UPLOAD_MB = 1
    answer, body, seconds = _ask(live_server.thread.host, live_server.thread.port, path)
    assert answer.status == 413, body[:300]
    assert b"exceeds the limit of 1 MB" in body and b"REPLAY_MAX_UPLOAD_MB" in body
    assert seconds < 5
    if path.startswith("/api/"):
        assert answer.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("path", ["/api/imports", "/sessions/upload/"])
def test_the_production_server_answers_the_413_at_once_too(served, path):
    _, base, _, _ = served
    host, port = base.removeprefix("http://").split(":")
    answer, body, seconds = _ask(host, int(port), path)  # 10 GiB, past REPLAY_MAX_UPLOAD_MB's 1024
    assert answer.status == 413 and b"REPLAY_MAX_UPLOAD_MB" in body and seconds < 5


def test_an_import_and_a_live_create_never_both_take_the_last_place(db, tmp_path, monkeypatch):
    # The importer's first count, before its session's transaction and without the lock, saw
    # room; a live create took the last place meanwhile (review). Counted again under the lock.
    from sessions_app.canonical import SessionMeta
    from sessions_app.ingest import importing, live

    project = Project.get_default()
    project.max_sessions = 1
    project.save()
    left = importing.sessions_left

    def then_a_live_create(of: Project) -> int | None:
        room = left(of)
        live.create_live_session(project=of, meta=SessionMeta(task="live"))
        return room

    monkeypatch.setattr(importing, "sessions_left", then_a_live_create)
    (outcome,) = import_file(path=write_canonical_file(tmp_path / "one.jsonl", events=4), project=project)
    assert outcome.session is None and Session.objects.count() == 1
    assert any("quota" in problem["message"] for problem in outcome.problems), outcome.problems
