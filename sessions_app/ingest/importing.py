"""File -> format detection -> ingest, streaming, with a report of everything that was skipped.

`import_file` is the one import workflow: the management command, the upload job and the demo
set-up all call it. Each session of a file is written in its own transaction (create, append,
finish), so a duplicate can be rolled back whole and a failure never leaves half a session.
"""

from __future__ import annotations

import contextvars
import gzip
import hashlib
import logging
import os
import stat
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import batched
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, connections, transaction
from django.utils import timezone

from .. import audit
from ..canonical import CanonicalEvent, ParsedSession, Problem, Problems
from ..deletion import holding_team_work, note_shortened, tours_through
from ..formats import GZIP_MAGIC, Source, detect, registry
from ..models import (
    ImportJob,
    Project,
    RedactionRules,
    Session,
)
from ..models.locks import lock_rows
from ..originals import jobs_holding, note_orphans
from ..redaction import Redactor
from ..worker_liveness import heartbeat, this_worker
from .bundles import FORMAT_NAME, BundleError, import_bundle, is_bundle
from .quotas import past_the_sessions_quota, sessions_left
from .uploads import display_name, keep_local_file, settle_original
from .writer import (
    append_events,
    bulk_write_cache,
    collector_paused,
    create_session,
    finish_session,
    short_text,
    text_redactor,
)

logger = logging.getLogger(__name__)

# How often (in events) a job's progress row is refreshed while a session streams in.
PROGRESS_EVERY = 5000
# Problems kept in full on a job / outcome; the rest are counted.
PROBLEMS_KEPT = 1000
# What a job's error holds when no format took the file: the job's page (views/imports.py)
# recognises it to list the formats that would have been.
UNRECOGNISED = "not a recognised session format (nothing importable)"


def _unrecognised_note(display_name: str, path: Path) -> str:
    """What more the file's first bytes say of a file no format took (read once):
    - named .gz but not gzip, said since its name promised otherwise; a
      real gzip that holds nothing importable (only blank lines) is not told it is no gzip;
    - UTF-16 text (what Windows PowerShell 5.1's `>` writes): every format reads UTF-8, and
      "not a recognised format" left its owner guessing."""
    try:
        with path.open("rb") as raw:
            head = raw.read(4)
    except OSError:
        return ""
    note = ""
    if display_name.lower().endswith(".gz"):
        note = (
            "; it is gzip-compressed, and what it holds is no session"
            if head[:2] == GZIP_MAGIC
            else "; it is named .gz but is not gzip-compressed"
        )
    if head[:2] == GZIP_MAGIC:
        head = _gzip_head(path)  # the text inside tells its encoding (a gzipped PowerShell file)
    encoding = _wide_encoding(head)
    if encoding:
        note += f"; it is {encoding} text: save it as UTF-8 (PowerShell: Out-File -Encoding utf8)"
    return note


def _gzip_head(path: Path) -> bytes:
    try:
        with gzip.open(path) as text:
            return text.read(4)
    except (OSError, EOFError, zlib.error):
        return b""


def _wide_encoding(head: bytes) -> str:
    """UTF-32 or UTF-16, by a byte-order mark or the zero bytes of ASCII text, else ""."""
    if head in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff") or (
        len(head) == 4 and head[0] and not any(head[1:])
    ) or (len(head) == 4 and not any(head[:3]) and head[3]):  # fmt: skip
        return "UTF-32"
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or (
        len(head) == 4 and ((head[0] and not head[1] and head[2] and not head[3])
                            or (not head[0] and head[1] and not head[2] and head[3]))
    ):  # fmt: skip
        return "UTF-16"
    return ""


@dataclass
class ImportOutcome:
    """One resulting session of a file, or a file that produced none (`error`)."""

    path: Path
    session: Session | None = None
    format: str = ""
    events: int = 0
    steps: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    duplicate: bool = False
    unreadable: bool = False  # the file could not be read at all (the command's exit status)
    # Values the project's redaction rules replaced, by label; None when no rule is on.
    redactions: dict[str, int] | None = None
    # The sessions of the same source this one replaced (an import with `replace`).
    replaced: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        if self.error is not None:
            return {"path": str(self.path), "error": self.error, "problems": self.problems}
        out = {
            "path": str(self.path),
            "session": self.session.pk if self.session is not None else None,
            "format": self.format,
            "events": self.events,
            "steps": self.steps,
            "problems": self.problems,
            "duplicate": self.duplicate,
        }
        if self.redactions is not None:
            out["redactions"] = self.redactions
        if self.replaced:
            out["replaced"] = self.replaced
        return out


