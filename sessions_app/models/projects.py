"""Projects, who belongs to them in which role, and the API keys users act through.

What each role may do is decided in one place, sessions_app/access.py; these are only the facts.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import DatabaseError, connection, models, transaction
from django.db.models.functions import Lower
from django.urls import reverse
from django.utils import timezone

from .fixed_lookup import FixedLookup
from .locks import lock_rows

logger = logging.getLogger("replay.access")


class Role(models.TextChoices):
    """A member's role in a project; each includes the ones before it (docs/teams.md)."""

    VIEWER = "viewer", "Viewer"
    REVIEWER = "reviewer", "Reviewer"
    MAINTAINER = "maintainer", "Maintainer"
    ADMIN = "admin", "Admin"

    @property
    def rank(self) -> int:
        return _ROLE_RANK[self.value]

    def includes(self, needed: Role | str) -> bool:
        """Whether this role may do what `needed` may do."""
        return self.rank >= _ROLE_RANK[needed]


_ROLE_RANK = {role.value: rank for rank, role in enumerate(Role)}


class Project(models.Model):
    name = models.CharField(max_length=200, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    # Sessions older than this many days are deleted by the daily retention run; empty: the
    # server's REPLAY_RETENTION_DAYS (sessions_app/retention.py).
    retention_days = models.PositiveIntegerField(null=True, blank=True)
    # Quotas (sessions_app/ingest/quotas.py): the bytes its uploads and live events may take,
    # and how many sessions it may hold; empty: the server's REPLAY_QUOTA_STORED_MB and
    # REPLAY_QUOTA_SESSIONS (unset there too: no limit).
    max_stored_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    max_sessions = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    DEFAULT_SLUG = "default"

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("sessions:project", args=[self.slug])

    @classmethod
    def get_default(cls) -> Project:
        """The project of command-line and demo imports that name none."""
        project, _ = cls.objects.get_or_create(slug=cls.DEFAULT_SLUG, defaults={"name": "Default"})
        return project

    @classmethod
    def lock(cls, pk: int) -> None:
        """Lock the project's row to the end of the transaction, so what changes its team and
        what depends on the team are taken one after the other: two admins demoting each other
        (the second then sees one admin left), a member removed while making a share link (the
        removal then revokes it, or the link is refused); the quota's writers take it too.

        FOR NO KEY UPDATE, not FOR UPDATE: a row inserted meanwhile that references the project
        (an audit entry, a job) checks its key with FOR KEY SHARE, which FOR UPDATE blocks. An
        audit write holding its log's head then waited on this lock while its holder waited for
        the head: a deadlock (tests/test_lock_order.py)."""
        lock_rows(cls.objects.filter(pk=pk))


class Membership(models.Model):
    """One user's role in one project."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=12, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project", "user__username"]
        constraints = [
            # One role per user and project; also the index of "this user's role in the session's
            # project", the lookup every scoped read joins (sessions_app/access.py).
            models.UniqueConstraint(fields=["user", "project"], name="membership_user_project_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.project_id}: {self.role}"


class ApiKeyQuerySet(models.QuerySet):
    def active(self) -> ApiKeyQuerySet:
        return self.filter(revoked_at__isnull=True)


class ApiKey(models.Model):
    """A user's API key. It acts as its user, narrowed to one project and/or to reading when
    created so. Only its SHA-256 is stored; the key itself is shown once, at creation."""

    PREFIX = "rpl_"

    name = models.CharField(max_length=200)
    key_prefix = models.CharField(max_length=16)  # first characters, to tell keys apart
    key_hash = models.CharField(max_length=64, unique=True)
    # Null only for keys made before keys belonged to users: those are refused (401).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys"
    )
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys")
    # A key of all its user's projects writes here when a write names no project, as its user
    # chose when making it, so a project the user joins later (or is added to by its admin)
    # never turns the exporters using this key into 400s.
    default_project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    read_only = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            # A user's active keys are told apart by name (the list, "Revoke the key ...?"),
            # whatever its case; held by the database, so two "Create" posts at once make one.
            models.UniqueConstraint(
                Lower("name"), "user", condition=models.Q(revoked_at__isnull=True), name="one_active_key_name_per_user"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode("utf-8")).hexdigest()

    @classmethod
    def create_key(
        cls, *, name: str, user, project: Project | None = None, read_only: bool = False,
        default_project: Project | None = None,
    ) -> tuple[ApiKey, str]:  # fmt: skip
        key = cls.PREFIX + secrets.token_urlsafe(32)
        api_key = cls.objects.create(
            name=name, key_prefix=key[:10], key_hash=cls.hash_key(key), user=user, project=project,
            read_only=read_only, default_project=default_project,
        )  # fmt: skip
        return api_key, key

    @classmethod
    def authenticate(cls, key: str) -> ApiKey | None:
        """The active key of an active user, or None (401)."""
        if not key:
            return None
        api_key = _ACTIVE_KEY_BY_HASH.get([cls.hash_key(key)])
        if api_key is None:
            return None
        if api_key.user is None or not api_key.user.is_active:
            return None
        api_key.note_use()
        return api_key

    def note_use(self) -> None:
        """Record the last use, at most once a minute: a write on every request would cost more
        than serving a single step, and "last used" needs no finer grain. It is a convenience,
        so it never fails or holds up the read it rides on (the request runs in autocommit, so
        this is its own short statement, outside any transaction of the request)."""
        now = timezone.now()
        if self.last_used_at is not None and (now - self.last_used_at).total_seconds() <= 60:
            return
        try:
            with _no_waiting(), transaction.atomic():  # a savepoint, should a transaction be open
                type(self).objects.filter(pk=self.pk).update(last_used_at=now)
        except DatabaseError:  # a locked SQLite file, a read-only replica: skip it this time
            logger.warning("could not record the last use of API key %s", self.key_prefix)
            return
        self.last_used_at = now


# `ApiKey.objects.active().select_related("user").get(key_hash=...)`, its SQL built once: every
# API request makes this lookup (fixed_lookup.py says why).
_ACTIVE_KEY_BY_HASH = FixedLookup(
    ApiKey, where="{table}.revoked_at IS NULL AND {table}.key_hash = %s", related=("user",)
)


@contextmanager
def _no_waiting() -> Iterator[None]:
    """On SQLite, a write that would wait for another writer's lock fails at once instead (the
    busy timeout is otherwise 30 s): a read must not wait to record a convenience."""
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        (waits,) = cursor.fetchone()
        cursor.execute("PRAGMA busy_timeout = 0")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA busy_timeout = {int(waits)}")
