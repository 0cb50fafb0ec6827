"""The player's Redactions panel: what was removed from a session after the fact, a maintainer's
"Redact…" of a value selected in the context panel (static/js/redact.js fills the form), and
"apply the project's current rules to this session" as a job (sessions_app/stored_redaction.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from .. import access, audit, jobs, stored_redaction
from ..forms import RedactValueForm, error_text
from ..models import RedactionJob, Role, Session
from ..stored_redaction import RedactionRefused
from .pages import login_required

LISTED = 50
JOBS_SHOWN = 3
LIST_PARTIAL = "sessions_app/includes/redactions.html#redaction-list"


def redaction_panel(request: HttpRequest, session: Session, seq: int) -> dict[str, Any]:
    """What the full player page needs for the panel (its list loads when it is shown)."""
    can_redact = access.may(request, session, Role.MAINTAINER)
    return {
        "can_redact": can_redact,
        "redact_form": RedactValueForm(initial={"seq": seq}, auto_id="redact-%s") if can_redact else None,
    }


@login_required
@require_GET
def redactions(request: HttpRequest, session_id: int) -> HttpResponse:
    """The list of removals, and the newest rules runs (it polls itself while one runs): the
    team's work, which a share link does not open."""
    session = access.session_for(request, session_id, shared=False)
    return _list(request, session)


@login_required
@require_POST
def redact(request: HttpRequest, session_id: int) -> HttpResponse:
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    form = RedactValueForm(request.POST)
    if not form.is_valid():
        return _list(request, session, error=f"Not redacted: {error_text(form)}", status=400)
    seq = form.cleaned_data["seq"]
    try:
        result = stored_redaction.redact_text(
            session=session, seq=seq, text=form.cleaned_data["text"], label=form.cleaned_data["label"],
            actor=access.actor_of(request), ip=audit.client_ip(request),
        )  # fmt: skip
    except RedactionRefused as exc:
        return _list(request, session, error=f"Not redacted: {exc}.", status=400)
    jobs.enqueue_after_redaction(session_id=session.pk)
    if not request.htmx:
        return redirect(f"{session.get_absolute_url()}?step={seq}")
    found = result.to_dict()
    message = (
        f"Removed {found['values']} value{'s' if found['values'] != 1 else ''} from {found['events']} "
        f"event{'s' if found['events'] != 1 else ''}" + (" and other stored copies." if result.elsewhere else ".")
    )
    response = _list(request, session, message=message)
    # The player asks for its frame again (player.js listens), now showing the placeholder.
    trigger_client_event(response, "replay:goto", {"seq": seq})
    return response


@login_required
@require_POST
def redact_with_rules(request: HttpRequest, session_id: int) -> HttpResponse:
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    try:
        job = stored_redaction.start_rules_job(session=session, actor=access.actor_of(request),
                                               ip=audit.client_ip(request))  # fmt: skip
    except RedactionRefused as exc:
        return _list(request, session, error=f"Not started: {exc}.", status=400)
    jobs.enqueue_redaction_after_commit(job_id=job.pk)
    if not request.htmx:
        return redirect(session.get_absolute_url())
    return _list(request, session)


def _list(request: HttpRequest, session: Session, *, message: str = "", error: str = "",
          status: int = 200) -> HttpResponse:  # fmt: skip
    entries, _ = stored_redaction.list_redactions(session=session, limit=LISTED, count_all=False)
    entries = [{**entry, "when": _moment(entry["at"])} for entry in entries]
    count = stored_redaction.count_redacted_events(session=session)
    runs = list(RedactionJob.objects.filter(session=session)[:JOBS_SHOWN])
    context = {
        "session": session, "entries": entries, "count": count, "listed": LISTED, "runs": runs,
        "polling": any(not run.finished for run in runs), "redaction_message": message, "redaction_error": error,
    }  # fmt: skip
    response = render(request, LIST_PARTIAL, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _moment(at: str) -> datetime | None:
    """A removal's time, recorded as ISO 8601 text in the event's `redacted` column, as the page
    shows every time (a bundle restored from elsewhere may hold any text there)."""
    try:
        moment = datetime.fromisoformat(at)
        # OverflowError: a time at either end of the calendar that UTC takes past it
        # ("0001-01-01T00:00:00+14:00").
        return moment.astimezone(UTC) if moment.tzinfo is not None else None
    except (TypeError, ValueError, OverflowError):
        return None
