"""Projects: the caller's projects, making one, its members and roles, its audit log."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Annotated, Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, StreamingHttpResponse
from django.utils.http import content_disposition_header
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status
from pydantic import AfterValidator, BeforeValidator

from .. import access, audit, teams
from ..models import Project, Role
from ..models.bounds import MAX_POSITION
from ..replay.listing import day_start
from .schemas import BodyIn, DetailOut, Text

router = Router(tags=["projects"])

DENIED = {403: DetailOut, 404: DetailOut}


class ProjectOut(Schema):
    slug: str
    name: str
    role: str = Field(description="the caller's role: viewer, reviewer, maintainer or admin")


class ProjectIn(BodyIn):
    name: Text = Field(..., min_length=1, max_length=200)
    slug: Text = Field("", max_length=100, description="lowercase letters, digits, - and _; from the name when empty")


class MemberOut(Schema):
    username: str
    role: str
    since: datetime


class MemberChangeOut(MemberOut):
    # The share links the member had made that this change ended (a role that may not share):
    # the page asks first and says how many; a program is told after, in the answer.
    linksRevoked: int


class MemberRemovedOut(Schema):
    username: str
    linksRevoked: int


class MemberIn(BodyIn):
    username: Text = Field(..., min_length=1, max_length=150)
    role: Role


class AuditEntryOut(Schema):
    seq: int
    at: str
    actor: str
    action: str
    target: str
    detail: dict[str, Any]
    ip: str | None
    key: str = Field(description="prefix of the API key it came through, if any")
    hash: str


class AuditPageOut(Schema):
    entries: list[AuditEntryOut]
    next: int | None = Field(None, description="pass as `before` for older entries; null at the end")


def _in_utc(value: datetime | None) -> datetime | None:
    """A time the database can compare: in UTC, so a moment that has none (year 1 at +14:00)
    is a 400 naming the parameter, not an overflow in the driver. A date or time without an
    offset is in UTC, as every time the API gives (Django had warned of a naive datetime)."""
    if value is None:
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("out of range: no such moment in UTC") from None


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _through_its_day(value: Any) -> Any:
    """An `until` given as a date includes its day, as the audit page's "until" does: the
    midnight after it (none past the last day there is: it bounds nothing)."""
    if isinstance(value, str) and _DATE.fullmatch(value):
        try:
            day = date.fromisoformat(value)
        except ValueError:
            return value  # not a day of the calendar: refused by the datetime's own check, naming it
        return day_start(day, days_after=1)
    return value


class AuditQuery(Schema):
    actor: str = Field("", max_length=200)
    action: str = Field("", max_length=40)
    since: Annotated[datetime | None, AfterValidator(_in_utc)] = None
    until: Annotated[datetime | None, BeforeValidator(_through_its_day), AfterValidator(_in_utc)] = None
    before: int | None = Field(None, ge=0, le=MAX_POSITION, description="seq cursor: entries older than this")
    limit: int = Field(50, ge=1, le=500)


class AuditVerifyOut(Schema):
    valid: bool
    entries: int
    firstBrokenSeq: int | None
    why: str
    head: str


def _project_row(project: Project) -> dict[str, Any]:
    return {"slug": project.slug, "name": project.name, "role": project.role.value}


def _refused(exc: teams.TeamError) -> HttpError:
    return HttpError(400, str(exc))


@router.get("/projects", response=list[ProjectOut], url_name="projects")
def list_projects(request: HttpRequest):
    """The caller's projects with the caller's role in each."""
    return [_project_row(p) for p in access.projects_visible_to(request)]


@router.post("/projects", response={201: ProjectOut, **DENIED, 400: DetailOut}, url_name="create_project")
def create_project(request: HttpRequest, body: ProjectIn):
    """Make a project; its creator is its admin."""
    actor = access.actor_of(request)
    if actor.read_only or actor.project_limit is not None:
        raise PermissionDenied("a read-only or project-limited key cannot make projects")
    try:
        project = teams.create_project(actor=actor, name=body.name, slug=body.slug, ip=audit.client_ip(request))
    except teams.TeamError as exc:
        raise _refused(exc)
    project.role = Role.ADMIN
    return Status(201, _project_row(project))


@router.get("/projects/{slug}/members", response={200: list[MemberOut], **DENIED}, url_name="members")
def list_members(request: HttpRequest, slug: str):
    """Who is in the project, with their roles (any member may see the team)."""
    project = access.project_for(request, slug)
    return [
        {"username": m.user.get_username(), "role": m.role, "since": m.created_at} for m in teams.members_of(project)
    ]


@router.post(
    "/projects/{slug}/members",
    response={200: MemberChangeOut, 201: MemberChangeOut, **DENIED, 400: DetailOut},
    url_name="add_member",
)
def add_member(request: HttpRequest, slug: str, body: MemberIn):
    """Add a member (201) or change a member's role (200). Admins only."""
    project = access.project_for(request, slug, need=Role.ADMIN)
    try:
        added = teams.set_member(actor=access.actor_of(request), project=project, username=body.username,
                                 role=body.role.value, ip=audit.client_ip(request))  # fmt: skip
    except teams.TeamError as exc:
        raise _refused(exc)
    member = next(m for m in teams.members_of(project) if m.user.get_username() == body.username)
    return Status(201 if added.outcome == "added" else 200, {"username": body.username, "role": member.role,
                  "since": member.created_at, "linksRevoked": added.links_revoked})  # fmt: skip


