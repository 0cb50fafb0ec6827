"""The player page and its panels that every reader of a session has: the frame, the search,
the chain badge and its verification, the live tail and the charts (the team's panels are each
their own module: comments, reviews, redactions, sharing, tours; the diff is views/diff.py).

Small functions that look up through sessions_app/access.py, validate the query string, call a
workflow and render (views/pages.py says how htmx requests get partials).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from .. import access, audit, replay, sse, verification
from ..canonical import ALL_KINDS
from ..checkpoints import checkpoints_listed
from ..forms import PACES, SPEEDS, LiveTailForm, PlayerForm, SearchForm, SignOffForm, error_text
from ..models import Role, Session
from ..replay import charts, exports, timeline
from ..replay.frames import Frame, frame_at, search_panel
from ..replay.imports import session_import_problems
from ..replay.sign_offs import sign_offs_of
from .comments import comment_panel, discussion, refused_comment
from .pages import player_link_suffix, render_page, signed_in_or_shared, wants_partial
from .redactions import redaction_panel
from .sharing import may_share, visitor_page
from .tours import tour_builder, tour_mode_context


@signed_in_or_shared
@require_GET
def player(request: HttpRequest, session_id: int) -> HttpResponse:
    session = access.session_for(request, session_id)
    return player_page(request, session, PlayerForm(request.GET).values())


def player_page(request: HttpRequest, session: Session, state: dict[str, Any], *,
                extra: dict[str, Any] | None = None, status: int = 200) -> HttpResponse:  # fmt: skip
    """The player in `state` (PlayerForm's values): the frame for htmx, else the whole page
    (with `extra`: what a refused form post shows in its panel, under its `status`)."""
    # Seen through a share link (no role of one's own): the recording, not the team's work on it.
    shared = access.share_grant_on(request, session)
    live = session.status == Session.Status.LIVE
    # Without a step a finished session opens at its start, a live one at its newest event.
    seq = state["step"] if state["step"] is not None or live else 0
    frame = frame_at(session=session, seq=seq, kinds=state["types"])
    partial = wants_partial(request)
    context: dict[str, Any] = {
        "session": session, "frame": frame, "state": state, "live": live, "oob": partial,
        "keep": player_link_suffix(state), "shared": shared, "step_notice": _step_notice(state, frame, session),
    }  # fmt: skip
    context |= _frame_extras(request, session, frame, state, partial=partial, live=live, shared=shared)
    if live or not partial:
        context["overview"] = timeline.session_overview(session=session)
    if shared is None:
        context |= comment_panel(request, session, frame.seq)
        if not partial:
            context |= refused_comment(request, session)
    context |= tour_mode_context(request, session, state, context["keep"])
    if not partial:
        team = shared is None
        context |= _player_page(session)
        context |= _team_panels(request, session, context["overview"]) if team else visitor_page(request, session)
        if team:
            context |= redaction_panel(request, session, frame.seq)
    response = render_page(request, "sessions_app/player.html", "step-list", context | (extra or {}))
    response.status_code = status
    return response


def _step_notice(state: dict[str, Any], frame: Frame, session: Session) -> str:
    """What of the URL the player could not follow (a link typed or cut short), so a shared link
    that opens elsewhere, or plays otherwise, says so instead of doing it silently."""
    return " ".join(filter(None, (_step_shown(state, frame, session), *_settings_ignored(state))))


def _step_shown(state: dict[str, Any], frame: Frame, session: Session) -> str:
    shown = f"showing event #{frame.seq + 1}"
    if state.get("step_refused") is not None:
        return f"?step={state['step_refused']} is not an event's seq (a whole number from 0); {shown}."
    asked = state["step"]
    if asked is not None and session.event_count and asked > frame.seq:
        return f"?step={asked} is past this session's last event (seq {frame.seq}); {shown}, the last."
    return ""


def _settings_ignored(state: dict[str, Any]) -> list[str]:
    said = []
    refused = state.get("refused", {})
    if "speed" in refused:
        said.append(f"?speed={refused['speed']} is not a speed ({', '.join(SPEEDS)}); playing at {state['speed']}×.")
    if "pace" in refused:
        paces = " or ".join(name for name, _label in PACES)
        said.append(f"?pace={refused['pace']} is not a pace ({paces}); the pace is {state['pace']}.")
    if state.get("unknown_kinds"):
        said.append(f"?types={','.join(state['unknown_kinds'])}: no such event kind, ignored.")
    return said


# While a session is being written, its header and the filters' counts travel with every frame
# (from the session row, loaded already: no query), and for this long after its last write, so
# the frames asked for as it finishes show its final numbers too.
WRITTEN_LATELY = timedelta(minutes=1)


def _frame_extras(request: HttpRequest, session: Session, frame: Frame, state: dict[str, Any], *, partial: bool,
                  live: bool, shared: Any) -> dict[str, Any]:  # fmt: skip
    """The player's own parts of a frame: whether the checkpoint form is there (and so its
    shown step), the link that shows an event the filter hides, and the live header."""
    extras: dict[str, Any] = {
        "can_checkpoint": shared is None and access.may(request, session, Role.MAINTAINER),
    }
    if frame.hidden_kind:
        extras["show_hidden"] = player_link_suffix(state | {"types": [*state["types"], frame.hidden_kind]})
    if not partial or live or timezone.now() - session.updated_at < WRITTEN_LATELY:
        extras |= {"header_oob": partial, "kind_options": _kind_options(session, live=live)}
    return extras


def _kind_options(session: Session, *, live: bool) -> list[tuple[str, int]]:
    """The filters' kinds with their counts, most frequent first. A live session lists every
    kind (those not seen yet hidden until they are), so each frame's count has its place."""
    counts = session.kind_counts if isinstance(session.kind_counts, dict) else {}
    if live:
        counts = {kind: counts.get(kind, 0) for kind in sorted(ALL_KINDS)} | counts
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _team_panels(request: HttpRequest, session: Session, overview: timeline.Overview) -> dict[str, Any]:
    """The full player's panels of the team's work: sign-offs, the Discussion, share links,
    "add this step to a tour…"."""
    return (
        sign_off_panel(request, session)
        | discussion(session, overview)
        | {"can_share": may_share(request, session)}
        | {"can_delete": access.may(request, session, Role.MAINTAINER)}
        | tour_builder(request, session)
        | {"import_problems": session_import_problems(jobs=access.jobs_visible_to(request), session=session)}
    )


