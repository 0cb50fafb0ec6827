"""Verifying a stored session: is what a page shows what was recorded?

Two checks, one pass over the events in seq order (keyset chunks, memory flat):

1. The chain: each event's stored link must be `chain.link_hash` of its predecessor's stored
   link and its own recorded fields and content (chain.py), so an edit of any recorded or
   content field, of a link, a gap or a moved event is found at its seq.
2. Everything derived (step positions, pairing, fail streaks, running totals, counts by kind,
   state keyframes, the session's totals) is derived again from the recorded fields by the
   writer's own code (ingest/rows.py, EventRows.add_stored) and compared with what is stored.
3. The session's own fields a page shows (task, final answer, status, times, ids, metadata) must
   still give the digests their writer sealed them with (chain.header_seal): an edit is named
   by its field.

The result is stored on the session (chain_valid, chain_broken_seq, chain_checked_at,
chain_checked_count): the badge says *verified at <time>* only after this ran.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import orjson
from django.db import connection, transaction
from django.utils import timezone

from .access import hold
from .chain import (
    CONTENT_FIELDS,
    GENESIS_HASH,
    HEADER_FIELDS,
    RECORDED_FIELDS,
    edited_after_redaction,
    header_changes,
    header_field_name,
    link_hash,
    parse_redacted,
    recorded_values,
    removals,
    stored_commitments,
)
from .ingest.rows import DERIVED_COLUMNS, EVENT_COLUMNS, SESSION_STATE, EventRows, Keyframe, WriterState
from .models import Event, Session, Snapshot, VerificationRun

CHUNK = 2000
FINDINGS_KEPT = 100
REDACTIONS_KEPT = 1000
_TABLE = Event._meta.db_table
_READ = [name for name in EVENT_COLUMNS if name != "session_id"]
# Compared after derivation; the chain's own columns are checked link by link instead.
_COMPARED = [name for name in DERIVED_COLUMNS if name not in ("hash", "prev_hash")]
# The session's totals against what derivation ends with; not the head (checked link by link) nor
# the reward (a source's stated total_reward overrides the sum when the session finishes).
_SESSION_TOTALS = {column: field for column, field in SESSION_STATE.items() if column not in ("head_hash", "reward")}


@dataclass
class Verification:
    valid: bool
    first_broken_seq: int | None
    events: int
    broken_events: int
    head: str
    checked_at: Any
    findings: list[dict[str, Any]] = field(default_factory=list)
    # Values removed after the fact, one entry per (seq, field, label): the first REDACTIONS_KEPT.
    redactions: list[dict[str, Any]] = field(default_factory=list)
    redaction_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "chainValid": self.valid,
            "firstBrokenSeq": self.first_broken_seq,
            "events": self.events,
            "brokenEvents": self.broken_events,
            "head": self.head,
            "checkedAt": self.checked_at.isoformat(),
            "findings": self.findings,
            "redactions": self.redactions,
            "redactionCount": self.redaction_count,
        }


class _Findings:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.broken_seqs: set[int] = set()
        self.first: int | None = None
        self.other = False  # a finding not at an event (the session's totals)
        self.redactions: list[dict[str, Any]] = []
        self.redaction_count = 0

    def add(self, seq: int | None, field_name: str, why: str) -> None:
        if seq is None:
            self.other = True
        else:
            self.broken_seqs.add(seq)
            if self.first is None or seq < self.first:
                self.first = seq
        if len(self.items) < FINDINGS_KEPT:
            self.items.append({"seq": seq, "field": field_name, "why": why})

    def redacted(self, seq: int, form: dict[str, Any]) -> None:
        """List an event's redactions, one entry per field and label."""
        found = removals(seq, form)
        self.redaction_count += len(found)
        self.redactions.extend(found[: max(0, REDACTIONS_KEPT - len(self.redactions))])


# A run older than this is taken for one whose process died (the longest measured, 100,000 events,
# takes 5-6 s; a million, about a minute).
RUN_GIVEN_UP_AFTER = timedelta(minutes=10)


