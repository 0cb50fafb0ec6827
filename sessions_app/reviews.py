"""Sign-offs: a reviewer's verdict on a session, bound to the chain as it was verified then.

`sign_off()` verifies the session first and stores, with the verdict, the chain head it
verified and the seqs it covered; only a rejection may sign off a broken chain. A live session
may grow afterwards: what a sign-off covers now is read by replay/sign_offs.py.
"""

from __future__ import annotations

import hashlib

from django.db import transaction

from . import audit
from .access import Actor, hold
from .models import Review, Session
from .verification import VerificationRunning, verify_once


class SignOffRefused(ValueError):
    """A sign-off the chain does not allow: approving or requesting changes on a broken one."""


# The longest note a sign-off keeps (the page's form and the API's body say so alike).
MAX_NOTE = 10_000


def sign_off(*, session: Session, reviewer: Actor, verdict: str, note: str = "", ip: str | None = None) -> Review:
    """Verify the session, then record the reviewer's verdict on what was verified.

    Raises SignOffRefused (naming the broken seq) when the chain does not hold and the verdict
    is not a rejection; a rejection of a broken chain is stored with chain_valid False."""
    if verdict not in Review.Verdict.values:
        raise SignOffRefused(f"verdict: one of {', '.join(Review.Verdict.values)}")
    try:
        checked = verify_once(session=session)
    except VerificationRunning as running:
        raise SignOffRefused(f"{running}; sign off once it has ended") from None
    # Nothing recorded (it would read "covers 1-0 of 0"). Both counts: events deleted from a
    # session's rows leave its own count, and that session can be rejected.
    if checked.events == 0 and session.event_count == 0:
        raise SignOffRefused("the session has no events yet: there is nothing to sign off")
    if not checked.valid and verdict != Review.Verdict.REJECTED:
        where = (
            f"at seq {checked.first_broken_seq} (event #{checked.first_broken_seq + 1})"
            if checked.first_broken_seq is not None
            else "in the session's own fields ("
            + ", ".join(sorted({f["field"].removeprefix("session.") for f in checked.findings if f["seq"] is None}))
            + ")"
        )
        raise SignOffRefused(
            f"the session's chain is broken {where}: it can only be rejected, not {Review.Verdict(verdict).label.lower()}"
        )
    # The range is what the verification read (its count and head were read together), not the
    # session's count now: a live writer may have appended while it ran, and those events were
    # not checked, so they are not signed.
    # The session's own fields as they were verified, read with nothing between: what the sign-off
    # pins as the event chain's head pins the events.
    with transaction.atomic():
        hold(Session, session.pk)
        seal = Session.objects.filter(pk=session.pk).values_list("header_seal", flat=True).get()
        review = Review.objects.create(
            session=session,
            reviewer=reviewer.user,
            reviewer_name=reviewer.name,
            verdict=verdict,
            note=note,
            chain_head=checked.head,
            chain_valid=checked.valid,
            first_seq=0,
            last_seq=checked.events - 1,
            header_seal=seal,
        )
        # The note is the reviewer's own words: it stays in the review, not in the audit log.
        audit.record(
            action="review.create",
            actor=reviewer,
            project=session.project_id,
            target=f"session:{session.pk}",
            detail={
                "review": review.pk,
                "verdict": verdict,
                "first_seq": review.first_seq,
                "last_seq": review.last_seq,
                "chain_head": review.chain_head,
                "chain_valid": review.chain_valid,
                # In the log's own chain: a later rewrite of the sign-off's copy shows there.
                "header_seal": hashlib.sha256(seal.encode()).hexdigest(),
            },
            ip=ip,
        )
    return review
