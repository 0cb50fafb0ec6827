"""What onboarding is built from: guided tours through a project's sessions, and share links
that open one session or one tour to someone without an account.

The workflows are sessions_app/tours.py and sessions_app/sharing.py; these are the facts.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from .. import markdown
from .projects import Membership, Project, Role
from .sessions import Session


class Tour(models.Model):
    """An ordered walk through steps of one project's sessions, each stop narrated."""

    project = models.ForeignKey(Project, on_delete=models.DB_CASCADE, related_name="tours")
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)  # Markdown as written; shown sanitised
    # The text's HTML, made when it was written (markdown.py: rendering on every view was
    # seconds a page), and the digest of the text and renderer it was made from.
    description_html = models.TextField(blank=True, default="")
    description_html_of = models.CharField(max_length=32, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.DB_SET_NULL, related_name="tours"
    )
    created_by_name = models.CharField(max_length=150, blank=True)  # kept when the user is deleted
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project", "title", "id"]
        indexes = [
            # The Learn page: a project's tours by title.
            models.Index(fields=["project", "title"], name="tour_project_title"),
        ]

    MARKDOWN_FIELDS = ("description",)

    def __str__(self) -> str:
        return self.title

    def save(self, *args: Any, **kwargs: Any) -> None:
        kwargs["update_fields"] = markdown.keep_html(self, kwargs.get("update_fields"))
        super().save(*args, **kwargs)


class TourStop(models.Model):
    """One stop of a tour: a step (`seq`, the event it stops at) of a session of the tour's
    project, with a title and a Markdown narration. `position` is 0-based and dense."""

    tour = models.ForeignKey(Tour, on_delete=models.DB_CASCADE, related_name="stops")
    position = models.PositiveIntegerField()
    # Deleting a session deletes the stops on it (the tour keeps the rest).
    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="tour_stops")
    seq = models.BigIntegerField()
    title = models.CharField(max_length=200)
    narration = models.TextField(blank=True)
    # The text's HTML, made when it was written (markdown.py: rendering on every view was
    # seconds a page), and the digest of the text and renderer it was made from.
    narration_html = models.TextField(blank=True, default="")
    narration_html_of = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["tour", "position"]
        constraints = [
            models.UniqueConstraint(fields=["tour", "position"], name="tourstop_tour_position_uniq"),
        ]

    MARKDOWN_FIELDS = ("narration",)

    def __str__(self) -> str:
        return f"stop {self.position + 1} of tour {self.tour_id}: {self.title}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        kwargs["update_fields"] = markdown.keep_html(self, kwargs.get("update_fields"))
        super().save(*args, **kwargs)


class ShareLinkQuerySet(models.QuerySet):
    def active(self, *, now=None) -> ShareLinkQuerySet:
        """Links that still open: not revoked, not expired, and their maker still may share in
        the project (a link speaks for the maintainer who made it: one who left the project, lost
        the role, or whose account was closed or deleted opens nothing through it)."""
        return self.with_maker_allowed().filter(
            revoked_at__isnull=True, expires_at__gt=now or timezone.now(), maker_may_share=True
        )

    def with_maker_allowed(self) -> ShareLinkQuerySet:
        """Each link with `maker_may_share`: whether its maker is an active user who is a
        superuser or at least a maintainer of the link's project (what creating one needs)."""
        sharers = Membership.objects.filter(
            project=OuterRef("project_id"), user=OuterRef("created_by_id"), role__in=SHARING_ROLES
        )
        return self.annotate(
            maker_may_share=Q(created_by__is_active=True) & (Q(created_by__is_superuser=True) | Exists(sharers))
        )


# The roles that may make a share link (docs/teams.md's matrix): a link opens only while its
# maker holds one of them.
SHARING_ROLES = (Role.MAINTAINER, Role.ADMIN)


class ShareLink(models.Model):
    """A read-only link (`/s/<token>`) to one session or one tour, for someone without an
    account. Only the token's SHA-256 is stored; the token is shown once, at creation."""

    project = models.ForeignKey(Project, on_delete=models.DB_CASCADE, related_name="share_links")
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.DB_CASCADE, related_name="share_links")
    tour = models.ForeignKey(Tour, null=True, blank=True, on_delete=models.DB_CASCADE, related_name="share_links")
    token_hash = models.CharField(max_length=64, unique=True)
    note = models.CharField(max_length=500, blank=True)
    allow_export = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.DB_SET_NULL, related_name="share_links"
    )
    created_by_name = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=150, blank=True)
    use_count = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = ShareLinkQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(session__isnull=False, tour__isnull=True) | Q(session__isnull=True, tour__isnull=False),
                name="sharelink_one_target",
            ),
        ]
        indexes = [
            # A session's (or a tour's) links, listed on its page.
            models.Index(fields=["session", "-created_at"], name="sharelink_session_created"),
            models.Index(fields=["tour", "-created_at"], name="sharelink_tour_created"),
        ]

    def __str__(self) -> str:
        return f"share link {self.pk} to {self.target}"

    @property
    def target(self) -> str:
        return f"session:{self.session_id}" if self.session_id else f"tour:{self.tour_id}"

    @property
    def state(self) -> str:
        """Whether the link still opens (as `active()`): "active", "revoked", "expired", or
        "maker left" (read from a queryset `with_maker_allowed`; else taken as allowed)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "active" if getattr(self, "maker_may_share", True) else "maker left"

    @staticmethod
    def hash_token(token: str) -> str:
        return hashlib.sha256(token.encode("utf-8")).hexdigest()

    @staticmethod
    def new_token() -> str:
        """32 random bytes, URL-safe (docs/teams.md)."""
        return secrets.token_urlsafe(32)
