"""Redacting a session already stored (issue 22, docs/redaction.md, "After the fact").

A maintainer removes a value from a stored session: a text selected in the player
(`redact_text`), or whatever the project's current rules find (`redact_with_rules`, run as a
job: sessions_app/jobs.py). Either way the value goes from every stored copy:

- the events' content fields (payload, source record, step state, state change): a changed
  field gets its redacted text and keeps its commitment in the event's `redacted` column
  (chain.redact_field), so the event's link, the chain's head and every sign-off made on it stay
  as they were, and verification checks all the rest without the value;
- what is derived from them and stored beside them: state keyframes and saved snapshots, the
  session's saved writer state (variables, memory), its task, answer and metadata;
- what people wrote about the session: comments and their earlier revisions, sign-off notes,
  checkpoints, tour stops on it and the titles and descriptions of their tours, share links'
  notes (of links to the session or to such a tour). They are users' words, but a secret is one
  whoever typed it, and the point is that it leaves through no copy;
- its import job's problems and messages;
- the kept original upload: written again redacted, or deleted when the project's rules say
  originals are not kept (the old file's bytes are overwritten before it is unlinked);
- the database file: the rewrite runs with SQLite's secure_delete on (freed space is zeroed),
  and `purge_freed` then VACUUMs and truncates the WAL (SQLite) or VACUUMs the touched tables
  (PostgreSQL; what that does and does not guarantee is in docs/redaction.md).

The recorded fields (kind, tool, ids, times, numbers) are hashed as they are, not through a
commitment: a value there cannot be removed without breaking the chain, and is not. Search has
no index of its own to rewrite: it reads the event rows (replay/navigation.py). The audit entry
(`session.redact`) names who, when, which seqs and labels, never the value.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import re2
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model, Q
from django.utils import timezone

from . import audit, markdown
from .access import Actor, NotVisible, hold
from .chain import (
    CONTENT_FIELDS,
    HEADER_FIELDS,
    header_digest,
    parse_redacted,
    redact_field,
    removals,
    with_text_digests,
)
from .formats import Source
from .ingest.bundles import FORMAT_NAME as BUNDLE_FORMAT
from .ingest.bundles import is_bundle
from .ingest.traces import recount_staged
from .models import (
    Checkpoint,
    Comment,
    CommentRevision,
    Event,
    ImportJob,
    OtlpSpan,
    OtlpTrace,
    RedactionJob,
    RedactionRules,
    Review,
    Session,
    ShareLink,
    Snapshot,
    Tour,
    TourStop,
)
from .redaction import LineTooLong, Redactor, RuleError, check_label
from .replay.exports import kept_file

logger = logging.getLogger(__name__)

MIN_TEXT = 4  # shorter, a selection would take out common words everywhere
MAX_TEXT = 10_000
MANUAL_LABEL = "manual"
CHUNK = 2000
AUDIT_SEQS_CHARS = 2000  # the audit entry's seq ranges, cut after this
_TABLE = Event._meta.db_table
_READ = ("seq", "salt", "redacted", *CONTENT_FIELDS)
# The tables a redaction rewrites, VACUUMed afterwards on PostgreSQL: the large ones in place, the
# small ones rewritten whole (VACUUM FULL), which leaves no byte of an old row in their files.
LARGE_MODELS = (Event, Snapshot, OtlpSpan)
SMALL_MODELS = (Session, Comment, CommentRevision, Review, Checkpoint, TourStop, ShareLink, ImportJob)


class RedactionRefused(ValueError):
    """A redaction that cannot be made; `field` names the input that is wrong."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass
class RedactionResult:
    """What one redaction changed: never the value, only where and how much."""

    seqs: list[int] = field(default_factory=list)  # events whose content changed, in order
    counts: Counter[str] = field(default_factory=Counter)  # values removed from events, by label
    fields: Counter[str] = field(default_factory=Counter)  # event fields changed, by field
    elsewhere: Counter[str] = field(default_factory=Counter)  # other stored copies changed, by kind
    original: str = ""  # the kept upload: "rewritten", "deleted", "unchanged" or "" (none kept)
    # The session's own fields it changed (task, final_answer, ...), each with the digest of
    # the value it left (chain.header_digest), and when it began: a sign-off made before says
    # they were redacted since, as long as they still hold those values, rather than edited
    # (replay/sign_offs.py reads them from the audit log).
    session_fields: dict[str, str] = field(default_factory=dict)
    at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": len(self.seqs),
            "seqs": seq_ranges(self.seqs),
            "values": sum(self.counts.values()),
            "byLabel": dict(self.counts),
            "fields": dict(self.fields),
            "elsewhere": dict(self.elsewhere),
            "original": self.original or None,
        }


