"""The sessions pages: the list with its upload panel and job list, and a session's deletion
(asked from its player, answered on the list). The player is views/player.py, the diff
views/diff.py.

Small functions that look up through sessions_app/access.py, validate the query string, call a
workflow and render (views/pages.py says how htmx requests get partials).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages as django_messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from .. import access, audit, deletion, jobs
from ..forms import PlayerForm, SessionFilterForm, UploadForm, error_text
from ..ingest.quotas import QuotaExceeded
from ..ingest.uploads import UploadRejected, accept_upload, check_declared_size, display_name
from ..models import Project, Role, Session
from ..replay import exports
from ..replay.listing import list_sessions, recent_jobs
from .pages import login_required, render_page, take_messages, wants_partial
from .player import player_page

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
                with accept_upload(uploaded_file=uploaded, project=project, format=form.cleaned_data["format"],
                                   created_by=request.user.get_username()) as job:  # fmt: skip
                    jobs.enqueue_import(job_id=job.pk)
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


# --- deleting a session ----------------------------------------------------------------------


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
