"""The team pages: the caller's projects, one project's members and settings, its audit log,
and the signed-in user's API keys.

Every project is looked up through sessions_app/access.py with the role the operation needs
(404 outside the project, 403 below the role); changes go through the workflows of
sessions_app/teams.py, whose TeamError ("field: message") becomes a form error and a 400.
Posts answer with a redirect (post/redirect/get) or, when refused, the page at 400 with the
message next to its form: plain forms, since each change is rare and reloads the page it changes.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages as django_messages
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import access, audit, sharing, teams
from ..forms import ApiKeyForm, AuditFilterForm, MemberForm, ProjectForm, ProjectSettingsForm, RemoveMemberForm
from ..ingest.quotas import usage_of
from ..models import ApiKey, Membership, Project, Role
from ..models.onboarding import SHARING_ROLES
from ..replay.listing import day_start
from .pages import asked_first, login_required, render_page, take_messages, wants_partial

AUDIT_PAGE = 50


def _refused(form: forms.Form, error: teams.TeamError) -> None:
    """A workflow's "field: message" as the form's error on that field (or on the form)."""
    field, _, message = str(error).partition(": ")
    if message and field in form.fields:
        form.add_error(field, message)
    else:
        form.add_error(None, str(error))


# --- projects ---------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def projects(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            project = teams.create_project(actor=access.actor_of(request), name=form.cleaned_data["name"],
                                           slug=form.cleaned_data["slug"], ip=audit.client_ip(request))  # fmt: skip
        except teams.TeamError as exc:
            _refused(form, exc)
        else:
            return redirect(project)
    mine = access.projects_visible_to(request)
    ids = [p.pk for p in mine]
    # Two grouped counts for the whole list; the session count goes through the same scoping
    # helper as the session list, so it is the number that list shows.
    sessions = dict(access.sessions_visible_to(request).filter(project__in=ids).order_by()
                    .values_list("project").annotate(n=Count("pk")))  # fmt: skip
    members = dict(Membership.objects.filter(project__in=ids).order_by().values_list("project").annotate(n=Count("pk")))
    rows = [{"project": p, "sessions": sessions.get(p.pk, 0), "members": members.get(p.pk, 0)} for p in mine]
    context = {"rows": rows, "form": form, "notices": take_messages(request, _TEAM_TAG)[_TEAM_TAG]}
    return render(request, "sessions_app/projects.html", context, status=400 if form.errors else 200)


@login_required
@require_GET
def project(request: HttpRequest, slug: str) -> HttpResponse:
    return _project_page(request, access.project_for(request, slug))


def _project_page(request: HttpRequest, project: Project, *, status: int = 200, **forms_: Any) -> HttpResponse:
    """The project page; a refused post passes its bound form (or a member row's error) back in."""
    row_errors: dict[str, str] = forms_.pop("row_errors", {})
    members = teams.members_of(project)
    # An admin's questions name each member's links; a member's own Leave names theirs.
    shared = sharing.open_link_counts(project.pk) if project.role.includes(Role.MAINTAINER) else {}
    for member in members:
        name = member.user.get_username()
        member.error = row_errors.pop(name, "")
        asked = {"oneself": member.user_id == request.user.pk, "links": shared.get(member.user_id, 0)}
        member.remove_question = _remove_question(project, name, **asked)
        member.change_question = _change_question(project, name, **asked)
    context = {
        "project": project,
        "members": members,
        "me": next((member for member in members if member.user_id == request.user.pk), None),  # to leave
        "member_errors": list(row_errors.values()),  # about no current member (a stale page)
        "is_admin": project.role.includes(Role.ADMIN),
        "can_read_audit": project.role.includes(Role.REVIEWER),
        "roles": Role.choices,
        "member_form": MemberForm(),
        "settings_form": ProjectSettingsForm.of(project),
        "server_retention_days": settings.RETENTION_DAYS,
        "usage": usage_of(project=project) if project.role.includes(Role.ADMIN) else None,
        # Those who may make and revoke links see every open one, whoever made it.
        "open_links": sharing.open_links_of(project.pk) if project.role.includes(Role.MAINTAINER) else None,
        "notices": take_messages(request, _TEAM_TAG)[_TEAM_TAG],
    } | forms_  # fmt: skip
    return render(request, "sessions_app/project.html", context, status=status)


@login_required
@require_POST
def project_member(request: HttpRequest, slug: str) -> HttpResponse:
    """Add a member, or change a member's role (the row forms post `change`)."""
    project = access.project_for(request, slug, need=Role.ADMIN)
    form = MemberForm(request.POST)
    if form.is_valid():
        username, role = form.cleaned_data["username"], Role(form.cleaned_data["role"])
        asked_of = _asked_of(request, project, username) if "change" in request.POST else None
        # Links end only below maintainer: a promotion is not asked about them (one's own role is).
        if asked_of is not None and role in SHARING_ROLES:
            asked_of["links"] = 0
        question = _change_question(project, username, **asked_of) if asked_of is not None else ""
        if question and (asked := asked_first(request, question=question, answer="Change the role",
                                              back=project.get_absolute_url())):  # fmt: skip
            return asked
        try:
            added = teams.set_member(actor=access.actor_of(request), project=project, username=username,
                                     role=role, ip=audit.client_ip(request),
                                     add_only="change" not in request.POST)  # fmt: skip
        except teams.TeamError as exc:
            _refused(form, exc)
        else:
            done = {"added": "added as", "changed": "is now", "unchanged": "is already"}[added.outcome]
            said = f"{username} {done} {role.label.lower()} in {project.name}."
            return _back_to(request, project, said + _links_revoked(added.links_revoked, username))
    if "change" in request.POST:
        return _refused_row(request, project, form)
    return _project_page(request, project, status=400, member_form=form)


@login_required
@require_POST
def project_member_remove(request: HttpRequest, slug: str) -> HttpResponse:
    """An admin removing a member, or any member leaving (their own username)."""
    project = access.project_to_remove_from(request, slug, str(request.POST.get("username", "")))
    form = RemoveMemberForm(request.POST)
    if form.is_valid():
        username = form.cleaned_data["username"]
        asked_of = _asked_of(request, project, username)
        question = _remove_question(project, username, **asked_of)
        answer = "Leave" if asked_of["oneself"] else "Remove"
        if asked := asked_first(request, question=question, answer=answer, back=project.get_absolute_url()):
            return asked
        try:
            revoked = teams.remove_member(actor=access.actor_of(request), project=project, username=username,
                                          ip=audit.client_ip(request))  # fmt: skip
        except teams.TeamError as exc:
            _refused(form, exc)
        else:
            said = f"{username} is no longer a member of {project.name}."
            return _back_to(request, project, said + _links_revoked(revoked, username))
    return _refused_row(request, project, form)


def _remove_question(project: Project, username: str, *, oneself: bool, links: int) -> str:
    """What a removal asks first (the page's data-confirm, and the page without JavaScript),
    naming the share links it ends."""
    question = (
        f"Leave {project.name}? You lose access to its sessions until an admin adds you again."
        if oneself
        else f"Remove {username} from {project.name}?"
    )
    if links:
        made = "you made" if oneself else "they made"
        question += f" The {links} open share link{pluralize(links)} {made} here will stop working, for good."
    return question


def _change_question(project: Project, username: str, *, oneself: bool, links: int) -> str:
    """What a change of role asks first, or "": one's own, which an admin had lost with one
    click, or one that may end the member's share links."""
    if oneself:
        return (
            f"Change your own role in {project.name}? Below admin you can no longer manage its members, "
            "nor give the role back to yourself."
        )
    if not links:
        return ""
    return (
        f"A role below maintainer also revokes the {links} open share link{pluralize(links)} {username} made here, "
        "for good. Change the role?"
    )


def _asked_of(request: HttpRequest, project: Project, username: str) -> dict[str, Any]:
    """The keywords both questions take, for a member named in a post."""
    user = get_user_model().objects.filter(username=username).values_list("pk", flat=True).first()
    return {
        "oneself": username == request.user.get_username(),
        "links": sharing.open_link_counts(project.pk).get(user, 0),
    }


def _links_revoked(count: int, username: str) -> str:
    # Their visitors' links stop working for good (a role given back does not reopen them).
    if not count:
        return ""
    return f" The {count} share link{pluralize(count)} {username} had made here {pluralize(count, 'was,were')} revoked."


def _refused_row(request: HttpRequest, project: Project, form: forms.Form) -> HttpResponse:
    """The project page at 400 with a member row's refusal shown in that row."""
    message = " ".join(e for errors in form.errors.values() for e in errors)
    return _project_page(request, project, status=400, row_errors={request.POST.get("username", ""): message})


# The messages a change of members leaves for the page it goes back to (project or list).
_TEAM_TAG = "team"


def _back_to(request: HttpRequest, project: Project, done: str) -> HttpResponse:
    """After a change of members: the project, or the list when the caller left it, saying
    what was done there once."""
    django_messages.success(request, done, extra_tags=_TEAM_TAG)
    return redirect(project) if _still_sees(request, project) else redirect("sessions:projects")


def _still_sees(request: HttpRequest, project: Project) -> bool:
    """Whether the caller may still open the project after changing its members (an admin may
    have removed themselves)."""
    return access.Actor(user=request.user).role_in(project.pk) is not None


@login_required
@require_POST
def project_settings(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.project_for(request, slug, need=Role.ADMIN)
    form = ProjectSettingsForm(request.POST)
    if not form.is_valid():
        return _project_page(request, project, status=400, settings_form=form)
    new = form.project_fields()
    with transaction.atomic():  # the row locked, so "from" is the value this change replaced
        old = Project.objects.select_for_update(no_key=True).values(*new).get(pk=project.pk)  # as Project.lock
        changed = {name: {"from": old[name], "to": value} for name, value in new.items() if old[name] != value}
        if changed:
            Project.objects.filter(pk=project.pk).update(**{name: change["to"] for name, change in changed.items()})
            audit.record_request(request, action="project.change", project=project, target=f"project:{project.slug}",
                                 detail=changed)  # fmt: skip
    return redirect(project)


# --- the audit log ----------------------------------------------------------------------------
# Reading, exporting and verifying the log record nothing: the log is about the project's data.


@login_required
@require_GET
def audit_log(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.project_for(request, slug, need=Role.REVIEWER, reading=True)
    return render_page(request, "sessions_app/audit.html", "audit-entries", _audit_context(request, project))


def _audit_context(request: HttpRequest, project: Project) -> dict[str, Any]:
    form = AuditFilterForm(request.GET)
    values = form.values()
    filters = {
        "project": project, "actor": values["actor"] or "", "action": values["action"] or "",
        "since": day_start(values["since"]), "until": day_start(values["until"], days_after=1),
    }  # fmt: skip
    entries = list(audit.entries_of(**filters, before=values["before"])[: AUDIT_PAGE + 1])
    # Keyset pages: the next one holds the entries below the last seq shown.
    next_before = entries[AUDIT_PAGE - 1].seq if len(entries) > AUDIT_PAGE else None
    is_first = values["before"] is None
    newer_before = None
    if not is_first:
        # The page above: the page's length of entries above the first shown, with the same
        # filters, so "Newer" undoes "Older". None when that page is the newest.
        floor = entries[0].seq + 1 if entries else values["before"]
        above = audit.entries_of(**filters).filter(seq__gte=floor).order_by("seq").values_list("seq", flat=True)
        seqs = list(above[: AUDIT_PAGE + 1])
        newer_before = seqs[AUDIT_PAGE] if len(seqs) > AUDIT_PAGE else None
        is_first = not seqs  # a `before` above every entry: this is the newest page
    return {"project": project, "form": form, "entries": entries[:AUDIT_PAGE], "next_before": next_before,
            "is_first": is_first, "newer_before": newer_before}  # fmt: skip


@login_required
@require_GET
def audit_export(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.project_for(request, slug, need=Role.REVIEWER, reading=True)
    response = StreamingHttpResponse(audit.export_lines(project=project), content_type="application/x-ndjson")
    response["Content-Disposition"] = content_disposition_header(True, f"audit-{project.slug}.jsonl")
    return response


@login_required
@require_POST
def audit_verify(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.project_for(request, slug, need=Role.REVIEWER, reading=True)
    context = {"project": project, "verification": audit.verify_log(project=project)}
    if wants_partial(request):
        return render(request, "sessions_app/audit.html#log-verification", context)
    return render(request, "sessions_app/audit.html", _audit_context(request, project) | context)


# --- API keys ---------------------------------------------------------------------------------
# A user's keys are theirs alone: looked up by owner, so another user's key id is a 404.


@login_required
@require_http_methods(["GET", "POST"])
def keys(request: HttpRequest) -> HttpResponse:
    projects = access.projects_visible_to(request)
    form = ApiKeyForm(request.POST if request.method == "POST" else None, projects=projects)
    created = None
    if request.method == "POST" and form.is_valid():
        slug, writes_to = form.cleaned_data["project"], form.cleaned_data["writes_to"]
        try:
            created = teams.create_key(
                actor=access.actor_of(request), user=request.user, name=form.cleaned_data["name"],
                project=access.project_for(request, slug) if slug else None,
                read_only=form.cleaned_data["read_only"], ip=audit.client_ip(request),
                default_project=access.project_for(request, writes_to) if writes_to else None,
            )  # fmt: skip
        except teams.TeamError as exc:
            _refused(form, exc)
        else:
            form = ApiKeyForm(projects=projects)
    own = ApiKey.objects.filter(user=request.user).select_related("project", "default_project").order_by("-created_at")
    context = {"form": form, "keys": own, "created_key": created[0] if created else None,
               "new_key": created[1] if created else ""}  # fmt: skip
    response = render(request, "sessions_app/keys.html", context, status=400 if form.errors else 200)
    if created:
        add_never_cache_headers(response)  # the only time the key is ever sent: keep it out of caches
    return response


@login_required
@require_POST
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    api_key = get_object_or_404(ApiKey, pk=key_id, user=request.user)
    question = f"Revoke the key “{api_key.name}” ({api_key.key_prefix}…)? Programs using it stop working at once."
    if asked := asked_first(request, question=question, answer="Revoke the key", back=reverse("sessions:keys")):
        return asked
    teams.revoke_key(actor=access.actor_of(request), api_key=api_key, ip=audit.client_ip(request))
    return redirect("sessions:keys")