class _Duplicate(Exception):
    """Raised inside a session's transaction to roll back a session that is already stored."""

    def __init__(self, existing: Session) -> None:
        self.existing = existing


class _Empty(Exception):
    """Raised inside a session's transaction to roll back a session without events."""


class _OverQuota(Exception):
    """Raised inside a session's transaction to roll back a session one more than the project's
    sessions quota allows (a replacing import's that superseded nothing)."""


def import_file(
    *,
    path: Path,
    project: Project,
    format: str | None = None,
    replace: bool = False,
    job: ImportJob | None = None,
    created_by: str = "",
) -> list[ImportOutcome]:
    """Import every session a file (or folder) holds; never raises on bad input.

    Detection is by content unless `format` names one. Importing the same content again returns
    the stored session (`duplicate=True`); `replace=True` deletes the stored one(s) of the same
    source id and imports afresh. A plain folder imports each file in it.
    """
    path = Path(path)
    display_name = job.original_name if job is not None and job.original_name else path.name
    progress = _JobProgress(job)
    progress.start(path, created_by)
    # One per file, so its counts are the file's (compiled once: redaction.Redactor.from_rules);
    # however the import ends, the kept file is then settled under the rules (settle_original).
    progress.redactor = RedactionRules.redactor_for(project.pk)

    unreadable = _unreadable(path)
    if unreadable:
        outcome = ImportOutcome(path=path, error=f"{display_name}: {unreadable}", unreadable=True)
        progress.finish([outcome], Problems(), "")
        return [outcome]

    if is_bundle(path):
        # The kept original the bundle carries is the uploader's too (a job's import names none).
        uploader = created_by or (job.created_by if job is not None else "")
        outcome = _import_bundle(path, project, uploader, display_name, progress.redactor)
        progress.finish([outcome], Problems(), FORMAT_NAME)
        return [outcome]
    if _starts_as_zip(path):
        # A zip's stored members would otherwise be read as lines of text, its first and last
        # records cut by the archive's own bytes; so would a bundle cut off before its end.
        why = NOT_A_BUNDLE if zipfile.is_zipfile(path) else CUT_ZIP
        outcome = ImportOutcome(path=path, error=f"{display_name}: {why}")
        progress.finish([outcome], Problems(), "")
        return [outcome]
    if _gzip_of_a_zip(path):
        outcome = ImportOutcome(path=path, error=f"{display_name}: {GZIPPED_ZIP}")
        progress.finish([outcome], Problems(), "")
        return [outcome]
    if format == FORMAT_NAME:
        outcome = ImportOutcome(path=path, error=f"{display_name}: {CHOSEN_NOT_A_BUNDLE}")
        progress.finish([outcome], Problems(), "")
        return [outcome]

    source = Source(
        path=path, display_name=display_name, on_bytes=progress.bytes_read, max_record_bytes=settings.MAX_RECORD_BYTES
    )
    try:
        fmt = _choose_format(source, format)
    except _FormatError as exc:
        outcome = ImportOutcome(path=path, error=f"{display_name}: {exc}", unreadable=exc.unreadable)
        progress.finish([outcome], Problems(), "")
        return [outcome]
    if fmt is None:
        if path.is_dir():
            return _import_folder(path, project, format, replace, created_by)
        outcome = ImportOutcome(
            path=path, error=f"{display_name}: {UNRECOGNISED}{_unrecognised_note(display_name, path)}"
        )
        progress.finish([outcome], Problems(), "")
        return [outcome]

    progress.detected(fmt)
    redactor = progress.redactor
    problems = Problems(limit=PROBLEMS_KEPT)
    outcomes: list[ImportOutcome] = []
    created: set[int] = set()
    sessions = None
    with collector_paused():  # (until the file is done)
        try:
            sessions = registry()[fmt].parse(source, problems)
            problems_before = 0  # those of the sessions before: not this one's to answer for
            for parsed in sessions:
                outcome = _import_session(
                    parsed,
                    path,
                    project,
                    fmt,
                    replace,
                    job,
                    created,
                    progress,
                    problems,
                    redactor,
                    replacer=created_by or (job.created_by if job is not None else "") or "import",
                    problems_before=problems_before,
                )
                problems_before = problems.count
                if outcome is not None:
                    outcomes.append(outcome)
        except (OSError, EOFError, zlib.error) as exc:  # the stream broke (a cut or corrupt .gz, a vanished file)
            problems.add(None, "file", f"could not read further: {exc}")
        except Exception as exc:  # a bug must not become a traceback for the user; log it for us
            logger.exception("import of %s failed", path)
            problems.add(None, "file", f"import stopped: {type(exc).__name__}: {exc}")
        finally:
            # However the loop ended, the format's reader closes its file now, not whenever its
            # generator happens to be collected.
            if sessions is not None and hasattr(sessions, "close"):
                sessions.close()

    if redactor is not None:
        # A problem's message quotes the line it is about.
        for index, problem in enumerate(problems.items):
            problems.items[index] = Problem(problem.line, problem.field, redactor.text(problem.message))
    kept = problems.to_list()
    for outcome in outcomes:
        outcome.problems = kept
    if not outcomes:
        error = _nothing_importable(display_name, fmt, problems)
        outcomes = [ImportOutcome(path=path, format=fmt, error=error, problems=kept)]
    progress.finish(outcomes, problems, fmt)
    return outcomes


