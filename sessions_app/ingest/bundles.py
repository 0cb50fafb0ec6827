"""Importing an evidence bundle (sessions_app/bundles.py writes them) into this Replay.

The bundle is checked first, whole (signature, every file's SHA-256, the event chain:
bundle_reader.read_bundle); nothing is stored from a bundle that fails. Its events then go
through the one writer as stored rows with their salts (writer.append_stored_events), so the
session's chain comes out link for link as the exporting server had it and its head is the
manifest's. Comments (with their edit history) and sign-offs come back as they were, their
authors by name; the session says which key signed the bundle it came from.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db import DatabaseError, OperationalError, connection, transaction

from ..bundle_reader import Bundle, BundleError, read_bundle
from ..canonical import SessionMeta
from ..comments import MAX_BODY
from ..formats import BUNDLE_FORMAT
from ..formats.fields import in_utc_range
from ..models import Comment, CommentRevision, ImportJob, Project, RedactionRules, Review, Session
from ..redaction import Redactor
from .quotas import QuotaExceeded, check_bytes, check_new_session
from .uploads import keep_stream, max_upload_bytes, settle_original
from .writer import append_stored_events, create_session, text_redactor

__all__ = ["BundleError", "import_bundle", "is_bundle"]

FORMAT_NAME = BUNDLE_FORMAT


def is_bundle(path: Path) -> bool:
    """Whether the file is a zip holding a bundle's manifest (checked before any format)."""
    if not path.is_file() or not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            return "manifest.json" in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def import_bundle(
    *,
    path: Path,
    project: Project,
    key: str | None = None,
    created_by: str = "",
    redactor: Redactor | None = None,
    name: str = "",
) -> tuple[Session, Bundle, bool]:
    """Check the bundle and restore its session, comments and sign-offs in `project`: the
    session, the bundle, and whether it was there already (the same chain head in the project).
    A BundleError (nothing stored) names what did not match.

    The project's redaction rules (`redactor`, else the project's own) apply to everything
    restored; a redacted event keeps its commitment in place of the value, so the chain still
    comes out as the bundle's (chain.redact_field)."""
    bundle = read_bundle(path, key=key, max_bytes=max_upload_bytes())
    summary = _session_fields(bundle)
    if redactor is None:
        redactor = RedactionRules.redactor_for(project.pk)
    head = bundle.chain["head"]
    existing = Session.objects.filter(project=project, source_digest=head).order_by("pk").first()
    if existing is not None:
        return existing, bundle, True
    _check_quotas(bundle, project)
    kept: ImportJob | None = None
    try:
        with transaction.atomic():
            kept = _keep_original(bundle, summary["format"], project, created_by, redactor)
            session = _restore(bundle, summary, project, kept, redactor, created_by)
            if kept is not None:
                _record_restored(kept, session, name or path.name)
    except BundleError:
        _forget(kept)
        raise
    except OperationalError:
        # The database, not the bundle: busy, or out of reach. Said as what it is (a 503 to the
        # API, the job's own error), never blamed on the bundle.
        _forget(kept)
        raise
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError, DatabaseError) as exc:
        # comments.json / reviews.json of the wrong shape: signed by whoever made the bundle,
        # so input like any other; nothing is stored.
        _forget(kept)
        raise BundleError(f"the bundle's comments or sign-offs are not as Replay writes them ({exc})") from None
    except BaseException:
        # Anything else (a bug, the worker stopped): the kept copy goes with the rolled-back row,
        # or it would stay on disk with no job to count, redact or delete it.
        _forget(kept)
        raise
    session.refresh_from_db()
    return session, bundle, False


