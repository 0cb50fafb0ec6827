"""Background jobs: uploads kept and queued with their job, imports run by a real qcluster worker,
a killed import run again without duplicates, retention clean-up and its daily schedule."""

from __future__ import annotations

import gzip
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone
from django_q.models import OrmQ, Schedule, Success

from sessions_app import jobs
from sessions_app.ingest.uploads import UploadRejected, UploadTooLarge, accept_upload
from sessions_app.ingest.writer import set_checkpoint
from sessions_app.models import Event, ImportJob, Session
from sessions_app.worker_liveness import is_stalled, this_worker

from .builders_ingest import write_canonical_file
from .builders_teams import maintainer_key

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def data_dir(settings, tmp_path) -> Path:
    settings.DATA_DIR = tmp_path / "data"
    return settings.DATA_DIR


def upload_of(path: Path, name: str | None = None) -> SimpleUploadedFile:
    return SimpleUploadedFile(name or path.name, path.read_bytes())


def accepted(**upload) -> ImportJob:
    """The job `accept_upload` makes, its transaction committed (the API's and the form's, without
    their queueing and logging)."""
    with accept_upload(**upload) as job:
        return job


def queued_import_job_ids() -> list[int]:
    return [
        task.task["kwargs"]["job_id"]
        for task in OrmQ.objects.all()
        if task.task.get("func") == "sessions_app.jobs.run_import"
    ]


# --- uploads -------------------------------------------------------------------------------------


def test_upload_is_kept_under_a_generated_name_never_the_clients(project, data_dir, tmp_path):
    source = write_canonical_file(tmp_path / "x.jsonl", events=8)
    job = accepted(uploaded_file=upload_of(source, "../../etc/passwd.jsonl"), project=project, created_by="ann")
    stored = Path(job.stored_path)
    assert stored.is_file() and stored.read_bytes() == source.read_bytes()
    assert stored.resolve().is_relative_to(data_dir.resolve())
    assert "passwd" not in stored.name and ".." not in job.stored_path
    assert stored.suffix == ".jsonl"
    assert job.original_name == "passwd.jsonl"
    assert (job.status, job.created_by, job.bytes_total) == ("queued", "ann", source.stat().st_size)


def test_an_upload_is_kept_before_the_transaction_that_makes_its_job(transactional_db, data_dir, tmp_path, monkeypatch):
    # Moved across file systems a kept file is copied (up to the upload limit), and SQLite's
    # write lock, taken when the transaction begins, held every other writer meanwhile.
    from sessions_app.ingest import uploads
    from sessions_app.models import Project

    stored_in_a_transaction = []
    store = uploads._store

    def watched(*args):
        stored_in_a_transaction.append(connection.in_atomic_block)
        return store(*args)

    monkeypatch.setattr(uploads, "_store", watched)
    source = write_canonical_file(tmp_path / "x.jsonl", events=8)
    with uploads.accept_upload(uploaded_file=upload_of(source), project=Project.get_default()) as job:
        assert connection.in_atomic_block
    assert stored_in_a_transaction == [False] and Path(job.stored_path).is_file()
    with pytest.raises(RuntimeError):  # and a failure inside still takes the kept file with it
        with uploads.accept_upload(uploaded_file=upload_of(source), project=Project.get_default()) as failed:
            raise RuntimeError("the entry could not be written")
    assert not Path(failed.stored_path).exists() and not ImportJob.objects.filter(pk=failed.pk).exists()


def test_an_uploads_task_is_committed_with_its_job_or_not_at_all(transactional_db, project, data_dir, tmp_path):
    source = write_canonical_file(tmp_path / "x.jsonl", events=8)
    with pytest.raises(RuntimeError):
        with accept_upload(uploaded_file=upload_of(source), project=project) as failed:
            jobs.enqueue_import(job_id=failed.pk)  # what the API and the upload form do
            raise RuntimeError("the audit entry could not be written")
    assert queued_import_job_ids() == [] and not ImportJob.objects.filter(pk=failed.pk).exists()
    with accept_upload(uploaded_file=upload_of(source), project=project) as job:
        jobs.enqueue_import(job_id=job.pk)
    assert queued_import_job_ids() == [job.pk]