def seq_ranges(seqs: list[int]) -> list[list[int]]:
    """Sorted seqs as [first, last] runs: [0, 1, 2, 7] -> [[0, 2], [7, 7]]."""
    runs: list[list[int]] = []
    for seq in seqs:
        if runs and seq == runs[-1][1] + 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return runs


def _ranges_text(seqs: list[int]) -> str:
    text = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in seq_ranges(seqs))
    return text if len(text) <= AUDIT_SEQS_CHARS else text[:AUDIT_SEQS_CHARS].rsplit(",", 1)[0] + ",…"


# --- the two ways in ------------------------------------------------------------------------------


def redact_text(
    *, session: Session, seq: int, text: str, label: str = MANUAL_LABEL, actor: Actor | str, ip: str | None = None
) -> RedactionResult:
    """Remove `text` (a value a maintainer selected at event `seq`) from every stored copy of the
    session: each occurrence becomes `[REDACTED:<label>]`. Raises RedactionRefused naming the
    field (`text`, `seq`, `label`) when it cannot."""
    wanted = selection_forms(text)
    label = _label(label)
    if not 0 <= seq < session.event_count:
        raise RedactionRefused("seq", f"the session has events 0 to {session.event_count - 1}")
    redactor = literal_redactor(wanted, label)
    candidates = _stored_forms(wanted)
    if not _events_hold(session, redactor, candidates):
        if not Session.objects.filter(pk=session.pk).exists():  # deleted since its lookup: no events
            raise NotVisible(f"session {session.pk} not found")
        # Checked before anything is rewritten: a selection is made in what the player shows of
        # the events (the context panel: this event, the history, the step, the variables ...),
        # and a text that is only elsewhere (someone's comment or sign-off note) must not be
        # rewritten through it, in words the maintainer chose as the label.
        raise RedactionRefused(
            "text", "not found in the session's events as (part of) one string (select text inside one string)"
        )
    result = _redact_session(session, redactor, by=_name(actor), candidates=candidates)
    _audit(session, result, actor=actor, ip=ip, how="selection", selected_at=seq)
    return result


def start_rules_job(*, session: Session, actor: Actor | str, ip: str | None = None) -> RedactionJob:
    """A queued run of the project's current rules over the session (the caller enqueues it
    after commit: jobs.enqueue_redaction_after_commit). RedactionRefused when no rule is on."""
    if RedactionRules.redactor_for(session.project_id) is None:
        raise RedactionRefused("rules", "the project has no redaction rule on: turn some on in its settings first")
    with transaction.atomic():
        hold(Session, session.pk)
        return RedactionJob.objects.create(
            session=session, requested_by=_name(actor)[:200], requested_ip=ip, events_total=session.event_count
        )


def redact_with_rules(*, job: RedactionJob) -> RedactionResult:
    """Apply the project's current rules to the job's session (the job's progress moves per
    chunk of events), then record the audit entry. The database's freed space is purged by the
    caller, outside any transaction (`purge_freed`)."""
    session = Session.objects.select_related("project").get(pk=job.session_id)
    redactor = RedactionRules.redactor_for(session.project_id)
    if redactor is None:
        raise RedactionRefused("rules", "the project has no redaction rule on")
    RedactionJob.objects.filter(pk=job.pk).update(events_total=session.event_count)

    def progress(done: int, changed: int) -> None:
        RedactionJob.objects.filter(pk=job.pk).update(events_done=done, events_redacted=changed)

    result = _redact_session(session, redactor, by=job.requested_by, candidates=None, on_progress=progress)
    _audit(session, result, actor=job.requested_by, ip=job.requested_ip, how="rules", job=job.pk)
    return result


# --- what a selection is --------------------------------------------------------------------------