def _check_quotas(bundle: Bundle, project: Project) -> None:
    """The project's quotas, as for any import: room for one more session, and for the events at
    their size in the bundle (more than the records they count for once stored: an upper bound,
    known before anything is written) with its original. The upload was admitted at the zip's
    size, which may be a thousandth of that."""
    with zipfile.ZipFile(bundle.path) as archive:
        # With the original it carries, kept as an upload is (a 50 MB original had been kept in
        # a project of 1 MB).
        size = sum(
            i.file_size
            for i in archive.infolist()
            if i.filename == "events.jsonl" or i.filename.startswith("original/")
        )
    try:
        check_new_session(project=project, what="The bundle's session")
        check_bytes(project=project, size=size, what="bundle's events and original")
    except QuotaExceeded as refused:
        raise BundleError(refused.message) from None


def _restore(
    bundle: Bundle,
    summary: dict[str, Any],
    project: Project,
    kept: ImportJob | None,
    redactor: Redactor | None,
    created_by: str,
) -> Session:
    head = bundle.chain["head"]
    session = create_session(project=project, source_format=summary["format"] or FORMAT_NAME,
                             meta=_meta(summary), import_job=kept, redactor=redactor)  # fmt: skip
    append_stored_events(session=session, events=_stored(bundle), redactor=redactor,
                         redacted_by=created_by or "bundle import")  # fmt: skip
    session.refresh_from_db()
    if session.head_hash != head:
        # read_bundle checked every link, so only a writer change could get here.
        raise BundleError(f"events.jsonl: the chain rebuilt to {session.head_hash}, not the manifest's head")
    text = text_redactor(redactor)
    _finish(session, summary, bundle, text)
    by = created_by or "bundle import"
    _restore_comments(session, bundle, text, by)
    _restore_reviews(session, bundle, text, by)
    return session


def _forget(kept: ImportJob | None) -> None:
    """The copy of the original an import that failed had already kept (its row rolled back)."""
    if kept is not None:
        Path(kept.stored_path).unlink(missing_ok=True)


def _keep_original(
    bundle: Bundle, source_format: str, project: Project, created_by: str, redactor: Redactor | None
) -> ImportJob | None:
    """The upload the bundle carries, kept as uploads are, so the imported session's original
    exports byte for byte as it did where it came from; under redaction rules, kept redacted
    or not at all, as the project's rules say."""
    name = bundle.original_name
    if name is None or (redactor is not None and not redactor.keep_originals):
        return None
    with bundle.open_original() as stream:
        job = keep_stream(stream=stream, name=name, project=project, format=source_format, created_by=created_by)
    try:
        ImportJob.objects.filter(pk=job.pk).update(status=ImportJob.Status.DONE, detected_format=FORMAT_NAME,
                                                    finished_at=datetime.now(UTC))  # fmt: skip
    except BaseException:
        _forget(job)  # the caller never gets the job to forget: its row goes with the transaction
        raise
    if redactor is not None:
        too_long = settle_original(path=Path(job.stored_path), redactor=redactor)
        if too_long is not None:  # deleted rather than kept unredacted: its job says why
            problem = {
                "line": too_long.number,
                "field": "original",
                "message": f"{too_long}: the kept original was deleted",
            }
            ImportJob.objects.filter(pk=job.pk).update(problems=[problem], problem_count=1)
    return job


def _record_restored(kept: ImportJob, session: Session, bundle_name: str) -> None:
    """The kept original's job names the session restored from the bundle and the bundle that
    carried it (`carried_by`): listed among the imports, it reads as what it is, the original
    inside that upload, not as an import that stored nothing nor as a second one."""
    ImportJob.objects.filter(pk=kept.pk).update(
        sessions_done=1, events_done=0,
        result=[{"path": kept.original_name, "session": session.pk, "format": FORMAT_NAME,
                 "events": session.event_count, "steps": session.step_count, "duplicate": False,
                 "carried_by": bundle_name[:500]}],
    )  # fmt: skip


# manifest.json's `session` as Replay writes it (bundles.session_summary): each text field and
# the column it is stored in, whose max_length bounds it (None: any length).
_SESSION_TEXTS = {
    "format": (Session, "source_format"), "source_session_id": (Session, "source_session_id"),
    "run_id": (Session, "run_id"), "agent_id": (Session, "agent_id"), "environment": (Session, "environment"),
    "model": (Session, "model"), "project": (Project, "name"), "task": (Session, "task"),
    "final_answer": (Session, "final_answer"),
}  # fmt: skip


