"""Workflows of teams: making projects, adding and removing members, creating and revoking API
keys. The API, the dashboard and the management commands all call these, and each records its
audit entry."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Value
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.text import slugify

from . import audit
from .access import Actor
from .lookalikes import as_picked, hidden_in_name, twin_in
from .models import ApiKey, Membership, Project, Role
from .models.locks import lock_rows
from .models.onboarding import SHARING_ROLES
from .sharing import revoke_links_made_by


class TeamError(ValueError):
    """A request the workflow refuses; the message names the field (a 400, or a form error)."""


def is_project_slug(slug: str) -> bool:
    """Whether a project may be named so in addresses (every path that makes a project asks)."""
    return bool(slug) and len(slug) <= 100 and slugify(slug) == slug


@transaction.atomic  # the change and its audit entry, or neither
def create_project(*, actor: Actor | str, name: str, slug: str = "", ip: str | None = None) -> Project:
    """A new project, whose creator is its admin (a command, `audit.OPERATOR`, makes one with
    no member yet)."""
    name = as_picked(name.strip())
    slug = slug.strip() or slugify(name)
    if not name:
        raise TeamError("name: a project needs a name")
    if why := hidden_in_name("name", name):
        raise TeamError(why)
    if not is_project_slug(slug):
        raise TeamError("slug: use lowercase letters, digits, hyphens and underscores")
    if Project.objects.filter(slug=slug).exists():
        raise TeamError(f"slug: a project {slug!r} exists already")
    if Project.objects.filter(name=name).exists():
        raise TeamError(f"name: a project named {name!r} exists already")
    # Not named: it may be a project the caller is no member of.
    if twin_in(name, Project.objects.values_list("name", flat=True).iterator()):
        raise TeamError(f"name: {name!r} looks like another project's name (lookalike letters); name it otherwise")
    try:
        with transaction.atomic():
            project = Project.objects.create(name=name[:200], slug=slug[:100])
            if isinstance(actor, Actor) and actor.user is not None:
                Membership.objects.create(project=project, user=actor.user, role=Role.ADMIN)
    except IntegrityError:  # created by someone else in between
        raise TeamError(f"slug: a project {slug!r} exists already")
    audit.record(action="project.create", actor=actor, project=project, target=f"project:{slug}",
                 detail={"name": project.name}, ip=ip)  # fmt: skip
    return project


@dataclass(frozen=True)
class MemberChange:
    """What `set_member` did: "added", "changed" or "unchanged", and how many share links the
    member had made it revoked (a role that may not share ends them): said to the admin, who
    had not been told an outside recipient's link was dead."""

    outcome: str
    links_revoked: int = 0


def hold_the_account_deleted(sender: type, instance: object, **kwargs: object) -> None:
    """pre_delete of a user (the admin's delete, single or bulk): the account's row is locked before
    Django deletes its memberships, so a role being set meanwhile (which holds the row, then the
    membership's) is waited for, or waits: they took the two the other way round, a deadlock
    (review)."""
    lock_rows(sender.objects.filter(pk=instance.pk), no_key=False)


def _no_user(username: str) -> TeamError:
    # Said how one is made: a project admin cannot make accounts, and was left at a dead end.
    return TeamError(
        f"username: no active user {username!r}; accounts are made by the server's operator "
        "(manage.py create_user) or a superuser"
    )


def set_member(
    *, actor: Actor, project: Project, username: str, role: str, ip: str | None = None, add_only: bool = False
) -> MemberChange:
    """Give a user a role in the project: "added", "changed", or "unchanged" (the role they had;
    nothing recorded). The last admin cannot be demoted. `add_only` (the page's Add form): a
    member already is refused, naming their role, rather than changed without a word."""
    if role not in Role.values:
        raise TeamError(f"role: one of {', '.join(Role.values)}")
    users = get_user_model().objects.filter(username=username, is_active=True)
    user = users.first() if "\x00" not in username else None
    if user is None:
        raise _no_user(username)
    with transaction.atomic():
        Project.lock(project.pk)
        # Held to the commit, as the project: a user deleted (or deactivated) since the look above
        # failed the membership's key at commit, a 500 (RACES).
        if not lock_rows(users.filter(pk=user.pk)):
            raise _no_user(username)
        current = Membership.objects.select_for_update().filter(project=project, user=user).first()
        if current is not None and add_only:
            raise TeamError(
                f"username: {username} is a member already ({Role(current.role).label.lower()}); "
                "change their role in the members list"
            )
        if current is None:
            Membership.objects.create(project=project, user=user, role=role)
        elif current.role != role:
            if current.role == Role.ADMIN and _admins(project) == 1:
                raise TeamError(f"role: {username} is the project's last admin; make another admin first")
            old = current.role
            current.role = role
            current.save(update_fields=["role", "updated_at"])
        else:
            return MemberChange("unchanged")
        # In the same transaction as the change: a demotion is never recorded without the
        # revocation of the links it ends, nor the other way round.
        if current is None:
            audit.record(action="member.add", actor=actor, project=project, target=f"user:{username}",
                         detail={"role": role}, ip=ip)  # fmt: skip
            return MemberChange("added")
        audit.record(action="member.change", actor=actor, project=project, target=f"user:{username}",
                     detail={"from": old, "role": role}, ip=ip)  # fmt: skip
        revoked = 0
        if role not in SHARING_ROLES:
            revoked = revoke_links_made_by(actor=actor, project_id=project.pk, user_id=user.pk, ip=ip,
                                           why=f"its maker {username} is now {Role(role).label.lower()}")  # fmt: skip
    return MemberChange("changed", revoked)


