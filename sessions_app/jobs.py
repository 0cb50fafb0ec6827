"""Background jobs: the only module that imports django_q.

Each job is a pair: `enqueue_x` (called with ids, never model instances; an import's in its job's
transaction, the others once the triggering transaction commits) and `run_x` (what a qcluster
worker executes). Progress lives on database rows
(ImportJob, RedactionJob) that pages poll.

A `run_x` imports its workflow inside the function: every page that queues a job imports this
module, and need not load the importer's formats, RE2, OTLP's protobufs or the verifier to do so.

Re-delivery: the ORM broker hands a task to a worker again when it was not acknowledged within
Q_CLUSTER["retry"] seconds (the worker was killed, the machine rebooted), so every `run_x` must
be safe to run twice.
"""

from __future__ import annotations

import logging
from datetime import datetime, time, timedelta
from itertools import batched
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import async_task

from .ingest.quotas import QuotaExceeded, check_bytes
from .ingest.uploads import decompressed_size_within_limit, too_large_message
from .models import ImportJob, RedactionJob, Session
from .originals import delete_expired_originals
from .retention import CleanupResult, delete_expired_sessions
from .worker_liveness import heartbeat, is_stalled, this_worker

logger = logging.getLogger(__name__)

CLEANUP_SCHEDULE_NAME = "replay-retention-cleanup"
CLEANUP_HOUR_UTC = 3  # a quiet hour for the daily clean-up


def enqueue_import(*, job_id: int) -> str:
    """Queue a job's import. In the job's own transaction, where there is one: the broker is
    django-q2's ORM on this database (settings.Q_CLUSTER), so its task is committed with the job
    or not at all, and no worker sees it before the job. Queued after the commit instead, a
    broker that failed then left a job that nothing would ever run."""
    return async_task("sessions_app.jobs.run_import", job_id=job_id, task_name=f"import-{job_id}", group="imports")


def run_import(*, job_id: int) -> None:
    """Import a stored upload. A job taken before by a worker that died mid-way is run again:
    the sessions its earlier attempt left half-written are removed first, and completed ones are
    recognised by the importer's content de-duplication, so a re-run never duplicates."""
    job = ImportJob.objects.select_related("project").filter(pk=job_id).first()
    if job is None:
        logger.warning("import job %s no longer exists", job_id)
        return
    interrupted = job.status == ImportJob.Status.RUNNING  # taken before by a worker now gone
    if interrupted and job.attempts >= MAX_ATTEMPTS and is_stalled(job):
        _give_up(job)
        return
    if not _claim(job):
        return  # finished, or a live worker runs it (a re-delivery, or the watchdog's requeue)
    if interrupted:
        discarded = discard_partial_sessions(job=job)
        logger.warning(
            "import job %s: attempt %s after an interruption (%s partial sessions removed)",
            job_id, job.attempts, discarded,
        )  # fmt: skip
    with heartbeat(job_id=job.pk, attempt=job.attempts):
        _import(job)


# Attempts of an import whose worker stopped under it: one that stops every worker it is given (out
# of memory, a crash) fails after these, instead of taking down worker after worker.
MAX_ATTEMPTS = 3


def _give_up(job: ImportJob) -> None:
    discard_partial_sessions(job=job)
    logger.warning("import job %s: its worker stopped %s times; not tried again", job.pk, job.attempts)
    _fail(job, f"The import stopped its worker {job.attempts} times (out of memory, or a crash) and is not tried "
               "again; the file may be larger or stranger than this server takes.")  # fmt: skip


def _claim(job: ImportJob) -> bool:
    """Take the job for this worker: one conditional UPDATE, so of two workers handed the same
    job (the broker's re-delivery, the watchdog's requeue) exactly one runs it."""
    if job.finished or (job.status == ImportJob.Status.RUNNING and not is_stalled(job)):
        return False
    now = timezone.now()
    fields = {"status": ImportJob.Status.RUNNING, "worker": this_worker(), "attempts": job.attempts + 1,
              "heartbeat_at": now, "started_at": now, "finished_at": None, "error": "", "bytes_done": 0,
              "events_done": 0}  # fmt: skip
    taken = ImportJob.objects.filter(pk=job.pk, attempts=job.attempts, status=job.status).update(**fields)
    if taken:
        for name, value in fields.items():
            setattr(job, name, value)
    return bool(taken)