def _session_fields(bundle: Bundle) -> dict[str, Any]:
    """manifest.json's `session` and who exported it, each field checked: one of the wrong type,
    longer than its column or out of range is refused by name, as a comment's field is (read
    with str() a list became its Python text; an unknown status, "completed"; a long format or
    a time without a UTC instant failed the write, blamed on the comments)."""
    where = "manifest.json: session"
    summary = bundle.session
    fields: dict[str, Any] = {}
    for name, (model, column) in _SESSION_TEXTS.items():
        most = model._meta.get_field(column).max_length
        value = fields[name] = _text(summary, name, where)
        if most is not None and len(value) > most:
            raise BundleError(f"{where}: field {name}: {len(value):,} characters, at most {most}")
    status = fields["status"] = _text(summary, "status", where) or Session.Status.COMPLETED
    if status not in Session.Status.values:
        known = ", ".join(Session.Status.values)
        raise BundleError(f"{where}: field status: not one of {known}, got {_shown(status)}")
    fields["completed"] = _flag(summary, "completed", where)
    fields["started_at"] = _time(summary, "started_at", where)
    fields["ended_at"] = _time(summary, "ended_at", where)
    identity = summary.get("id")
    if identity is not None and type(identity) is not int:
        raise BundleError(f"{where}: field id: not a whole number, got {_shown(identity)}")
    fields["id"] = identity
    fields["exported_by"] = _text(bundle.manifest, "exported_by", "manifest.json")[:200]
    exported_at = _time(bundle.manifest, "exported_at", "manifest.json")
    fields["exported_at"] = bundle.manifest["exported_at"] if exported_at is not None else None  # as written
    return fields


def _meta(summary: dict[str, Any]) -> SessionMeta:
    return SessionMeta(
        source_session_id=summary["source_session_id"], run_id=summary["run_id"], agent_id=summary["agent_id"],
        task=summary["task"], environment=summary["environment"], model=summary["model"],
        started_at=summary["started_at"],
    )  # fmt: skip


def _origin(summary: dict[str, Any], bundle: Bundle) -> dict[str, Any]:
    """Session.bundle_origin: which key signed the bundle and what it said of itself. A column
    of its own, never the session's metadata, which sources and clients write."""
    return {
        "fingerprint": bundle.fingerprint, "public_key": bundle.public_key, "pinned": bundle.pinned,
        "exported_at": summary["exported_at"], "exported_by": summary["exported_by"],
        "session": summary["id"], "project": summary["project"], "head": bundle.chain["head"],
    }  # fmt: skip


def _stored(bundle: Bundle) -> Iterator[dict[str, Any]]:
    """events.jsonl's lines as the writer's stored values: the timestamp in the database's own
    form (SQLite keeps the hashed text as is; PostgreSQL takes an aware datetime)."""
    as_text = connection.vendor == "sqlite"
    for line in bundle.events():
        ts = line.get("ts")
        if ts is not None and not as_text:
            line["ts"] = datetime.fromisoformat(ts).replace(tzinfo=UTC)
        yield line


def _finish(session: Session, summary: dict[str, Any], bundle: Bundle, text: Callable[[str], str]) -> None:
    """What the writer does not derive from the events, in one write: how the session ended,
    where it came from, and its digest (a bundle imported twice is one session: its chain head
    names its content, the salts making any other content's head differ)."""
    fields = {
        "source_digest": bundle.chain["head"],
        "bundle_origin": _origin(summary, bundle),
        "status": summary["status"],
        "completed": summary["completed"],
        "ended_at": summary["ended_at"],
        "final_answer": text(summary["final_answer"]),
    }  # fmt: skip
    if fields["status"] == Session.Status.LIVE:  # nothing will append to an imported copy
        fields["status"] = Session.Status.INTERRUPTED
    Session.objects.filter(pk=session.pk).update(**fields)
    Session.objects.filter(pk=session.pk).reseal(fields)