class VerificationRunning(Exception):
    """Someone's verification of the session is running: this one would only repeat its work."""

    def __init__(self, started_at: Any) -> None:
        self.started_at = started_at
        super().__init__(
            f"a verification of this session is already running (since {started_at:%H:%M:%S} UTC): "
            "its result shows when it ends"
        )


@contextmanager
def one_at_a_time(session: Session) -> Iterator[None]:
    """Hold the session's VerificationRun while the block runs, or raise VerificationRunning: a
    verification someone asks for (a member's verify, a sign-off, the API) runs once at a time
    for a session, however many ask."""
    now = timezone.now()
    with transaction.atomic():
        hold(Session, session.pk)
        run, made = VerificationRun.objects.select_for_update().get_or_create(session=session,
                                                                              defaults={"started_at": now})  # fmt: skip
        if not made:
            if now - run.started_at < RUN_GIVEN_UP_AFTER:
                raise VerificationRunning(run.started_at)
            run.started_at = now
            run.save(update_fields=["started_at"])
    try:
        yield
    finally:
        VerificationRun.objects.filter(pk=run.pk, started_at=now).delete()


def verify_once(*, session: Session, record: bool = True) -> Verification:
    """`verify_session` for someone who asked (VerificationRunning while another runs). A read
    (`record=False`, the API's GET) writes nothing, its place held in this process only: it is
    refused while a recorded one runs anywhere, or another read of the session runs here."""
    if record:
        with one_at_a_time(session):
            return verify_session(session=session, record=record)
    running = VerificationRun.objects.filter(session=session).values_list("started_at", flat=True).first()
    if running is not None and timezone.now() - running < RUN_GIVEN_UP_AFTER:
        raise VerificationRunning(running)
    with _reading_here(session.pk):
        return verify_session(session=session, record=False)


_reads_here: dict[int, Any] = {}  # session pk -> when a read verification of it started here
_reads_lock = threading.Lock()


@contextmanager
def _reading_here(session_pk: int) -> Iterator[None]:
    with _reads_lock:
        if session_pk in _reads_here:
            raise VerificationRunning(_reads_here[session_pk])
        _reads_here[session_pk] = timezone.now()
    try:
        yield
    finally:
        with _reads_lock:
            _reads_here.pop(session_pk, None)


def verify_session(*, session: Session, chunk: int = CHUNK, record: bool = True) -> Verification:
    """Check the session's events as stored and record the result on the session. With
    `record=False` nothing is written (GET /api/sessions/{id}/verify: a read never writes)."""
    # Count and head are written in one transaction by ingest: read them together, and check
    # only what existed then (a live session may grow while we read).
    count, head = Session.objects.filter(pk=session.pk).values_list("event_count", "head_hash").get()
    findings = _Findings()
    rows = EventRows(session_pk=session.pk, state=WriterState(), vendor=connection.vendor)
    stored_pairs: dict[int, tuple[Any, Any]] = {}  # rows still waiting for their pair
    keyframes: list[Keyframe] = []
    expected_prev = GENESIS_HASH
    next_seq = 0
    while next_seq < count:
        stored = _read(session.pk, next_seq, count, chunk)
        if not stored:
            break
        derived: list[dict[str, Any]] = []
        for values in stored:
            seq = values["seq"]
            if seq != next_seq:
                findings.add(next_seq, "seq", f"events {next_seq}..{seq - 1} are missing")
                keyframes.extend(_compare(rows, derived, stored_pairs, findings))
                derived = []
                rows.skip_to(seq)
            expected_prev = _check_link(values, expected_prev, findings)
            rows.add_stored(values)
            derived.append(values)
            next_seq = seq + 1
        keyframes.extend(_compare(rows, derived, stored_pairs, findings))
    if next_seq < count:
        findings.add(next_seq, "seq", f"events {next_seq}..{count - 1} are missing")
    elif expected_prev != head:
        findings.add(max(count - 1, 0), "hash", "the session's chain head is not its last event's hash")
    answered_since = _answered_since(session.pk, count, stored_pairs)
    for seq, (pair_seq, _duration) in stored_pairs.items():
        if pair_seq is not None and seq not in answered_since:
            findings.add(seq, "pair_seq", "paired with an event that does not answer it")
    _compare_keyframes(session, keyframes, findings, count)
    _compare_totals(session, rows.state, findings)
    _compare_header(session, findings)
    return _record(session, findings, next_seq, head, store=record)