def selection_forms(text: Any) -> list[str]:
    """The values a selection stands for: the text as selected (surrounding space and quotes
    taken off), and, when it reads as the inside of a JSON string (the player shows payloads as
    JSON, so a selected newline is `\\n`), that string decoded. RedactionRefused when too short
    or too long."""
    if not isinstance(text, str):
        raise RedactionRefused("text", "the value to redact is required")
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    if len(text) < MIN_TEXT:
        raise RedactionRefused("text", f"select at least {MIN_TEXT} characters")
    if len(text) > MAX_TEXT:
        raise RedactionRefused("text", f"select at most {MAX_TEXT:,} characters")
    forms = [text]
    if "\\" in text:
        try:
            decoded = orjson.loads(f'"{text}"')
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, str) and len(decoded) >= MIN_TEXT and decoded not in forms:
            forms.append(decoded)
    return forms


def literal_redactor(forms: list[str], label: str) -> Redactor:
    """A redactor with one rule: these exact texts. Built here, not through the rules' cache,
    which would keep the value in memory for as long as the process lives."""
    pattern = "|".join(re2.escape(form) for form in sorted(forms, key=len, reverse=True))
    return Redactor((), ((label, pattern),), False)


def _stored_forms(forms: list[str]) -> list[str]:
    """How the values can be spelled in a stored column: as they are (a plain source record),
    inside JSON text as Replay writes it, and with non-ASCII escaped (a source's own JSON)."""
    found: list[str] = []
    for form in forms:
        for spelled in (form, orjson.dumps(form).decode()[1:-1], _ascii_json(form)):
            if spelled not in found:
                found.append(spelled)
    return found


def _ascii_json(text: str) -> str:
    import json

    return json.dumps(text)[1:-1]


def _label(label: Any) -> str:
    try:
        return check_label(label or MANUAL_LABEL, "label")
    except RuleError as error:
        raise RedactionRefused(error.field, error.message) from None


def _name(actor: Actor | str) -> str:
    return actor.name if isinstance(actor, Actor) else actor


# --- the rewrite ----------------------------------------------------------------------------------


def _redact_session(
    session: Session,
    redactor: Redactor,
    *,
    by: str,
    candidates: list[str] | None,
    on_progress: Callable[[int, int], None] | None = None,
) -> RedactionResult:
    result = RedactionResult()
    at = result.at = datetime.now(UTC).isoformat()
    with secure_delete():
        _redact_events(session, redactor, by=by, at=at, candidates=candidates, result=result, on_progress=on_progress)
        with transaction.atomic():
            # The session row locked: a live append (which locks it too) waits, so the saved writer
            # state and the keyframes are redacted as one.
            locked = Session.objects.select_for_update(no_key=True).filter(pk=session.pk).first()
            if locked is None:  # deleted while its events were being redacted: they went with it
                raise NotVisible(f"session {session.pk} not found")
            _redact_session_row(locked, redactor, result)
            _redact_snapshots(session, redactor, result)
            _redact_team_work(session, redactor, result, by=by, at=datetime.fromisoformat(at))
            _redact_import_job(locked, redactor, result)
            _redact_staged_spans(session, redactor, result)
        result.original = _redact_original(session, redactor, must_be_gone=candidates)
        if deleted := _delete_bundle_uploads(session):
            result.elsewhere["bundle_upload"] = deleted
    return result


def _redact_events(
    session: Session,
    redactor: Redactor,
    *,
    by: str,
    at: str,
    candidates: list[str] | None,
    result: RedactionResult,
    on_progress: Callable[[int, int], None] | None,
) -> None:
    """The events in keyset chunks of CHUNK, one transaction each: a run stopped half-way leaves
    every event either redacted or not, and running it again finishes it."""
    count = Session.objects.filter(pk=session.pk).values_list("event_count", flat=True).get()
    where, extra = _candidate_sql(candidates)
    next_seq = 0
    while next_seq < count:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT {', '.join(_READ)} FROM {_TABLE} WHERE session_id = %s AND seq >= %s AND seq < %s"
                    f"{where} ORDER BY seq LIMIT {CHUNK}",
                    [session.pk, next_seq, count, *extra],
                )
                rows = cursor.fetchall()
            updates = [update for row in rows if (update := _redact_event(row, redactor, by, at, result))]
            if updates:
                with connection.cursor() as cursor:
                    cursor.executemany(
                        f"UPDATE {_TABLE} SET {', '.join(f'{name} = %s' for name in CONTENT_FIELDS)}, salt = %s, "
                        f"redacted = %s WHERE session_id = %s AND seq = %s",
                        [[*values, session.pk, seq] for seq, values in updates],
                    )
        next_seq = rows[-1][0] + 1 if len(rows) == CHUNK else count
        if on_progress is not None:
            on_progress(next_seq, len(result.seqs))


