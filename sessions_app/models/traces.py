"""OpenTelemetry traces on their way into sessions (OTLP ingest, sessions_app/ingest/traces.py).

Spans arrive when they end, children before their parents, in any number of requests; a
session's events must land in the order the spans started, each once, on an append-only chain.
So spans are staged here first and become events when their trace has settled. A staged span
keeps its record until then; afterwards only the columns that place a straggler (its parent, its
operation, the session its descendants went to) and dedupe a retried export stay.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .projects import Project
from .sessions import Session


class OtlpTrace(models.Model):
    """One trace of a project: the session its top-level events go to, and whether it waits."""

    # Like sessions: the database's own foreign key refuses deleting a project that has them.
    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING, related_name="otlp_traces")
    trace_id = models.CharField(max_length=32)  # lower-case hex, as OTLP/JSON writes it
    # The trace's top session (its conversation's, else its own); deleting it forgets the trace,
    # and a span arriving later starts a new one.
    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="otlp_traces")
    pending = models.BooleanField(default=True)  # holds spans not yet written as events
    root_seen = models.BooleanField(default=False)  # its root span (no parent) has arrived
    last_received_at = models.DateTimeField(default=timezone.now)
    settled_at = models.DateTimeField(null=True, blank=True)  # when its spans were last written
    # The characters of its spans' records waiting to be written (0 once settled): what the
    # project's storage quota counts of them, read per export without reading the records.
    staged_chars = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            # Every export request looks its traces up by (project, trace id).
            models.UniqueConstraint(fields=["project", "trace_id"], name="otlptrace_project_trace_uniq"),
        ]
        indexes = [
            # The settling job: "traces still waiting, quiet since before T".
            # (Per session, "its waiting traces" is served by the session foreign key's index.)
            models.Index(fields=["last_received_at"], name="otlptrace_pending_received", condition=Q(pending=True)),
        ]

    def __str__(self) -> str:
        return f"{self.trace_id} ({'pending' if self.pending else 'settled'})"


class OtlpConversation(models.Model):
    """The session of each conversation of a project (or of a trace that names none), found by a
    keyed digest of its id. Not by the session's own source id: that is the id as the project's
    redaction rules left it, so an id a rule changes would never be found again (a new session
    every export request), and two ids a rule makes read alike would share one."""

    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING, related_name="+")
    digest = models.CharField(max_length=64)  # ingest/traces.py's conversation_digest
    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "digest"], name="otlpconversation_project_digest_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.digest[:12]} -> session {self.session_id}"


class OtlpSpan(models.Model):
    """One span of a trace, stored once whatever how often an exporter retries it."""

    # No index of its own: the unique (trace, span_id) index starts with it.
    trace = models.ForeignKey(OtlpTrace, on_delete=models.DB_CASCADE, related_name="spans", db_index=False)
    span_id = models.CharField(max_length=16)
    parent_span_id = models.CharField(max_length=16, blank=True)
    operation = models.CharField(max_length=64, blank=True)  # gen_ai.operation.name
    start_ns = models.BigIntegerField()
    # The span as formats/otlp.py normalised it (JSON text), until it is written as events.
    record = models.TextField(null=True, blank=True)
    # Where its descendants' events go (a sub-agent's own session), once written.
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.DB_SET_NULL, related_name="+")

    class Meta:
        constraints = [
            # Dedupe: an exporter's retry (or a collector's duplicate) inserts nothing.
            models.UniqueConstraint(fields=["trace", "span_id"], name="otlpspan_trace_span_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.trace_id}:{self.span_id}"
