"""Share links: read-only links to one session or one tour for someone without an account.
Maintainers create, list and revoke them (docs/teams.md, "Share links"); the link itself opens
pages only, never this API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from .. import access, audit, sharing
from ..models import Role, Session, ShareLink, Tour
from .schemas import BodyIn, DetailOut, Id, Text

router = Router(tags=["share links"])

DENIED = {400: DetailOut, 403: DetailOut, 404: DetailOut}


class ShareLinkIn(BodyIn):
    expires_in_days: int = Field(sharing.DEFAULT_DAYS, description=f"from 1 to {sharing.MAX_DAYS}")
    note: Text = Field("", description=f"at most {sharing.MAX_NOTE} characters, shown to maintainers only")
    allow_export: bool = Field(False, description="whether the link's visitor may download the exports")


class ShareLinkOut(Schema):
    id: int
    session: int | None = Field(description="the session the link opens (null for a tour link)")
    tour: int | None = Field(description="the tour the link opens (null for a session link)")
    note: str
    allow_export: bool
    created_by: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    revoked_by: str
    use_count: int
    last_used_at: datetime | None
    state: str = Field(description="active, revoked, expired, or maker left (its maker may no longer share here)")


class NewShareLinkOut(ShareLinkOut):
    url: str = Field(description="/s/<token>: the link to hand out, in this answer only (the token is stored hashed)")


def _row(link: ShareLink) -> dict[str, Any]:
    return {
        "id": link.pk, "session": link.session_id, "tour": link.tour_id, "note": link.note,
        "allow_export": link.allow_export, "created_by": link.created_by_name, "created_at": link.created_at,
        "expires_at": link.expires_at, "revoked_at": link.revoked_at, "revoked_by": link.revoked_by,
        "use_count": link.use_count, "last_used_at": link.last_used_at, "state": link.state,
    }  # fmt: skip


def _create(request: HttpRequest, body: ShareLinkIn, **target: Session | Tour) -> Status:
    try:
        link, token = sharing.create_link(actor=access.actor_of(request), **target, ip=audit.client_ip(request),
                                          expires_in_days=body.expires_in_days, note=body.note,
                                          allow_export=body.allow_export)  # fmt: skip
    except sharing.SharingError as exc:
        raise HttpError(400, str(exc))
    return Status(201, _row(link) | {"url": reverse("sessions:open_share_link", args=[token])})


@router.post("/sessions/{session_id}/share-links", response={201: NewShareLinkOut, **DENIED},
             url_name="create_session_share_link")  # fmt: skip
def create_session_link(request: HttpRequest, session_id: Id, body: ShareLinkIn):
    """A read-only link to the session; its `url` is in this answer only. Maintainers."""
    return _create(request, body, session=access.session_for(request, session_id, need=Role.MAINTAINER))


@router.get("/sessions/{session_id}/share-links", response={200: list[ShareLinkOut], **DENIED},
            url_name="session_share_links")  # fmt: skip
def list_session_links(request: HttpRequest, session_id: Id):
    """The session's links, newest first, without their tokens. Maintainers."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    return [_row(link) for link in sharing.links_of(session=session)]


@router.post("/tours/{tour_id}/share-links", response={201: NewShareLinkOut, **DENIED},
             url_name="create_tour_share_link")  # fmt: skip
def create_tour_link(request: HttpRequest, tour_id: Id, body: ShareLinkIn):
    """A read-only link to the tour and the sessions of its stops; its `url` is in this answer
    only. Maintainers."""
    return _create(request, body, tour=access.tour_for(request, tour_id, need=Role.MAINTAINER))


@router.get("/tours/{tour_id}/share-links", response={200: list[ShareLinkOut], **DENIED}, url_name="tour_share_links")
def list_tour_links(request: HttpRequest, tour_id: Id):
    """The tour's links, newest first, without their tokens. Maintainers."""
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    return [_row(link) for link in sharing.links_of(tour=tour)]


@router.delete("/share-links/{link_id}", response={204: None, **DENIED}, url_name="revoke_share_link")
def revoke_link(request: HttpRequest, link_id: Id):
    """Revoke the link: it opens nothing from its visitors' next request on. Maintainers of its
    project; revoking a revoked link changes nothing."""
    link = access.share_link_for(request, link_id, need=Role.MAINTAINER)
    sharing.revoke_link(actor=access.actor_of(request), link=link, ip=audit.client_ip(request))
    return Status(204, None)