def _candidate_sql(forms: list[str] | None) -> tuple[str, list[str]]:
    """Only the events whose content holds one of the texts (a literal redaction), found by the
    database: C's substring search, not Python decoding every event."""
    if not forms:
        return "", []
    find = "instr({column}, %s) > 0" if connection.vendor == "sqlite" else "strpos({column}, %s) > 0"
    tests = [find.format(column=column) for form in forms for column in CONTENT_FIELDS]
    return f" AND ({' OR '.join(tests)})", [form for form in forms for _ in CONTENT_FIELDS]


def _events_hold(session: Session, redactor: Redactor, candidates: list[str]) -> bool:
    """Whether the rules change a content field of any of the session's events (nothing is
    written): the events the database finds holding a candidate text, decoded one at a time up
    to the first that does."""
    where, extra = _candidate_sql(candidates)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(CONTENT_FIELDS)} FROM {_TABLE} WHERE session_id = %s{where} ORDER BY seq",
            [session.pk, *extra],
        )
        while rows := cursor.fetchmany(100):
            for contents in rows:
                for name, text in zip(CONTENT_FIELDS, contents):
                    if text is None:
                        continue
                    redactor.counts = Counter()
                    if redactor.content_text(name, text) != text:
                        return True
    return False


def _redact_event(
    row: tuple, redactor: Redactor, by: str, at: str, result: RedactionResult
) -> tuple[int, list[Any]] | None:
    """One event's new content, salt and `redacted` column, or None when nothing changed."""
    seq, salt, redacted, *contents = row
    salt = salt or ""
    new = list(contents)
    changed = False
    for index, (name, text) in enumerate(zip(CONTENT_FIELDS, contents)):
        if text is None:
            continue
        found = Counter()
        redactor.counts = found
        redacted_text = redactor.content_text(name, text)
        if redacted_text == text:
            continue
        salt, redacted = redact_field(
            event_salt=salt, redacted=redacted, contents=contents, field=name, labels=sorted(found), by=by, at=at
        )
        new[index] = redacted_text
        result.counts.update(found)
        result.fields[name] += 1
        changed = True
    if not changed:
        return None
    result.seqs.append(seq)
    # The text each redacted field holds now is bound to its record (`after`), so an edit of it
    # is found as an edit of any other field is.
    removed = orjson.loads(redacted)["fields"]
    redacted = with_text_digests(redacted, {name: text for name, text in zip(CONTENT_FIELDS, new) if name in removed})
    return seq, [*new, salt, redacted]


def _redact_session_row(session: Session, redactor: Redactor, result: RedactionResult) -> None:
    changes: dict[str, Any] = {}
    for name in ("task", "final_answer", "environment", "source_session_id", "run_id", "agent_id", "model"):
        _text(session, name, redactor, changes)
    for name in ("metadata", "bundle_origin"):
        _value(session, name, redactor, changes)
    state = session.ingest_state if isinstance(session.ingest_state, dict) else {}
    # What a later append starts from (ingest/rows.SAVED_FIELDS): the variables and memory the
    # keyframes are built from, and the format's own state. Pair ids and tool names are recorded
    # fields, kept as they are.
    new_state = {
        name: redactor.value(value) if name in ("variables", "memory", "format_state") else value
        for name, value in state.items()
    }
    if any(new_state[name] is not state[name] for name in state):
        changes["ingest_state"] = new_state
    if changes:
        Session.objects.filter(pk=session.pk).update(**changes)
        Session.objects.filter(pk=session.pk).reseal(changes)
        result.elsewhere["session"] += 1
        result.session_fields = {
            name: header_digest(name, value) for name, value in sorted(changes.items()) if name in HEADER_FIELDS
        }


