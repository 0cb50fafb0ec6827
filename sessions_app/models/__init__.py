"""The models, by subject: projects and who may use them, recorded sessions and their events,
what reviewers leave on them (comments, sign-offs), tours and share links, the audit log."""

from .audit import SITE_LOG, AuditEntry, AuditLog, log_name
from .onboarding import ShareLink, Tour, TourStop
from .projects import ApiKey, Membership, Project, Role
from .redaction import RedactionRules
from .redactions import RedactionJob
from .reviews import Comment, CommentRevision, Review
from .sessions import (
    KEYFRAME_EVERY,
    Checkpoint,
    Event,
    ImportJob,
    IngestBatch,
    ReceivedEvent,
    RowIdField,
    Session,
    SessionQuerySet,
    Snapshot,
    VerificationRun,
)
from .traces import OtlpConversation, OtlpSpan, OtlpTrace

__all__ = [
    "KEYFRAME_EVERY", "SITE_LOG", "ApiKey", "AuditEntry", "AuditLog", "Checkpoint", "Comment", "CommentRevision",
    "Event", "ImportJob", "Review", "ShareLink", "Tour", "TourStop",
    "IngestBatch", "Membership", "OtlpConversation", "OtlpSpan", "OtlpTrace", "Project", "ReceivedEvent", "Role", "RowIdField", "Session", "SessionQuerySet", "Snapshot", "VerificationRun",
    "log_name", "RedactionJob", "RedactionRules",
]  # fmt: skip
