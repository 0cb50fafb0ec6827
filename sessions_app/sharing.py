"""Share links: a maintainer opens one session or one tour, read-only, to someone without an
account, for a while (docs/teams.md, "Share links").

The token is made here, handed back once and stored only as its SHA-256; what a visitor may
read through an opened link is sessions_app/access.py's to decide (`ShareGrant`). The API, the
dashboard and `/s/<token>` call these workflows, and each records its audit entry (never the
token).
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from . import access, audit
from .access import Actor
from .models import Membership, Project, Role, Session, ShareLink, Tour

DEFAULT_DAYS = 7
MAX_DAYS = 90
MAX_NOTE = 500
MAX_LISTED = 200
# Tokens are 43 characters (32 bytes, URL-safe base64); anything much longer is not one and is
# not worth hashing.
MAX_TOKEN = 100


class SharingError(ValueError):
    """A request the workflow refuses; the message names the field (a 400, or a form error)."""


@transaction.atomic  # the change and its audit entry, or neither
def create_link(
    *,
    actor: Actor,
    session: Session | None = None,
    tour: Tour | None = None,
    expires_in_days: int = DEFAULT_DAYS,
    note: str = "",
    allow_export: bool = False,
    ip: str | None = None,
) -> tuple[ShareLink, str]:
    """A new link to the session or the tour (exactly one), and its token: shown to the caller
    now and never again."""
    if (session is None) == (tour is None):
        raise ValueError("a share link opens exactly one session or one tour")
    if isinstance(expires_in_days, bool) or not isinstance(expires_in_days, int):
        raise SharingError("expires_in_days: a whole number of days")
    if not 1 <= expires_in_days <= MAX_DAYS:
        raise SharingError(f"expires_in_days: from 1 to {MAX_DAYS} days")
    note = note.strip()
    if len(note) > MAX_NOTE:
        raise SharingError(f"note: at most {MAX_NOTE} characters")
    if "\x00" in note:
        raise SharingError("note: must not contain a NUL character")
    target = session if session is not None else tour
    # The team as it is now, not as the caller's check read it: a maker removed or demoted in
    # between had their links revoked already, and this one would have stayed (and reopened
    # were they given their role back). Their removal waits for this lock, or this for theirs.
    Project.lock(target.project_id)
    if session is not None:
        access.hold(Session, session.pk)
    else:
        access.hold(Tour, tour.pk)
    fresh = Membership.objects.filter(project_id=target.project_id, user=actor.user).values_list("role", flat=True)
    access.check(actor, project_id=target.project_id, role=fresh.first(), need=Role.MAINTAINER, what="share link")
    token = ShareLink.new_token()
    link = ShareLink.objects.create(
        project_id=target.project_id, session=session, tour=tour, token_hash=ShareLink.hash_token(token),
        note=note, allow_export=bool(allow_export), created_by=actor.user, created_by_name=actor.name,
        expires_at=timezone.now() + timedelta(days=expires_in_days),
    )  # fmt: skip
    audit.record(action="share_link.create", actor=actor, project=link.project_id, target=link.target, ip=ip,
                 detail={"link": link.pk, "expires_at": link.expires_at.isoformat(),
                         "allow_export": link.allow_export})  # fmt: skip
    return link, token


def links_of(*, session: Session | None = None, tour: Tour | None = None) -> list[ShareLink]:
    """The links to a session or a tour, newest first (revoked and expired ones included)."""
    links = ShareLink.objects.with_maker_allowed()
    found = links.filter(session=session) if session is not None else links.filter(tour=tour)
    return list(found.order_by("-created_at", "-id")[:MAX_LISTED])


def open_links_of(project_id: int) -> list[ShareLink]:
    """The project's links that open something now, newest first (the project page lists them
    for its maintainers, who would otherwise find them session by session), and those that open
    nothing only while their maker's account is closed (`state` "maker left"): reopened, the
    account reopens them, and an admin looking here for every link that may expose the project
    had not seen them."""
    links = (
        ShareLink.objects.with_maker_allowed()
        .filter(project_id=project_id, revoked_at__isnull=True, expires_at__gt=timezone.now())
        .filter(Q(maker_may_share=True) | Q(created_by__isnull=False))
        .select_related("session", "tour")
    )
    return list(links.order_by("-created_at", "-id")[:MAX_LISTED])


def open_link_counts(project_id: int) -> dict[int, int]:
    """How many links that open something now each user made in the project (by user id): the
    project page's questions before a removal or a change of role say which would end."""
    links = ShareLink.objects.active().filter(project_id=project_id, created_by__isnull=False)
    return dict(links.values("created_by").annotate(count=Count("id")).values_list("created_by", "count"))


@transaction.atomic  # the change and its audit entry, or neither
def revoke_link(*, actor: Actor, link: ShareLink, ip: str | None = None, why: str = "") -> ShareLink:
    """Stop the link opening anything, from its visitors' next request on. Revoking a revoked
    link changes nothing. `why`: said in the audit entry when the revocation is no one's choice
    of this link (its maker left the project)."""
    if link.revoked_at is not None:
        return link
    now = timezone.now()
    # Revoked by whoever gets there first (two posts at once): one revocation, one audit entry.
    if not ShareLink.objects.filter(pk=link.pk, revoked_at=None).update(revoked_at=now, revoked_by=actor.name):
        link.refresh_from_db(fields=["revoked_at", "revoked_by"])
        return link
    link.revoked_at, link.revoked_by = now, actor.name
    detail = {"link": link.pk, "why": why} if why else {"link": link.pk}
    audit.record(action="share_link.revoke", actor=actor, project=link.project_id, target=link.target,
                 detail=detail, ip=ip)  # fmt: skip
    return link


def revoke_links_made_by(*, actor: Actor, project_id: int, user_id: int, why: str, ip: str | None = None) -> int:
    """Revoke the links a user made in a project they may no longer share in (removed, or given
    a role below maintainer), each recorded as revoked and why; how many of them had not expired. They would
    open nothing anyway (`ShareLink.objects.active()`); revoked, the lists and the audit log say
    so, and a role given back later does not reopen them."""
    links = list(ShareLink.objects.filter(project_id=project_id, created_by_id=user_id, revoked_at__isnull=True))
    for link in links:
        revoke_link(actor=actor, link=link, ip=ip, why=why)
    # The ones not expired: what the question before it counted (an expired one ended already).
    now = timezone.now()
    return sum(link.expires_at > now for link in links)


@transaction.atomic  # the change and its audit entry, or neither
def open_link(*, token: str, ip: str | None = None) -> ShareLink | None:
    """The active link the token opens, its use counted and recorded (`share_link.use`, by
    `share:<id>`); None for a token that opens nothing (unknown, revoked or expired)."""
    if not token or len(token) > MAX_TOKEN:
        return None
    link = ShareLink.objects.active().filter(token_hash=ShareLink.hash_token(token)).first()
    if link is None:
        return None
    now = timezone.now()
    # One UPDATE with F(): visits at the same moment each count.
    ShareLink.objects.filter(pk=link.pk).update(use_count=F("use_count") + 1, last_used_at=now)
    audit.record(action="share_link.use", actor=f"share:{link.pk}", project=link.project_id, target=link.target,
                 ip=ip)  # fmt: skip
    return link