def _redact_snapshots(session: Session, redactor: Redactor, result: RedactionResult) -> None:
    """Keyframes, saved and imported snapshots: verification derives the keyframes again from the
    redacted state changes, so they must hold exactly what those give (the same walk)."""
    for snapshot in Snapshot.objects.filter(session=session).only("pk", "variables", "memory_notes").iterator():
        changes: dict[str, Any] = {}
        _value(snapshot, "variables", redactor, changes)
        _value(snapshot, "memory_notes", redactor, changes)
        if changes:
            Snapshot.objects.filter(pk=snapshot.pk).update(**changes)
            result.elsewhere["snapshots"] += 1


def _redact_team_work(session: Session, redactor: Redactor, result: RedactionResult, *, by: str, at: datetime) -> None:
    # A comment or sign-off note the redaction changed is marked with who changed it and when:
    # its author did not write the placeholder (a comment's earlier revision marks the comment).
    marked: dict[type[Model], set[int]] = {Comment: set(), CommentRevision: set(), Review: set()}
    tours = TourStop.objects.filter(session=session).values("tour_id")  # the tours that stop on it
    for model, rows, names in (
        (Comment, Comment.objects.filter(session=session), ("body",)),
        (CommentRevision, CommentRevision.objects.filter(comment__session=session), ("body",)),
        (Review, Review.objects.filter(session=session), ("note",)),
        (Checkpoint, Checkpoint.objects.filter(session=session), ("name", "note")),
        (TourStop, TourStop.objects.filter(session=session), ("title", "narration")),
        # A tour that stops on the session tells of it in its own title and description too,
        # and a link to such a tour in its note (a secret stayed in a tour's description).
        (Tour, Tour.objects.filter(pk__in=tours), ("title", "description")),
        (ShareLink, ShareLink.objects.filter(Q(session=session) | Q(tour__in=tours)), ("note",)),
    ):
        # Checkpoint names are unique in their session, and two may become one text once
        # redacted ("ping ana@x.org", "ping bo@x.org"): the later ones are numbered apart.
        names_held = set(rows.values_list("name", flat=True)) if model is Checkpoint else None
        written = _MARKDOWN_WRITTEN.get(model, ())
        kept = [f"{name}_{column}" for name in getattr(model, "MARKDOWN_FIELDS", ()) for column in ("html", "html_of")]
        for row in rows.only("pk", *names, *kept).order_by("pk").iterator():
            changes: dict[str, Any] = {}
            for name in names:
                if name in written:
                    _markdown(row, name, redactor, changes)
                else:
                    _text(row, name, redactor, changes)
            if names_held is not None and "name" in changes:
                names_held.discard(row.name)
                changes["name"] = _numbered_apart(changes["name"], names_held)
                names_held.add(changes["name"])
            for name in getattr(model, "MARKDOWN_FIELDS", ()):
                if name in changes:  # its kept HTML holds the words too (markdown.py)
                    changes |= markdown.kept_columns(name, changes[name])
            if changes:
                model.objects.filter(pk=row.pk).update(**changes)
                result.elsewhere[model._meta.model_name] += 1
                if model in marked:
                    marked[model].add(row.pk)
    revised = CommentRevision.objects.filter(pk__in=marked.pop(CommentRevision)).values_list("comment_id", flat=True)
    marked[Comment].update(revised)
    for model, pks in marked.items():
        if pks:
            model.objects.filter(pk__in=pks).update(redacted_by=by[:150], redacted_at=at)


# The texts written as Markdown, whose redaction covers what they show (markdown.redacted): the
# models' MARKDOWN_FIELDS, and a comment's earlier bodies, shown and exported as written.
_MARKDOWN_WRITTEN: dict[type[Model], tuple[str, ...]] = {
    Comment: Comment.MARKDOWN_FIELDS,
    CommentRevision: ("body",),
    Tour: Tour.MARKDOWN_FIELDS,
    TourStop: TourStop.MARKDOWN_FIELDS,
}


