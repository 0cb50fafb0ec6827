"""Who may see and do what: the one place every read and write of a project's data is scoped.

Every page, API operation, stream, job, export and job status looks its object up here, naming
the role the operation needs (docs/teams.md has the matrix):

    session = access.session_for(request, session_id, need=Role.MAINTAINER)

- Outside the object's project the answer is 404, worded as for an object that does not exist,
  so a non-member learns nothing about what is there.
- Inside it with too low a role the answer is 403 (`PermissionDenied`).
- Lists go through the `*_visible_to` query helpers, so they only ever hold the caller's
  projects.

A caller (`Actor`) is a signed-in user, or an API key acting as its user narrowed by the key's
own limits (one project, read-only). Superusers act as admin of every project.

The role is looked up inside the same query that fetches the object (a subquery on the
membership's unique index), so scoping adds no query to a page.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import CharField, QuerySet
from django.db.models.expressions import RawSQL
from django.http import Http404, HttpRequest

from .models import ApiKey, ImportJob, Membership, Project, Role, Session, Tour


class NotVisible(Http404):
    """404: the object does not exist, or the caller may not know that it does."""


@dataclass
class Actor:
    """Who a request acts as: a user, possibly through a key narrowed to one project or to
    reading. An anonymous actor may see nothing."""

    user: AbstractBaseUser | None
    key: ApiKey | None = None
    _roles: dict[int, Role] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """What `created_by` and the audit log call this actor: the user's name."""
        return self.user.get_username()[:150] if self.user is not None else ""

    @property
    def key_prefix(self) -> str:
        return self.key.key_prefix if self.key is not None else ""

    @property
    def is_superuser(self) -> bool:
        return self.user is not None and self.user.is_active and self.user.is_superuser

    @property
    def read_only(self) -> bool:
        return self.key is not None and self.key.read_only

    @property
    def project_limit(self) -> int | None:
        return self.key.project_id if self.key is not None else None

    def narrow(self, project_id: int, role: Role | str | None) -> Role | None:
        """The role this actor has in a project, given the user's own role there (or None)."""
        if self.user is None or not self.user.is_active:
            return None
        if self.project_limit is not None and self.project_limit != project_id:
            return None
        effective = Role.ADMIN if self.is_superuser else (Role(role) if role else None)
        if effective is not None and self.read_only:
            return Role.VIEWER
        return effective

    def role_in(self, project_id: int) -> Role | None:
        """The role in one project (the user's memberships are read once per actor)."""
        if self._roles is None:
            rows = Membership.objects.filter(user=self.user).values_list("project_id", "role") if self.user else []
            self._roles = {project_id: Role(role) for project_id, role in rows}
        return self.narrow(project_id, self._roles.get(project_id))


ANONYMOUS = Actor(user=None)


def actor_of(request: HttpRequest) -> Actor:
    """The actor of a request: the API key it authenticated with (ninja's `request.auth`), else
    the signed-in user. Kept on the request so its memberships are read once."""
    actor = getattr(request, "_replay_actor", None)
    if actor is not None:
        return actor
    auth = getattr(request, "auth", None)
    user = getattr(request, "user", None)
    if isinstance(auth, ApiKey):
        actor = Actor(user=auth.user, key=auth)
    elif user is not None and user.is_authenticated:
        actor = Actor(user=user)
    else:
        actor = ANONYMOUS
    request._replay_actor = actor
    return actor


def _as_actor(who: HttpRequest | Actor) -> Actor:
    return who if isinstance(who, Actor) else actor_of(who)


def check(actor: Actor, *, project_id: int, role: Role | str | None, need: Role, what: str) -> None:
    """The one permission check: 404 outside the project, 403 inside it below `need`."""
    effective = actor.narrow(project_id, role)
    if effective is None:
        raise NotVisible(f"{what} not found")
    if not effective.includes(need):
        raise PermissionDenied(f"{what}: this needs the {need.label.lower()} role in its project")


def _with_role(queryset: QuerySet, actor: Actor, project_column: str) -> QuerySet:
    """The queryset with the actor's own role in each row's project as `member_role`.

    Written as SQL: the same correlated subquery as an ORM `Subquery(OuterRef(...))`, which
    Django takes ~0.7 ms longer to compile, on every request of every page (bench/replay_bench.py
    measured it as a third of serving a single step)."""
    if actor.user is None or actor.is_superuser:
        return queryset  # a superuser's role comes from narrow(), not from a membership
    quote = connection.ops.quote_name
    members, outer = quote(Membership._meta.db_table), quote(queryset.model._meta.db_table)
    sql = f"SELECT role FROM {members} WHERE {members}.project_id = {outer}.{quote(project_column)} AND {members}.user_id = %s"
    return queryset.annotate(member_role=RawSQL(sql, [actor.user.pk], output_field=CharField()))


