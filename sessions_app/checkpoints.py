"""Checkpoints people set on a session: naming an event, moving a name (only when asked to),
renaming and deleting, each with its audit entry. The entries name the checkpoint by id and
seq, never by its name: a name is text someone wrote, and the log, which is never rewritten,
holds no such value (a later redaction could not take it out).

The API (api/checkpoints.py) and the player's forms (views/checkpoints.py) call these workflows.
Who may call them at all (maintainer and up) is the caller's `access.session_for`. Checkpoints
a recording carries (rlm-code's, a live client's `checkpoint` events) are written by the ingest
path (ingest/writer.py's set_checkpoint), which moves a name silently: the recording says so.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from . import audit
from .access import Actor, NotVisible, hold
from .canonical import without_nul
from .ingest.writer import redactor_of, set_checkpoint
from .lookalikes import as_picked, hidden_in_name, twin_in
from .models import Checkpoint, Session

MAX_NAME = 200  # Checkpoint.name's length


class CheckpointError(ValueError):
    """A checkpoint the workflow refuses (a 400): the message names the field."""


class CheckpointExists(Exception):
    """The name is taken (a 409): the caller asks before replacing it."""

    def __init__(self, existing: Checkpoint) -> None:
        super().__init__(f"name: a checkpoint named {existing.name!r} exists at seq {existing.seq}")
        self.existing = existing


def _clean_name(name: str, project_id: int) -> str:
    """The name as it will be stored: the project's redaction rules applied first, so that the
    existence check and a rename see what a save stores (two names with different addresses
    are one once redacted, and a rename is held to the rules as a save is)."""
    name = as_picked(without_nul(name or "").strip())
    if not name:
        raise CheckpointError("name: give the checkpoint a name")
    if len(name) > MAX_NAME:
        raise CheckpointError(f"name: at most {MAX_NAME} characters")
    if why := hidden_in_name("name", name):
        raise CheckpointError(why)
    if any(part in (".", "..") for part in name.split("/")):
        # Browsers and HTTP clients resolve them away before the request is sent.
        raise CheckpointError("name: '.' and '..' cannot be part of a checkpoint's address; name it otherwise")
    redactor = redactor_of(project_id, None)
    return name if redactor is None else redactor.text(name)[:MAX_NAME]


def _refuse_a_twin(name: str, others: QuerySet[Checkpoint]) -> None:
    """A name that looks like another checkpoint's (lookalike letters: "АСМЕ" beside "ACME") is
    refused: the panel and "Replace the checkpoint …?" would show one for the other."""
    if twin := twin_in(name, others.values_list("name", flat=True).iterator()):
        raise CheckpointError(f"name: looks like the checkpoint {twin!r} (lookalike letters); name it otherwise")


# The player's Checkpoints panel lists this many; the API lists them all.
MAX_LISTED = 200


def checkpoints_listed(*, session: Session) -> dict[str, Any]:
    """The player's Checkpoints panel: the first MAX_LISTED checkpoints (`checkpoints`) and how
    many the session has (`checkpoint_count`), counted only when the list is full: the panel
    says it shows the first so many, where it had stopped at 200 without a word."""
    listed = list(Checkpoint.objects.filter(session=session)[:MAX_LISTED])
    count = Checkpoint.objects.filter(session=session).count() if len(listed) == MAX_LISTED else len(listed)
    return {"checkpoints": listed, "checkpoint_count": count}


def checkpoint_named(*, session: Session, name: str) -> Checkpoint | None:
    """The session's checkpoint of that name, as stored, or as the name a client saved it under
    (with redaction rules on, the name stored is the redacted one)."""
    found = Checkpoint.objects.filter(session=session, name=name).first()
    if found is None:
        try:
            stored = _clean_name(name, session.project_id)
        except CheckpointError:
            return None
        if stored != name:
            found = Checkpoint.objects.filter(session=session, name=stored).first()
    return found


def checkpoint_in(*, session: Session, checkpoint_id: int) -> Checkpoint:
    """One checkpoint of the session (another session's id is a 404)."""
    found = Checkpoint.objects.filter(session=session, pk=checkpoint_id).first()
    if found is None:
        raise NotVisible(f"session {session.pk} has no checkpoint {checkpoint_id}")
    found.session = session  # the caller's scoped lookup: no second read of the session
    return found


@transaction.atomic  # the change and its audit entry, or neither
def save_checkpoint(
    *,
    actor: Actor,
    session: Session,
    name: str,
    seq: int,
    note: str = "",
    replace: bool = False,
    ip: str | None = None,
) -> Checkpoint:
    """Name event `seq`. A name already in use raises CheckpointExists (saying where it is)
    unless `replace`, which moves it: never a silent overwrite."""
    hold(Session, session.pk)
    name = _clean_name(name, session.project_id)
    if not 0 <= seq < session.event_count:
        span = f"its seqs are 0 to {session.event_count - 1}" if session.event_count else "it has no events"
        raise CheckpointError(f"seq: session {session.pk} has no event at seq {seq} ({span})")
    existing = Checkpoint.objects.filter(session=session, name=name).first()
    if existing is not None and not replace:
        raise CheckpointExists(existing)
    if existing is None:
        _refuse_a_twin(name, Checkpoint.objects.filter(session=session))
    saved = set_checkpoint(session=session, name=name, seq=seq, created_by=actor.name, note=note, name_redacted=True)
    target = f"session:{session.pk}"
    if existing is None:
        audit.record(action="checkpoint.create", actor=actor, project=session.project_id, target=target,
                     detail={"checkpoint": saved.pk, "seq": saved.seq}, ip=ip)  # fmt: skip
    else:
        audit.record(action="checkpoint.change", actor=actor, project=session.project_id, target=target,
                     detail={"checkpoint": saved.pk, "seq": saved.seq, "from_seq": existing.seq}, ip=ip)  # fmt: skip
    return saved


@transaction.atomic  # the change and its audit entry, or neither
def rename_checkpoint(*, actor: Actor, checkpoint: Checkpoint, name: str, ip: str | None = None) -> Checkpoint:
    """Give a checkpoint another name; a name another checkpoint holds raises CheckpointExists
    (rename or delete that one first)."""
    hold(Session, checkpoint.session_id)  # before the checkpoint's row: access.hold's order (review)
    name = _clean_name(name, checkpoint.session.project_id)
    if name == checkpoint.name:
        return checkpoint
    taken = Checkpoint.objects.filter(session_id=checkpoint.session_id, name=name).exclude(pk=checkpoint.pk).first()
    if taken is not None:
        raise CheckpointExists(taken)
    _refuse_a_twin(name, Checkpoint.objects.filter(session_id=checkpoint.session_id).exclude(pk=checkpoint.pk))
    old = checkpoint.name
    checkpoint.name = name
    try:
        with transaction.atomic():
            checkpoint.save(update_fields=["name"])
    except IntegrityError:  # taken meanwhile by a concurrent save
        checkpoint.name = old
        raise CheckpointExists(Checkpoint.objects.get(session_id=checkpoint.session_id, name=name))
    audit.record(action="checkpoint.change", actor=actor, project=checkpoint.session.project_id,
                 target=f"session:{checkpoint.session_id}",
                 detail={"checkpoint": checkpoint.pk, "seq": checkpoint.seq, "renamed": True}, ip=ip)  # fmt: skip
    return checkpoint


@transaction.atomic  # the change and its audit entry, or neither
def delete_checkpoint(*, actor: Actor, checkpoint: Checkpoint, ip: str | None = None) -> None:
    hold(Session, checkpoint.session_id)  # before the checkpoint's row: access.hold's order (review)
    checkpoint_id = checkpoint.pk  # None once deleted
    checkpoint.delete()
    audit.record(action="checkpoint.delete", actor=actor, project=checkpoint.session.project_id,
                 target=f"session:{checkpoint.session_id}", detail={"checkpoint": checkpoint_id, "seq": checkpoint.seq},
                 ip=ip)  # fmt: skip