def remove_member(*, actor: Actor, project: Project, username: str, ip: str | None = None) -> int:
    """Take a user out of the project; never its last admin. How many share links they had
    made there it revoked."""
    if "\x00" in username:  # no username holds one (and PostgreSQL refuses it)
        raise TeamError(f"username: {username!r} is not a member of {project.slug}")
    with transaction.atomic():
        Project.lock(project.pk)
        member = (
            # The membership's row only (`of`): the account's too took it after the membership (a
            # deadlock with the account's delete) and blocked a comment's key check on it (review).
            Membership.objects.select_for_update(of=("self",)).select_related("user")
            .filter(project=project, user__username=username).first()
        )  # fmt: skip
        if member is None:
            raise TeamError(f"username: {username!r} is not a member of {project.slug}")
        if member.role == Role.ADMIN and _admins(project) == 1:
            raise TeamError(f"username: {username} is the project's last admin; make another admin first")
        role = member.role
        member.delete()
        audit.record(action="member.remove", actor=actor, project=project, target=f"user:{username}",
                     detail={"role": role}, ip=ip)  # fmt: skip
        # A superuser's too: the team's decision about this person here ends what they shared
        # here, whatever else they may do (a link kept would reopen once they are no superuser).
        return revoke_links_made_by(actor=actor, project_id=project.pk, user_id=member.user_id, ip=ip,
                                    why=f"its maker {username} left the project")  # fmt: skip


def _admins(project: Project) -> int:
    return Membership.objects.filter(project=project, role=Role.ADMIN).count()


def members_of(project: Project) -> list[Membership]:
    return list(Membership.objects.filter(project=project).select_related("user").order_by("user__username"))


def _active_key_like(user: AbstractBaseUser, name: str) -> str | None:
    """The name of an active key of `user` that looks like `name` (lookalike letters), if any:
    as written and folded as the name check folds them ("CI" and "Cl" look alike as they are,
    "CI" and a Cyrillic "сі" once folded)."""
    held = list(ApiKey.objects.active().filter(user=user).values_list("name", flat=True))
    twin = twin_in(name, held)
    if twin is None:
        folded = {other.lower(): other for other in held}
        twin = folded.get(twin_in(name.lower(), folded) or "")
    return twin


@transaction.atomic  # the change and its audit entry, or neither
def create_key(
    *, actor: Actor | str, user: AbstractBaseUser, name: str, project: Project | None = None, read_only: bool = False,
    ip: str | None = None, default_project: Project | None = None,
) -> tuple[ApiKey, str]:  # fmt: skip
    """A new key of `user`; the key itself is returned once and never stored. `default_project`
    (a key of all projects only): where its writes that name no project go, as its user chose;
    they must be able to write there."""
    name = as_picked(name.strip())
    if not name:
        raise TeamError("name: a key needs a name")
    if why := hidden_in_name("name", name):
        raise TeamError(why)
    if not user.is_active:
        raise TeamError(f"user: {user.get_username()} is not active")
    if default_project is not None and (project is not None or read_only):
        default_project = None  # a key of one project writes there; a read-only one writes nowhere
    if default_project is not None:
        role = Actor(user=user).role_in(default_project.pk)
        if role is None or not role.includes(Role.MAINTAINER):
            raise TeamError(f"writes_to: {user.get_username()} may not write to project {default_project.slug!r}")
    # Names tell a user's keys apart (in the list, in "Revoke the key ...?"); a page reloaded
    # after "Create" would otherwise make a second key of the same name. The database holds
    # it (one_active_key_name_per_user); the look first names the key in the way.
    same = _active_key_named(user, name[:200])
    if same is None:
        if (twin := _active_key_like(user, name[:200])) is not None:
            raise TeamError(f"name: looks like {user.get_username()}'s active key {twin!r} (lookalike "
                            "letters); choose another name")  # fmt: skip
        try:
            with transaction.atomic():
                api_key, key = ApiKey.create_key(name=name[:200], user=user, project=project, read_only=read_only,
                                                 default_project=default_project)  # fmt: skip
        except IntegrityError:
            same = _active_key_named(user, name[:200])  # made by a post at the same moment
            if same is None:
                raise
    if same is not None:
        raise TeamError(f"name: {user.get_username()} has an active key named {same.name!r} already "
                        f"({same.key_prefix}…); revoke it or choose another name")  # fmt: skip
    detail = {"name": api_key.name, "user": user.get_username(), "read_only": read_only}
    if default_project is not None:
        detail["writes_to"] = default_project.slug
    audit.record(action="key.create", actor=actor, project=project, target=f"key:{api_key.key_prefix}", detail=detail,
                 ip=ip)  # fmt: skip
    return api_key, key


def _active_key_named(user, name: str) -> ApiKey | None:
    # Folded by the database, as its constraint folds it (not as Python or iexact would).
    return ApiKey.objects.active().alias(folded=Lower("name")).filter(user=user, folded=Lower(Value(name))).first()


@transaction.atomic  # the change and its audit entry, or neither
def revoke_key(*, actor: Actor | str, api_key: ApiKey, ip: str | None = None) -> None:
    if api_key.revoked_at is not None:
        return
    # Revoked by whoever gets there first (two posts at once): one revocation, one audit entry.
    if not ApiKey.objects.filter(pk=api_key.pk, revoked_at=None).update(revoked_at=timezone.now()):
        return
    api_key.revoked_at = timezone.now()
    audit.record(action="key.revoke", actor=actor, project=api_key.project_id, target=f"key:{api_key.key_prefix}",
                 detail={"name": api_key.name}, ip=ip)  # fmt: skip
