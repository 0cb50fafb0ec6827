"""Recorded agent sessions as append-only event streams.

The shape of `Event` is what makes every page cheap: each row carries the running totals *after*
itself (cost, tokens, errors, elapsed time, reward, steps, counts by kind), its pairing and its
hash-chain link, all computed once at ingest (sessions_app/ingest/rows.py). A page of a session is
then one indexed range read over `(session, seq)`, whatever the session's length or the offset.
JSON columns that pages read in bulk (payload, step_state, kind_counts) are stored as text and
spliced into responses with orjson.Fragment, never decoded by Django's JSONField.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from django.db import models, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone

from ..chain import GENESIS_HASH, HEADER_FIELDS, header_digests, header_seal
from ..lookalikes import shown_plainly
from .projects import Project


class SessionQuerySet(models.QuerySet):
    def in_project(self, project: Project | str | None) -> SessionQuerySet:
        if project is None or project == "":
            return self
        if isinstance(project, Project):
            return self.filter(project=project)
        return self.filter(project__slug=project)

    def reseal(self, fields: Iterable[str]) -> None:
        """Seal again `fields` of these sessions as the database now holds them, after a writer
        set them by an UPDATE rather than from a whole row it holds; every other field keeps the
        digest it had (so an edit made in the database is still found). Run it in the writer's
        transaction, after its UPDATE; the rows are locked while they are read and sealed, so a
        whole-row write in between cannot leave a seal of values it replaced."""
        fields = set(fields)
        with transaction.atomic():
            rows = self.order_by().select_for_update(no_key=True).values_list("pk", "header_seal", *HEADER_FIELDS)
            for pk, seal, *values in rows:
                kept = {name: digest for name, digest in header_digests(seal).items() if name not in fields}
                sealed = header_seal(dict(zip(HEADER_FIELDS, values)), keep=kept)
                Session.objects.filter(pk=pk).update(header_seal=sealed)

    def with_start_time(self) -> SessionQuerySet:
        """Each session with `start_time`: when it ran (its first event's time), or, for one
        without any (a live session before its first event, a source without timestamps), when
        it was stored; so never null. The index session_project_start_time is on this expression."""
        return self.annotate(start_time=_START_TIME)

    def matching(self, text: str) -> SessionQuerySet:
        if not text:
            return self
        return self.filter(
            Q(task__icontains=text)
            | Q(source_session_id__icontains=text)
            | Q(run_id__icontains=text)
            | Q(agent_id__icontains=text)
            | Q(model__icontains=text)
            | Q(final_answer__icontains=text)
        )


_START_TIME = Coalesce("started_at", "created_at")
_ABSENT = object()


class Session(models.Model):
    """One recorded agent session: its identity, its live totals and the head of its hash chain."""

    class Status(models.TextChoices):
        LIVE = "live", "Live"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        # The recording stops in the middle of an action a restart would resume (daycare's
        # pending run_python block): neither finished nor failed.
        INTERRUPTED = "interrupted", "Interrupted"

    # DO_NOTHING leaves the database's own foreign key to refuse deleting a project that still
    # has sessions; Python-level PROTECT cannot be mixed with the DB_CASCADE chain below it.
    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING, related_name="sessions")
    source_format = models.CharField(max_length=40)
    source_session_id = models.CharField(max_length=200, blank=True)
    run_id = models.CharField(max_length=200, blank=True)
    agent_id = models.CharField(max_length=200, blank=True)
    task = models.TextField(blank=True)
    environment = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.LIVE)
    completed = models.BooleanField(default=False)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    final_answer = models.TextField(blank=True)

    # Totals, kept current on every append.
    event_count = models.BigIntegerField(default=0)
    step_count = models.BigIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    # Whether cost_usd is a price or only a sum of nothing: events with a known cost, and events
    # that used tokens with no known price (a total of 0 with no priced event is *unpriced*).
    priced_events = models.BigIntegerField(default=0)
    unpriced_events = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(default=0)
    error_count = models.BigIntegerField(default=0)  # events flagged as errors
    step_error_count = models.BigIntegerField(default=0)  # steps with a non-empty error (rlm-code)
    step_success_count = models.BigIntegerField(default=0)
    reward = models.FloatField(default=0.0)
    elapsed_ms = models.FloatField(default=0.0)
    kind_counts = models.JSONField(default=dict, blank=True)  # {kind: count} over the session
    models_used = models.JSONField(default=list, blank=True)
    tools_used = models.JSONField(default=list, blank=True)

    # Hash chain: its head, and the result of the last verification that actually ran
    # (sessions_app/verification.py): None until one has.
    head_hash = models.CharField(max_length=64, default=GENESIS_HASH)
    chain_valid = models.BooleanField(null=True, blank=True)
    chain_broken_seq = models.BigIntegerField(null=True, blank=True)
    chain_checked_at = models.DateTimeField(null=True, blank=True)
    chain_checked_count = models.BigIntegerField(null=True, blank=True)  # events it covered
    # The redactions it listed (values removed after the fact, each checked by its commitment):
    # the player's badge shows them whenever the session is opened, not only after a verify.
    chain_redaction_count = models.BigIntegerField(default=0, db_default=0)
    # The digests of the fields above that a page shows (chain.HEADER_FIELDS), stored by every
    # writer with them (`seal_header`, `reseal`): verification names a field edited since.
    header_seal = models.TextField(blank=True, default="", db_default="")

    # SHA-256 of the records an import read, in order: the same content imported again is
    # recognised by it (the chain's head differs, its salts being random).
    source_digest = models.CharField(max_length=64, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # Set only by importing an evidence bundle (ingest/bundles.py): the key that signed it and
    # what the bundle said of itself. Not in `metadata`, which sources and clients write.
    bundle_origin = models.JSONField(null=True, blank=True)
    # What the writer needs to continue a session later (open pairs, streaks, state).
    ingest_state = models.JSONField(default=dict, blank=True)
    import_job = models.ForeignKey(
        "ImportJob", null=True, blank=True, on_delete=models.DB_SET_NULL, related_name="sessions"
    )
    # The size of the source records its events hold (their text as received, imported or sent
    # live): what its project's stored-bytes quota counts for it (sessions_app/ingest/quotas.py).
    record_bytes = models.BigIntegerField(default=0)
    # SHA-256 of the request that created it live under metadata["idempotency_key"]: a retry
    # with the same key and another request is refused (409), not answered with this session.
    idempotency_digest = models.CharField(max_length=64, blank=True, default="")
    # The session that started this one as a sub-agent (OpenTelemetry ingest: an invoke_agent
    # span inside another agent's). The parent's child_spawn event names this session; deleting
    # the parent keeps the child, which then stands alone.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.DB_SET_NULL, related_name="children")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The sessions page sorted by import time ("-created"/"created"; the default sort by
            # start time has session_project_start_time), and retention's candidates.
            models.Index(fields=["project", "-created_at"], name="session_project_created"),
            # Import de-duplication: same source id + same content in a project.
            models.Index(
                fields=["project", "source_format", "source_session_id", "source_digest"],
                name="session_dedupe_digest",
            ),
            # Retention clean-up: sessions older than N days.
            models.Index(fields=["created_at"], name="session_created"),
            # The sessions page in its default order, newest run first, within each of the
            # caller's projects (replay/listing.py): ORDER BY COALESCE(started_at, created_at)
            # DESC, id DESC LIMIT 51 and its keyset pages' `COALESCE(...) < %s`
            # (SessionQuerySet.with_start_time), as session_project_created serves "newest import".
            models.Index(F("project"), _START_TIME.desc(), F("id").desc(), name="session_project_start_time"),
        ]

    def __str__(self) -> str:
        # The id as the source wrote it, but a direction override or an invisible character
        # written out: "ses_approved\u202edesiler_" read as "ses_approved_relised" in a title.
        return f"{shown_plainly(self.source_session_id) or self.pk} ({self.source_format})"

    def get_absolute_url(self) -> str:
        return reverse("sessions:player", args=[self.pk])

    @classmethod
    def from_db(cls, db, field_names, values, **options):  # noqa: ANN001, ANN003, ANN206 (Django's signature)
        # `options`: what Django passes besides (6.1 adds fetch_mode), passed on as given.
        instance = super().from_db(db, field_names, values, **options)
        # The header as loaded: what `seal_header` tells a writer's own changes from (the JSON
        # ones copied: a writer may change them in place).
        instance._loaded_header = {
            name: copy.deepcopy(value) if isinstance(value, dict | list) else value
            for name in HEADER_FIELDS
            if (value := instance.__dict__.get(name, _ABSENT)) is not _ABSENT
        }
        return instance

    def seal_header(self) -> None:
        """Seal the header fields this instance changed since it was loaded (every field of a new
        one), before a writer saves the whole row or inserts it; the others keep their digests,
        so an edit made in the database before this write is still found."""
        values = {name: getattr(self, name) for name in HEADER_FIELDS}
        loaded: dict[str, Any] = getattr(self, "_loaded_header", {})
        old = header_digests(self.header_seal) if loaded else {}
        kept = {name: digest for name, digest in old.items() if name in loaded and loaded[name] == values[name]}
        self.header_seal = header_seal(values, keep=kept)
        self._loaded_header = copy.deepcopy(values)  # as saved next: a second save keeps these digests

    @property
    def duration_seconds(self) -> float:
        if self.started_at and self.ended_at:
            return (self.ended_at - self.started_at).total_seconds()
        return self.elapsed_ms / 1000.0

    @property
    def cost_known(self) -> bool:
        """Whether `cost_usd` is a price: some event had a known cost. Without one its 0 is a sum
        of nothing, shown as *unpriced*, never as $0 (every page, the API and MCP ask here)."""
        return self.priced_events > 0

    @property
    def success_rate(self) -> float:
        return self.step_success_count / self.step_count if self.step_count else 0.0

    @property
    def chain_state(self) -> str:
        """ "verified", "broken" or "unverified": only a verification that ran says more."""
        if self.chain_valid is None or self.chain_checked_at is None:
            return "unverified"
        return "verified" if self.chain_valid else "broken"

    @property
    def llm_calls(self) -> int:
        return self.kind_counts.get("llm_call", 0)

    @property
    def tool_calls(self) -> int:
        return self.kind_counts.get("tool_call", 0)


class RowIdField(models.BigAutoField):
    """A BigAutoField that SQLite declares as a plain INTEGER PRIMARY KEY (its rowid).

    Django adds AUTOINCREMENT there, which makes every inserted row also update the
    sqlite_sequence table: 6 % of the instructions of writing a large import's events
    (docs/benchmarks.md). Its one guarantee, that an id of a deleted row is never handed out
    again, nothing here needs: nothing refers to an event by its id.
    """

    def db_type_suffix(self, connection):
        if connection.vendor == "sqlite":
            return None
        return super().db_type_suffix(connection)


class Event(models.Model):
    """One event of a session, with everything a page needs about it precomputed."""

    id = RowIdField(primary_key=True)

    # No index of its own: the unique (session, seq) index below starts with session and serves
    # every "events of a session" lookup; a second index would only slow each insert.
    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="events", db_index=False)
    seq = models.BigIntegerField()  # 0, 1, 2 ... gap-free per session: the one true order
    kind = models.CharField(max_length=32)  # canonical vocabulary, docs/formats.md
    source_type = models.CharField(max_length=64)
    ts = models.DateTimeField(null=True, blank=True)
    line = models.BigIntegerField(null=True, blank=True)  # line of the source file
    # 64-bit like every number a source gives (formats refuse larger ones): a 32-bit column
    # would refuse, or in a binary COPY silently wrap, a step of 3,000,000,000.
    step = models.BigIntegerField(null=True, blank=True)  # the step number the source recorded
    step_pos = models.BigIntegerField(null=True, blank=True)  # 0-based position if it closes a step
    depth = models.BigIntegerField(default=0)
    agent_id = models.CharField(max_length=200, blank=True)
    parent_id = models.CharField(max_length=200, blank=True)
    child_id = models.CharField(max_length=200, blank=True)
    tool = models.CharField(max_length=200, blank=True)  # tool name, or model for LLM events
    pair_id = models.CharField(max_length=200, blank=True)  # callId / requestId / child id
    pair_seq = models.BigIntegerField(null=True, blank=True)
    pair_duration_ms = models.FloatField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    cost_usd = models.FloatField(null=True, blank=True)
    cost_unpriced = models.BooleanField(default=False)  # tokens used but no price known
    tokens = models.BigIntegerField(null=True, blank=True)
    reward = models.FloatField(null=True, blank=True)
    cumulative_reward = models.FloatField(null=True, blank=True)  # when the source states it
    is_error = models.BooleanField(default=False)
    failed = models.BooleanField(null=True, blank=True)  # a tool or step outcome, when recorded
    fail_streak = models.BigIntegerField(default=0)  # consecutive failures of this tool so far
    payload = models.TextField(default="{}")  # JSON text of the normalised data
    # The source's record as received (a JSON line's text), where no copy of the source file is
    # kept: live batches, and files imported without keeping them.
    raw = models.TextField(null=True, blank=True)
    step_state = models.TextField(null=True, blank=True)  # JSON StepState when it closes a step
    state_change = models.TextField(null=True, blank=True)  # JSON change to variables/memory
    # The chain (sessions_app/chain.py): the salt of the content fields' commitments, this
    # event's link and its predecessor's.
    salt = models.CharField(max_length=32, default="")
    # Content values removed after the event was hashed: their commitments and the kept fields'
    # salts (chain.redact_field), JSON; null while nothing was.
    redacted = models.TextField(null=True, blank=True)
    hash = models.CharField(max_length=64)
    prev_hash = models.CharField(max_length=64)

    # Running totals after this event: the context at any event is this one row.
    cost_total = models.FloatField(default=0.0)
    tokens_total = models.BigIntegerField(default=0)
    errors_total = models.BigIntegerField(default=0)
    elapsed_ms = models.FloatField(default=0.0)
    reward_total = models.FloatField(default=0.0)
    steps_total = models.BigIntegerField(default=0)
    kind_counts = models.TextField(default="{}")  # JSON {kind: count} up to and including this

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            # Pages are range reads `seq >= a AND seq < b` on this index; it also makes two
            # writers racing for the same seq fail instead of interleaving.
            models.UniqueConstraint(fields=["session", "seq"], name="event_session_seq_uniq"),
        ]
        indexes = [
            # llmHistory / toolResults / pending approvals / search by kind / next user message:
            # "last N events of these kinds at or before seq".
            models.Index(fields=["session", "kind", "seq"], name="event_session_kind_seq"),
            # StepState pages and goto_step: "steps at positions a..b" (rlm-code's step list).
            models.Index(
                fields=["session", "step_pos"],
                name="event_session_step_pos",
                condition=Q(step_pos__isnull=False),
            ),
            # Next/previous error from a position.
            models.Index(
                fields=["session", "seq"],
                name="event_session_error_seq",
                condition=Q(is_error=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.kind}"


class VerificationRun(models.Model):
    """A verification someone asked for, while it runs: one a session at a time
    (verification.one_at_a_time), as each reads every event of the session again (5-6 s of a
    process at 100,000 events) and a member could otherwise start any number at once."""

    session = models.OneToOneField(Session, on_delete=models.DB_CASCADE, related_name="verification_run")
    started_at = models.DateTimeField()


# A state keyframe (full variables + memory) at most every this many events while the state
# changes, so the state at any event is one keyframe plus at most this many rows away: the
# writer keeps the promise (ingest/rows.py), the readers rely on it (replay/state.py).
KEYFRAME_EVERY = 256


class Snapshot(models.Model):
    """A point-in-time state of a session: variables, memory notes and stats at `seq`.

    Ingest writes a keyframe every few hundred events while the state changes, so the state at
    any event is one keyframe plus at most that many changes away. Users save named snapshots too.
    """

    class Kind(models.TextChoices):
        KEYFRAME = "keyframe", "Keyframe"
        SAVED = "saved", "Saved"
        IMPORTED = "imported", "Imported"

    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="snapshots")
    seq = models.BigIntegerField()
    step_pos = models.BigIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=12, choices=Kind.choices, default=Kind.KEYFRAME)
    variables = models.JSONField(default=dict, blank=True)
    memory_notes = models.JSONField(default=list, blank=True)
    stats = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "seq"]
        indexes = [
            # State at seq N: "latest keyframe with seq <= N".
            models.Index(fields=["session", "kind", "seq"], name="snapshot_session_kind_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}@{self.seq} ({self.kind})"


class Checkpoint(models.Model):
    """A named position in a session, with who set it and when."""

    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="checkpoints")
    name = models.CharField(max_length=200)
    seq = models.BigIntegerField()
    step_pos = models.BigIntegerField(null=True, blank=True)
    note = models.TextField(blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "seq", "name"]
        constraints = [
            models.UniqueConstraint(fields=["session", "name"], name="checkpoint_session_name_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.name} @ {self.seq}"


class ImportJob(models.Model):
    """An uploaded (or command-line) file on its way in: the kept original, progress, problems."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING, related_name="import_jobs")
    original_name = models.CharField(max_length=500)
    stored_path = models.CharField(max_length=1000)  # the kept original under REPLAY_DATA_DIR
    requested_format = models.CharField(max_length=40, blank=True)
    detected_format = models.CharField(max_length=40, blank=True)
    replace = models.BooleanField(default=False)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    bytes_total = models.BigIntegerField(default=0)
    bytes_done = models.BigIntegerField(default=0)
    events_done = models.BigIntegerField(default=0)
    sessions_done = models.IntegerField(default=0)
    problem_count = models.IntegerField(default=0)
    problems = models.JSONField(default=list, blank=True)  # [{line, field, message}], capped
    result = models.JSONField(default=list, blank=True)  # one entry per resulting session
    error = models.TextField(blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Who runs it ("host:pid:process start", sessions_app/worker_liveness.py), how many times a
    # worker took it, and the running worker's last sign of life: a job whose worker died is
    # queued again by the watchdog (jobs.requeue_stalled_imports).
    worker = models.CharField(max_length=300, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The kept original is deleted REPLAY_ORIGINALS_GRACE_DAYS after the job failed, or after
    # its last session was deleted (`orphaned_at`, sessions_app/originals.py).
    orphaned_at = models.DateTimeField(null=True, blank=True)
    original_deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The sessions page lists the newest jobs.
            models.Index(fields=["-created_at"], name="importjob_created"),
            # The watchdog's look at the running jobs, every minute.
            models.Index(fields=["status"], name="importjob_status"),
        ]

    def __str__(self) -> str:
        return f"{self.original_name} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in {self.Status.DONE, self.Status.FAILED}

    @property
    def carried_by(self) -> str:
        """For the original an evidence bundle carried, kept as its restored session's upload
        (ingest/bundles.py): the bundle's file name, which the imports lists say instead of
        counting the session's events a second time; "" for any other job."""
        first = self.result[0] if isinstance(self.result, list) and self.result else None
        return str(first.get("carried_by") or "") if isinstance(first, dict) else ""


class IngestBatch(models.Model):
    """A batch appended through the API under a client idempotency key: a retry is a no-op."""

    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="batches")
    idempotency_key = models.CharField(max_length=200)
    # SHA-256 of the batch as sent: the same key with another body is refused (409), not
    # answered as a retry. Empty for batches stored before it was kept.
    body_digest = models.CharField(max_length=64, blank=True, default="")
    first_seq = models.BigIntegerField()
    count = models.IntegerField()
    head_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "idempotency_key"], name="ingestbatch_session_key_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.idempotency_key}"


class ReceivedEvent(models.Model):
    """An event a client posted under its own id (AgentLens's POST /api/events): a retry naming
    the id again is answered from here and stored no second time."""

    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="received_events")
    source_id = models.CharField(max_length=200)
    seq = models.BigIntegerField()
    source_hash = models.CharField(max_length=64)  # the event's hash in the source's own chain
    # sha256 of the event as posted (ingest/agentlens_events.content_digest): a retry under the
    # id with other content is refused, not dropped. "" for events received before it was kept.
    content_digest = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [
            # Also the index of each batch's look-up: WHERE session_id = %s AND source_id IN (...).
            models.UniqueConstraint(fields=["session", "source_id"], name="receivedevent_session_source_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.source_id}"
