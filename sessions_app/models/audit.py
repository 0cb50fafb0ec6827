"""The audit log: who did what, when, from where; append-only and hash-chained.

Each project has its own chain (so a project's log can be exported and checked alone); what
belongs to no project (sign-ins, keys that span projects) goes to the site's chain. Entries are
written only by sessions_app/audit.py, which links them with the same hashing as events
(sessions_app/chain.py).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from ..chain import GENESIS_HASH
from .projects import Project

SITE_LOG = "site"


def log_name(project_id: int | None) -> str:
    """The chain an entry of this project (or of none) belongs to."""
    return SITE_LOG if project_id is None else f"project:{project_id}"


class AuditLog(models.Model):
    """The head of one chain: appending locks this row, so two writers never fork the chain."""

    name = models.CharField(max_length=40, unique=True)
    head_hash = models.CharField(max_length=64, default=GENESIS_HASH)
    last_seq = models.BigIntegerField(default=-1)

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_seq}"


class AuditEntryQuerySet(models.QuerySet):
    def of_project(self, project: Project) -> AuditEntryQuerySet:
        return self.filter(log=log_name(project.pk))


class AuditEntry(models.Model):
    log = models.CharField(max_length=40)
    seq = models.BigIntegerField()  # 0, 1, 2 ... gap-free per log
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.DO_NOTHING, related_name="audit_entries"
    )
    at = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=200)  # username, key:<prefix> or share:<id>
    action = models.CharField(max_length=40)  # dotted, sessions_app/audit.py ACTIONS
    target = models.CharField(max_length=200, blank=True)  # e.g. session:42
    # JSON text exactly as hashed (sorted keys), so the stored bytes are the hashed bytes.
    detail = models.TextField(default="{}")
    # Text, not an inet column: PostgreSQL would rewrite an IPv6 address's spelling, and the
    # hashed value must be the stored one.
    ip = models.CharField(max_length=45, null=True, blank=True)
    key_prefix = models.CharField(max_length=16, blank=True)  # the API key it came through
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["log", "-seq"]
        constraints = [
            # Gap-free per log; two writers racing for a seq fail instead of forking the chain.
            models.UniqueConstraint(fields=["log", "seq"], name="auditentry_log_seq_uniq"),
        ]
        indexes = [
            # The audit page's filters: a log's entries of one action, newest first.
            models.Index(fields=["log", "action", "-seq"], name="auditentry_log_action"),
            models.Index(fields=["log", "actor", "-seq"], name="auditentry_log_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.log}#{self.seq} {self.action} by {self.actor}"