def _markdown(row: Model, name: str, redactor: Redactor, changes: dict[str, Any]) -> None:
    text = getattr(row, name)
    if not text:
        return
    # The kept HTML, when it was made from this text, saves rendering every text again.
    kept = (
        getattr(row, f"{name}_html", None) if getattr(row, f"{name}_html_of", None) == markdown.digest(text) else None
    )
    new = markdown.redacted(text, redactor.text, kept)
    if new != text:
        changes[name] = new


def _numbered_apart(name: str, held: set[str]) -> str:
    """`name`, or `name (2)`, `name (3)` ... the first no other checkpoint of the session holds."""
    if name not in held:
        return name
    limit = Checkpoint._meta.get_field("name").max_length
    n = 2
    while (numbered := f"{name[: limit - len(f' ({n})')]} ({n})") in held:
        n += 1
    return numbered


def _redact_import_job(session: Session, redactor: Redactor, result: RedactionResult) -> None:
    if session.import_job_id is None:
        return
    job = ImportJob.objects.filter(pk=session.import_job_id).only("pk", "problems", "result", "error").first()
    if job is None:
        return
    changes: dict[str, Any] = {}
    _value(job, "problems", redactor, changes)
    _value(job, "result", redactor, changes)
    _text(job, "error", redactor, changes)
    if changes:
        ImportJob.objects.filter(pk=job.pk).update(**changes)
        result.elsewhere["import_job"] += 1


def _redact_staged_spans(session: Session, redactor: Redactor, result: RedactionResult) -> None:
    """OpenTelemetry spans of the session's traces still waiting to be written as its events
    (ingest/traces.py; a written span keeps no record)."""
    waiting = OtlpSpan.objects.filter(trace__session=session, record__isnull=False).only("pk", "record", "trace_id")
    changed: set[int] = set()
    for span in waiting.iterator():
        record = redactor.json_text(span.record)
        if record != span.record:
            OtlpSpan.objects.filter(pk=span.pk).update(record=record)
            result.elsewhere["otlp_span"] += 1
            changed.add(span.trace_id)
    if changed:
        recount_staged(OtlpTrace.objects.filter(pk__in=changed))  # a placeholder's length is not the value's


def _text(row: Model, name: str, redactor: Redactor, changes: dict[str, Any]) -> None:
    text = getattr(row, name)
    if not text:
        return
    new = redactor.text(text)
    if new != text:
        limit = row._meta.get_field(name).max_length
        changes[name] = new[:limit] if limit else new


def _value(row: Model, name: str, redactor: Redactor, changes: dict[str, Any]) -> None:
    value = getattr(row, name)
    if value is None:
        return
    new = redactor.value(value)
    if new is not value and new != value:
        changes[name] = new


# --- the kept original ----------------------------------------------------------------------------


def _redact_original(session: Session, redactor: Redactor, *, must_be_gone: list[str] | None = None) -> str:
    """The upload the session was imported from, when it is kept: written again redacted (line
    by line, redaction.Redactor.lines), or deleted when the project's rules keep no originals.
    A file holding several sessions changes for all of them: the value goes everywhere. With
    `must_be_gone` (a selected value's spellings), a rewritten file still holding one (a value
    spanning lines of a text file) is deleted instead."""
    path = kept_file(session)  # given or not (a deleted sibling's): the value must leave the disk
    if path is None:
        return ""
    if not _in_data_dir(path):
        logger.warning("redaction: the original of session %s is outside REPLAY_DATA_DIR: left alone", session.pk)
        return "outside the data folder"
    job = session.import_job
    rules = RedactionRules.redactor_for(session.project_id)
    if rules is not None and not rules.keep_originals:
        ImportJob.objects.filter(pk=job.pk).update(stored_path="", original_deleted_at=timezone.now())
        wipe_file(path)
        return "deleted"
    target = path.with_name(f"{path.name.split('.', 1)[0]}-redacted-{int(time.time() * 1000)}{_plain_suffix(path)}")
    redactor.counts = Counter()
    try:
        with Source(path=path).open() as source, target.open("xb") as out:
            os.chmod(target, 0o640)
            for line in redactor.lines(source, max_line=settings.MAX_RECORD_BYTES):
                out.write(line)
    except LineTooLong:  # cannot be redacted in bounded memory: not kept as received either
        wipe_file(target)
        ImportJob.objects.filter(pk=job.pk).update(stored_path="", original_deleted_at=timezone.now())
        wipe_file(path)
        return "deleted"
    if must_be_gone and _file_holds(target, must_be_gone):
        wipe_file(target)
        ImportJob.objects.filter(pk=job.pk).update(stored_path="", original_deleted_at=timezone.now())
        wipe_file(path)
        return "deleted"
    if not redactor.counts:
        target.unlink()
        return "unchanged"
    ImportJob.objects.filter(pk=job.pk).update(stored_path=str(target))
    wipe_file(path)
    return "rewritten"