def _import(job: ImportJob) -> None:
    from .ingest.importing import import_file  # the importer imports formats; keep worker start light

    job_id = job.pk
    path = Path(job.stored_path)
    try:
        if not path.is_file():
            _fail(job, f"The stored upload {path.name} is missing from REPLAY_DATA_DIR.")
            return
        within, size = decompressed_size_within_limit(path)
        if not within:
            _fail(job, too_large_message(size, what="decompressed upload"))
            return
        # What a gzip holds is what its sessions will store: the quota was checked on what its
        # last member states, which a file of several members can understate. The
        # upload itself is counted already, at its size on disk.
        try:
            check_bytes(project=job.project, size=size - path.stat().st_size, what="gzip's content past its own size")
        except QuotaExceeded as exc:
            _fail(job, exc.message)
            return
        outcomes = list(
            import_file(
                path=path,
                project=job.project,
                format=job.requested_format or None,
                replace=job.replace,
                job=job,
            )
        )
    except Exception as exc:  # reported on the job; the traceback goes to the worker's log
        logger.exception("import job %s failed", job_id)
        _fail(job, f"The import stopped: {type(exc).__name__}: {exc}")
        return
    enqueue_verify_after_commit(session_ids=new_sessions(outcomes))
    job.refresh_from_db()
    if job.finished:
        return  # the importer recorded the outcome itself
    errors = [o.error for o in outcomes if getattr(o, "error", "")]
    if errors and len(errors) == len(outcomes):
        _fail(job, "; ".join(errors)[:2000])
    else:
        _mark(job, status=ImportJob.Status.DONE, finished_at=timezone.now())


# Sessions are verified in jobs of several: an OpenTelemetry export settles hundreds of small
# sessions a minute, and each queued task is a broker row, a signed pickle, a worker's round and
# a result row (1,001 of them for bench/otlp_bench.py's run). A job takes sessions up to this
# many events together (a few seconds of verifying), so a large import's sessions still spread
# over the workers.
VERIFY_EVENTS_A_JOB = 200_000
VERIFY_SESSIONS_A_JOB = 200
_IDS_A_STATEMENT = 2000


def enqueue_verify(*, session_ids: list[int]) -> str:
    name = f"verify-{session_ids[0]}" + (f"+{len(session_ids) - 1}" if len(session_ids) > 1 else "")
    return async_task("sessions_app.jobs.run_verify", session_ids=session_ids, task_name=name, group="verify")


def enqueue_verify_after_commit(*, session_ids: list[int]) -> None:
    """Queue the verification of the sessions once the caller's transaction commits."""
    if session_ids:
        wanted = list(session_ids)
        transaction.on_commit(lambda: _enqueue_verify_jobs(wanted))


def _enqueue_verify_jobs(session_ids: list[int]) -> None:
    # Read a chunk of ids a statement: an import may give more sessions than one statement binds
    # values (65,535 on PostgreSQL, 32,766 in SQLite's usual builds).
    events: dict[int, int] = {}
    for part in batched(session_ids, _IDS_A_STATEMENT):
        events.update(Session.objects.filter(pk__in=part).values_list("pk", "event_count"))
    batch: list[int] = []
    batch_events = 0
    for session_id in dict.fromkeys(session_ids):  # in order, each once
        if session_id not in events:
            continue  # deleted meanwhile
        if batch and (batch_events + events[session_id] > VERIFY_EVENTS_A_JOB or len(batch) == VERIFY_SESSIONS_A_JOB):
            enqueue_verify(session_ids=batch)
            batch, batch_events = [], 0
        batch.append(session_id)
        batch_events += events[session_id]
    if batch:
        enqueue_verify(session_ids=batch)


def run_verify(*, session_ids: list[int] | None = None, session_id: int | None = None) -> None:
    """Verify stored sessions (verification.py); running it twice only checks twice. One that
    cannot be verified does not stop the others; the job then fails, naming it. (`session_id`:
    a job queued, one session a job, before an upgrade.)"""
    from .verification import verify_session

    ids = list(session_ids or []) + ([session_id] if session_id is not None else [])
    failed = []
    for session in Session.objects.filter(pk__in=ids).order_by("pk"):  # a deleted one is skipped
        try:
            verify_session(session=session)
        except Exception:
            logger.exception("verifying session %s failed", session.pk)
            failed.append(session.pk)
    if failed:
        raise RuntimeError(f"verifying sessions {failed} failed (see the worker's log)")