def _when(value: Any) -> datetime | None:
    """An ISO 8601 time with a UTC instant (UTC when it names no zone), or None."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    parsed = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return parsed if in_utc_range(parsed) else None


def _restore_comments(session: Session, bundle: Bundle, text: Callable[[str], str], by: str) -> None:
    """The bundle's threads, each comment marked with the key that signed the bundle
    (`restored_from`): its author and times are the bundle's word, so it is shown as restored,
    and none is dated after the bundle was exported (nor in the future)."""
    latest = _latest(bundle)
    for number, thread in enumerate(bundle.comments, start=1):
        _an_object(thread, f"comments.json: thread {number}")
        where = f"comments.json: comment {_shown(thread.get('id'))}"
        first = _comment(session, thread, parent=None, text=text, bundle=bundle, latest=latest, by=by)
        resolved = _time(thread, "resolved_at", where, latest)
        if resolved is not None:
            first.resolved_at = resolved
            first.resolved_by = _text(thread, "resolved_by", where)[:150]
            first.save(update_fields=["resolved_at", "resolved_by"])
        for reply in _list_of_objects(thread, "replies", where):
            _comment(session, reply, parent=first, text=text, bundle=bundle, latest=latest, by=by)


def _comment(
    session: Session, data: dict[str, Any], *, parent: Comment | None, text: Callable[[str], str], bundle: Bundle,
    latest: datetime, by: str,
) -> Comment:  # fmt: skip
    where = f"comments.json: comment {_shown(data.get('id'))}"
    revisions = _list_of_objects(data, "revisions", where)
    seq = data.get("seq", parent.seq if parent is not None else 0)
    if type(seq) is not int or not 0 <= seq < max(session.event_count, 1):  # not 1.9, true or "3"
        raise BundleError(f"comments.json: comment {data.get('id')} is on event {_shown(seq)}, outside the session")
    written = [_body(data, f"comment {data.get('id')}")] + [
        _body(r, f"comment {data.get('id')}'s revision {n}") for n, r in enumerate(revisions, start=1)
    ]
    body, *earlier = kept = [text(one) for one in written]
    created = _time(data, "created_at", where, latest) or latest
    comment = Comment.objects.create(
        session=session, seq=seq, parent=parent, author=None, author_name=_text(data, "author", where)[:150],
        body=body, created_at=created, edited_at=_time(data, "edited_at", where, latest),
        deleted_at=_time(data, "deleted_at", where, latest), restored_from=bundle.fingerprint[:64] or "bundle",
        **_redaction_mark(data, changed_here=kept != written, by=by, latest=latest, where=where),
    )  # fmt: skip
    CommentRevision.objects.bulk_create(
        CommentRevision(comment=comment, body=revision,
                        written_at=_time(r, "written_at", f"{where}'s revision {n}", latest) or created,
                        replaced_at=_time(r, "replaced_at", f"{where}'s revision {n}", latest) or created)
        for n, (revision, r) in enumerate(zip(earlier, revisions), start=1)
    )  # fmt: skip
    return comment


def _redaction_mark(
    data: dict[str, Any], *, changed_here: bool, by: str, latest: datetime, where: str
) -> dict[str, Any]:
    """Who last replaced words in a restored comment or note: this import, when the project's
    rules changed it now; else what the bundle says (its word, dated no later than its export)."""
    if changed_here:
        return {"redacted_by": by[:150], "redacted_at": datetime.now(UTC)}
    at = _time(data, "redacted_at", where, latest)
    return {"redacted_by": _text(data, "redacted_by", where)[:150] if at else "", "redacted_at": at}


# A restored value of the wrong type is refused by name, like a seq or a verdict: read with str()
# a reply body {"a": 1} became the text "{'a': 1}", a created_at of [] another time, unsaid.


def _an_object(value: Any, where: str) -> None:
    if type(value) is not dict:
        raise BundleError(f"{where}: not an object, got {_shown(value)}")


def _list_of_objects(data: dict[str, Any], name: str, where: str) -> list[dict[str, Any]]:
    value = data.get(name)
    if value is None:
        return []
    if type(value) is not list:
        raise BundleError(f"{where}: field {name}: not a list, got {_shown(value)}")
    for number, item in enumerate(value, start=1):
        _an_object(item, f"{where}: {name} {number}")
    return value


def _text(data: dict[str, Any], name: str, where: str) -> str:
    value = data.get(name)
    if value is None:
        return ""
    if type(value) is not str:
        raise BundleError(f"{where}: field {name}: not text, got {_shown(value)}")
    return value


def _flag(data: dict[str, Any], name: str, where: str) -> bool:
    value = data.get(name, False)
    if type(value) is not bool:  # bool("false") is True
        raise BundleError(f"{where}: field {name}: not true or false, got {_shown(value)}")
    return value


def _time(data: dict[str, Any], name: str, where: str, latest: datetime | None = None) -> datetime | None:
    """A restored time, no later than `latest` when given; None when the bundle gives none."""
    value = data.get(name)
    if value is None or value == "":
        return None
    when = _when(value) if type(value) is str else None
    if when is None:
        raise BundleError(f"{where}: field {name}: not a time (ISO 8601, years 1-9999 in UTC), got {_shown(value)}")
    return when if latest is None else min(when, latest)


def _shown(value: Any) -> str:
    """A bundle's value in a message: as written, cut (a 300-digit number says nothing more)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _body(data: dict[str, Any], what: str) -> str:
    """A restored body within what a comment here may hold (comments.MAX_BODY)."""
    body = _text(data, "body", f"comments.json: {what}")
    if len(body) > MAX_BODY:
        raise BundleError(f"comments.json: {what}: body has {len(body):,} characters, at most {MAX_BODY:,}")
    return body


