"""The models, by subject: projects and who may use them, recorded sessions and their events,
the audit log."""

from .audit import SITE_LOG, AuditEntry, AuditLog, log_name
from .projects import ApiKey, Membership, Project, Role
from .sessions import (
    KEYFRAME_EVERY,
    Checkpoint,
    Event,
    ImportJob,
    IngestBatch,
    RowIdField,
    Session,
    SessionQuerySet,
    Snapshot,
)

__all__ = [
    "KEYFRAME_EVERY", "SITE_LOG", "ApiKey", "AuditEntry", "AuditLog", "Checkpoint", "Event", "ImportJob",
    "IngestBatch", "Membership", "Project", "Role", "RowIdField", "Session", "SessionQuerySet", "Snapshot",
    "log_name",
]  # fmt: skip
