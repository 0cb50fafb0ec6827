"""What a session's sign-offs cover now (the read side of sessions_app/reviews.py, which records
them): "covers events 1–N of M", and whether the events a sign-off covered are still the ones it
signed: the stored event at its last seq still has the hash it signed, and no verification since
found an event inside its range broken. (An edit of a stored field leaves the stored hashes as
they were, so the hash alone cannot show it; the verification that re-derives every event does.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from django.db.models import Q

from ..chain import HEADER_FIELDS, header_digest, header_digests, header_field_name
from ..models import AuditEntry, Event, Review, Session
from ..models.audit import log_name
from ..models.planning import planned_for_values


@dataclass(frozen=True)
class RedactedAfter:
    """A redaction of the session after a sign-off, as its `session.redact` audit entry says."""

    by: str
    at: datetime  # when it began: a sign-off made while it ran signed what it left
    events: int
    # The digest of the value it left in each field it changed (by the model's field name): the
    # field counts as redacted, not edited, while it still holds that value.
    left: dict[str, str] = field(default_factory=dict)

    @property
    def session_fields(self) -> tuple[str, ...]:
        """The session's own fields it changed, as findings name them."""
        return tuple(header_field_name(name) for name in self.left)


@dataclass(frozen=True)
class Coverage:
    """What a sign-off covers of its session now, counted from 1 for people."""

    first: int  # the first event it covered (1)
    last: int  # the last event it covered (N); 0 when the session had no events
    of: int  # the events the session has now (M)
    unchanged: bool  # the covered events still end in the head it signed, and none was found broken
    # The first event inside the range a verification after the sign-off found broken (a seq),
    # or -1 when it found the session's stored totals broken rather than an event; None: none.
    broken_seq: int | None = None
    # The session's own fields (task, answer, status, ...) whose digest is not what the sign-off
    # signed: changed since, by a writer (a live session ending) or by an edit.
    fields_changed: tuple[str, ...] = ()
    # Of those, the ones a redaction after the sign-off changed (recorded as such in the audit
    # log): a value removed, which the sign-off's chain still holds, not an edit.
    fields_redacted: tuple[str, ...] = ()
    # Of those, the ones that events appended after the sign-off move (GROWN_FIELDS), in a
    # session that grew since: what its writer did after it, not an edit (verification still
    # finds an edit of them, against the session's own seal).
    fields_grown: tuple[str, ...] = ()
    # The redactions after the sign-off, oldest first: who, when (ISO), how many events.
    redacted_after: tuple[RedactedAfter, ...] = ()
    # What the stored sign-off says that its `review.create` audit entry, in the log's own
    # verified chain, does not (verdict, range, head, the seal it signed): its row was rewritten.
    record_differs: tuple[str, ...] = ()

    @property
    def grew(self) -> bool:
        """Events were appended after the sign-off: they are outside it."""
        return self.of > self.last

    def to_dict(self) -> dict[str, int]:
        return {"from": self.first, "to": self.last, "of": self.of}


@dataclass(frozen=True)
class SignOff:
    """A review with its coverage now, as the player and the API show it."""

    review: Review
    coverage: Coverage
    current: bool  # the session's newest sign-off: its review state


def coverage(
    review: Review,
    *,
    session: Session,
    hash_at_last: str | None,
    redactions: Sequence[RedactedAfter] = (),
    recorded: dict[str, Any] | None = None,
) -> Coverage:
    """The review's coverage of `session` as it is now (its event count and its latest
    verification), whose event at the review's last seq has the hash `hash_at_last` (None: that
    event is gone). `redactions`: the session's, oldest first (`audit_of`); those after the
    review are its `redacted_after`. `recorded`: its `review.create` audit entry's detail (None:
    none found, as for a sign-off restored from a bundle)."""
    broken = _broken_inside(review, session)
    unchanged = (review.last_seq < 0 or hash_at_last == review.chain_head) and broken is None
    after = tuple(r for r in redactions if r.at > review.created_at)
    changed = _fields_changed(review, session)
    # A changed field is redacted when the latest redaction since that changed it left the value
    # it holds now; any other value is an edit (made after the redaction, or by hand).
    left: dict[str, str] = {}
    for redaction in after:
        left.update(redaction.left)
    redacted = {name for name in changed if left.get(name) == header_digest(name, getattr(session, name))}
    grew = session.event_count > review.last_seq + 1
    grown = {name for name in changed if grew and name in GROWN_FIELDS and name not in redacted}
    return Coverage(
        first=review.first_seq + 1, last=review.last_seq + 1, of=session.event_count, unchanged=unchanged,
        broken_seq=broken,
        fields_changed=tuple(header_field_name(n) for n in changed if n not in redacted and n not in grown),
        fields_grown=tuple(header_field_name(n) for n in changed if n in grown),
        fields_redacted=tuple(header_field_name(n) for n in changed if n in redacted), redacted_after=after,
        record_differs=_record_differs(review, recorded),
    )  # fmt: skip


def _record_differs(review: Review, recorded: dict[str, Any] | None) -> tuple[str, ...]:
    if not isinstance(recorded, dict):
        return ()
    stored = {
        "verdict": review.verdict, "first_seq": review.first_seq, "last_seq": review.last_seq,
        "chain_head": review.chain_head, "chain_valid": review.chain_valid,
        "header_seal": hashlib.sha256(review.header_seal.encode()).hexdigest(),
    }  # fmt: skip
    # An entry written before a field was recorded says nothing of it.
    differs = [name for name, value in stored.items() if name in recorded and recorded[name] != value]
    # Who signed, and when: the entry's own actor and time (written a moment after the row).
    if recorded.get("_actor") not in (None, review.reviewer_name):
        differs.append("reviewer")
    at = recorded.get("_at")
    if isinstance(at, datetime) and abs((at - review.created_at).total_seconds()) > SIGNED_AT_SLACK:
        differs.append("created_at")
    return tuple(differs)