@router.delete(
    "/projects/{slug}/members/{username}",
    response={200: MemberRemovedOut, **DENIED, 400: DetailOut},
    url_name="remove_member",
)
def remove_member(request: HttpRequest, slug: str, username: str):
    """Take a member out of the project, with how many of their share links that ended (200);
    the last admin stays. Admins, or any member leaving (their own username)."""
    project = access.project_to_remove_from(request, slug, username)
    try:
        revoked = teams.remove_member(actor=access.actor_of(request), project=project, username=username,
                                      ip=audit.client_ip(request))  # fmt: skip
    except teams.TeamError as exc:
        raise _refused(exc)
    return Status(200, {"username": username, "linksRevoked": revoked})


@router.get("/projects/{slug}/audit", response={200: AuditPageOut, **DENIED, 400: DetailOut}, url_name="audit")
def audit_log(request: HttpRequest, slug: str, query: Query[AuditQuery]):
    """The project's audit log, newest first, filtered by actor, action and time; reviewers,
    maintainers and admins."""
    project = access.project_for(request, slug, need=Role.REVIEWER, reading=True)
    found = audit.entries_of(project=project, actor=query.actor, action=query.action, since=query.since,
                             until=query.until, before=query.before)  # fmt: skip
    rows = list(found[: query.limit + 1])
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    return {"entries": [audit.entry_dict(e) for e in rows], "next": rows[-1].seq if more else None}


@router.get("/projects/{slug}/audit/export", response={200: None, **DENIED}, url_name="audit_export")
def audit_export(request: HttpRequest, slug: str):
    """The whole log as JSON lines, oldest first, with each entry's links."""
    project = access.project_for(request, slug, need=Role.REVIEWER, reading=True)
    response = StreamingHttpResponse(audit.export_lines(project=project), content_type="application/x-ndjson")
    response["Content-Disposition"] = content_disposition_header(True, f"audit-{project.slug}.jsonl")
    return response


@router.get("/projects/{slug}/audit/verify", response={200: AuditVerifyOut, **DENIED}, url_name="audit_verify")
def audit_verify(request: HttpRequest, slug: str):
    """Walk the project's log link by link; the first entry that does not hold is named."""
    project = access.project_for(request, slug, need=Role.REVIEWER, reading=True)
    return audit.verify_log(project=project).to_dict()