def _file_holds(path: Path, texts: list[str]) -> bool:
    """Whether the file's bytes hold any of the texts (UTF-8), read a MiB at a time."""
    needles = [text.encode("utf-8", "surrogatepass") for text in texts]
    overlap = max(len(needle) for needle in needles) - 1
    tail = b""
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            window = tail + block
            if any(needle in window for needle in needles):
                return True
            tail = window[-overlap:] if overlap else b""
    return False


def _delete_bundle_uploads(session: Session) -> int:
    """An evidence bundle uploaded as a file gave the session its events: that zip is kept as its
    own upload's original (the session's import job is the original the bundle carried). Signed
    whole, it cannot be rewritten, so it is deleted."""
    deleted = 0
    uploads = ImportJob.objects.filter(project_id=session.project_id, detected_format=BUNDLE_FORMAT)
    for job in uploads.exclude(pk=session.import_job_id).exclude(stored_path="").only("pk", "stored_path", "result"):
        listed = any(isinstance(entry, dict) and entry.get("session") == session.pk for entry in job.result or [])
        path = Path(job.stored_path)
        if listed and path.is_file() and _in_data_dir(path) and is_bundle(path):
            ImportJob.objects.filter(pk=job.pk).update(stored_path="", original_deleted_at=timezone.now())
            wipe_file(path)
            deleted += 1
    return deleted


def _in_data_dir(path: Path) -> bool:
    """Only files under REPLAY_DATA_DIR are Replay's to rewrite or delete."""
    try:
        return path.resolve().is_relative_to(Path(settings.DATA_DIR).resolve())
    except OSError:
        return False


def _plain_suffix(path: Path) -> str:
    """The stored name's ending without .gz: the redacted copy is written uncompressed."""
    suffixes = "".join(path.suffixes)
    return suffixes[:-3] if suffixes.lower().endswith(".gz") else suffixes


def wipe_file(path: Path) -> None:
    """Overwrite a file's bytes with zeros, flush them to the disk, and unlink it: the blocks it
    held no longer hold the value (on a filesystem that writes in place; see docs/redaction.md)."""
    try:
        size = path.stat().st_size
        zeros = bytes(1 << 20)
        with path.open("r+b") as out:
            left = size
            while left > 0:
                left -= out.write(zeros[: min(left, len(zeros))])
            out.flush()
            os.fsync(out.fileno())
    except FileNotFoundError:
        return
    path.unlink(missing_ok=True)


# --- the database file ----------------------------------------------------------------------------


@contextmanager
def secure_delete() -> Iterator[None]:
    """SQLite's secure_delete on this connection while the rewrite runs: the space an old value
    leaves in a page, and pages freed whole, are overwritten with zeros instead of left as they
    were. (PostgreSQL has no such switch: `purge_freed` VACUUMs.)"""
    if connection.vendor != "sqlite":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA secure_delete")
        before = cursor.fetchone()[0]
        cursor.execute("PRAGMA secure_delete = ON")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA secure_delete = {int(before)}")


@dataclass
class Purge:
    vacuumed: list[str]
    wal_truncated: bool | None  # SQLite: whether the WAL file was emptied (None: PostgreSQL)
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"vacuumed": self.vacuumed, "wal_truncated": self.wal_truncated, "seconds": round(self.seconds, 3)}


