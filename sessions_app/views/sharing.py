"""Share links in the dashboard: `/s/<token>` for a visitor, the Share links panel for
maintainers (on the player and the tour page), and what the player shows a visitor.

What a visitor may read is sessions_app/access.py's to decide (`ShareGrant`); the workflows are
sessions_app/sharing.py.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import access, audit, sharing
from ..forms import ShareLinkForm, error_text
from ..lookalikes import shown_plainly
from ..models import Role, Session, ShareLink, Tour
from ..replay import exports
from .pages import asked_first, login_required, wants_partial

# The exports a visitor's link may allow (the signed bundle carries the team's comments and
# sign-offs, which a link does not share).
VISITOR_EXPORTS = (("jsonl", "rlm-code JSONL"), ("snapshot", "snapshot JSON"), ("original", "original records"))


@require_GET
def open_link(request: HttpRequest, token: str) -> HttpResponse:
    """A visitor's way in: an active link's grant kept in the browser's session, then the
    player of its session or tour. Anything else is the plain 404 of an unknown address."""
    link = sharing.open_link(token=token, ip=audit.client_ip(request))
    if link is None:
        raise Http404()
    access.remember_share_link(request, link.pk)
    if link.tour_id is not None:
        return redirect("sessions:tour_play", link.tour_id)
    return redirect("sessions:player", link.session_id)


def visitor_page(request: HttpRequest, session: Session) -> dict[str, Any]:
    """What the player shows in place of the team's panels to someone who sees the session
    through a share link: its exports, when a link allows them, through the export page."""
    if not access.may_export(request, session):
        return {"exports": []}
    url = reverse("sessions:export", args=[session.pk])
    offered = [(name, label) for name, label in VISITOR_EXPORTS
               if name != "original"
               or (access.may_export_original(request, session) and not exports.original_missing(session))]  # fmt: skip
    return {"exports": [{"url": f"{url}?format={name}", "label": label} for name, label in offered]}


def may_share(request: HttpRequest, found: Session | Tour) -> bool:
    """Whether the caller may create and revoke links to `found` (no query: the lookup's role)."""
    return access.may(request, found, Role.MAINTAINER)


# --- the panel --------------------------------------------------------------------------------


def _panel(request: HttpRequest, found: Session | Tour, *, created: str = "", form: ShareLinkForm | None = None,
           error: str = "") -> HttpResponse:  # fmt: skip
    is_session = isinstance(found, Session)
    context = {
        "share_target": found,
        "share_what": "session" if is_session else "tour",
        "share_links": sharing.links_of(session=found) if is_session else sharing.links_of(tour=found),
        "share_url": reverse("sessions:share_links" if is_session else "sessions:tour_share_links", args=[found.pk]),
        "share_form": form or ShareLinkForm(),
        "share_created": created,
        "share_error": error,
    }
    # A refusal is a 400 with the panel saying why (base.html's htmx responseHandling swaps it in).
    status = 400 if error else 200
    if wants_partial(request):
        template = "sessions_app/includes/share_links.html#share-links"
    else:  # without JavaScript: the panel as a page of its own
        template = "sessions_app/share_links.html"
        context |= _target_names(found)
    response = render(request, template, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _target_names(found: Session | Tour) -> dict[str, str]:
    if isinstance(found, Session):
        return {"share_title": str(found.source_session_id or found.pk), "share_back_url": found.get_absolute_url()}
    return {"share_title": found.title, "share_back_url": reverse("sessions:tour", args=[found.pk])}


def _create(request: HttpRequest, found: Session | Tour) -> HttpResponse:
    form = ShareLinkForm(request.POST)
    if not form.is_valid():
        return _panel(request, found, form=form, error=error_text(form))
    target = {"session": found} if isinstance(found, Session) else {"tour": found}
    try:
        _, token = sharing.create_link(actor=access.actor_of(request), **target, ip=audit.client_ip(request),
                                       **form.cleaned_data)  # fmt: skip
    except sharing.SharingError as exc:
        return _panel(request, found, form=form, error=str(exc))
    # The token is in this answer only: the link is built here and never stored.
    return _panel(request, found, created=request.build_absolute_uri(reverse("sessions:open_share_link", args=[token])))


@login_required
@require_http_methods(["GET", "POST"])
def session_share_links(request: HttpRequest, session_id: int) -> HttpResponse:
    """The session's Share links panel (GET), or a new link (POST, shown once in the panel)."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    return _create(request, session) if request.method == "POST" else _panel(request, session)


@login_required
@require_http_methods(["GET", "POST"])
def tour_share_links(request: HttpRequest, tour_id: int) -> HttpResponse:
    """The tour's Share links panel (GET), or a new link (POST, shown once in the panel)."""
    tour = access.tour_for(request, tour_id, need=Role.MAINTAINER)
    return _create(request, tour) if request.method == "POST" else _panel(request, tour)


@login_required
@require_POST
def revoke(request: HttpRequest, link_id: int) -> HttpResponse:
    link: ShareLink = access.share_link_for(request, link_id, need=Role.MAINTAINER)
    back = reverse("sessions:share_links" if link.session_id else "sessions:tour_share_links",
                   args=[link.session_id or link.tour_id])  # fmt: skip
    # Named as the list names it: the list holds several alike "revoke" buttons.
    named = f"“{shown_plainly(link.note) or '(no note)'}” by {shown_plainly(link.created_by_name) or '(unknown)'}"
    question = (
        f"Revoke the link {named}, expiring {link.expires_at:%Y-%m-%d %H:%M} UTC? Whoever holds it can no longer "
        "open what it shares."
    )
    if asked := asked_first(request, question=question, answer="Revoke the link", back=back):
        return asked
    sharing.revoke_link(actor=access.actor_of(request), link=link, ip=audit.client_ip(request))
    found = access.session_for(request, link.session_id) if link.session_id else access.tour_for(request, link.tour_id)
    if not wants_partial(request):  # without JavaScript: back to the links' own page
        return redirect("sessions:share_links" if link.session_id else "sessions:tour_share_links", found.pk)
    return _panel(request, found)
