"""Deleting one session: the workflow behind `DELETE /api/sessions/{id}` and the player's
"Delete session", so both write the same audit entry and leave the upload's original to the
clean-up in the same way.

Who may call it at all (maintainer and up) is the caller's `access.session_for`. Retention and
an import with `replace` delete sessions in bulk and say so in their own ways (retention.py,
ingest/importing.py).
"""

from __future__ import annotations

from django.db import transaction

from . import audit, originals
from .access import Actor, NotVisible
from .models import Session


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
        session.delete()
        originals.note_orphans(job_ids=holding)
        audit.record(action="session.delete", actor=actor, project=session.project_id,
                     target=f"session:{session_id}",
                     detail={"events": events, "source_session_id": session.source_session_id}, ip=ip)  # fmt: skip
    return events
