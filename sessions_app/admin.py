from django.contrib import admin

from .models import ApiKey, AuditEntry, Checkpoint, Event, ImportJob, IngestBatch, Project, Session, Snapshot


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = [
        "id", "source_session_id", "source_format", "project", "status", "step_count",
        "event_count", "cost_usd", "tokens", "error_count", "chain_valid", "created_at",
    ]  # fmt: skip
    list_filter = ["status", "source_format", "project", "chain_valid"]
    search_fields = ["source_session_id", "run_id", "agent_id", "task", "model"]
    readonly_fields = [
        "event_count", "step_count", "cost_usd", "tokens", "error_count", "step_error_count",
        "step_success_count", "reward", "elapsed_ms", "kind_counts", "head_hash",
        "chain_valid", "chain_broken_seq", "chain_checked_at", "ingest_state", "import_job",
    ]  # fmt: skip
    # Never list a session's events inline: a session may hold millions.

    def has_change_permission(self, request, obj=None):
        # A session's fields are what its writer stored and sealed (chain.HEADER_FIELDS): an edit
        # here would be an unrecorded change that verify then reports as tampering.
        return False


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    """Read-mostly: events are the audit record, so the admin never edits or adds them."""

    list_display = ["session", "seq", "kind", "source_type", "ts", "step", "is_error"]
    list_filter = ["kind", "is_error"]
    list_select_related = ["session"]
    raw_id_fields = ["session"]
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Snapshot)
class SnapshotAdmin(admin.ModelAdmin):
    list_display = ["session", "seq", "step_pos", "kind", "created_at"]
    list_filter = ["kind"]
    raw_id_fields = ["session"]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["session", "name", "seq", "step_pos", "created_by", "created_at"]
    raw_id_fields = ["session"]


@admin.register(ImportJob)
class ImportJobAdmin(admin.ModelAdmin):
    list_display = [
        "original_name",
        "project",
        "status",
        "detected_format",
        "events_done",
        "sessions_done",
        "problem_count",
        "created_at",
    ]
    list_filter = ["status", "detected_format"]
    readonly_fields = ["problems", "result", "error"]


@admin.register(IngestBatch)
class IngestBatchAdmin(admin.ModelAdmin):
    list_display = ["session", "idempotency_key", "first_seq", "count", "created_at"]
    raw_id_fields = ["session"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "key_prefix", "user", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["key_prefix", "key_hash", "created_at", "last_used_at"]


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The logs as they are, read only: the site's (sign-ins, keys without a project limit),
    which no project page shows, and every project's. An edit would break the chain, and the
    log is evidence, so the admin adds, changes and deletes nothing."""

    list_display = ["log", "seq", "at", "actor", "action", "target", "ip", "key_prefix"]
    list_filter = ["log", "action"]
    search_fields = ["actor", "target"]
    ordering = ["log", "-seq"]
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