def purge_freed(*, attempts: int = 20) -> Purge:
    """Take the old values out of the database's files after a redaction committed. Must run
    outside a transaction (VACUUM cannot run inside one).

    SQLite: VACUUM rebuilds the file from its live rows (so no free page or free space in a page
    keeps an old row, even one freed before the redaction without secure_delete), then a
    TRUNCATE checkpoint copies the WAL into the file and empties it (the WAL holds old page
    images until then). A reader holding an old snapshot delays the checkpoint: it is retried.

    PostgreSQL: an UPDATE writes a new row version and leaves the old one dead in its page.
    VACUUM removes the dead versions (and their TOAST chunks) from the events and snapshots,
    without locking readers out; the bytes they took may stay in the page's free space until
    reused. The small tables (sessions, comments, ...) are rewritten whole (VACUUM FULL: a short
    exclusive lock), so their files hold no old row at all. docs/redaction.md says the rest."""
    if connection.in_atomic_block:
        raise RuntimeError("purge_freed must run outside a transaction (VACUUM cannot run inside one)")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("VACUUM")
            truncated = False
            for attempt in range(attempts):
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                busy, _log, _done = cursor.fetchone()
                if not busy:
                    truncated = True
                    break
                time.sleep(min(0.05 * (attempt + 1), 1.0))
            if not truncated:
                logger.warning("redaction: the WAL could not be truncated (a reader held it); it empties later")
            return Purge(vacuumed=["*"], wal_truncated=truncated, seconds=time.perf_counter() - started)
        quote = connection.ops.quote_name
        done = []
        for models, command in ((LARGE_MODELS, "VACUUM"), (SMALL_MODELS, "VACUUM FULL")):
            for model in models:
                cursor.execute(f"{command} {quote(model._meta.db_table)}")
                done.append(f"{command} {model._meta.db_table}")
    return Purge(vacuumed=done, wal_truncated=None, seconds=time.perf_counter() - started)


# --- the audit entry --------------------------------------------------------------------------------


def _audit(session: Session, result: RedactionResult, *, actor: Actor | str, ip: str | None, how: str,
           **extra: Any) -> None:  # fmt: skip
    audit.record(
        action="session.redact",
        actor=actor,
        project=session.project_id,
        target=f"session:{session.pk}",
        detail={
            "how": how,
            "labels": dict(result.counts),
            "events": len(result.seqs),
            "seqs": _ranges_text(result.seqs),
            "fields": dict(result.fields),
            "elsewhere": dict(result.elsewhere),
            "original": result.original or None,
            **({"session_fields": result.session_fields, "at": result.at} if result.session_fields else {}),
            **extra,
        },
        ip=ip,
    )


def list_redactions(*, session: Session, limit: int = 1000, count_all: bool = True) -> tuple[list[dict[str, Any]], int]:
    """The session's removals (seq, field, label, by, at) in seq order, the first `limit`, and
    how many in all: one read of its events' `redacted` column (no index: the API, or the
    Redactions panel loaded when shown, not the player's every frame). Without `count_all` only
    the first `limit` redacted events are read, and the count is -1 (the panel, polling while a
    rules run goes, counts events instead: `count_redacted_events`)."""
    entries: list[dict[str, Any]] = []
    total = 0 if count_all else -1
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT seq, redacted FROM {_TABLE} WHERE session_id = %s AND redacted IS NOT NULL ORDER BY seq"
            + ("" if count_all else f" LIMIT {int(limit)}"),
            [session.pk],
        )
        for seq, text in cursor.fetchall():
            try:
                found = removals(seq, parse_redacted(text))
            except ValueError:
                continue  # verification names it
            if count_all:
                total += len(found)
            entries.extend(found[: max(0, limit - len(entries))])
    return entries, total


def count_redacted_events(*, session: Session) -> int:
    """How many of the session's events had a value removed (one count, no decoding)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {_TABLE} WHERE session_id = %s AND redacted IS NOT NULL", [session.pk])
        return cursor.fetchone()[0]


def job_row(job: RedactionJob) -> dict[str, Any]:
    """A rules run as the API and the panel show it."""
    return {
        "id": job.pk,
        "status": job.status,
        "requestedBy": job.requested_by,
        "eventsTotal": job.events_total,
        "eventsDone": job.events_done,
        "eventsRedacted": job.events_redacted,
        "byLabel": job.counts,
        "error": job.error,
        "createdAt": job.created_at.isoformat(),
        "finishedAt": job.finished_at.isoformat() if job.finished_at else None,
    }