def test_a_store_that_stops_midway_leaves_no_partial_file(project, data_dir):
    class DiskFull(SimpleUploadedFile):
        def chunks(self, chunk_size=None):
            yield b'{"partial": 1}\n'
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        with accept_upload(uploaded_file=DiskFull("x.jsonl", b'{"a": 1}\n' * 100), project=project):
            pass
    assert [path for path in data_dir.rglob("*") if path.is_file()] == []
    assert not ImportJob.objects.exists()


def test_a_commit_callback_that_fails_leaves_the_committed_job_its_file(transactional_db, project, data_dir, tmp_path):
    # Review: the queueing ran on commit and, failing there, took the file of a job already
    # committed (queued for ever, its bytes counted against the quota, its entry in the log).
    source = write_canonical_file(tmp_path / "x.jsonl", events=8)

    def fails() -> None:
        raise RuntimeError("the broker was busy")

    with pytest.raises(RuntimeError):
        with accept_upload(uploaded_file=upload_of(source), project=project) as job:
            transaction.on_commit(fails)
    assert ImportJob.objects.filter(pk=job.pk).exists() and Path(job.stored_path).is_file()


def test_upload_over_the_size_limit_is_refused_with_a_clear_message(project, data_dir, settings):
    settings.MAX_UPLOAD_MB = 1
    too_big = SimpleUploadedFile("big.jsonl", b"x" * (1024 * 1024 + 1))
    with pytest.raises(UploadTooLarge) as refused:
        accepted(uploaded_file=too_big, project=project)
    assert refused.value.status == 413
    assert "REPLAY_MAX_UPLOAD_MB" in refused.value.message and "1 MB" in refused.value.message
    assert not ImportJob.objects.exists()


def test_gzip_stating_a_decompressed_size_over_the_limit_is_refused_at_upload(project, data_dir, settings):
    settings.MAX_UPLOAD_MB = 1
    bomb = gzip.compress(b"\n" * (3 * 1024 * 1024))  # 3 MB of newlines: a few KB compressed
    assert len(bomb) < 1024 * 1024
    with pytest.raises(UploadTooLarge) as refused:
        accepted(uploaded_file=SimpleUploadedFile("b.jsonl.gz", bomb), project=project)
    assert "decompressed upload" in refused.value.message
    # A cut file's last 4 bytes are no size: the message says where its figure comes from.
    assert "the gzip file's last 4 bytes state" in refused.value.message and "gzip -t" in refused.value.message


def test_a_cut_gzip_whose_trailer_states_more_than_deflate_can_make_is_called_cut(project, data_dir):
    text = random.Random(16).randbytes(20_000).hex().encode()  # compresses little: 300 bytes are its start
    cut = gzip.compress(text)[:300]  # its last 4 bytes are compressed data, read as a size: here an impossible one
    stated = int.from_bytes(cut[-4:], "little")
    assert stated > 1032 * len(cut)
    with pytest.raises(UploadRejected) as refused:
        accepted(uploaded_file=SimpleUploadedFile("cut.jsonl.gz", cut), project=project)
    assert refused.value.status == 400 and refused.value.message.startswith("The gzip file is cut off or damaged")
    assert f"state {stated:,} bytes" in refused.value.message and "of its 300" in refused.value.message
    assert not ImportJob.objects.exists()