def _import_session(
    parsed: ParsedSession,
    path: Path,
    project: Project,
    fmt: str,
    replace: bool,
    job: ImportJob | None,
    created: set[int],
    progress: _JobProgress,
    problems: Problems,
    redactor: Redactor | None,
    replacer: str,
    problems_before: int,
) -> ImportOutcome | None:
    """Store one session of a file (`replacer`: who the sessions a `replace` supersedes are
    deleted by, in the audit log)."""
    digest = hashlib.sha256()
    events = _fingerprinted(parsed.events, digest)
    at_quota = sessions_left(project) == 0
    if at_quota and not replace:
        # The upload was admitted with room for a session; a file holding more than the quota
        # leaves allows stops adding them here. Each is read through (so the next is found) and
        # fingerprinted: one stored before is found as at any time, not refused as one more.
        for _ in events:
            pass
        stored = _stored_before(parsed, project, fmt, digest.hexdigest(), redactor)
        if stored is not None:
            return _duplicate_outcome(path, fmt, stored)
        _over_quota(parsed, project, problems)
        return None
    counted = redactor.counts.copy() if redactor is not None else None
    try:
        with bulk_write_cache(), transaction.atomic():
            session = create_session(
                project=project, source_format=fmt, meta=parsed.meta, import_job=job, redactor=redactor
            )
            result = append_events(
                session=session, events=events, on_progress=progress.events_written,
                keep_raw=job is None or not path.is_file(), redactor=redactor,
            )  # fmt: skip
            if result.event_count == 0:
                raise _Empty
            session.source_digest = digest.hexdigest()
            session.save(update_fields=["source_digest"])
            finish_session(session=session, meta=parsed.meta, redactor=redactor)
            _one_at_a_time(project, fmt, session)
            same_source = Session.objects.filter(
                project=project, source_format=fmt, source_session_id=session.source_session_id
            ).exclude(pk=session.pk)
            # The same content stored before is this one; so is a session this very file already
            # gave (a run appended to its log twice): one import never lists a session twice.
            # Replacing, only what this file gave counts, the rest being about to go. (`created`
            # is looked up here, not sent as `pk__in`: a file may give more sessions than a
            # statement binds values, 32,766 on SQLite.)
            same = same_source.filter(source_digest=session.source_digest).order_by("pk")
            existing = next((s for s in same if not replace or s.pk in created), None)
            if existing is not None:
                raise _Duplicate(existing)
            # Counted again, now that no other writer can take a place meanwhile: the count above
            # was taken before this session's transaction, without the lock.
            at_quota = past_the_sessions_quota(project)
            if at_quota and not replace:
                raise _OverQuota
            if replace:
                superseded = [pk for pk in same_source.values_list("pk", flat=True) if pk not in created]
                damaged = problems.count - problems_before  # (read since the session before ended)
                # A damaged session (lines skipped or repaired) never deletes what is stored, with
                # its comments and sign-offs: it is kept beside them. Nor does a replacement delete
                # what people wrote on a session: replacing supersedes what was read, and the team's
                # work stays, asked first on its delete page.
                if damaged:
                    kept_whole, held, taken = superseded, [], []
                else:
                    # Held first: a comment (a stop, a link) on one of them is then seen below,
                    # or waits and finds it gone (a 404); it was deleted with it, unsaid (RACES).
                    _hold(superseded)
                    kept_whole, held = [], holding_team_work(same_source, superseded, project_id=project.pk)
                    kept_ids = set(held)
                    taken = [pk for pk in superseded if pk not in kept_ids]
                if at_quota and not taken:
                    # Stored beside the sessions it was to replace: one more than the quota allows.
                    raise _OverQuota
                if kept_whole:
                    kept = ", ".join(map(str, kept_whole[:20])) + (" ..." if len(kept_whole) > 20 else "")
                    problems.add(None, "replace", f"not replaced: its part of the file has {damaged} problem(s), "
                                 f"so session(s) {kept} of the same source are kept and this one is stored beside "
                                 "them; mend the file and import it again to replace them")  # fmt: skip
                if held:
                    kept = ", ".join(map(str, held[:20])) + (" ..." if len(held) > 20 else "")
                    problems.add(None, "replace", f"not replaced: session(s) {kept} of the same source hold "
                                 "comments, sign-offs, tour stops, share links, checkpoints set by people or values "
                                 "redacted since, or came from a bundle, so they "
                                 "are kept and this one is stored beside them; delete them on their own page "
                                 "if they are to go")  # fmt: skip
                replaced = _replace(taken, by=session, actor=replacer)
    except _OverQuota:
        _over_quota(parsed, project, problems)
        return None
    except _Empty:
        for _ in events:  # finish reading the session so the next one starts at its line
            pass
        return None
    except _Duplicate as dup:
        return _duplicate_outcome(path, fmt, dup.existing)
    created.add(session.pk)
    progress.session_done(session.event_count)
    return ImportOutcome(
        path=path, session=session, format=fmt, events=session.event_count,
        steps=session.step_count, redactions=None if redactor is None else dict(redactor.counts - counted),
        replaced=replaced if replace else [],
    )  # fmt: skip