# Seconds between a sign-off's row and its audit entry, written in the same transaction.
SIGNED_AT_SLACK = 60


def audit_of(session: Session, *, since: datetime) -> tuple[list[RedactedAfter], dict[int, dict[str, Any]]]:
    """From the session's audit log (one query on the log's action index): its redactions after
    `since`, oldest first, and each sign-off's `review.create` detail by review id. The log is
    hash-chained: its verification (audit.verify_log, the audit page's) finds an entry added or
    changed in the database, which a sign-off's or a session's own row would not show."""
    entries = AuditEntry.objects.filter(
        Q(action="session.redact", at__gt=since) | Q(action="review.create"),
        log=log_name(session.project_id),
        target=f"session:{session.pk}",
    ).order_by("seq")
    found, created = [], {}
    for action, actor, at, detail in entries.values_list("action", "actor", "at", "detail"):
        said = orjson.loads(detail)
        if action == "review.create":
            if isinstance(said, dict) and isinstance(said.get("review"), int):
                created[said["review"]] = said | {"_actor": actor, "_at": at}
            continue
        if not isinstance(said, dict):
            continue
        fields = said.get("session_fields")
        left = (
            {n: d for n, d in fields.items() if isinstance(n, str) and isinstance(d, str)}
            if isinstance(fields, dict)
            else {}
        )
        events = said.get("events") if isinstance(said.get("events"), int) else 0
        began = _instant(said.get("at")) or at
        found.append(RedactedAfter(by=actor, at=began, events=events, left=left))
    return found, created


def _instant(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


# The sealed fields a writer moves as events are appended: the running reward, and at a live
# session's end its status, completion, end time and answer (a first event's time, its start).
GROWN_FIELDS = frozenset({"reward", "status", "completed", "ended_at", "final_answer", "started_at"})


def _fields_changed(review: Review, session: Session) -> tuple[str, ...]:
    """The fields (by the model's names) whose value now is not the one signed: by their digests, the signed ones kept
    with the sign-off, so an edit shows whether or not the session's own seal was made again."""
    if not review.header_seal:
        return ()
    signed = header_digests(review.header_seal)
    return tuple(
        name for name in HEADER_FIELDS if name in signed and signed[name] != header_digest(name, getattr(session, name))
    )


def _broken_inside(review: Review, session: Session) -> int | None:
    """Where the session's latest verification found the signed range broken. Only for a
    sign-off made on a chain that held (a rejection of a broken chain signed it broken), and
    only a verification after it: one before it was the sign-off's own, or older."""
    if not review.chain_valid or session.chain_valid is not False or review.last_seq < 0:
        return None
    if session.chain_checked_at is None or session.chain_checked_at < review.created_at:
        return None
    if session.chain_broken_seq is None:
        return -1  # the stored totals, not one event: the whole range is in question
    return session.chain_broken_seq if session.chain_broken_seq <= review.last_seq else None


def newest_broken(sessions: list[Session]) -> set[int]:
    """The ids of `sessions` whose newest sign-off a verification after it found broken inside
    the range it signed (the player's warning on that sign-off), for a list of them: one query,
    and none unless one of them has a broken chain and a sign-off (`review_state`)."""
    candidates = {s.pk: s for s in sessions if s.chain_valid is False and getattr(s, "review_state", None)}
    if not candidates:
        return set()
    newest: dict[int, Review] = {}
    made_here = Review.objects.filter(session__in=list(candidates), restored_from="")
    for review in made_here.order_by("session_id", "-created_at", "-id"):
        newest.setdefault(review.session_id, review)
    return {pk for pk, review in newest.items() if _broken_inside(review, candidates[pk]) is not None}


def sign_offs_of(*, session: Session) -> list[SignOff]:
    """The session's sign-offs, newest first, each with its coverage now. Four queries whatever
    their number (one when there is none): the reviews, the session row as it is now, the stored
    hashes at their last seqs, and the session's audit entries (`audit_of`)."""
    reviews = list(Review.objects.filter(session=session).order_by("-created_at", "-id"))
    if not reviews:
        return []
    # The row as it is now: its count and its latest verification (the caller's may be older).
    now = Session.objects.only(
        "event_count", "chain_valid", "chain_broken_seq", "chain_checked_at", *HEADER_FIELDS
    ).get(pk=session.pk)
    last_seqs = {r.last_seq for r in reviews if r.last_seq >= 0}
    with planned_for_values():  # a list of seqs: models/planning.py says why
        hashes = dict(Event.objects.filter(session=session, seq__in=last_seqs).order_by().values_list("seq", "hash"))
    # The current one: the newest made here (a restored one is shown, never the review state).
    current = next((r for r in reviews if not r.restored_from), None)
    redactions, created = audit_of(session, since=min(r.created_at for r in reviews))
    return [
        SignOff(
            review=r,
            current=r is current,
            coverage=coverage(
                r,
                session=now,
                hash_at_last=hashes.get(r.last_seq),
                redactions=redactions,
                recorded=None if r.restored_from else created.get(r.pk),
            ),
        )  # fmt: skip
        for r in reviews
    ]
