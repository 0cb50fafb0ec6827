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
own limits (one project, read-only). Superusers act as admin of every project. A page request may
also carry share grants (`ShareGrant`): the share links opened in its browser, each making its
visitor a viewer of exactly one session, or of one tour and the sessions of its stops, and of
nothing else (no list, no project, no job, no API).

The role is looked up inside the same query that fetches the object (a subquery on the
membership's unique index), so scoping adds no query to a page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import CharField, QuerySet
from django.db.models.expressions import RawSQL
from django.http import Http404, HttpRequest
from django.utils.crypto import constant_time_compare

from .models import ApiKey, ImportJob, Membership, Project, Role, Session, ShareLink, Tour, TourStop
from .models.fixed_lookup import FixedLookup
from .models.locks import lock_rows


class NotVisible(Http404):
    """404: the object does not exist, or the caller may not know that it does."""


def hold(model: type[Session] | type[Tour], *pks: int) -> None:
    """Lock these sessions' (or tours') rows to the end of the caller's transaction, or raise
    NotVisible for one that is gone: what a writer hangs on them (a comment, a sign-off, a stop,
    a link, a checkpoint) then commits before their delete begins, or finds them gone (a 404),
    where it failed its foreign key at commit (a 500, RACES). In lock order: after Project.lock,
    sessions before tours, both before the log's head (deletion.delete_session's order). FOR NO
    KEY UPDATE, as Project.lock says why."""
    wanted = sorted(set(pks))
    if not wanted:
        return
    found = lock_rows(model.objects.filter(pk__in=wanted))
    for pk in wanted:
        if pk not in found:
            raise NotVisible(f"{model._meta.verbose_name} {pk} not found")


@dataclass(frozen=True)
class ShareGrant:
    """What one active share link opened in this browser lets it read: one session, or one tour
    and the sessions of its stops (all in the link's project)."""

    link_id: int
    project_id: int
    sessions: frozenset[int]
    tours: frozenset[int]
    allow_export: bool
    expires_at: datetime

    def covers(self, found: object) -> bool:
        """Whether this grant names exactly `found` (a Session or a Tour; nothing else)."""
        if getattr(found, "project_id", None) != self.project_id:
            return False
        if isinstance(found, Session):
            return found.pk in self.sessions
        return isinstance(found, Tour) and found.pk in self.tours


@dataclass
class Actor:
    """Who a request acts as: a user, possibly through a key narrowed to one project or to
    reading, and the share grants of its browser. An anonymous actor without a grant may see
    nothing."""

    user: AbstractBaseUser | None
    key: ApiKey | None = None
    grants: tuple[ShareGrant, ...] = ()
    _roles: dict[int, Role] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """What `created_by` and the audit log call this actor: the user's name, or for a
        visitor without an account the newest share link it came in by (`share:<id>`)."""
        if self.user is None:
            return f"share:{self.grants[-1].link_id}" if self.grants else ""
        return self.user.get_username()[:150]

    def grant_on(self, found: object) -> ShareGrant | None:
        """The newest share grant covering `found`, if any."""
        return next((grant for grant in reversed(self.grants) if grant.covers(found)), None)

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

    def narrow(self, project_id: int, role: Role | str | None, *, reading: bool = False) -> Role | None:
        """The role this actor has in a project, given the user's own role there (or None). A
        read-only key acts as a viewer, which writes nothing; `reading`: for a read that needs
        more than a viewer's role (the audit log), it keeps its user's, as reading writes nothing."""
        if self.user is None or not self.user.is_active:
            return None
        if self.project_limit is not None and self.project_limit != project_id:
            return None
        effective = Role.ADMIN if self.is_superuser else (Role(role) if role else None)
        if effective is not None and self.read_only and not reading:
            return Role.VIEWER
        return effective

    def role_in(self, project_id: int) -> Role | None:
        """The role in one project (the user's memberships are read once per actor)."""
        if self._roles is None:
            rows = Membership.objects.filter(user=self.user).values_list("project_id", "role") if self.user else []
            self._roles = {project_id: Role(role) for project_id, role in rows}
        return self.narrow(project_id, self._roles.get(project_id))


ANONYMOUS = Actor(user=None)
# Not read for a session a caller opens: the writer's saved state (its variables and memory, as
# large as an agent made them) is for the next append, which reads the row again locked. Loaded
# on first use where a reader needs it.
SESSION_DEFERRED = ("ingest_state",)

# Where a browser keeps the share links it opened (ids, newest last): its Django session, so
# nothing a visitor holds names a link, and signing out forgets them.
SHARE_LINKS_KEY = "share_links"
MAX_SHARE_LINKS = 20


def actor_of(request: HttpRequest) -> Actor:
    """The actor of a request: the API key it authenticated with (ninja's `request.auth`), else
    the signed-in user, with the share grants of its browser. Kept on the request so its
    memberships and grants are read once."""
    actor = getattr(request, "_replay_actor", None)
    if actor is not None:
        return actor
    auth = getattr(request, "auth", None)
    user = getattr(request, "user", None)
    if isinstance(auth, ApiKey):
        actor = Actor(user=auth.user, key=auth)
    elif user is not None and user.is_authenticated:
        actor = Actor(user=user, grants=_share_grants(request))
    else:
        grants = _share_grants(request)
        actor = Actor(user=None, grants=grants) if grants else ANONYMOUS
    request._replay_actor = actor
    return actor


def holds_share_links(request: HttpRequest) -> bool:
    """Whether this browser ever opened a share link (active or not): its requests for the
    player reach the view, which answers 404 once the link is revoked or expired, as for any
    object it cannot see."""
    store = getattr(request, "session", None)
    return bool(store is not None and store.get(SHARE_LINKS_KEY))


def remember_share_link(request: HttpRequest, link_id: int) -> None:
    """Keep an opened link in the browser's session: its grant holds from the next request on."""
    kept = [pk for pk in request.session.get(SHARE_LINKS_KEY, []) if pk != link_id]
    request.session[SHARE_LINKS_KEY] = (kept + [link_id])[-MAX_SHARE_LINKS:]
    request.__dict__.pop("_replay_actor", None)


def still_reads(request: HttpRequest, session_id: int) -> bool:
    """Whether the caller of a long stream may still read the session, asked anew of the
    database (the actor kept on the request is as it was when the stream began): its key not
    revoked, its user still signed in and active, its role or its share link still there. The
    live tail asks every few seconds (replay/streaming.py)."""
    actor = actor_of(request)
    if actor.key is not None:
        key = ApiKey.objects.active().select_related("user").filter(pk=actor.key.pk).first()
        if key is None:
            return False
        fresh = Actor(user=key.user, key=key)
    else:
        user = None
        if actor.user is not None:
            user = _still_signed_in(request, actor.user.pk)
            if user is None:
                return False
        fresh = Actor(user=user, grants=_share_grants(request))
    try:
        session_for(fresh, session_id)
    except (Http404, PermissionDenied):
        return False
    return True


def _still_signed_in(request: HttpRequest, user_id: int) -> AbstractBaseUser | None:
    """The user of the request's login, if it still holds as Django's own sign-in check would
    find it: the login not ended nor expired, the password not changed since (the session's
    auth hash)."""
    store = getattr(request, "session", None)
    if store is None or not store.session_key:
        return None
    stored = type(store)(store.session_key).load()  # {} when signed out or expired
    # request.user is a lazy wrapper: the model is asked of Django, not of its type.
    user = get_user_model()._default_manager.filter(pk=user_id).first()
    if not stored or user is None or str(stored.get(SESSION_KEY)) != str(user_id):
        return None
    if not constant_time_compare(str(stored.get(HASH_SESSION_KEY, "")), user.get_session_auth_hash()):
        return None
    return user


def _share_grants(request: HttpRequest) -> tuple[ShareGrant, ...]:
    """The grants of the browser's active share links, read on every request (one query, two
    with a tour link), so a revoked or expired link stops opening anything at once."""
    if getattr(request, "auth", None) is not None:
        return ()  # an API request: share links open pages, never the API
    store = getattr(request, "session", None)
    ids = [pk for pk in (store.get(SHARE_LINKS_KEY) or []) if isinstance(pk, int)] if store is not None else []
    if not ids:
        return ()
    links = list(
        ShareLink.objects.active()
        .filter(pk__in=ids)
        .values_list("pk", "project_id", "session_id", "tour_id", "allow_export", "expires_at")
    )
    tour_ids = [tour_id for _, _, _, tour_id, _, _ in links if tour_id is not None]
    stops: dict[int, set[int]] = {}
    if tour_ids:
        for tour_id, session_id in TourStop.objects.filter(tour_id__in=tour_ids).values_list("tour_id", "session_id"):
            stops.setdefault(tour_id, set()).add(session_id)
    order = {pk: n for n, pk in enumerate(ids)}
    grants = [
        ShareGrant(link_id=pk, project_id=project_id, allow_export=allow_export, expires_at=expires_at,
                   sessions=frozenset(stops.get(tour_id, ()) if tour_id is not None else (session_id,)),
                   tours=frozenset((tour_id,) if tour_id is not None else ()))
        for pk, project_id, session_id, tour_id, allow_export, expires_at in links
    ]  # fmt: skip
    return tuple(sorted(grants, key=lambda grant: order[grant.link_id]))


def _as_actor(who: HttpRequest | Actor) -> Actor:
    return who if isinstance(who, Actor) else actor_of(who)


def check(
    actor: Actor, *, project_id: int, role: Role | str | None, need: Role, what: str, reading: bool = False
) -> None:
    """The one permission check: 404 outside the project, 403 inside it below `need` (said to be
    the key's doing where only its being read-only stands in the way)."""
    _require(actor.narrow(project_id, role, reading=reading), need=need, what=what, held=_held(actor, project_id, role))


def _held(actor: Actor, project_id: int, role: Role | str | None) -> Role | None:
    """The role a read-only key's user holds in the project (None for any other caller)."""
    return actor.narrow(project_id, role, reading=True) if actor.read_only else None


def _require(effective: Role | None, *, need: Role, what: str, held: Role | None = None) -> None:
    if effective is None:
        raise NotVisible(f"{what} not found")
    if not effective.includes(need):
        if held is not None and held.includes(need):  # the user may; their read-only key may not
            raise PermissionDenied(
                f"{what}: a read-only key acts as a viewer (it keeps its user's role only to read the audit log)"
            )
        raise PermissionDenied(f"{what}: this needs the {need.label.lower()} role in its project")


def _with_role(queryset: QuerySet, actor: Actor, project_column: str) -> QuerySet:
    """The queryset with the actor's own role in each row's project as `member_role`.

    Written as SQL: the same correlated subquery as an ORM `Subquery(OuterRef(...))`, which
    Django takes ~0.7 ms longer to compile, on every request of every page (bench/replay_bench.py
    measured it as a third of serving a single step)."""
    if actor.user is None or actor.is_superuser:
        return queryset  # a superuser's role comes from narrow(), not from a membership
    sql = _member_role_sql(connection.ops.quote_name(queryset.model._meta.db_table), project_column)
    return queryset.annotate(member_role=RawSQL(sql, [actor.user.pk], output_field=CharField()))


def _member_role_sql(outer: str, project_column: str) -> str:
    """The caller's role in the project of a row of `outer` (the user's id its one parameter):
    a correlated subquery on the membership's unique index."""
    quote = connection.ops.quote_name
    members = quote(Membership._meta.db_table)
    return (
        f"SELECT role FROM {members} WHERE {members}.project_id = {outer}.{quote(project_column)} "
        f"AND {members}.user_id = %s"
    )


# --- one object -------------------------------------------------------------------------------


@cache
def _lookup(model: type[Session | ShareLink | ImportJob | Tour], *, with_role: bool) -> FixedLookup:
    """The object by its pk with its project and, `with_role`, the caller's own role in that
    project (`member_role`): `_with_role`'s query as SQL built once, since compiling it through
    the ORM cost ~1 ms of every request."""
    return FixedLookup(
        model,
        where=f"{{table}}.{connection.ops.quote_name(model._meta.pk.column)} = %s",
        related=("project",),
        annotations={"member_role": _member_role_sql("{table}", "project_id")} if with_role else {},
        deferred=SESSION_DEFERRED if model is Session else (),
    )


def _object_for(
    actor: Actor, model: type[Session | ShareLink | ImportJob | Tour], pk: int, what: str, need: Role,
    *, shared: bool = True,
):  # fmt: skip
    """The object `pk` of `model` if the actor's role in its project is at least `need`.
    Without a role there, a share grant naming exactly this object makes the actor its viewer,
    never more (unless not `shared`: the team's own work, which no link shares)."""
    if actor.user is None and not actor.grants:
        raise NotVisible(f"{what} not found")
    # As _with_role: a superuser's role comes from narrow(), an anonymous visitor has none.
    with_role = actor.user is not None and not actor.is_superuser
    pk = model._meta.pk.get_prep_value(pk)  # as the ORM takes it (an int)
    found = _lookup(model, with_role=with_role).get([actor.user.pk, pk] if with_role else [pk])
    if found is None:
        raise NotVisible(f"{what} not found")
    role = getattr(found, "member_role", None)
    effective = actor.narrow(found.project_id, role)
    if effective is None and shared and actor.grant_on(found) is not None:
        effective = Role.VIEWER
    _require(effective, need=need, what=what, held=_held(actor, found.project_id, role))
    return found


def session_for(who: HttpRequest | Actor, session_id: int, *, need: Role = Role.VIEWER, shared: bool = True) -> Session:
    """The session, if the caller's role in its project is at least `need`. Not `shared`: for
    the team's work on it (who redacted what, ...), which a share link's visitor, signed in or
    not, never reads: a 404 then, as for any session outside the caller's projects."""
    return _object_for(_as_actor(who), Session, session_id, f"session {session_id}", need, shared=shared)


def role_on(who: HttpRequest | Actor, found: Session | ImportJob | Tour) -> Role | None:
    """The caller's role in the project of an object fetched through `session_for`,
    `job_for` or `tour_for` (from the role that lookup read with it: no query)."""
    return _as_actor(who).narrow(found.project_id, getattr(found, "member_role", None))


def may(who: HttpRequest | Actor, found: Session | ImportJob | Tour | Project, need: Role) -> bool:
    """Whether the caller holds `need` in the project of `found` (fetched through `session_for`,
    `job_for`, `tour_for` or `project_for`): what a page offers. The operation checks again when
    it is asked for, through the same lookups with `need=`; one rule for both (no query)."""
    role = found.role if isinstance(found, Project) else role_on(who, found)
    return role is not None and role.includes(need)


def share_grant_on(who: HttpRequest | Actor, found: Session | Tour) -> ShareGrant | None:
    """The share grant by which the caller sees `found` (fetched through `session_for` or
    `tour_for`) when it has no role of its own in its project: the page then shows what a link
    shares (the recording) and not the team's work on it (comments, sign-offs, forms)."""
    actor = _as_actor(who)
    return actor.grant_on(found) if role_on(actor, found) is None else None


def may_export(who: HttpRequest | Actor, session: Session) -> bool:
    """Whether the caller may export a session fetched through `session_for`: any member may
    (viewer and up), a share link's visitor only when a link covering it allows exports."""
    actor = _as_actor(who)
    if role_on(actor, session) is not None:
        return True
    return any(grant.allow_export for grant in actor.grants if grant.covers(session))


def session_to_export(who: HttpRequest | Actor, session_id: int, *, format: str | None = None) -> Session:
    """The session, if the caller may export it as `format` (see `may_export`, and for
    "original" `may_export_original`): 404 as `session_for`, 403 for a visitor whose link does
    not allow it."""
    session = session_for(who, session_id)
    if not may_export(who, session):
        raise PermissionDenied(f"session {session_id}: this share link does not allow exports")
    if format == "original" and not may_export_original(who, session):
        raise PermissionDenied(
            f"session {session_id}: its upload held other sessions too, which a share link does not share; "
            "the rlm-code JSONL export has this session's own events"
        )
    return session


def may_export_original(who: HttpRequest | Actor, session: Session) -> bool:
    """Whether the caller may have the session's original upload (`may_export` granted): a
    member may; a share link's visitor only when the upload gave this session alone, as its
    bytes would give the other sessions' records too (an appended file, an AgentLens export of
    several sessions), and never one a restored bundle carried (what else it gave is unknown)."""
    actor = _as_actor(who)
    if role_on(actor, session) is not None or session.import_job_id is None:
        return True  # a member, or no upload: the session's own stored records
    result = ImportJob.objects.filter(pk=session.import_job_id).values_list("result", flat=True).first() or []
    # The original an evidence bundle carried (`carried_by`) came from another server, which
    # may have given other sessions from it: its job names only the one restored here.
    return all(
        isinstance(entry, dict) and entry.get("session") == session.pk and not entry.get("carried_by")
        for entry in result
    )


def share_link_for(who: HttpRequest | Actor, link_id: int, *, need: Role = Role.MAINTAINER) -> ShareLink:
    """The share link, if the caller's role in its project is at least `need`."""
    return _object_for(_as_actor(who), ShareLink, link_id, f"share link {link_id}", need)


def job_for(who: HttpRequest | Actor, job_id: int, *, need: Role = Role.VIEWER) -> ImportJob:
    """The import job, if the caller's role in its project is at least `need`."""
    return _object_for(_as_actor(who), ImportJob, job_id, f"import job {job_id}", need)


def tour_for(who: HttpRequest | Actor, tour_id: int, *, need: Role = Role.VIEWER) -> Tour:
    """The tour, if the caller's role in its project is at least `need`."""
    return _object_for(_as_actor(who), Tour, tour_id, f"tour {tour_id}", need)


def project_for(who: HttpRequest | Actor, slug: str, *, need: Role = Role.VIEWER, reading: bool = False) -> Project:
    """The project, if the caller's role in it is at least `need` (`reading`: see Actor.narrow)."""
    actor = _as_actor(who)
    what = f"project {slug!r}"
    if actor.user is None or "\x00" in slug:  # no slug holds one (and PostgreSQL refuses it)
        raise NotVisible(f"{what} not found")
    try:
        project = _with_role(Project.objects.all(), actor, "id").get(slug=slug)
    except Project.DoesNotExist:
        raise NotVisible(f"{what} not found")
    role = getattr(project, "member_role", None)
    check(actor, project_id=project.pk, role=role, need=need, what=what, reading=reading)
    project.role = actor.narrow(project.pk, role, reading=reading)
    return project


def project_to_remove_from(who: HttpRequest | Actor, slug: str, username: str) -> Project:
    """The project, if the caller may take `username` out of it: an admin anyone, any member
    themselves (leaving; not through a read-only key, which writes nothing)."""
    actor = _as_actor(who)
    if actor.user is None or username != actor.user.get_username():
        return project_for(actor, slug, need=Role.ADMIN)
    project = project_for(actor, slug, need=Role.VIEWER)
    if actor.read_only:
        raise PermissionDenied(f"project {slug!r}: a read-only key cannot leave a project")
    return project


def project_to_write(who: HttpRequest | Actor, slug: str, *, need: Role = Role.MAINTAINER) -> Project:
    """The project an upload or a live session goes to: the one named, else the key's default
    (ApiKey.default_project: chosen by its user when the key was made), else the caller's only
    project they may write to. A ValueError (a 400) says what to name instead."""
    actor = _as_actor(who)
    if slug:
        return project_for(actor, slug, need=need)
    pinned = actor.key.default_project_id if actor.key is not None and actor.project_limit is None else None
    if pinned is not None:
        project = Project.objects.get(pk=pinned)  # a deleted project clears the key's (SET_NULL)
        role = actor.role_in(pinned)
        if role is None or not role.includes(need):
            raise ValueError(f"project: this key writes to project {project.slug!r} when none is named, where "
                             f"you may not write now; name one of your projects")  # fmt: skip
        project.role = role
        return project
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
    return _visible(Session.objects.defer(*SESSION_DEFERRED), _as_actor(who))


def jobs_visible_to(who: HttpRequest | Actor) -> QuerySet[ImportJob]:
    """Every import job the caller may see."""
    return _visible(ImportJob.objects.all(), _as_actor(who))