def _duplicate_outcome(path: Path, fmt: str, existing: Session) -> ImportOutcome:
    return ImportOutcome(
        path=path, session=existing, format=fmt, events=existing.event_count, steps=existing.step_count,
        duplicate=True,
    )  # fmt: skip


def _stored_before(
    parsed: ParsedSession, project: Project, fmt: str, digest: str, redactor: Redactor | None
) -> Session | None:
    """The session of the project this one, read through, is (the same source session with the
    same fingerprint), as the duplicate check in `_import_session` finds it once it is stored:
    its source id as create_session stores it."""
    name = short_text(text_redactor(redactor), parsed.meta.source_session_id)
    return (
        Session.objects.filter(project=project, source_format=fmt, source_session_id=name, source_digest=digest)
        .order_by("pk")
        .first()
    )


def _over_quota(parsed: ParsedSession, project: Project, problems: Problems) -> None:
    name = parsed.meta.source_session_id or "a session"
    problems.add(None, "session", f"{name} not imported: project {project.slug}'s sessions quota is reached")


def _import_bundle(
    path: Path, project: Project, created_by: str, display_name: str, redactor: Redactor | None
) -> ImportOutcome:
    """An evidence bundle from another Replay (ingest/bundles.py): all or nothing."""
    try:
        session, _bundle, duplicate = import_bundle(path=path, project=project, created_by=created_by,
                                                    redactor=redactor, name=display_name)  # fmt: skip
    except BundleError as exc:
        return ImportOutcome(path=path, format=FORMAT_NAME, error=f"{display_name}: {exc}")
    return ImportOutcome(path=path, session=session, format=FORMAT_NAME, events=session.event_count,
                         steps=session.step_count, duplicate=duplicate,
                         redactions=None if redactor is None else dict(redactor.counts))  # fmt: skip


