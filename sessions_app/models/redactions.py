"""Redactions made after the fact: the runs of "apply the project's current rules to this
session" (sessions_app/stored_redaction.py). What each removal left in the chain is the event's
own `redacted` column (chain.py); who asked for each removal, and when, is the audit log's
`session.redact` entry."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from .sessions import Session


class RedactionJob(models.Model):
    """One run of the project's current rules over a stored session: its progress, which the
    player's Redactions panel polls, and what it removed (values by label, never the values)."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="redaction_jobs")
    requested_by = models.CharField(max_length=200)  # the audit entry's actor, written when it ends
    requested_ip = models.CharField(max_length=45, null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    events_total = models.BigIntegerField(default=0)
    events_done = models.BigIntegerField(default=0)
    events_redacted = models.BigIntegerField(default=0)  # events whose content changed
    counts = models.JSONField(default=dict, blank=True)  # {label: values removed}
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The Redactions panel and the API: a session's newest runs.
            models.Index(fields=["session", "-created_at"], name="redactionjob_session_created"),
        ]

    def __str__(self) -> str:
        return f"redaction of {self.session_id} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in {self.Status.DONE, self.Status.FAILED}