def sign_off_panel(request: HttpRequest, session: Session, **extra: Any) -> dict[str, Any]:
    """What the panel shows: the sign-offs, and the form for a caller who may sign off."""
    return {
        "sign_offs": sign_offs_of(session=session),
        "can_sign_off": access.may(request, session, Role.REVIEWER),
        "sign_off_form": SignOffForm(),
    } | extra


def _player_page(session: Session) -> dict[str, Any]:
    """What only the full player page shows (the frame's partial leaves these alone)."""
    metadata = session.metadata if isinstance(session.metadata, dict) else {}
    recovery = None
    if metadata.get("pending_phase"):
        recovery = {"phase": metadata["pending_phase"], "action": metadata.get("pending_action", ""),
                    "seq": metadata.get("pending_event_index"), "blocks": metadata.get("pending_run_python") or [],
                    "assistant": metadata.get("pending_assistant"), "deferred": metadata.get("pending_deferred")}  # fmt: skip
    export_url = reverse("api:export", args=[session.pk])
    return checkpoints_listed(session=session) | {
        "recovery": recovery,
        "exports": [
            {"url": f"{export_url}?format=jsonl", "label": "rlm-code JSONL"},
            {"url": f"{export_url}?format=snapshot", "label": "snapshot JSON"},
            # Said, not offered, when there is nothing: an empty download explained nothing.
            {
                "url": f"{export_url}?format=original",
                "label": "original records",
                "missing": exports.original_missing(session),
            },
            {"url": reverse("api:bundle", args=[session.pk]), "label": "evidence bundle (signed .zip)"},
        ],
        "speeds": [(s, f"{s}×") for s in SPEEDS],
        "paces": PACES,
        "categories": timeline.CATEGORY_NAMES,
        "badge_polls": _verification_due(session),
    }


# A session that ended is verified by a worker within seconds (jobs.enqueue_verify_after_commit):
# its open player's chain badge asks again every few seconds for this long, then leaves it to a
# reload (a worker that is down would otherwise be polled for ever).
BADGE_POLL_SECONDS = 120


def _verification_due(session: Session) -> bool:
    """Whether the session ended lately and no verification has run on it yet."""
    return (
        session.status != Session.Status.LIVE
        and session.chain_state == "unverified"
        and (timezone.now() - session.updated_at).total_seconds() < BADGE_POLL_SECONDS
    )


@signed_in_or_shared
@require_GET
def chain_badge(request: HttpRequest, session_id: int) -> HttpResponse:
    """The chain badge as it is now: what the player asks for once a live session has ended,
    and again (the badge polls itself) until the verification that follows the end has run."""
    session = access.session_for(request, session_id)
    context = {"session": session, "badge_polls": _verification_due(session)}
    return render(request, "sessions_app/player.html#chain-badge", context)