# --- one object -------------------------------------------------------------------------------


def _object_for(actor: Actor, queryset: QuerySet, pk: int, what: str, need: Role):
    """The object `pk` of `queryset` if the actor's role in its project is at least `need`."""
    if actor.user is None:
        raise NotVisible(f"{what} not found")
    try:
        # get(), not first(): first() orders by the model's ordering, more SQL to compile.
        found = _with_role(queryset.select_related("project"), actor, "project_id").get(pk=pk)
    except queryset.model.DoesNotExist:
        raise NotVisible(f"{what} not found")
    check(actor, project_id=found.project_id, role=getattr(found, "member_role", None), need=need, what=what)
    return found


def session_for(who: HttpRequest | Actor, session_id: int, *, need: Role = Role.VIEWER) -> Session:
    """The session, if the caller's role in its project is at least `need`."""
    return _object_for(_as_actor(who), Session.objects.all(), session_id, f"session {session_id}", need)


def role_on(who: HttpRequest | Actor, found: Session | ImportJob | Tour) -> Role | None:
    """The caller's role in the project of an object fetched through `session_for`,
    `job_for` or `tour_for` (from the role that lookup read with it: no query)."""
    return _as_actor(who).narrow(found.project_id, getattr(found, "member_role", None))


def job_for(who: HttpRequest | Actor, job_id: int, *, need: Role = Role.VIEWER) -> ImportJob:
    """The import job, if the caller's role in its project is at least `need`."""
    return _object_for(_as_actor(who), ImportJob.objects.all(), job_id, f"import job {job_id}", need)


def tour_for(who: HttpRequest | Actor, tour_id: int, *, need: Role = Role.VIEWER) -> Tour:
    """The tour, if the caller's role in its project is at least `need`."""
    return _object_for(_as_actor(who), Tour.objects.all(), tour_id, f"tour {tour_id}", need)


def project_for(who: HttpRequest | Actor, slug: str, *, need: Role = Role.VIEWER) -> Project:
    """The project, if the caller's role in it is at least `need`."""
    actor = _as_actor(who)
    what = f"project {slug!r}"
    if actor.user is None or "\x00" in slug:  # no slug holds one (and PostgreSQL refuses it)
        raise NotVisible(f"{what} not found")
    try:
        project = _with_role(Project.objects.all(), actor, "id").get(slug=slug)
    except Project.DoesNotExist:
        raise NotVisible(f"{what} not found")
    check(actor, project_id=project.pk, role=getattr(project, "member_role", None), need=need, what=what)
    project.role = actor.narrow(project.pk, getattr(project, "member_role", None))
    return project


def project_to_write(who: HttpRequest | Actor, slug: str, *, need: Role = Role.MAINTAINER) -> Project:
    """The project an upload or a live session goes to: the one named, else the caller's only
    project they may write to. A ValueError (a 400) says what to name instead."""
    actor = _as_actor(who)
    if slug:
        return project_for(actor, slug, need=need)
    writable = [p for p in projects_visible_to(actor) if p.role is not None and p.role.includes(need)]
    if len(writable) == 1:
        return writable[0]
    if not writable:
        raise PermissionDenied(f"project: you have no project with the {need.label.lower()} role")
    names = ", ".join(p.slug for p in writable[:20])
    raise ValueError(f"project: name one of your projects ({names})")


# --- lists ------------------------------------------------------------------------------------


def projects_visible_to(who: HttpRequest | Actor) -> list[Project]:
    """The caller's projects, by name, each with `.role` (the caller's effective role)."""
    actor = _as_actor(who)
    if actor.user is None:
        return []
    projects = Project.objects.all()
    if not actor.is_superuser:
        projects = _with_role(projects, actor, "id").filter(memberships__user=actor.user)
    if actor.project_limit is not None:
        projects = projects.filter(pk=actor.project_limit)
    found = []
    for project in projects.order_by("name"):
        project.role = actor.narrow(project.pk, getattr(project, "member_role", None))
        if project.role is not None:
            found.append(project)
    return found


def _visible(queryset: QuerySet, actor: Actor, project_field: str = "project") -> QuerySet:
    if actor.user is None or not actor.user.is_active:
        return queryset.none()
    if not actor.is_superuser:
        queryset = queryset.filter(**{f"{project_field}__memberships__user": actor.user})
    if actor.project_limit is not None:
        queryset = queryset.filter(**{f"{project_field}_id": actor.project_limit})
    return queryset


def sessions_visible_to(who: HttpRequest | Actor) -> QuerySet[Session]:
    """Every session the caller may open: the base of every session list, picker and count."""
    return _visible(Session.objects.all(), _as_actor(who))


def jobs_visible_to(who: HttpRequest | Actor) -> QuerySet[ImportJob]:
    """Every import job the caller may see."""
    return _visible(ImportJob.objects.all(), _as_actor(who))