def enqueue_redaction(*, job_id: int) -> str:
    return async_task(
        "sessions_app.jobs.run_redaction", job_id=job_id, task_name=f"redact-{job_id}", group="redactions"
    )


def enqueue_redaction_after_commit(*, job_id: int) -> None:
    """Queue a rules run once its RedactionJob row is committed (a worker must find it)."""
    transaction.on_commit(lambda: enqueue_redaction(job_id=job_id))


def run_redaction(*, job_id: int) -> dict:
    """Apply the project's current rules to a stored session (stored_redaction.py), then take
    the old values out of the database files. Running it twice finds nothing left to change."""
    from .stored_redaction import purge_freed, redact_with_rules

    job = RedactionJob.objects.filter(pk=job_id).first()
    if job is None or job.finished:
        return {}
    _mark(job, status=RedactionJob.Status.RUNNING, started_at=timezone.now(), error="")
    try:
        result = redact_with_rules(job=job)
    except Exception as exc:  # reported on the job; the traceback goes to the worker's log
        logger.exception("redaction job %s failed", job_id)
        _mark(job, status=RedactionJob.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000],
              finished_at=timezone.now())  # fmt: skip
        return {"error": job.error}
    done = {"events_redacted": len(result.seqs), "counts": dict(result.counts)}
    if result.seqs:  # verified again: the player's badge then counts the redactions
        enqueue_verify_after_commit(session_ids=[job.session_id])
    try:
        purge = purge_freed().to_dict()
    except Exception as exc:  # the values are out of the rows; the file keeps freed copies until the next purge
        logger.exception("redaction job %s: the database file was not purged", job_id)
        done["error"] = f"The values are removed, but the database file was not purged: {type(exc).__name__}: {exc}"
        purge = None
    _mark(job, status=RedactionJob.Status.DONE, finished_at=timezone.now(), **done)
    return {"events": len(result.seqs), "byLabel": dict(result.counts), "purge": purge}


def enqueue_after_redaction(*, session_id: int) -> None:
    """What follows a redaction once its transaction commits: the database files purged of the
    old values, and the session verified again (the player's badge then counts the redactions)."""
    enqueue_purge_after_commit()
    enqueue_verify_after_commit(session_ids=[session_id])


def enqueue_purge_after_commit() -> None:
    """Queue a purge of the database files once the redaction's transaction commits."""
    transaction.on_commit(lambda: async_task("sessions_app.jobs.run_purge", task_name="purge", group="redactions"))


def run_purge() -> dict:
    """VACUUM (and on SQLite empty the WAL) after a redaction: stored_redaction.purge_freed."""
    from .stored_redaction import purge_freed

    return purge_freed().to_dict()


def discard_partial_sessions(*, job: ImportJob) -> int:
    """Delete the sessions an interrupted attempt of `job` left unfinished (still live)."""
    with transaction.atomic():
        deleted = Session.objects.filter(import_job=job, status=Session.Status.LIVE).delete()
    return deleted[1].get(Session._meta.label, 0)


def new_sessions(outcomes: list) -> list[int]:
    """The sessions an import stored (not the ones it found already stored)."""
    return [o.session.pk for o in outcomes if o.session is not None and not o.duplicate]


def _mark(job: ImportJob | RedactionJob, **fields) -> None:
    type(job).objects.filter(pk=job.pk).update(**fields)
    for name, value in fields.items():
        setattr(job, name, value)


def _fail(job: ImportJob, message: str) -> None:
    _mark(job, status=ImportJob.Status.FAILED, error=message, finished_at=timezone.now())


def run_cleanup(*, days: float | None = None, include_checkpointed: bool = False, dry_run: bool = False) -> dict:
    """Delete each project's expired sessions: its own retention_days, else `days` (default
    REPLAY_RETENTION_DAYS; unset keeps the sessions of projects without their own); then the
    kept originals past their grace period (REPLAY_ORIGINALS_GRACE_DAYS)."""
    if days is None:
        days = settings.RETENTION_DAYS
    result: CleanupResult = delete_expired_sessions(
        days=days, include_checkpointed=include_checkpointed, dry_run=dry_run
    )
    for outcome in result.projects:
        if outcome.sessions and not dry_run:
            logger.info("retention: deleted %s sessions (%s events) of project %s older than %s days",
                        outcome.sessions, outcome.events, outcome.project, outcome.days)  # fmt: skip
    # Then the originals nothing needs any more, those of the sessions just deleted among them
    # once their grace period is over (originals.py).
    originals = delete_expired_originals(dry_run=dry_run)
    if originals.files and not dry_run:
        logger.info("originals: deleted %s files (%s bytes) past their grace period", originals.files, originals.bytes)
    return result.to_dict() | {"originals": originals.to_dict()}