def _answered_since(session_pk: int, count: int, waiting: dict[int, tuple[Any, Any]]) -> set[int]:
    """The rows left waiting for their pair whose stored pair is an event appended after this
    verification counted the session's events (a live session's next batch answered them while
    their chunks were read: not a break). Such a pair must exist now; the next verification,
    counting it, checks it. One past the events stored now is no answer, and stays a finding."""
    late = {seq: pair for seq, (pair, _duration) in waiting.items() if pair is not None and pair >= count}
    if not late:
        return set()
    now = Session.objects.filter(pk=session_pk).values_list("event_count", flat=True).get()
    return {seq for seq, pair in late.items() if pair < now}


def _read(session_pk: int, start: int, stop: int, chunk: int) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(_READ)} FROM {_TABLE} WHERE session_id = %s AND seq >= %s "
            f"AND seq < %s ORDER BY seq LIMIT {int(chunk)}",
            [session_pk, start, stop],
        )
        return [dict(zip(_READ, row)) for row in cursor.fetchall()]


def _check_link(values: dict[str, Any], expected_prev: str, findings: _Findings) -> str:
    """Check one stored link; the walk goes on from the stored hash, so one edited event is
    reported once, not with every event after it."""
    seq = values["seq"]
    if values["prev_hash"] != expected_prev:
        findings.add(seq, "prev_hash", "does not point at the previous event's hash")
    # A value removed after the event was hashed leaves its commitment in `redacted` and no
    # event salt (chain.redact_field).
    redacted = values["redacted"]
    salted = redacted is not None or _is_salt(values["salt"])
    try:
        if redacted is not None:
            form = parse_redacted(redacted)
            findings.redacted(seq, form)
            for name in edited_after_redaction(form, [values[name] for name in CONTENT_FIELDS]):
                findings.add(seq, name, "the text its redaction left was changed since")
        commits = (
            stored_commitments(values["salt"] or "", redacted, [values[name] for name in CONTENT_FIELDS])
            if salted
            else [None] * len(CONTENT_FIELDS)
        )
    except (ValueError, KeyError) as error:
        findings.add(seq, "redacted", f"the record of removed values cannot be read ({error})")
        values["redacted"] = None  # derived from as an unredacted event: the writer's code could not read it
        return values["hash"]
    recomputed = link_hash(
        values["prev_hash"], seq, recorded_values([values[name] for name in RECORDED_FIELDS]), commits
    )
    if not salted:
        findings.add(seq, "salt", "no valid salt (recorded before chain form 2: re-import to verify)")
    elif recomputed != values["hash"]:
        findings.add(seq, "hash", "the event's recorded fields or content changed since it was written")
    return values["hash"]


def _is_salt(value: Any) -> bool:
    if not isinstance(value, str) or len(value) != 32:
        return False
    try:
        bytes.fromhex(value)
    except ValueError:
        return False
    return True


