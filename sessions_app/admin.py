"""Django's admin site, for superusers: Replay's records to look at, never to change.

Every change to them goes through the product, which checks it (a project's name against
lookalikes, a member change against the last admin, a deletion against the tours it shortens)
and leaves its entry in the project's audit log; an edit here would do neither, and one to a
sealed record (a session, an event, a keyframe) is what verification reports as tampering. Users
(Django's own admin) are the site's accounts and stay editable here; groups, which only grant
permissions a superuser holds anyway, are not shown. Only superusers get in
(replay_site/admin_site.py).
"""

from django.contrib import admin
from django.contrib.auth.models import Group
from django_q import admin as _django_q_admin  # noqa: F401  (its models registered, then replaced below)
from django_q.models import Failure, OrmQ, Schedule, Success

from .models import ApiKey, AuditEntry, Checkpoint, Event, ImportJob, IngestBatch, Project, Session, Snapshot


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Project)
class ProjectAdmin(ReadOnlyAdmin):
    """Made on the Projects page (project.create), its settings changed on its own page
    (project.change)."""

    list_display = ["name", "slug", "retention_days", "max_stored_bytes", "max_sessions", "created_at"]


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = [
        "id", "source_session_id", "source_format", "project", "status", "step_count",
        "event_count", "cost_usd", "tokens", "error_count", "chain_valid", "created_at",
    ]  # fmt: skip
    list_filter = ["status", "source_format", "project", "chain_valid"]
    search_fields = ["source_session_id", "run_id", "agent_id", "task", "model"]
    # Never list a session's events inline: a session may hold millions.


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["session", "seq", "kind", "source_type", "ts", "step", "is_error"]
    list_filter = ["kind", "is_error"]
    list_select_related = ["session"]
    raw_id_fields = ["session"]
    show_full_result_count = False


@admin.register(Snapshot)
class SnapshotAdmin(ReadOnlyAdmin):
    list_display = ["session", "seq", "step_pos", "kind", "created_at"]
    list_filter = ["kind"]
    raw_id_fields = ["session"]


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ["session", "name", "seq", "step_pos", "created_by", "created_at"]
    raw_id_fields = ["session"]


@admin.register(ImportJob)
class ImportJobAdmin(ReadOnlyAdmin):
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


@admin.register(IngestBatch)
class IngestBatchAdmin(ReadOnlyAdmin):
    list_display = ["session", "idempotency_key", "first_seq", "count", "created_at"]
    raw_id_fields = ["session"]


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    list_display = ["name", "key_prefix", "user", "created_at", "last_used_at", "revoked_at"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The logs as they are: the site's (sign-ins, keys without a project limit), which no
    project page shows, and every project's. An edit would break the chain, and the log is
    evidence."""

    list_display = ["log", "seq", "at", "actor", "action", "target", "ip", "key_prefix"]
    list_filter = ["log", "action"]
    search_fields = ["actor", "target"]
    ordering = ["log", "-seq"]
    show_full_result_count = False


# django-q2's job queue. A scheduled task names any function the worker can import and calls it
# ("os.system" with a command line), so a schedule added or changed here ran code as the
# server's user, unaudited. Shown read only and without actions (its "resubmit" too): the
# schedules are made by `manage.py schedule_jobs`, the tasks by the product.
for _model in (Schedule, Success, Failure, OrmQ):
    if admin.site.is_registered(_model):
        _shown = type(admin.site.get_model_admin(_model))
        admin.site.unregister(_model)
        admin.site.register(_model, type(f"ReadOnly{_shown.__name__}", (ReadOnlyAdmin, _shown), {"actions": []}))

# Groups grant model permissions, which nobody but a superuser (holding them all) uses here.
admin.site.unregister(Group)