def requeue_stalled_imports() -> dict:
    """The watchdog, every minute: queue again each running import whose worker is gone
    (worker_liveness.is_stalled). The re-run takes the job over (`_claim`) and stores each
    event once. Its own run is the workers' heartbeat that /healthz reports."""
    requeued = []
    given_up = []
    # A folder's job (stored_path "") is run by the command that made it, with nothing kept to
    # run it again from: never taken for a worker's.
    for job in ImportJob.objects.filter(status=ImportJob.Status.RUNNING).exclude(stored_path=""):
        if not is_stalled(job):
            continue
        if job.attempts >= MAX_ATTEMPTS:
            _give_up(job)
            given_up.append(job.pk)
            continue
        logger.warning("import job %s: its worker %s is gone; queued again", job.pk, job.worker or "(unknown)")
        enqueue_import(job_id=job.pk)
        requeued.append(job.pk)
    return {"requeued": requeued, "given_up": given_up}


def run_settle_traces() -> dict:
    """Every minute: write the OpenTelemetry traces that have settled as their sessions' events
    (ingest/traces.py; export requests settle their own project's too), and verify the sessions
    they finished."""
    from .ingest.traces import settle_traces

    result = settle_traces(quiet_seconds=settings.OTLP_SETTLE_SECONDS, orphan_seconds=settings.OTLP_ORPHAN_SECONDS)
    enqueue_verify_after_commit(session_ids=result.finished)
    return {"sessions": len(set(result.sessions)), "events": result.events, "spans": result.spans}


SETTLE_TRACES_SCHEDULE_NAME = "replay-otlp-settle"


def last_watchdog_run() -> datetime | None:
    """When a worker last ran the watchdog (django-q2 keeps the results of successful tasks)."""
    from django_q.models import Success

    return Success.objects.filter(func=WATCHDOG_FUNC).order_by("-stopped").values_list("stopped", flat=True).first()


WATCHDOG_FUNC = "sessions_app.jobs.requeue_stalled_imports"
WATCHDOG_SCHEDULE_NAME = "replay-import-watchdog"


def schedule_jobs() -> list[Schedule]:
    """Create (or repair) the schedules: the daily clean-up, and the watchdog and the settling of
    OpenTelemetry traces each minute; safe to call on every start."""
    cleanup = _schedule(CLEANUP_SCHEDULE_NAME, {"func": "sessions_app.jobs.run_cleanup",
                                                "schedule_type": Schedule.DAILY},
                        first_run=_next_quiet_hour(timezone.now()))  # fmt: skip
    watchdog = _schedule(WATCHDOG_SCHEDULE_NAME, {"func": WATCHDOG_FUNC, "schedule_type": Schedule.MINUTES,
                                                   "minutes": 1}, first_run=timezone.now())  # fmt: skip
    settle = _schedule(SETTLE_TRACES_SCHEDULE_NAME, {"func": "sessions_app.jobs.run_settle_traces",
                                                     "schedule_type": Schedule.MINUTES, "minutes": 1},
                       first_run=timezone.now())  # fmt: skip
    return [cleanup, watchdog, settle]


def _schedule(name: str, values: dict, *, first_run: datetime) -> Schedule:
    defaults = values | {"repeats": -1, "args": None, "kwargs": None}
    schedule = Schedule.objects.filter(name=name).first()
    if schedule is None:
        return Schedule.objects.create(name=name, next_run=first_run, **defaults)
    changed = [field for field, value in defaults.items() if getattr(schedule, field) != value]
    if changed:
        for field in changed:
            setattr(schedule, field, defaults[field])
        schedule.save(update_fields=changed)
    return schedule


def _next_quiet_hour(now: datetime) -> datetime:
    today = datetime.combine(now.date(), time(CLEANUP_HOUR_UTC), tzinfo=now.tzinfo)
    return today if today > now else today + timedelta(days=1)