def _compare(
    rows: EventRows, stored: list[dict[str, Any]], waiting: dict[int, tuple], findings: _Findings
) -> list[Keyframe]:
    """Compare the derived columns of one chunk (its keyframes are compared at the end); a row
    whose pair may still come later is compared when it comes (or found unpaired at the end)."""
    batch = rows.take()
    open_seqs = {entry[0] for entry in rows.state.open_pairs.values()}
    open_seqs.update(entry[0] for entry in rows.state.early_answers.values())
    pair_seq_at = EVENT_COLUMNS.index("pair_seq")
    for values, derived in zip(stored, batch.rows):
        seq = values["seq"]
        for name in _COMPARED:
            ours = derived[EVENT_COLUMNS.index(name)]
            if name in ("pair_seq", "pair_duration_ms") and derived[pair_seq_at] is None and seq in open_seqs:
                continue
            if not _same(name, ours, values[name]):
                findings.add(seq, name, f"stored {values[name]!r}, derived {ours!r}")
        if derived[pair_seq_at] is None and seq in open_seqs:
            waiting[seq] = (values["pair_seq"], values["pair_duration_ms"])
    for seq, duration, other in batch.pair_updates:
        stored_pair = waiting.pop(seq, None)
        if stored_pair is None:
            continue
        if stored_pair[0] != other or not _same("pair_duration_ms", duration, stored_pair[1]):
            findings.add(seq, "pair_seq", f"stored {stored_pair!r}, derived {(other, duration)!r}")
    return batch.keyframes


def _same(name: str, ours: Any, theirs: Any) -> bool:
    if name == "kind_counts":
        return _counts(ours) == _counts(theirs)
    if ours is None or theirs is None:
        return ours is None and theirs is None
    if isinstance(ours, float) or isinstance(theirs, float):
        return float(ours) == float(theirs)
    return ours == theirs


def _counts(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, (str, bytes)) else value


def _compare_keyframes(session: Session, keyframes: list[Keyframe], findings: _Findings, count: int) -> None:
    derived = {frame.seq: frame for frame in keyframes}
    stored = Snapshot.objects.filter(session=session, kind=Snapshot.Kind.KEYFRAME, seq__lt=count)
    for snapshot in stored.order_by("seq").iterator():
        frame = derived.pop(snapshot.seq, None)
        if frame is None:
            findings.add(snapshot.seq, "keyframe", "a stored state keyframe the events do not give")
        elif (snapshot.variables, snapshot.memory_notes, snapshot.step_pos) != (
            frame.variables,
            frame.memory_notes,
            frame.step_pos,
        ):
            findings.add(snapshot.seq, "keyframe", "the stored variables or memory differ from the events'")
    for seq in sorted(derived):
        findings.add(seq, "keyframe", "the state keyframe at this event is missing")


def _compare_totals(session: Session, state: WriterState, findings: _Findings) -> None:
    fresh = Session.objects.filter(pk=session.pk).values(*_SESSION_TOTALS).get()
    if fresh["event_count"] != state.next_seq:
        return  # a live session grew meanwhile: its totals are past what was checked
    for column, attribute in _SESSION_TOTALS.items():
        if not _same(column, getattr(state, attribute), fresh[column]):
            findings.add(None, f"session.{column}", f"stored {fresh[column]!r}, derived {getattr(state, attribute)!r}")


_SEAL = Session.header_seal.field.name


def _compare_header(session: Session, findings: _Findings) -> None:
    stored = Session.objects.filter(pk=session.pk).values("header_seal", *HEADER_FIELDS).get()
    if not stored["header_seal"]:
        findings.add(None, f"session.{_SEAL}", "the session's own fields were stored without a seal")
        return
    for name in header_changes(stored["header_seal"], stored):
        findings.add(
            None, f"session.{header_field_name(name)}", "changed since it was written: not what its writer sealed"
        )


def _record(session: Session, findings: _Findings, checked: int, head: str, *, store: bool) -> Verification:
    valid = findings.first is None and not findings.other
    checked_at = timezone.now()
    values = {
        "chain_valid": valid,
        "chain_broken_seq": findings.first,
        "chain_checked_at": checked_at,
        "chain_checked_count": checked,
        "chain_redaction_count": findings.redaction_count,
    }
    if store:
        Session.objects.filter(pk=session.pk).update(**values)
        for name, value in values.items():
            setattr(session, name, value)
    return Verification(
        valid=valid,
        first_broken_seq=findings.first,
        events=checked,
        broken_events=len(findings.broken_seqs),
        head=head,
        checked_at=checked_at,
        findings=findings.items,
        redactions=findings.redactions,
        redaction_count=findings.redaction_count,
    )
