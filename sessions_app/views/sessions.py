"""The session pages: the list with its upload panel, the player and its panels (the diff is
views/diff.py).

Small functions that look up through sessions_app/access.py, validate the query string, call a
workflow and render (views/pages.py says how htmx requests get partials).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from django.contrib import messages as django_messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from .. import access, audit, deletion, jobs, replay, sse, verification
from ..canonical import ALL_KINDS
from ..forms import (
    PACES,
    SPEEDS,
    LiveTailForm,
    PlayerForm,
    SearchForm,
    SessionFilterForm,
    UploadForm,
    error_text,
)
from ..ingest.quotas import QuotaExceeded
from ..ingest.uploads import UploadRejected, accept_upload, check_declared_size, display_name
from ..models import Checkpoint, Project, Role, Session
from ..replay import charts, exports, timeline
from ..replay.frames import Frame, frame_at, search_panel
from ..replay.imports import session_import_problems
from ..replay.listing import list_sessions, recent_jobs
from .comments import comment_panel, discussion, refused_comment
from .pages import login_required, player_link_suffix, render_page, signed_in_or_shared, take_messages, wants_partial
from .redactions import redaction_panel
from .reviews import sign_off_panel
from .sharing import may_share, visitor_page
from .tours import tour_builder, tour_mode_context

LIST_FILTERS = ("q", "project", "format", "status", "model", "start", "end", "errors", "review")


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return redirect("sessions:list")


@login_required
@require_GET
def session_list(request: HttpRequest) -> HttpResponse:
    projects = access.projects_visible_to(request)
    form = SessionFilterForm(request.GET, projects=projects)
    values = form.values()
    page = list_sessions(
        sessions=access.sessions_visible_to(request),
        filters={name: values[name] for name in LIST_FILTERS},
        sort=values["sort"],
        after=values["after"],
        before=values["before"],
    )
    picks = {"a": values["a"], "b": values["b"]}
    context: dict[str, Any] = {"form": form, "page": page, "projects": projects, "picks": picks,
                               "picked_elsewhere": _picked_elsewhere(request, page.sessions, picks),
                               "filtered": any(values[name] for name in LIST_FILTERS)}  # fmt: skip
    if not wants_partial(request):
        # The upload panel only for who may upload somewhere: a viewer's upload would be refused.
        writable = _writable(projects)
        context |= _imports_context(request) | {"upload_form": UploadForm(projects=writable) if writable else None}
        # An upload sent without JavaScript came back here with its errors (_upload_answer), a
        # session deleted from its player with what went (delete_session).
        context["upload_errors"], context["notices"] = _list_messages(request)
    return render_page(request, "sessions_app/session_list.html", "session-table", context)


def _picked_elsewhere(request: HttpRequest, shown: list[Session], picks: dict[str, int | None]) -> list[dict]:
    """The compare picks (A, B) that are not on the shown page, each with its session's name: the
    page keeps them picked, so a session on one page can be compared with one on another. Looked
    up through access.py (a pick the caller may not see is dropped); no query when none is."""
    on_page = {s.pk for s in shown}
    elsewhere = {letter: pk for letter, pk in picks.items() if pk is not None and pk not in on_page}
    if not elsewhere:
        return []
    visible = access.sessions_visible_to(request).filter(pk__in=elsewhere.values())
    names = dict(visible.values_list("pk", "source_session_id"))
    return [{"letter": letter, "pk": pk, "name": names[pk] or pk} for letter, pk in elsewhere.items() if pk in names]


@login_required
@require_POST
def upload(request: HttpRequest) -> HttpResponse:
    errors: list[str] = []
    try:
        # Before the form touches request.POST/FILES, which would read the whole body first.
        check_declared_size(request.META.get("CONTENT_LENGTH"))
    except UploadRejected as exc:
        errors.append(exc.message)
    form = UploadForm(request.POST, request.FILES, projects=_writable(access.projects_visible_to(request)))
    form = form if not errors else None
    if form is not None and form.is_valid():
        try:
            # A project named but not the caller's to write to answers 404/403 as in the API;
            # naming none when there is no single choice is a message in the panel.
            project = access.project_to_write(request, form.cleaned_data["project"])
        except ValueError as exc:
            return _upload_answer(request, [str(exc)])
        for uploaded in form.cleaned_data["files"]:
            try:
                job = accept_upload(uploaded_file=uploaded, project=project, format=form.cleaned_data["format"],
                                    created_by=request.user.get_username())  # fmt: skip
                jobs.enqueue_import_after_commit(job_id=job.pk)
                audit.record_upload(request, job)
            except (UploadRejected, QuotaExceeded) as exc:
                errors.append(f"{display_name(uploaded.name or '')}: {exc.message}")
    elif form is not None:
        errors = [error_text(form)]
    return _upload_answer(request, errors)


def _upload_answer(request: HttpRequest, errors: list[str]) -> HttpResponse:
    """The panel's partial for htmx; without JavaScript, back to the sessions page, which shows
    the errors once (Django's messages, kept in the session across the redirect)."""
    if request.htmx:
        return _imports_response(request, upload_errors=errors)
    for error in errors:
        django_messages.error(request, error, extra_tags=_UPLOAD_TAG)
    return redirect("sessions:list")


_UPLOAD_TAG = "upload"
_DELETED_TAG = "session-deleted"


def _list_messages(request: HttpRequest) -> tuple[list[str], list[str]]:
    """What the sessions page says once: the errors of an upload sent without JavaScript
    (_upload_answer) and the sessions deleted from their player (delete_session)."""
    taken = take_messages(request, _UPLOAD_TAG, _DELETED_TAG)
    return taken[_UPLOAD_TAG], taken[_DELETED_TAG]


@login_required
@require_GET
def imports(request: HttpRequest) -> HttpResponse:
    """The upload panel's job list; it re-fetches itself every second while a job runs."""
    return _imports_response(request, upload_errors=None)


def _writable(projects: list[Project]) -> list[Project]:
    return [p for p in projects if p.role is not None and p.role.includes(Role.MAINTAINER)]


def _imports_context(request: HttpRequest) -> dict[str, Any]:
    jobs = recent_jobs(jobs=access.jobs_visible_to(request), created_by=request.user.get_username())
    return {"jobs": jobs, "jobs_running": any(not job.finished for job in jobs)}


def _imports_response(request: HttpRequest, *, upload_errors: list[str] | None) -> HttpResponse:
    """The job list; after an upload (`upload_errors` not None) also its errors, out of band and
    outside the list, so the list's polls leave them until dismissed or the next upload."""
    context = _imports_context(request) | {
        "upload_errors": upload_errors or [],
        "errors_oob": upload_errors is not None,
    }
    response = render(request, "sessions_app/session_list.html#imports", context)
    patch_vary_headers(response, ["HX-Request"])
    if not context["jobs_running"]:
        # The last poll: the sessions table reloads itself to show what was imported.
        trigger_client_event(response, "sessions-changed")
    return response


# --- the player -------------------------------------------------------------------------------


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
    """Why the event shown is not the one the URL asked for (a link typed or cut short), so a
    shared link that opens elsewhere says so instead of showing another moment silently."""
    shown = f"showing event #{frame.seq + 1}"
    if state.get("step_refused") is not None:
        return f"?step={state['step_refused']} is not an event's seq (a whole number from 0); {shown}."
    asked = state["step"]
    if asked is not None and session.event_count and asked > frame.seq:
        return f"?step={asked} is past this session's last event (seq {frame.seq}); {shown}, the last."
    return ""


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


def _player_page(session: Session) -> dict[str, Any]:
    """What only the full player page shows (the frame's partial leaves these alone)."""
    metadata = session.metadata if isinstance(session.metadata, dict) else {}
    recovery = None
    if metadata.get("pending_phase"):
        recovery = {"phase": metadata["pending_phase"], "action": metadata.get("pending_action", ""),
                    "seq": metadata.get("pending_event_index"), "blocks": metadata.get("pending_run_python") or [],
                    "assistant": metadata.get("pending_assistant"), "deferred": metadata.get("pending_deferred")}  # fmt: skip
    export_url = reverse("api:export", args=[session.pk])
    return {
        "checkpoints": list(Checkpoint.objects.filter(session=session)[:200]),
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
    if not wants_partial(request):
        return player_page(request, session, PlayerForm(request.GET).values(), extra=context, status=status)
    response = render(request, "sessions_app/player.html#search-results", context | {"session": session}, status=status)
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


# The confirm step's answer: only its own form sends it, so a first post (or a second click on
# the button that asked) never deletes.
DELETE_CONFIRMED = "yes"


@login_required
@require_POST
def delete_session(request: HttpRequest, session_id: int) -> HttpResponse:
    """Delete the session, asking first: a post without `confirm` answers with the question,
    naming the session and the events that go (the panel for htmx, else the player showing it);
    the question's own post deletes, then the project's session list says what went."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    if request.POST.get("confirm") != DELETE_CONFIRMED:
        return _delete_question(request, session)
    name, project = _session_name(session), session.project.slug
    events = deletion.delete_session(actor=access.actor_of(request), session=session, ip=audit.client_ip(request))
    plural = "" if events == 1 else "s"
    django_messages.success(request, f"Deleted session {name} and its {events} event{plural}.", extra_tags=_DELETED_TAG)
    url = f"{reverse('sessions:list')}?{urlencode({'project': project})}"
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def _delete_question(request: HttpRequest, session: Session) -> HttpResponse:
    state = PlayerForm(request.POST).values()  # the shown step (#nav-step), for "Keep it"
    asked = {"can_delete": True, "delete_asked": True, "delete_step": state["step"],
             "upload_siblings": _upload_siblings(session), "delete_tours": deletion.tours_through(session)}  # fmt: skip
    if not request.htmx:
        return player_page(request, session, state, extra=asked)
    response = render(request, "sessions_app/includes/session_delete.html#session-delete", {"session": session} | asked)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _upload_siblings(session: Session) -> int:
    """The other sessions imported from the same kept upload, while it is given: the file, which
    holds this session's records too, is given to them no more once this one goes."""
    if session.import_job_id is None or exports.original_file(session) is None:
        return 0
    return Session.objects.filter(import_job_id=session.import_job_id).exclude(pk=session.pk).count()


def _session_name(session: Session) -> str:
    # As the player's heading names it.
    return f"“{session.source_session_id}”" if session.source_session_id else str(session.pk)


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


# --- the diff view ----------------------------------------------------------------------------
