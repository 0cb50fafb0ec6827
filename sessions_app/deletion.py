"""Deleting one session: the workflow behind `DELETE /api/sessions/{id}` and the player's
"Delete session", so both write the same audit entry and leave the upload's original to the
clean-up in the same way.

Who may call it at all (maintainer and up) is the caller's `access.session_for`. Retention and
an import with `replace` delete sessions in bulk and say so in their own ways (retention.py,
ingest/importing.py); `holding_team_work` names the sessions a replace must keep.
"""

from __future__ import annotations

from itertools import batched

import orjson
from django.db import connection, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from . import audit, originals
from .access import Actor, NotVisible
from .models import AuditEntry, Checkpoint, Comment, Project, Review, Session, ShareLink, Tour, TourStop
from .models.audit import log_name
from .models.locks import lock_rows


def delete_session(*, actor: Actor, session: Session, ip: str | None = None) -> int:
    """Delete `session` with its events, snapshots, checkpoints, comments, sign-offs, tour stops
    and share links (the database cascades); its upload's original goes after the grace period.
    Returns how many events went. A live session may be deleted too: the events a batch appends
    meanwhile go with it."""
    session_id = session.pk
    with transaction.atomic():
        shortened = hold_for_delete(session.project_id, Session.objects.filter(pk=session_id))
        # The live writer appends under the row's lock (ingest/live.py), so the count read under
        # it is the number of events that go, not the one the caller loaded a moment ago.
        locked = Session.objects.filter(pk=session_id)
        events = locked.values_list("event_count", flat=True).first()
        if events is None:  # deleted by someone else since the caller looked it up
            raise NotVisible(f"session {session_id} not found")
        holding = originals.jobs_holding(locked)
        detail = {"events": events, "source_session_id": session.source_session_id}
        if shortened:
            detail["tour_stops"] = {str(tour.pk): stops for tour, stops in shortened}
        # The log's head before the row goes: a comment (a review, a stop) on the session that
        # holds the head checks its key at commit, which the delete's lock would block while
        # this waited for the head (tests/test_lock_order.py).
        audit.record(action="session.delete", actor=actor, project=session.project_id,
                     target=f"session:{session_id}", detail=detail, ip=ip)  # fmt: skip
        session.delete()
        originals.note_orphans(job_ids=holding)
        note_shortened(shortened, actor=actor, ip=ip, with_session=session_id)
    return events


def hold_for_delete(project_id: int, sessions: QuerySet[Session]) -> list[tuple[Tour, int]]:
    """Lock what deleting `sessions` (of one project) takes with it, in access.hold's order and
    before the deletion takes the log's head: the project (a team change holding it writes its
    entry, then revokes links the delete takes), the sessions and their sub-agents' (whose
    `parent` the database sets to null; a comment on one holds it before the head), the tours
    they shorten, their share links. Returns those tours with the stops they lose, counted
    under the lock (a tour rewritten meanwhile may no longer stop there; none can gain a stop
    there: its writer holds the session first). Each deadlock this closes was proved on
    PostgreSQL by a review (tests/test_lock_order.py)."""
    Project.lock(project_id)
    lock_rows(sessions)
    lock_rows(Session.objects.filter(parent__in=sessions))
    lock_tours(tours_through(sessions))
    shortened = tours_through(sessions)
    lock_links(ShareLink.objects.filter(session__in=sessions))
    return shortened


def lock_tours(shortened: list[tuple[Tour, int]]) -> None:
    """Lock the tours a deletion shortens, before it takes the log's head (access.hold's order):
    a stop added to one (holding its session, then the tour, then the head) waits for the
    deletion, or the deletion for it, never each for the other."""
    lock_rows(Tour.objects.filter(pk__in=[tour.pk for tour, _ in shortened]))


def lock_links(links: QuerySet[ShareLink]) -> None:
    """Lock the share links a deletion takes with it (the database's cascade), before the log's
    head: a link opened or revoked meanwhile takes its row, then the head, and the cascade had
    waited for its row while holding the head, a deadlock (review)."""
    lock_rows(links, no_key=False)


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


# What people did with a session, as its project's log names it: a checkpoint set or moved (a
# recording's own come back with it), a value redacted after the fact (an import would show it
# again). Read from the log, on its (log, action) index: a scan of every event of every session
# for a redacted one ran while an import held the write lock.
_DONE_BY_PEOPLE = ("checkpoint.create", "checkpoint.change", "session.redact")


def holding_team_work(sessions: QuerySet[Session], among: list[int], *, project_id: int) -> list[int]:
    """Of the sessions `among` (all of `sessions`, a project's), those holding what people did
    with them, which an import's `replace` must not delete: comments, sign-offs, tour stops,
    share links that still open, checkpoints set or moved, values redacted since, or a bundle's
    origin (a restored review)."""
    if not among:
        return []
    team_work = (
        Exists(Comment.objects.filter(session=OuterRef("pk")))
        | Exists(Review.objects.filter(session=OuterRef("pk")))
        | Exists(TourStop.objects.filter(session=OuterRef("pk")))
        | Exists(ShareLink.objects.active().filter(session=OuterRef("pk")))
        | Q(bundle_origin__isnull=False)
    )
    # `among` is matched here, not sent as pk__in: it may hold more ids than a statement binds.
    wanted = set(among)
    held = {pk for pk in sessions.filter(team_work).values_list("pk", flat=True) if pk in wanted}
    size = min(500, (connection.features.max_query_params or 1000) // 2)
    touched: set[int] = set()  # the checkpoints set or moved
    for part in batched(sorted(wanted - held), size):
        logged = AuditEntry.objects.filter(
            log=log_name(project_id), action__in=_DONE_BY_PEOPLE, target__in=[f"session:{pk}" for pk in part]
        ).values_list("target", "action", "detail")
        for target, action, text in logged:
            pk, detail = int(target.removeprefix("session:")), _detail(text)
            if action == "session.redact":
                if _removed_something(detail):
                    held.add(pk)
            elif isinstance(detail.get("checkpoint"), int):
                touched.add(detail["checkpoint"])
            else:  # an entry of an unknown shape: kept, as a checkpoint would be
                held.add(pk)
    # Only while that checkpoint is still there: one set and deleted since leaves nothing to lose.
    for ids in batched(sorted(touched), size):
        held.update(Checkpoint.objects.filter(pk__in=ids).values_list("session_id", flat=True))
    return sorted(held)


def _detail(text: str) -> dict:
    try:
        detail = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return detail if isinstance(detail, dict) else {}


def _removed_something(detail: dict) -> bool:
    """Whether a `session.redact` entry removed a value (a rules run may find none to remove); an
    entry of an unknown shape is taken to have, so the session is kept."""
    if "events" not in detail:
        return True
    # The original kept "deleted" (the rules keep none) or "unchanged" removed no value from it.
    removed = any(detail.get(name) for name in ("events", "session_fields", "elsewhere"))
    return removed or detail.get("original") == "rewritten"