def _one_at_a_time(project: Project, fmt: str, session: Session) -> None:
    """On PostgreSQL, two imports of one source session at once (two workers, the same file sent
    twice, two replacements) would each miss the other's uncommitted session in the duplicate
    check (or the replacement) below, and both be stored: the second waits here until the
    first's transaction ends, and then finds it. SQLite lets one writer at a time anyway."""
    if connection.vendor != "postgresql":
        return
    key = f"{project.pk}|{fmt}|{session.source_session_id}".encode()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(hashlib.sha256(key).digest()[:8], "big", signed=True)]
        )


def _hold(session_ids: list[int]) -> None:
    """Lock these sessions' rows to the end of the import's transaction (access.hold's lock, a
    chunk a statement: a file may supersede more sessions than a statement binds values)."""
    for part in batched(sorted(session_ids), min(2000, (connection.features.max_query_params or 2000) // 2)):
        lock_rows(Session.objects.filter(pk__in=part))


def _replace(session_ids: list[int], *, by: Session, actor: str) -> list[int]:
    """Delete the sessions a `replace` import supersedes, a chunk a statement, and return their
    ids. Events, snapshots, checkpoints, comments, sign-offs and tour stops go too, through the
    database's own cascade; the originals of their uploads after the grace period (originals.py).
    Each goes into the project's log as a `session.delete` naming the session that replaced it,
    and each tour that stopped on one says so, as deletion.delete_session does for a session
    deleted by hand: inside the import's transaction, so a failed import deletes nothing."""
    for part in batched(session_ids, min(2000, (connection.features.max_query_params or 2000) // 2)):
        replaced = Session.objects.filter(pk__in=part)
        gone = list(replaced.values_list("pk", "event_count", "source_session_id"))
        jobs = jobs_holding(replaced)
        shortened = tours_through(replaced)
        replaced.delete()
        note_orphans(job_ids=jobs)
        audit.record_many(action="session.delete", actor=actor, project=by.project_id, entries=[
            (f"session:{pk}", {"events": events, "source_session_id": name, "replaced_by": f"session:{by.pk}"})
            for pk, events, name in gone
        ])  # fmt: skip
        note_shortened(shortened, actor=actor, replaced_by=f"session:{by.pk}")
    return session_ids


def _fingerprinted(events: Iterable[CanonicalEvent], digest: Any) -> Iterator[CanonicalEvent]:
    """The events, each one's source record added to `digest` as it passes."""
    update = digest.update
    for event in events:
        update(event.raw.encode("utf-8", "surrogatepass"))
        update(b"\n")
        yield event


def import_local_file(
    *, path: Path, project: Project, format: str = "", replace: bool = False, created_by: str = ""
) -> list[ImportOutcome]:
    """Import a file or folder given on this machine (the command line, the demo), keeping a copy
    of a file as an upload is kept, so its original stays exportable byte for byte."""
    path = Path(path)
    if path.is_dir() and not _unreadable(path):
        return _import_local_folder(path=path, project=project, format=format, replace=replace, created_by=created_by)
    # A missing or unreadable file or folder, a device: import_file says why, as for any source.
    # A pipe (`<(zcat run.jsonl.gz)`, `... | import_sessions /dev/stdin`) can be read only once:
    # it is not read to check it, but kept first and then imported from the copy.
    readable = os.access(path, os.R_OK) if _is_pipe(path) else path.is_file() and not _unreadable(path)
    if not readable:
        return import_file(path=path, project=project, format=format or None, replace=replace, created_by=created_by)
    job = keep_local_file(path=path, project=project, format=format, created_by=created_by, replace=replace)
    # This process runs the job as a worker would, and says so: a job with no worker is one the
    # watchdog takes for stalled, and queued a second run of a long import while it went on.
    job.worker, job.attempts = this_worker(), 1
    job.save(update_fields=["worker", "attempts"])
    try:
        with heartbeat(job_id=job.pk, attempt=job.attempts):
            outcomes = import_file(
                path=Path(job.stored_path), project=project, format=format or None, replace=replace, job=job,
                created_by=created_by,
            )  # fmt: skip
    except KeyboardInterrupt:
        _fail_interrupted(job)
        raise
    for outcome in outcomes:
        outcome.path = path  # reported as the caller named it, not as kept
    if not any(o.session is not None and not o.duplicate for o in outcomes):
        # Nothing new was stored (the same file again, as at every `make run`, or nothing
        # importable; the command printed why): no copy and no job to keep for it.
        Path(job.stored_path).unlink(missing_ok=True)
        job.delete()
    return outcomes


def _fail_interrupted(job: ImportJob) -> None:
    """The job of an import its operator stopped (Ctrl-C; the command turns SIGTERM and SIGHUP
    into it): failed, saying so. Left running, the watchdog took it for a dead worker's and had
    a worker finish the import that was cancelled. (The session being written rolled back.)"""
    ImportJob.objects.filter(pk=job.pk, status__in=(ImportJob.Status.QUEUED, ImportJob.Status.RUNNING)).update(
        status=ImportJob.Status.FAILED, finished_at=timezone.now(),
        error="Interrupted: the command importing it was stopped; sessions it had finished are kept.",
    )  # fmt: skip


def _import_local_folder(
    *, path: Path, project: Project, format: str, replace: bool, created_by: str
) -> list[ImportOutcome]:
    """A folder given on this machine. One that is a recording (rlm-code's SessionStore or
    LocalJSONLSink folder) is imported under a job of its own that names it, "name/", so its
    sessions say where they came from and it is listed with the other imports; no copy of its
    files is kept: its events keep their records, which its original export gives. A plain
    folder imports each file in it as a file given on its own (_import_folder), each kept
    with its job, so the job made here goes again."""
    job = ImportJob.objects.create(project=project, original_name=f"{display_name(path.resolve().name)}/", stored_path="",
                                   requested_format=format, replace=replace, created_by=created_by[:150])  # fmt: skip
    try:
        outcomes = import_file(path=path, project=project, format=format or None, replace=replace, job=job,
                               created_by=created_by)  # fmt: skip
    except KeyboardInterrupt:
        _fail_interrupted(job)  # (never taken up by the watchdog: it has no kept file to run)
        raise
    if not Session.objects.filter(import_job=job).exists():
        job.delete()  # a plain folder (its files have their own jobs), or nothing new stored
    return outcomes


class _FormatError(Exception):
    def __init__(self, message: str, *, unreadable: bool = False) -> None:
        super().__init__(message)
        self.unreadable = unreadable


def _choose_format(source: Source, requested: str | None) -> str | None:
    formats = registry()
    if requested:
        if requested not in formats:
            known = ", ".join(sorted(formats))
            raise _FormatError(f"unknown format {requested!r} (known: {known})")
        return requested
    try:
        return detect(source)
    except (OSError, EOFError, zlib.error) as exc:
        raise _FormatError(f"cannot read: {exc}", unreadable=True) from exc


def _is_pipe(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(path.stat().st_mode)
    except OSError:
        return False


CHOSEN_NOT_A_BUNDLE = (
    "format replay_bundle was chosen, but the file is not a Replay evidence bundle (a zip "
    "archive holding a manifest.json); choose its format, or let Replay detect it"
)
NOT_A_BUNDLE = (
    "a zip archive that is not a Replay evidence bundle (it has no manifest.json); "
    "upload the session files it holds, or a .gz of one"
)


CUT_ZIP = (
    "a zip archive cut off or damaged: its directory, which ends the file, is missing; "
    "send the whole file again (`unzip -t` checks it)"
)


# A zip's first bytes: a member's header, or an empty archive's end record.
_ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")

GZIPPED_ZIP = "a zip archive inside gzip: gunzip it first (an evidence bundle is imported as its .zip)"


def _gzip_of_a_zip(path: Path) -> bool:
    """A gzip whose content starts as a zip does (its members would be read as lines of text)."""
    if not path.is_file():
        return False
    try:
        with path.open("rb") as raw:
            if raw.read(2) != GZIP_MAGIC:
                return False
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw) as stream:
                return stream.read(4) in _ZIP_STARTS
    except (OSError, EOFError, zlib.error):
        return False  # a damaged gzip: the import reports what it can read


def _starts_as_zip(path: Path) -> bool:
    """A zip's own first bytes (a member, or an empty archive's end record): is_zipfile alone
    looks only for an end record in the last 64 KiB, which a gzip's compressed bytes may hold
    by chance."""
    if not path.is_file():
        return False
    with path.open("rb") as stream:
        return stream.read(4) in _ZIP_STARTS


def _unreadable(path: Path) -> str:
    """Why a path cannot be read at all, or "" when it can."""
    try:
        if path.is_dir():
            path.iterdir()
            return ""
        with path.open("rb") as stream:
            stream.read(1)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return ""


def _import_folder(
    path: Path, project: Project, format: str | None, replace: bool, created_by: str
) -> list[ImportOutcome]:
    outcomes: list[ImportOutcome] = []
    here = path.resolve()
    opened = _FOLDERS_OPEN.get()
    reset = _FOLDERS_OPEN.set(opened | {here})
    try:
        for child in sorted(path.iterdir()):
            if not child.name.startswith("."):
                outcomes.extend(_import_child(child, here, project, format, replace, created_by))
    finally:
        _FOLDERS_OPEN.reset(reset)
    if not outcomes:
        outcomes.append(ImportOutcome(path=path, error=f"{path.name}: empty folder (nothing importable)"))
    return outcomes


# The folders a folder import is reading, one inside the other: a link back to one of them is a loop.
_FOLDERS_OPEN: contextvars.ContextVar[frozenset[Path]] = contextvars.ContextVar("folders_open", default=frozenset())


def _import_child(
    child: Path, here: Path, project: Project, format: str | None, replace: bool,
    created_by: str,
) -> list[ImportOutcome]:  # fmt: skip
    name = display_name(child.name)
    if child.is_symlink() and not child.exists():
        return [ImportOutcome(path=child, error=f"{name}: a broken link (or a link to itself): skipped")]
    if child.is_dir() and (child.resolve() in _FOLDERS_OPEN.get() or here.is_relative_to(child.resolve())):
        # A link to a folder being read, or above it (two folders linking to each other too):
        # followed, it was read 40 levels deep, each file "already imported" 40 times.
        return [ImportOutcome(path=child, error=f"{name}: a link back to a folder being read: skipped")]
    if not child.is_dir() and not child.is_file():
        # A pipe, socket or device found in a folder: reading a pipe no one writes to hung the
        # command for ever (one named on its own is read, as `<(zcat run.gz)` needs).
        return [ImportOutcome(path=child, error=f"{name}: not a regular file (a pipe, socket or device): skipped")]
    return import_local_file(path=child, project=project, format=format or "", replace=replace, created_by=created_by)


def _nothing_importable(name: str, fmt: str, problems: Problems) -> str:
    message = f"{name}: nothing importable as {fmt}"
    if problems.count:
        first = problems.in_line_order()[0]
        where = f"line {first.line}" if first.line is not None else "file"
        # A field that only repeats the place ("line 1, line: …") is not named twice.
        if first.field and first.field not in ("line", "file"):
            where += f", field {first.field}"
        message += f" ({problems.count} problem(s); first: {where}: {first.message})"
    return message


class _JobProgress:
    """Keeps an ImportJob row current while a file streams in.

    The sessions are written inside their own transaction, so a plain UPDATE of the job row
    would stay invisible to the page polling it until the session commits. On PostgreSQL the
    progress therefore goes through a second, autocommit connection (with a short lock timeout:
    progress must never stall the import). SQLite allows one writer at a time, so there the row
    is updated on the import's own connection and shows at each commit.
    """

    def __init__(self, job: ImportJob | None) -> None:
        self.job = job
        self.bytes_done = 0
        self.events_done = 0
        self.last_reported = 0
        self._side = None
        self._unwritten: dict[str, Any] = {}
        self.redactor: Redactor | None = None  # the file's, once its format is known

    def start(self, path: Path, created_by: str) -> None:
        if self.job is None:
            return
        job = self.job
        job.status = ImportJob.Status.RUNNING
        job.started_at = timezone.now()
        job.created_by = job.created_by or created_by[:150]
        try:
            job.bytes_total = path.stat().st_size if path.is_file() else 0
        except OSError:
            job.bytes_total = 0
        job.save(update_fields=["status", "started_at", "bytes_total", "created_by"])

    def detected(self, fmt: str) -> None:
        if self.job is not None:
            self.job.detected_format = fmt
            self.job.save(update_fields=["detected_format"])

    def bytes_read(self, count: int) -> None:
        self.bytes_done = count

    def events_written(self, stored_in_session: int) -> None:
        # append_events calls this after each flushed batch with the session's stored count.
        total = self.events_done + stored_in_session
        if self.job is None or total - self.last_reported < PROGRESS_EVERY:
            return
        self.last_reported = total
        self._write(bytes_done=self.bytes_done, events_done=total)

    def session_done(self, events: int) -> None:
        self.events_done += events
        self.last_reported = self.events_done
        if self.job is not None and self._unwritten:
            values, self._unwritten = self._unwritten, {}
            ImportJob.objects.filter(pk=self.job.pk).update(**values)

    def _write(self, **values: Any) -> None:
        job = self.job
        for name, value in values.items():
            setattr(job, name, value)
        if connection.vendor == "postgresql" and connection.in_atomic_block:
            try:
                side = self._side_connection()
                with side.cursor() as cursor:
                    cursor.execute("SET lock_timeout = '500ms'")
                    sets = ", ".join(f"{name} = %s" for name in values)
                    cursor.execute(
                        f"UPDATE {ImportJob._meta.db_table} SET {sets} WHERE id = %s",
                        [*values.values(), job.pk],
                    )
            except Exception:  # progress is best effort; the final row is written below
                logger.warning("could not update progress of import job %s", job.pk, exc_info=True)
            return
        if connection.in_atomic_block:
            # SQLite: no other connection would see it before the session commits.
            self._unwritten.update(values)
            return
        ImportJob.objects.filter(pk=job.pk).update(**values)

    def _side_connection(self):
        if self._side is None:
            self._side = connections.create_connection("default")
            self._side.set_autocommit(True)
        return self._side

    def finish(self, outcomes: list[ImportOutcome], problems: Problems, fmt: str) -> None:
        if self._side is not None:
            self._side.close()
            self._side = None
        job = self.job
        if job is None:
            return
        if self.redactor is not None and job.stored_path:  # a folder's job keeps no copy
            path = Path(job.stored_path)
            # A bundle's zip is not redacted line by line: the original its session carries is
            # kept (or not) by the bundle's import, under the same rules.
            too_long = settle_original(path=path, redactor=self.redactor, line_by_line=not is_bundle(path))
            if too_long is not None:
                problems.add(too_long.number, "original", f"{too_long}: the kept original was deleted")
        stored = [o for o in outcomes if o.error is None]
        job.detected_format = fmt or job.detected_format
        job.problems = problems.to_list()
        job.problem_count = problems.count
        # The problems are the job's own (above), not copied into each outcome: the imports page
        # reads every job's result, and a file's problems would be there once a session.
        job.result = [{k: v for k, v in o.to_dict().items() if k != "problems"} for o in outcomes]
        job.sessions_done = len(stored)
        job.events_done = sum(o.events for o in stored if not o.duplicate)
        job.bytes_done = job.bytes_total or self.bytes_done
        job.error = "\n".join(o.error for o in outcomes if o.error)
        if self.redactor is not None:
            job.error = self.redactor.text(job.error)
        job.status = ImportJob.Status.DONE if stored else ImportJob.Status.FAILED
        job.finished_at = timezone.now()
        job.save()
