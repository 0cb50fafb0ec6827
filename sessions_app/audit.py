"""The audit log: an append-only, hash-chained record of who did what, when, from where.

`record()` is the only writer (`record_many()` for several entries at once). Each entry is
linked to its predecessor in its log (one log per project, one for the site) with the same
function that links events (chain.link_hash), over its stored values; `verify_log()` walks a log and names the first entry whose link does not
hold, as a session's verification does. Entries never hold a secret or a redacted value: the
detail says which seqs or which key, never what was in them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from .access import Actor, actor_of, hold
from .chain import GENESIS_HASH, link_hash, ts_text
from .models import AuditEntry, AuditLog, Project, Session, log_name

# One dotted name per action (docs/teams.md), so filters and exports stay stable.
ACTIONS = (
    "auth.login", "auth.login_failed", "auth.logout",
    "session.import", "session.create_live", "session.end", "session.delete", "session.export", "session.verify", "session.redact",
    "checkpoint.create", "checkpoint.delete",
    "member.add", "member.change", "member.remove",
    "key.create", "key.revoke",
    "project.create", "project.change", "retention.run", "redaction.change",
    "comment.create", "comment.edit", "comment.delete", "comment.resolve", "review.create",
    "bundle.export", "checkpoint.change",
    "tour.create", "tour.change", "tour.delete", "share_link.create", "share_link.use", "share_link.revoke",
)  # fmt: skip

# Written only to the site's log (docs/teams.md): a project's log never holds them, so its
# filter does not offer them. The site's log is read by superusers in the admin site.
SITE_ONLY_ACTIONS = ("auth.login", "auth.login_failed", "auth.logout")
PROJECT_ACTIONS = tuple(action for action in ACTIONS if action not in SITE_ONLY_ACTIONS)

CHUNK = 2000
# The actor of what the server's operator does from the command line (manage.py's commands: an
# import, a key, a member, the demo), one name in every entry and job they leave.
OPERATOR = "manage.py"


def client_ip(request: HttpRequest | None) -> str | None:
    """The address the request came from: REMOTE_ADDR. Behind a reverse proxy, replay_site/asgi.py
    sets it from the X-Forwarded-For of a trusted proxy (REPLAY_BEHIND_PROXY,
    REPLAY_TRUSTED_PROXIES); a header the client sets itself is never taken here."""
    if request is None:
        return None
    return request.META.get("REMOTE_ADDR") or None


def _detail_text(detail: dict[str, Any] | None) -> str:
    return orjson.dumps(detail or {}, option=orjson.OPT_SORT_KEYS).decode()


def entry_hash(*, prev_hash: str, seq: int, at: Any, actor: str, action: str, target: str, detail: str,
               ip: str | None, key_prefix: str, project_id: int | None) -> str:  # fmt: skip
    """An entry's link: its predecessor's and its own stored values, hashed as events are."""
    return link_hash(prev_hash, seq, [ts_text(at), actor, action, target, detail, ip, key_prefix, project_id], [])


def record(
    *,
    action: str,
    actor: Actor | str,
    project: Project | int | None = None,
    target: str = "",
    detail: dict[str, Any] | None = None,
    ip: str | None = None,
) -> AuditEntry:
    """Append one entry to the project's log (or the site's): who (an Actor, or a name for
    what no request made, such as the retention job), what, on what."""
    return record_many(action=action, actor=actor, project=project, entries=[(target, detail)], ip=ip)[0]


_HASHED = ("at", "actor", "action", "target", "detail", "ip", "key_prefix", "project_id")


def record_many(
    *,
    action: str,
    actor: Actor | str,
    project: Project | int | None,
    entries: list[tuple[str, dict[str, Any] | None]],
    ip: str | None = None,
) -> list[AuditEntry]:
    """`record()` for several entries of one action by one actor in one log, each (target,
    detail), linked one after another as `record()` links them: with one lock of the log's head,
    one insert and one update for them all, in one transaction (an OTLP export request makes a
    session for each new conversation: one transaction and four queries each cost it more than
    staging the conversation's spans)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    if not entries:
        return []
    project_id = project.pk if isinstance(project, Project) else project
    name = (actor.name if isinstance(actor, Actor) else actor)[:200]
    key_prefix = actor.key_prefix if isinstance(actor, Actor) else ""
    log = log_name(project_id)
    with transaction.atomic():
        # The head row is locked (PostgreSQL) or the database is (SQLite's IMMEDIATE
        # transactions), so entries of one log are appended one at a time. (A head made here is
        # this transaction's until it commits: another's insert of it waits, then finds it.)
        head, _ = AuditLog.objects.select_for_update().get_or_create(name=log)
        seq, link = head.last_seq, head.head_hash
        made = []
        for target, detail in entries:
            values = {
                "log": log, "project_id": project_id, "at": timezone.now(), "actor": name, "action": action,
                "target": target[:200], "detail": _detail_text(detail), "ip": ip, "key_prefix": key_prefix,
            }  # fmt: skip
            seq, prev = seq + 1, link
            link = entry_hash(prev_hash=prev, seq=seq, **{k: values[k] for k in _HASHED})
            made.append(AuditEntry(seq=seq, prev_hash=prev, hash=link, **values))
        AuditEntry.objects.bulk_create(made)
        AuditLog.objects.filter(pk=head.pk).update(head_hash=link, last_seq=seq)
    return made


def record_request(
    request: HttpRequest,
    *,
    action: str,
    project: Project | int | None = None,
    target: str = "",
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    """`record()` for what a request did, by its actor, from its address."""
    return record(action=action, actor=actor_of(request), project=project, target=target, detail=detail,
                  ip=client_ip(request))  # fmt: skip


def record_request_many(
    request: HttpRequest,
    *,
    action: str,
    project: Project | int | None,
    entries: list[tuple[str, dict[str, Any] | None]],
) -> list[AuditEntry]:
    """`record_many()` for what a request did, by its actor, from its address."""
    return record_many(action=action, actor=actor_of(request), project=project, entries=entries,
                       ip=client_ip(request))  # fmt: skip


def record_on_session(request: HttpRequest, action: str, session: Any, **detail: Any) -> AuditEntry:
    """`record_request()` for an action on one session: its project's log, `session:<id>`. A
    share link's visitor is named by the link that opens this session to it (`share:<id>`).
    NotVisible when the session was deleted since the caller looked it up: no entry names a
    session gone before it (an export of it would be of nothing)."""
    actor = actor_of(request)
    grant = actor.grant_on(session) if actor.user is None else None
    with transaction.atomic():
        hold(Session, session.pk)
        return record(action=action, actor=f"share:{grant.link_id}" if grant else actor,
                      project=session.project_id, target=f"session:{session.pk}", detail=detail,
                      ip=client_ip(request))  # fmt: skip


def record_file_import(*, actor: str, project: Project, outcomes: list[Any]) -> list[AuditEntry]:
    """`session.import` for each file the server's operator imported (`manage.py import_sessions`
    of a file or a folder, `setup_demo`): the sessions it stored, so an auditor sees where they
    came from. A file that stored none (each a duplicate, or unreadable) stored nothing to
    account for."""
    by_file: dict[Path, list[Any]] = {}
    for outcome in outcomes:
        if outcome.session is not None and not outcome.duplicate:
            by_file.setdefault(outcome.path, []).append(outcome)
    entries = []
    for path, stored in by_file.items():
        jobs = {o.session.import_job_id for o in stored}
        target = f"import:{jobs.pop()}" if len(jobs) == 1 and None not in jobs else f"session:{stored[0].session.pk}"
        detail = {"file": path.name, "session_count": len(stored), "sessions": [o.session.pk for o in stored][:100],
                  "events": sum(o.events for o in stored)}  # fmt: skip
        entries.append(record(action="session.import", actor=actor, project=project, target=target, detail=detail))
    return entries


def record_upload(request: HttpRequest, job: Any) -> AuditEntry:
    """`session.import` for an accepted upload (the API's or the dashboard's)."""
    return record_request(request, action="session.import", project=job.project_id, target=f"import:{job.pk}",
                          detail={"file": job.original_name, "bytes": job.bytes_total})  # fmt: skip


# --- reading ----------------------------------------------------------------------------------


def entry_dict(entry: AuditEntry) -> dict[str, Any]:
    """An entry as the API, the page and the JSONL export give it."""
    return {
        "seq": entry.seq,
        "at": entry.at.isoformat(),
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "detail": orjson.loads(entry.detail) if entry.detail else {},
        "ip": entry.ip,
        "key": entry.key_prefix,
        "hash": entry.hash,
    }


def entries_of(
    *, project: Project, actor: str = "", action: str = "", since: datetime | None = None,
    until: datetime | None = None, before: int | None = None,
) -> Any:  # fmt: skip
    """A project's entries, newest first, filtered; `before` is a seq (keyset pagination)."""
    found = AuditEntry.objects.of_project(project).order_by("-seq")
    if actor:
        found = found.filter(actor=actor)
    if action:
        found = found.filter(action=action)
    if since is not None:
        found = found.filter(at__gte=since)
    if until is not None:
        found = found.filter(at__lt=until)
    if before is not None:
        found = found.filter(seq__lt=before)
    return found


def export_lines(*, project: Project) -> Iterator[bytes]:
    """The project's whole log, oldest first, one JSON object a line, in keyset chunks; each line
    with all its link hashes (`prev_hash`, and the project's id), so the file is checked without
    the server (docs/teams.md gives the recipe; tests/test_audit.py runs it)."""
    after = -1
    while True:
        chunk = list(AuditEntry.objects.of_project(project).filter(seq__gt=after).order_by("seq")[:CHUNK])
        for entry in chunk:
            yield orjson.dumps(entry_dict(entry) | {"prev_hash": entry.prev_hash, "project": entry.project_id}) + b"\n"
        if len(chunk) < CHUNK:
            return
        after = chunk[-1].seq


@dataclass
class LogVerification:
    valid: bool
    entries: int
    first_broken_seq: int | None
    why: str
    head: str

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "entries": self.entries, "firstBrokenSeq": self.first_broken_seq,
                "why": self.why, "head": self.head}  # fmt: skip


def verify_log(*, project: Project | None) -> LogVerification:
    """Walk a log in seq order: every link must be the hash of its predecessor and its own
    stored values, seqs gap-free, and the log's head the last link."""
    name = log_name(project.pk if project is not None else None)
    prev, expected_seq, count = GENESIS_HASH, 0, 0
    after = -1
    while True:
        chunk = list(AuditEntry.objects.filter(log=name, seq__gt=after).order_by("seq")[:CHUNK])
        for entry in chunk:
            count += 1
            why = ""
            if entry.seq != expected_seq:
                why = f"seq {expected_seq} is missing"
            elif entry.prev_hash != prev:
                why = "its prev_hash is not the hash of the entry before it"
            elif entry.hash != entry_hash(prev_hash=prev, seq=entry.seq, **{k: getattr(entry, k) for k in _HASHED}):
                why = "its stored values do not hash to its link"
            if why:
                return LogVerification(
                    False, count, entry.seq if entry.seq == expected_seq else expected_seq, why, prev
                )
            prev, expected_seq = entry.hash, entry.seq + 1
        if len(chunk) < CHUNK:
            break
        after = chunk[-1].seq
    head = AuditLog.objects.filter(name=name).values_list("head_hash", "last_seq").first()
    if head is not None and (head[0] != prev or head[1] != expected_seq - 1):
        return LogVerification(False, count, expected_seq, "entries after this seq were removed", prev)
    return LogVerification(True, count, None, "", prev)