def test_gzip_hiding_its_size_fails_the_job_once_decompressed_past_the_limit(project, data_dir, settings, tmp_path):
    settings.MAX_UPLOAD_MB = 1
    # Two gzip members: the trailer of the last (tiny) one is all a quick look can see.
    bomb = gzip.compress(b"\n" * (3 * 1024 * 1024)) + gzip.compress(b"\n")
    job = accepted(uploaded_file=SimpleUploadedFile("b.jsonl.gz", bomb), project=project)
    jobs.run_import(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "failed"
    assert "decompressed upload" in job.error and "REPLAY_MAX_UPLOAD_MB" in job.error
    assert not Session.objects.exists()


# --- run_import ----------------------------------------------------------------------------------


def test_run_import_imports_every_session_of_the_upload(project, data_dir, tmp_path):
    source = write_canonical_file(tmp_path / "three.jsonl.gz", sessions=3, events=10, compress=True)
    job = accepted(uploaded_file=upload_of(source), project=project)
    jobs.run_import(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "done" and job.detected_format == "canonical"
    assert job.sessions_done == 3 and job.events_done == 3 * 12
    sessions = Session.objects.filter(import_job=job).order_by("source_session_id")
    assert [s.source_session_id for s in sessions] == [f"file-session-{i}" for i in range(3)]
    assert all(s.status == "completed" and s.final_answer == "42" for s in sessions)


def test_run_import_of_a_finished_job_does_nothing(project, data_dir, tmp_path):
    source = write_canonical_file(tmp_path / "one.jsonl", events=10)
    job = accepted(uploaded_file=upload_of(source), project=project)
    jobs.run_import(job_id=job.pk)
    jobs.run_import(job_id=job.pk)  # delivered twice by the broker
    assert Session.objects.count() == 1


def test_run_import_reports_a_missing_stored_file_on_the_job(project, data_dir, tmp_path):
    source = write_canonical_file(tmp_path / "one.jsonl", events=10)
    job = accepted(uploaded_file=upload_of(source), project=project)
    Path(job.stored_path).unlink()
    jobs.run_import(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "failed" and "missing" in job.error


def test_rerun_after_an_interruption_discards_half_written_sessions(project, data_dir, tmp_path, make_session):
    source = write_canonical_file(tmp_path / "two.jsonl", sessions=2, events=10)
    job = accepted(uploaded_file=upload_of(source), project=project)
    # What a killed attempt can leave: the job RUNNING and a session still live under it.
    ImportJob.objects.filter(pk=job.pk).update(status="running", started_at=timezone.now())
    partial = make_session(events=5, source_session_id="file-session-1")
    Session.objects.filter(pk=partial.pk).update(import_job=job)
    jobs.run_import(job_id=job.pk)
    assert not Session.objects.filter(pk=partial.pk).exists()
    assert sorted(Session.objects.values_list("source_session_id", flat=True)) == [
        "file-session-0", "file-session-1",
    ]  # fmt: skip


def test_an_import_that_stopped_its_worker_three_times_fails_instead_of_stopping_more(
    project, data_dir, tmp_path, make_session
):
    """A file that kills every worker it is given (out of memory) would otherwise be queued again
    each minute forever (a retest's bundle took down worker after worker)."""
    source = write_canonical_file(tmp_path / "one.jsonl", events=10)
    job = accepted(uploaded_file=upload_of(source), project=project)
    ImportJob.objects.filter(pk=job.pk).update(status="running", started_at=timezone.now(), attempts=2)
    assert jobs.requeue_stalled_imports() == {"requeued": [job.pk], "given_up": []}  # its worker is gone: again
    ImportJob.objects.filter(pk=job.pk).update(attempts=jobs.MAX_ATTEMPTS)
    partial = make_session(events=5, source_session_id="file-session-0")
    Session.objects.filter(pk=partial.pk).update(import_job=job)
    assert jobs.requeue_stalled_imports() == {"requeued": [], "given_up": [job.pk]}
    job.refresh_from_db()
    assert job.status == "failed" and "stopped its worker 3 times" in job.error
    assert not Session.objects.filter(pk=partial.pk).exists()  # what the last attempt left half-written
    # The task the broker may still deliver does nothing more.
    ImportJob.objects.filter(pk=job.pk).update(status="running", error="")
    jobs.run_import(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "failed" and job.attempts == jobs.MAX_ATTEMPTS and Session.objects.count() == 0


def test_a_job_whose_worker_lives_is_neither_requeued_nor_taken_by_a_second_worker(project, data_dir, tmp_path):
    source = write_canonical_file(tmp_path / "one.jsonl", events=10)
    job = accepted(uploaded_file=upload_of(source), project=project)
    # This very process is the worker running it.
    ImportJob.objects.filter(pk=job.pk).update(status="running", worker=this_worker(), attempts=1,
                                               started_at=timezone.now())  # fmt: skip
    assert jobs.requeue_stalled_imports() == {"requeued": [], "given_up": []}
    jobs.run_import(job_id=job.pk)  # a re-delivery while the first worker still runs it
    job.refresh_from_db()
    assert job.status == "running" and job.attempts == 1 and Session.objects.count() == 0


def test_a_job_whose_worker_is_gone_is_stalled_by_process_here_and_by_heartbeat_elsewhere(project):
    job = ImportJob(project=project, status="running", started_at=timezone.now(), heartbeat_at=timezone.now())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    job.worker = f"{socket.gethostname()}:{dead.pid}:1"
    assert is_stalled(job)  # on this host: the process is gone (or its pid reused by another)
    job.worker = this_worker()
    assert not is_stalled(job)
    job.worker = "another-host:123:456"
    assert not is_stalled(job)  # elsewhere: its heartbeat is fresh
    job.heartbeat_at = timezone.now() - timedelta(seconds=60)
    assert is_stalled(job)
    job.status = "done"
    assert not is_stalled(job)


def test_the_watchdog_runs_every_minute_and_healthz_reports_it(db, client):
    jobs.schedule_jobs()
    watchdog = Schedule.objects.get(name=jobs.WATCHDOG_SCHEDULE_NAME)
    assert watchdog.func == jobs.WATCHDOG_FUNC and watchdog.schedule_type == Schedule.MINUTES
    assert watchdog.minutes == 1
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == "ok" and body["workers"]["ok"] is False and body["workers"]["last_heartbeat"] is None
    Success.objects.create(id="t1", name="w", func=jobs.WATCHDOG_FUNC, started=timezone.now(),
                           stopped=timezone.now(), success=True)  # fmt: skip
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["workers"]["ok"] is True
    Success.objects.filter(id="t1").update(stopped=timezone.now() - timedelta(minutes=5))
    assert client.get("/healthz").status_code == 503


# --- retention -----------------------------------------------------------------------------------


def age(session: Session, days: float) -> None:
    Session.objects.filter(pk=session.pk).update(
        created_at=timezone.now() - timedelta(days=days),
        status="completed",
    )
    Session.objects.filter(pk=session.pk).update(updated_at=timezone.now() - timedelta(days=days))


def test_cleanup_deletes_old_sessions_with_their_events_and_keeps_checkpointed_ones(make_session):
    old, old_checkpointed, recent = make_session(events=10), make_session(events=10), make_session(events=10)
    age(old, 40)
    age(old_checkpointed, 40)
    set_checkpoint(session=old_checkpointed, name="keep me", seq=3)
    result = jobs.run_cleanup(days=30)
    assert result["sessions"] == 1 and result["events"] == 10 and result["kept_checkpointed"] == 1
    assert set(Session.objects.values_list("pk", flat=True)) == {old_checkpointed.pk, recent.pk}
    assert not Event.objects.filter(session_id=old.pk).exists()


def test_cleanup_can_include_checkpointed_sessions(make_session):
    old = make_session(events=4)
    age(old, 40)
    set_checkpoint(session=old, name="cp", seq=1)
    assert jobs.run_cleanup(days=30, include_checkpointed=True)["sessions"] == 1
    assert not Session.objects.exists()


def test_cleanup_without_retention_setting_keeps_everything(make_session, settings):
    settings.RETENTION_DAYS = None
    old = make_session(events=4)
    age(old, 4000)
    assert jobs.run_cleanup()["sessions"] == 0
    assert Session.objects.filter(pk=old.pk).exists()


def test_cleanup_uses_the_retention_setting(make_session, settings):
    settings.RETENTION_DAYS = 7
    old, recent = make_session(events=2), make_session(events=2)
    age(old, 8)
    age(recent, 6)
    assert jobs.run_cleanup()["sessions"] == 1
    assert list(Session.objects.values_list("pk", flat=True)) == [recent.pk]


def test_cleanup_never_deletes_a_live_session_still_receiving_events(make_session):
    live = make_session(events=2)
    Session.objects.filter(pk=live.pk).update(created_at=timezone.now() - timedelta(days=40))
    assert jobs.run_cleanup(days=30)["sessions"] == 0


def test_cleanup_command_dry_run_counts_without_deleting(make_session, capsys):
    old = make_session(events=6)
    age(old, 10)
    call_command("cleanup_sessions", "--days", "5", "--dry-run")
    assert "Would delete 1 session(s) (6 events)" in capsys.readouterr().out
    assert Session.objects.filter(pk=old.pk).exists()
    call_command("cleanup_sessions", "--days", "5")
    assert "Deleted 1 session(s) (6 events)" in capsys.readouterr().out
    assert not Session.objects.filter(pk=old.pk).exists()


def test_cleanup_command_keeps_checkpointed_unless_included(make_session, capsys):
    old = make_session(events=3)
    age(old, 10)
    set_checkpoint(session=old, name="cp", seq=0)
    call_command("cleanup_sessions", "--days", "5")
    assert "kept 1 checkpointed" in capsys.readouterr().out
    assert Session.objects.filter(pk=old.pk).exists()
    call_command("cleanup_sessions", "--days", "5", "--include-checkpointed")
    assert not Session.objects.filter(pk=old.pk).exists()


def test_schedule_jobs_creates_one_daily_cleanup_schedule_however_often_it_runs(db):
    call_command("schedule_jobs")
    Schedule.objects.filter(name=jobs.CLEANUP_SCHEDULE_NAME).update(schedule_type=Schedule.HOURLY)
    call_command("schedule_jobs")  # repairs instead of duplicating
    schedules = Schedule.objects.filter(func="sessions_app.jobs.run_cleanup")
    assert schedules.count() == 1
    schedule = schedules.get()
    assert schedule.schedule_type == Schedule.DAILY and schedule.repeats == -1
    assert schedule.next_run > timezone.now() - timedelta(minutes=1)


# --- a real qcluster worker ----------------------------------------------------------------------


class WorkerDatabase:
    """This test's database as a separate process can open it.

    PostgreSQL: the test database itself (a transactional test commits, so a worker sees it).
    SQLite: pytest-django's test database lives in this process's memory, so it is copied to a
    file for the worker (`push`) and the worker's results are copied back (`pull`) with SQLite's
    online backup.
    """

    def __init__(self, tmp_path: Path) -> None:
        self.file: Path | None = None
        config = connection.settings_dict
        if connection.vendor == "postgresql":
            auth = config["USER"] + (f":{config['PASSWORD']}" if config["PASSWORD"] else "")
            self.url = f"postgres://{auth}@{config['HOST'] or 'localhost'}:{config['PORT'] or 5432}/{config['NAME']}"
        elif connection.is_in_memory_db():
            self.file = tmp_path / "worker.sqlite3"
            self.url = f"sqlite:///{self.file}"
        else:
            self.url = f"sqlite:///{Path(config['NAME']).resolve()}"

    def push(self) -> None:
        if self.file is not None:
            connection.ensure_connection()
            target = sqlite3.connect(self.file)
            connection.connection.backup(target)
            target.close()

    def pull(self) -> None:
        if self.file is not None:
            source = sqlite3.connect(self.file, timeout=30)
            source.backup(connection.connection)
            source.close()

    def scalar(self, sql: str, params: tuple = ()):
        """One value read the way the worker's writes are visible from here."""
        if self.file is not None:
            db = sqlite3.connect(self.file, timeout=30)
            try:
                row = db.execute(sql, params).fetchone()
            finally:
                db.close()
        else:
            with connection.cursor() as cursor:
                cursor.execute(sql.replace("?", "%s"), params)
                row = cursor.fetchone()
        return row[0] if row else None

    def start(self, *args: str, log: Path, demo: bool = False) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAY_Q")}
        env.update(DATABASE_URL=self.url, REPLAY_LOG_LEVEL="INFO", PYTHONUNBUFFERED="1")
        if demo:
            env["REPLAY_DEMO"] = "1"  # `manage.py serve` with the development secret key
        # Its own process group, so stopping it also stops the workers it forks.
        return subprocess.Popen(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, start_new_session=True,
            stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """SIGTERM to the cluster's main process stops it cleanly (signalling its whole group at
    once leaves it hanging); SIGKILL goes to the whole group, as when a machine dies."""
    if process.poll() is None:
        if sig == signal.SIGKILL:
            os.killpg(process.pid, sig)
        else:
            os.kill(process.pid, sig)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


def wait_for(condition, *, timeout: float, what: str, log: Path, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout}s waiting for {what}; worker log:\n{log.read_text()[-3000:]}")


@pytest.fixture
def worker_db(transactional_db, tmp_path) -> WorkerDatabase:
    return WorkerDatabase(tmp_path)


JOB_STATUS = "SELECT status FROM sessions_app_importjob WHERE id = ?"


def test_an_upload_is_imported_by_a_real_qcluster_worker(worker_db, data_dir, tmp_path, project):
    from django.test import Client

    from sessions_app.models import ApiKey

    api = Client(headers={"authorization": f"Bearer {maintainer_key('up')}"})
    source = write_canonical_file(tmp_path / "queued.jsonl.gz", sessions=3, events=40, compress=True)
    with source.open("rb") as handle:
        response = api.post("/api/imports", {"file": handle})  # autocommit: enqueued at once
    assert response.status_code == 202
    job_id = response.json()["job"]
    assert queued_import_job_ids() == [job_id]

    worker_db.push()
    log = tmp_path / "qcluster.log"
    cluster = worker_db.start("qcluster", log=log)
    try:
        wait_for(lambda: worker_db.scalar(JOB_STATUS, (job_id,)) in ("done", "failed"),
                 timeout=90, what="the worker to finish the import", log=log)  # fmt: skip
        # The broker drops the task once the worker acknowledges it.
        wait_for(lambda: worker_db.scalar("SELECT COUNT(*) FROM django_q_ormq") == 0,
                 timeout=30, what="the task to be acknowledged", log=log)  # fmt: skip
    finally:
        stop(cluster)
    worker_db.pull()

    status = api.get(response.json()["status_url"]).json()
    assert status["status"] == "done", status
    assert status["sessions_done"] == 3 and status["events_done"] == 3 * 42
    assert Session.objects.filter(import_job_id=job_id).count() == 3
    assert Event.objects.count() == 3 * 42


def test_an_import_killed_mid_way_and_run_again_gives_the_same_sessions_once(worker_db, data_dir, tmp_path, project):
    sessions, events = 16, 2500
    source = write_canonical_file(tmp_path / "big.jsonl", sessions=sessions, events=events)
    job = accepted(uploaded_file=upload_of(source), project=project)
    jobs.enqueue_import(job_id=job.pk)
    worker_db.push()
    log = tmp_path / "qcluster.log"
    cluster = worker_db.start("qcluster", log=log)
    committed = "SELECT COUNT(*) FROM sessions_app_session WHERE import_job_id = ?"
    try:
        wait_for(lambda: (worker_db.scalar(committed, (job.pk,)) or 0) >= 2,
                 timeout=90, what="two sessions to be committed", log=log, every=0.01)  # fmt: skip
    finally:
        stop(cluster, signal.SIGKILL)  # the worker dies mid-import, without any clean-up
    worker_db.pull()
    job.refresh_from_db()
    survived = Session.objects.filter(import_job=job).count()
    assert job.status == "running", "the import finished before it could be killed; enlarge the file"
    assert 2 <= survived < sessions

    # The watchdog, a minute later, finds the worker gone and queues the job again. (SIGKILL is
    # delivered at once, but the worker process may take a moment to be gone.)
    wait_for(lambda: is_stalled(ImportJob.objects.get(pk=job.pk)), timeout=30, what="the killed worker to be gone",
             log=log)  # fmt: skip
    OrmQ.objects.all().delete()  # the dead worker's task (the broker would redeliver it in an hour)
    assert jobs.requeue_stalled_imports() == {"requeued": [job.pk], "given_up": []}
    (task,) = [t.task for t in OrmQ.objects.all()]
    assert task["func"] == "sessions_app.jobs.run_import" and task["kwargs"] == {"job_id": job.pk}
    jobs.run_import(**task["kwargs"])  # what the next worker does with it

    job.refresh_from_db()
    assert job.status == "done" and job.attempts == 2
    stored = Session.objects.filter(project=project)
    assert stored.count() == sessions
    assert sorted(stored.values_list("source_session_id", flat=True)) == sorted(
        f"file-session-{i}" for i in range(sessions)
    )
    assert set(stored.values_list("event_count", flat=True)) == {events + 2}
    assert Event.objects.count() == sessions * (events + 2)
    # The sessions the killed attempt had finished were recognised, not written again.
    assert sum(1 for entry in job.result if entry.get("duplicate")) == survived


def test_sessions_are_verified_several_to_a_job_and_each_once(
    make_session, monkeypatch, django_capture_on_commit_callbacks
):
    small = [make_session(events=5) for _ in range(4)]
    big = make_session(events=30)
    monkeypatch.setattr(jobs, "VERIFY_EVENTS_A_JOB", 40)
    ids = [s.pk for s in small] + [small[0].pk, big.pk]  # a session named twice is verified once
    with django_capture_on_commit_callbacks(execute=True):
        jobs.enqueue_verify_after_commit(session_ids=ids)
        assert OrmQ.objects.count() == 0  # nothing before the commit
    queued = [t.task for t in OrmQ.objects.order_by("id")]
    assert [t["func"] for t in queued] == ["sessions_app.jobs.run_verify"] * 2
    # 4 x 7 events fit under the budget of 40; the 32-event session starts a job of its own.
    assert [t["kwargs"]["session_ids"] for t in queued] == [[s.pk for s in small], [big.pk]]

    jobs.run_verify(session_ids=queued[0]["kwargs"]["session_ids"])
    states = {s.pk: s.chain_state for s in Session.objects.all()}
    assert [states[s.pk] for s in small] == ["verified"] * 4 and states[big.pk] == "unverified"


def test_more_sessions_to_verify_than_a_statement_binds_are_read_a_chunk_at_a_time(make_session, monkeypatch):
    """An import may give more sessions than one statement binds values (65,535 on PostgreSQL):
    with the chunk at 3, seven sessions and ids no longer there are still queued, each once."""
    made = [make_session(events=2).pk for _ in range(7)]
    monkeypatch.setattr(jobs, "_IDS_A_STATEMENT", 3)
    lookups: list[int] = []
    real_filter = Session.objects.filter

    def counting_filter(*args, **kwargs):
        if "pk__in" in kwargs:
            lookups.append(len(kwargs["pk__in"]))
        return real_filter(*args, **kwargs)

    monkeypatch.setattr(Session.objects, "filter", counting_filter)
    queued: list[list[int]] = []
    monkeypatch.setattr(jobs, "enqueue_verify", lambda *, session_ids: queued.append(session_ids))
    jobs._enqueue_verify_jobs([*made, 10**9, 10**9 + 1])

    assert lookups and max(lookups) <= 3
    assert [pk for batch in queued for pk in batch] == made


def test_a_verify_job_queued_before_the_upgrade_still_runs(make_session):
    session = make_session(events=5)
    jobs.run_verify(session_id=session.pk)  # the one-session form of older queued tasks
    session.refresh_from_db()
    assert session.chain_state == "verified"


def test_one_session_that_cannot_be_verified_does_not_stop_the_others(make_session, monkeypatch):
    from sessions_app import verification

    first, second = make_session(events=5), make_session(events=5)
    real = verification.verify_session

    def verify(*, session):
        if session.pk == first.pk:
            raise OSError("disk gone")
        return real(session=session)

    monkeypatch.setattr(verification, "verify_session", verify)
    with pytest.raises(RuntimeError, match=rf"\[{first.pk}\]"):
        jobs.run_verify(session_ids=[first.pk, second.pk, 999_999])  # a deleted one is skipped
    assert Session.objects.get(pk=second.pk).chain_state == "verified"


def test_a_command_line_import_is_not_taken_for_stalled_while_it_runs(project, data_dir, tmp_path, monkeypatch):
    # The command that imports a file runs its job itself: the watchdog, running meanwhile,
    # must see a live worker, not queue the job for a second run of the same file.
    from sessions_app.ingest import importing

    source = write_canonical_file(tmp_path / "run.jsonl", events=8)
    seen = []
    detected = importing._JobProgress.detected

    def watchdog_meanwhile(self, fmt):
        detected(self, fmt)
        job = ImportJob.objects.get(pk=self.job.pk)
        seen.append((job.status, job.worker, is_stalled(job), jobs.requeue_stalled_imports()))

    monkeypatch.setattr(importing._JobProgress, "detected", watchdog_meanwhile)
    (outcome,) = importing.import_local_file(path=source, project=project, created_by="cli")
    assert outcome.session is not None and outcome.session.event_count == 10  # with start and end
    assert seen == [("running", this_worker(), False, {"requeued": [], "given_up": []})]
    assert queued_import_job_ids() == []
    job = ImportJob.objects.get(pk=outcome.session.import_job_id)
    assert job.status == "done" and job.attempts == 1


def test_an_imported_upload_and_a_command_line_import_each_queue_their_sessions_verification(
    project, data_dir, tmp_path, django_capture_on_commit_callbacks
):
    # Both ways a file comes in end with its new sessions queued for verification (the badge
    # says "not verified yet" until a worker has run it); a duplicate is queued no second time.
    def verify_tasks():
        return [
            t.task["kwargs"]["session_ids"]
            for t in OrmQ.objects.order_by("id")
            if t.task["func"] == "sessions_app.jobs.run_verify"
        ]

    source = write_canonical_file(tmp_path / "up.jsonl", events=6)
    with django_capture_on_commit_callbacks(execute=True):
        job = accepted(uploaded_file=upload_of(source), project=project, created_by="ann")
    with django_capture_on_commit_callbacks(execute=True):
        jobs.run_import(job_id=job.pk)
    uploaded = Session.objects.get(import_job=job)
    assert uploaded.chain_state == "unverified" and verify_tasks() == [[uploaded.pk]]

    other = write_canonical_file(tmp_path / "cli.jsonl", sessions=2, events=4)
    with django_capture_on_commit_callbacks(execute=True):
        call_command("import_sessions", str(other), str(source), stdout=open(os.devnull, "w"))
    by_command = list(Session.objects.exclude(pk=uploaded.pk).order_by("pk").values_list("pk", flat=True))
    assert len(by_command) == 2 and verify_tasks() == [[uploaded.pk], by_command]
    jobs.run_verify(session_ids=by_command)
    assert [s.chain_state for s in Session.objects.filter(pk__in=by_command)] == ["verified"] * 2