def _latest(bundle: Bundle) -> datetime:
    """The latest moment a restored comment or sign-off may claim: the bundle's export, or now."""
    now = datetime.now(UTC)
    return min(_when(bundle.manifest.get("exported_at")) or now, now)


def _restore_reviews(session: Session, bundle: Bundle, text: Callable[[str], str], by: str) -> None:
    """The bundle's sign-offs, each marked with the key that signed the bundle (`restored_from`):
    what they say of reviewer and time is the bundle's word, so none becomes the session's review
    state here, and none is dated after the bundle was exported (nor in the future). One that
    covers events the session does not have refuses the bundle, as a comment outside it does."""
    verdicts = set(Review.Verdict.values)
    latest = _latest(bundle)
    for number, data in enumerate(bundle.reviews, start=1):
        _an_object(data, f"reviews.json: sign-off {number}")
        where = f"reviews.json: sign-off {_shown(data.get('id'))}"
        if type(data.get("verdict")) is not str or data["verdict"] not in verdicts:
            raise BundleError(f"reviews.json: sign-off {data.get('id')} has no known verdict")
        first, last = data.get("first_seq", 0), data.get("last_seq", -1)
        held = session.event_count
        if (
            type(first) is not int
            or type(last) is not int
            or not (0 <= first <= last < held if held else (first, last) == (0, -1))
        ):
            raise BundleError(
                f"reviews.json: sign-off {data.get('id')} covers seqs {_shown(first)} to {_shown(last)}, "
                + (f"outside the session's 0 to {held - 1}" if held else "but the session has no events")
            )
        note = _text(data, "note", where)
        kept = text(note)
        Review.objects.create(
            session=session, reviewer=None, reviewer_name=_text(data, "reviewer", where)[:150],
            verdict=data["verdict"], note=kept, chain_head=_text(data, "chain_head", where),
            chain_valid=_flag(data, "chain_valid", where), first_seq=first, last_seq=last,
            created_at=_time(data, "created_at", where, latest) or latest,
            restored_from=bundle.fingerprint[:64] or "bundle",
            **_redaction_mark(data, changed_here=kept != note, by=by, latest=latest, where=where),
        )  # fmt: skip
