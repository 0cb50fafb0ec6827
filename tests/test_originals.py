"""Kept originals (issue 20 item 4): the file of an upload that failed, and of one whose sessions
were all deleted (by a user, by retention, by a replacing import), is deleted from disk after
REPLAY_ORIGINALS_GRACE_DAYS and kept before; one a session still needs is never deleted."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from sessions_app import jobs
from sessions_app.ingest.importing import import_file, import_local_file
from sessions_app.ingest.quotas import usage_of
from sessions_app.models import ImportJob, Session
from sessions_app.originals import delete_expired_originals

from .builders_ingest import write_canonical_file
from .builders_teams import maintainer_key

GRACE = 7


@pytest.fixture(autouse=True)
def _grace(settings, monkeypatch):
    settings.ORIGINALS_GRACE_DAYS = GRACE
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")


@pytest.fixture
def api(db) -> Client:
    return Client(headers={"authorization": f"Bearer {maintainer_key('agent')}"})


def days_later(days: float):
    return timezone.now() + timedelta(days=days)


def imported(project, tmp_path: Path, name: str = "run.jsonl", **kwargs) -> ImportJob:
    import_local_file(path=write_canonical_file(tmp_path / name, **kwargs), project=project)
    return ImportJob.objects.get(original_name=name)


def test_the_original_of_a_failed_upload_is_deleted_after_the_grace_period(api, project, tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_bytes(b"not a session at all\n" * 100)
    with junk.open("rb") as handle:
        job_id = api.post("/api/imports", {"file": handle}).json()["job"]
    jobs.run_import(job_id=job_id)
    job = ImportJob.objects.get(pk=job_id)
    kept = Path(job.stored_path)
    assert job.status == "failed" and kept.is_file()
    assert usage_of(project=project).stored_bytes == junk.stat().st_size  # it takes room meanwhile

    assert delete_expired_originals(now=days_later(GRACE - 1)).files == 0
    assert kept.is_file()
    cleaned = delete_expired_originals(now=days_later(GRACE + 1))
    assert (cleaned.files, cleaned.bytes) == (1, junk.stat().st_size)
    assert not kept.exists()
    job.refresh_from_db()
    assert job.original_deleted_at is not None and job.status == "failed"  # the row stays for the imports page
    assert usage_of(project=project).stored_bytes == 0


def test_the_original_of_a_session_deleted_through_the_api_goes_after_the_grace_period(api, project, tmp_path):
    job = imported(project, tmp_path)
    kept = Path(job.stored_path)
    session = Session.objects.get(import_job=job)
    assert api.delete(f"/api/sessions/{session.pk}").status_code == 204
    job.refresh_from_db()
    assert job.orphaned_at is not None and kept.is_file()
    delete_expired_originals(now=days_later(GRACE - 1))
    assert kept.is_file()  # a deletion can still be regretted: the file is there to import again
    delete_expired_originals(now=days_later(GRACE + 1))
    assert not kept.exists()


def test_an_original_that_held_a_deleted_session_is_given_to_no_one_then_deleted(api, project, tmp_path):
    """The file holds the deleted session's records: its other sessions' original export and
    bundle no longer give it (a security sweep read a deleted session's secret that way); their
    events stay, and the file goes after the grace period."""
    job = imported(project, tmp_path, sessions=2)
    first, second = Session.objects.filter(import_job=job).order_by("pk")
    whole = api.get(f"/api/sessions/{second.pk}/export?format=original")
    assert whole.status_code == 200 and b"".join(whole.streaming_content) == Path(job.stored_path).read_bytes()
    assert api.delete(f"/api/sessions/{first.pk}").status_code == 204
    refused = api.get(f"/api/sessions/{second.pk}/export?format=original")
    assert refused.status_code == 404
    assert "also held a session deleted since, so it is given no more" in refused.json()["detail"]
    bundle = api.get(f"/api/sessions/{second.pk}/bundle")
    import io
    import zipfile

    members = zipfile.ZipFile(io.BytesIO(b"".join(bundle.streaming_content))).namelist()
    assert bundle.status_code == 200 and not [name for name in members if name.startswith("original/")]
    assert api.get(f"/api/sessions/{second.pk}/export?format=jsonl").status_code == 200
    job.refresh_from_db()
    assert job.orphaned_at is not None and Path(job.stored_path).is_file()  # a deletion regretted, for a while
    assert delete_expired_originals(now=job.orphaned_at + timedelta(days=GRACE - 1)).files == 0
    assert delete_expired_originals(now=job.orphaned_at + timedelta(days=GRACE + 1)).files == 1
    assert not Path(job.stored_path).exists() and Session.objects.filter(pk=second.pk).exists()


def test_retention_deletes_the_originals_of_the_sessions_it_removed_after_the_grace_period(project, tmp_path,
                                                                                          settings):  # fmt: skip
    settings.RETENTION_DAYS = 30
    old, recent = imported(project, tmp_path, "old.jsonl"), imported(project, tmp_path, "recent.jsonl", events=9)
    Session.objects.filter(import_job=old).update(created_at=timezone.now() - timedelta(days=40))
    result = jobs.run_cleanup()
    assert result["sessions"] == 1 and result["originals"]["files"] == 0
    assert Path(old.stored_path).is_file()  # retention ran today: the grace period starts now
    # The daily run a week later.
    later = delete_expired_originals(now=days_later(GRACE + 1))
    assert later.files == 1 and not Path(old.stored_path).exists()
    assert Path(recent.stored_path).is_file()


def test_a_replaced_sessions_original_goes_too(project, tmp_path):
    first = imported(project, tmp_path, "run.jsonl", events=10)
    write_canonical_file(tmp_path / "run.jsonl", events=12)
    import_file(path=tmp_path / "run.jsonl", project=project, replace=True)
    first.refresh_from_db()
    assert first.orphaned_at is not None
    delete_expired_originals(now=days_later(GRACE + 1))
    assert not Path(first.stored_path).exists()


def test_a_job_left_without_sessions_unannounced_starts_its_grace_when_the_clean_up_sees_it(project, tmp_path):
    job = imported(project, tmp_path)
    Session.objects.filter(import_job=job).delete()  # e.g. by hand in the admin
    assert delete_expired_originals(now=days_later(1)).files == 0
    job.refresh_from_db()
    assert job.orphaned_at is not None
    assert delete_expired_originals(now=job.orphaned_at + timedelta(days=GRACE - 1)).files == 0
    assert delete_expired_originals(now=job.orphaned_at + timedelta(days=GRACE + 1)).files == 1
    assert not Path(job.stored_path).exists()


def test_only_files_under_the_data_folder_are_ever_deleted(project, tmp_path, settings):
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("{}\n")
    ImportJob.objects.create(project=project, original_name="x", stored_path=str(outside), status="failed",
                             finished_at=timezone.now() - timedelta(days=GRACE + 1))  # fmt: skip
    delete_expired_originals()
    assert outside.is_file()


def test_the_command_and_a_dry_run_say_what_goes(project, tmp_path, capsys, settings):
    settings.ORIGINALS_GRACE_DAYS = 0
    job = imported(project, tmp_path)
    Session.objects.filter(import_job=job).delete()
    ImportJob.objects.filter(pk=job.pk).update(orphaned_at=timezone.now() - timedelta(seconds=1))
    call_command("cleanup_sessions", "--dry-run")
    assert "Would delete 1 kept original(s)" in capsys.readouterr().out and Path(job.stored_path).is_file()
    call_command("cleanup_sessions")
    assert "Deleted 1 kept original(s)" in capsys.readouterr().out and not Path(job.stored_path).exists()


def test_a_deleted_sessions_records_are_given_from_no_upload_that_holds_them(api, project, tmp_path):
    """Another upload that held the same session (recognised as a duplicate), and an upload whose
    import still ran when the session was deleted, hold its records too (a retest read them)."""
    alone = imported(project, tmp_path, "one.jsonl", sessions=1)
    both = imported(project, tmp_path, "two.jsonl", sessions=2)
    (first,) = Session.objects.filter(import_job=alone)
    (second,) = Session.objects.filter(import_job=both)  # its first session was the one above
    assert any(e.get("duplicate") and e.get("session") == first.pk for e in both.result)
    assert api.get(f"/api/sessions/{second.pk}/export?format=original").status_code == 200
    assert api.delete(f"/api/sessions/{first.pk}").status_code == 204
    assert api.get(f"/api/sessions/{second.pk}/export?format=original").status_code == 404

    running = imported(project, tmp_path, "three.jsonl", sessions=3)
    ImportJob.objects.filter(pk=running.pk).update(status=ImportJob.Status.RUNNING)
    (gone,) = Session.objects.filter(import_job=running, source_session_id="file-session-2")
    assert api.delete(f"/api/sessions/{gone.pk}").status_code == 204
    ImportJob.objects.filter(pk=running.pk).update(status=ImportJob.Status.DONE)  # the import ends after it
    kept = Session.objects.filter(import_job=running).first()
    assert api.get(f"/api/sessions/{kept.pk}/export?format=original").status_code == 404
