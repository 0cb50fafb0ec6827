"""Per-project quotas: the bytes a project's data takes, and how many sessions it holds.

A project's admins set its own on the project page (Project.max_stored_bytes, max_sessions),
at most the server's REPLAY_QUOTA_STORED_MB / REPLAY_QUOTA_SESSIONS where those are set (any
signed-in user may make a project and be its admin); a project without one follows the server's,
and with those unset has no limit. Stored bytes are what the project holds, each byte counted once:
its sessions' source records (Session.record_bytes: the text of every event as received, from a
file or live), the uploads no session holds yet, at their size as uploaded, while their
originals are kept (queued, running, or failed until the clean-up deletes them,
sessions_app/originals.py), and the OpenTelemetry spans waiting to be written as events (their
records' text).

Every check runs before any work starts: an upload is refused on its declared size before its
body is read when the project is known from the URL (the API's `?project=`), else before it is
stored (a gzip at the size its last bytes state it holds, as its sessions will, and again by its
import job at the size it decompresses to); a live batch on its Content-Length before its body
is parsed (an OTLP export again once decompressed); a live session before it is created. Too
many bytes is a 413, too many sessions a 409 (docs/api.md). The checks count what is stored when
they run: two requests at the same moment may both pass, each staying within the quota on its
own.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Sum

from ..formats import size_text
from ..models import ImportJob, OtlpTrace, Project, Session


class QuotaExceeded(Exception):
    """A write a quota refuses; `status` is the HTTP status to answer (413 bytes, 409 sessions)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Usage:
    """What a project holds, against its quotas (None: no limit)."""

    stored_bytes: int
    sessions: int
    max_stored_bytes: int | None
    max_sessions: int | None

    @property
    def bytes_left(self) -> int | None:
        return None if self.max_stored_bytes is None else max(0, self.max_stored_bytes - self.stored_bytes)


def limits_of(project: Project) -> tuple[int | None, int | None]:
    """The project's (stored bytes, sessions) quotas: the lower of its own and the server's, the
    server's being a ceiling (one set before a lower server quota counts as the server's)."""
    return (
        _lower(project.max_stored_bytes, settings.QUOTA_STORED_BYTES),
        _lower(project.max_sessions, settings.QUOTA_SESSIONS),
    )


def _lower(own: int | None, server: int | None) -> int | None:
    return min((limit for limit in (own, server) if limit is not None), default=None)


def usage_of(*, project: Project) -> Usage:
    """The project's stored bytes and sessions (two aggregate queries, one a quota needs)."""
    max_bytes, max_sessions = limits_of(project)
    return Usage(stored_bytes=stored_bytes(project), sessions=Session.objects.filter(project=project).count(),
                 max_stored_bytes=max_bytes, max_sessions=max_sessions)  # fmt: skip


def stored_bytes(project: Project) -> int:
    pending = (
        ImportJob.objects.filter(project=project, original_deleted_at__isnull=True)
        .exclude(status=ImportJob.Status.DONE)
        .aggregate(n=Sum("bytes_total"))
    )
    held = Session.objects.filter(project=project).aggregate(n=Sum("record_bytes"))
    # OpenTelemetry spans received but not yet written as events (ingest/traces.py): settling
    # runs later, so without them any number of exports would pass the quota meanwhile. Their
    # traces keep the count (one row a trace, not the records read).
    staged = OtlpTrace.objects.filter(project=project, pending=True).aggregate(n=Sum("staged_chars"))
    return (pending["n"] or 0) + (held["n"] or 0) + (staged["n"] or 0)


def check_bytes(*, project: Project, size: int, what: str = "upload") -> None:
    """Refuse (413) `size` more bytes past the project's stored-bytes quota."""
    max_bytes, _ = limits_of(project)
    if max_bytes is None:
        return
    used = stored_bytes(project)
    if used + size > max_bytes:
        left = max(0, max_bytes - used)
        raise QuotaExceeded(
            413,
            f"The {what} ({size_text(size)}) exceeds project {project.slug}'s storage quota: "
            f"{size_text(used)} of {size_text(max_bytes)} used, {size_text(left)} left "
            "(an admin sets the quota on the project page).",
        )


def check_new_session(*, project: Project, what: str = "A new session") -> None:
    """Refuse (409) a session more than the project's sessions quota."""
    _, max_sessions = limits_of(project)
    if max_sessions is None:
        return
    held = Session.objects.filter(project=project).count()
    if held >= max_sessions:
        raise QuotaExceeded(
            409,
            f"{what} would exceed project {project.slug}'s quota of {max_sessions} sessions "
            f"({held} held); delete sessions or ask an admin to raise it on the project page.",
        )


def check_upload(*, project: Project, size: int) -> None:
    """An upload of `size` bytes: it must fit the bytes quota and leave room for a session."""
    check_bytes(project=project, size=size)
    check_new_session(project=project, what="The upload")


def sessions_left(project: Project) -> int | None:
    """How many sessions the project may still take (None: no limit); the importer asks before
    each session of a file."""
    _, max_sessions = limits_of(project)
    if max_sessions is None:
        return None
    return max(0, max_sessions - Session.objects.filter(project=project).count())


def past_the_sessions_quota(project: Project) -> bool:
    """Whether the project holds more sessions than its quota, the caller's own new one (not yet
    committed) counted: asked last, under Project.lock to the end of the caller's transaction,
    so two writers (an import and a live create) never both take the last place."""
    _, max_sessions = limits_of(project)
    if max_sessions is None:
        return False  # and no lock: every other writer of the project would wait for the import
    Project.lock(project.pk)
    return Session.objects.filter(project=project).count() > max_sessions
