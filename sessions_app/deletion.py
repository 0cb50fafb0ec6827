"""Deleting one session: the workflow behind `DELETE /api/sessions/{id}` and the player's
"Delete session", so both write the same audit entry and leave the upload's original to the
clean-up in the same way.

Who may call it at all (maintainer and up) is the caller's `access.session_for`. Retention and
an import with `replace` delete sessions in bulk and say so in their own ways (retention.py,
ingest/importing.py).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Count, QuerySet
from django.utils import timezone

from . import audit, originals
from .access import Actor, NotVisible
from .models import Session, Tour, TourStop


def delete_session(*, actor: Actor, session: Session, ip: str | None = None) -> int:
    """Delete `session` with its events, snapshots, checkpoints, comments, sign-offs, tour stops
    and share links (the database cascades); its upload's original goes after the grace period.
    Returns how many events went. A live session may be deleted too: the events a batch appends
    meanwhile go with it."""
    session_id = session.pk
    with transaction.atomic():
        # The live writer appends under this row's lock (ingest/live.py), so the count read under
        # it is the number of events that go, not the one the caller loaded a moment ago.
        locked = Session.objects.select_for_update().filter(pk=session_id)
        events = locked.values_list("event_count", flat=True).first()
        if events is None:  # deleted by someone else since the caller looked it up
            raise NotVisible(f"session {session_id} not found")
        holding = originals.jobs_holding(locked)
        shortened = tours_through(session)
        session.delete()
        originals.note_orphans(job_ids=holding)
        detail = {"events": events, "source_session_id": session.source_session_id}
        if shortened:
            detail["tour_stops"] = {str(tour.pk): stops for tour, stops in shortened}
        audit.record(action="session.delete", actor=actor, project=session.project_id,
                     target=f"session:{session_id}", detail=detail, ip=ip)  # fmt: skip
        note_shortened(shortened, actor=actor, ip=ip, with_session=session_id)
    return events


def note_shortened(shortened: list[tuple[Tour, int]], *, actor: Actor | str, ip: str | None = None,
                   **detail: object) -> None:  # fmt: skip
    """Each tour a deletion shortened says so in its own history (`tour.change` with
    `stops_removed`), and shows it changed (its updated time): inside the deletion's transaction."""
    now = timezone.now()
    for tour, stops in shortened:
        Tour.objects.filter(pk=tour.pk).update(updated_at=now)
        audit.record(action="tour.change", actor=actor, project=tour.project_id, target=f"tour:{tour.pk}",
                     detail={"stops_removed": stops, **detail}, ip=ip)  # fmt: skip


def tours_through(sessions: Session | QuerySet[Session]) -> list[tuple[Tour, int]]:
    """The tours that stop on a session (or any of several), each with how many of its stops are
    there (they go with them): by title, for the question that asks before deleting one."""
    where = {"session": sessions} if isinstance(sessions, Session) else {"session__in": sessions}
    counts = TourStop.objects.filter(**where).values("tour_id").annotate(n=Count("id"))
    stops = {row["tour_id"]: row["n"] for row in counts}
    return [(tour, stops[tour.pk]) for tour in Tour.objects.filter(pk__in=stops).order_by("title", "id")]