@signed_in_or_shared
@require_GET
def search(request: HttpRequest, session_id: int) -> HttpResponse:
    """Events matching the search box, from the shown step on: the results for htmx, else the
    player at that step with them (a search's address is a page of its own)."""
    session = access.session_for(request, session_id)
    form = SearchForm(request.GET)
    query = form.values()
    error = f"Search: {form.errors['q'][0]}." if "q" in form.errors else ""
    start = query["step"] or 0
    found = None
    if not error and (query["q"] or query["errors"] or query["kind"]):
        found = search_panel(replay.search(session=session, q=query["q"] or "", kind=query["kind"] or None,
                                           errors=query["errors"], from_seq=start, limit=20))  # fmt: skip
    context = {"search": found, "search_from": start, "search_error": error, "search_q": request.GET.get("q", ""),
               "search_errors": query["errors"]}  # fmt: skip
    status = 400 if error else 200
    state = PlayerForm(request.GET).values()
    if not wants_partial(request):
        return player_page(request, session, state, extra=context, status=status)
    # The results' links keep the viewer's kinds, speed, pace and tour, as the step list's do.
    keep = player_link_suffix(state)
    context |= {"session": session, "keep": tour_mode_context(request, session, state, keep).get("keep", keep)}
    response = render(request, "sessions_app/player.html#search-results", context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


@signed_in_or_shared
@require_POST
def verify(request: HttpRequest, session_id: int) -> HttpResponse:
    """Verify the stored session now and show the chain badge's new state."""
    session = access.session_for(request, session_id)
    visitor = access.share_grant_on(request, session) is not None
    result, running = None, None
    if not (visitor and _verified_lately(session)):
        try:
            result = verification.verify_once(session=session)
        except verification.VerificationRunning as already:
            running = already  # its result shows when it ends (the badge asks again)
        else:
            audit.record_on_session(
                request, "session.verify", session, valid=result.valid, first_broken_seq=result.first_broken_seq
            )
    if not request.htmx:
        return redirect(_the_player_it_came_from(request, session))
    badge = render_to_string("sessions_app/player.html#chain-badge",
                             {"session": session, "verification": result, "running": running,
                              "badge_polls": running is not None}, request)  # fmt: skip
    if visitor:
        return HttpResponse(badge)  # a link's visitor sees no sign-offs
    # The sign-offs' list, out of band: a break the verification found inside one is said there at
    # once (their form stays as it is, with whatever is being typed in it).
    panel = render_to_string("sessions_app/player.html#sign-off-list",
                             {"session": session, "sign_offs_oob": True} | sign_off_panel(request, session), request)  # fmt: skip
    return HttpResponse(badge + panel)


def _the_player_it_came_from(request: HttpRequest, session: Session) -> str:
    """Back to the player as it was (its step, kinds, speed) when the form was posted from it,
    as the browser's same-origin Referer says; else to the session's start. A form posted
    without JavaScript reloads the page, and used to lose the viewer's place."""
    came_from = urlsplit(request.META.get("HTTP_REFERER", ""))
    here = session.get_absolute_url()
    if came_from.netloc != request.get_host() or came_from.path not in (
        here,
        reverse("sessions:search", args=[session.pk]),
    ):
        return here
    # From a search's page (the player with results): the player at its step, the search left.
    state = [(name, value) for name, value in parse_qsl(came_from.query) if name not in ("q", "errors", "kind")]
    return f"{here}?{urlencode(state)}" if state else here


@signed_in_or_shared
@require_GET
def live_tail(request: HttpRequest, session_id: int) -> HttpResponse:
    """The player's live tail: the API's `/tail` stream (docs/ingest.md) behind the dashboard's
    sign-in, so that a share link's visitor follows a live session too (the API never reads
    share grants). It ends once the caller may no longer read the session."""
    session = access.session_for(request, session_id)
    query = LiveTailForm(request.GET)
    if not query.is_valid():
        return HttpResponseBadRequest(error_text(query), content_type="text/plain; charset=utf-8")
    try:
        after = sse.resume_after(request, query.cleaned_data["after"])
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain; charset=utf-8")
    return sse.tail(request, session, after)


# A link's visitor (no member, no account needed) may verify too, but not make the server re-hash
# a session over and over (about 4 s of CPU for 100k events): within this many seconds of the
# session's last verification, theirs is answered with that one's result.
VISITOR_VERIFY_EVERY_SECONDS = 60


def _verified_lately(session: Session) -> bool:
    checked = session.chain_checked_at
    return checked is not None and (timezone.now() - checked).total_seconds() < VISITOR_VERIFY_EVERY_SECONDS


@signed_in_or_shared
@require_GET
def session_charts(request: HttpRequest, session_id: int) -> HttpResponse:
    """The player's charts, loaded when scrolled into view (plotly.js is 4.8 MB)."""
    session = access.session_for(request, session_id)
    figures = charts.player_figures(session=session)
    context = {"session": session, "charts": figures, "chart_names": list(figures["figures"])}
    response = render(request, "sessions_app/player.html#charts", context)
    patch_vary_headers(response, ["HX-Request"])
    return response
