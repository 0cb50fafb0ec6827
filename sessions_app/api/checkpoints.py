"""Checkpoints: named positions in a session, each answered with the full state at it."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from .. import access, audit, replay
from ..ingest.writer import set_checkpoint
from ..models import Checkpoint, Role, Session
from .auth import who
from .responses import json_response
from .schemas import BAD, NOT_FOUND, CheckpointOut, ContextOut, StepStateOut

router = Router(tags=["sessions"])


class CheckpointIn(Schema):
    name: str = Field(..., min_length=1, max_length=200)
    seq: int | None = Field(None, ge=0, description="the event to name; or give `step`")
    step: int | None = Field(None, ge=0, description="0-based step position; its closing event is named")
    note: str = Field("", max_length=2000)


class CheckpointStateOut(Schema):
    checkpoint: CheckpointOut
    stepState: StepStateOut | None
    context: ContextOut


def checkpoint_row(checkpoint: Checkpoint) -> dict[str, Any]:
    """A checkpoint as `CheckpointOut`."""
    return {
        "name": checkpoint.name,
        "seq": checkpoint.seq,
        "stepPos": checkpoint.step_pos,
        "note": checkpoint.note,
        "createdBy": checkpoint.created_by,
        "createdAt": checkpoint.created_at.isoformat() if checkpoint.created_at else None,
    }


def _checkpoint_state(session: Session, checkpoint: Checkpoint) -> dict[str, Any]:
    step = None
    if checkpoint.step_pos is not None:
        step = replay.step_state_at(session=session, index=checkpoint.step_pos)
    return {
        "checkpoint": checkpoint_row(checkpoint),
        "stepState": step,
        "context": replay.context_at(session=session, seq=checkpoint.seq),
    }


@router.get(
    "/sessions/{session_id}/checkpoints", response={200: list[CheckpointOut], **NOT_FOUND}, url_name="checkpoints"
)
def list_checkpoints(request: HttpRequest, session_id: int):
    """The session's named positions, in seq order."""
    session = access.session_for(request, session_id)
    return [checkpoint_row(c) for c in session.checkpoints.order_by("seq", "name")]


@router.post(
    "/sessions/{session_id}/checkpoints", response={201: CheckpointStateOut, **BAD}, url_name="create_checkpoint"
)
def create_checkpoint(request: HttpRequest, session_id: int, body: CheckpointIn):
    """Name an event (`seq`) or a step (`step`); an existing name moves. Returns the full state."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    if (body.seq is None) == (body.step is None):
        raise HttpError(400, "give exactly one of seq or step")
    seq = body.seq
    if body.step is not None:
        seq = replay.step_seq(session=session, index=body.step)
        if seq is None:
            raise HttpError(400, f"step: session {session_id} has no step {body.step} (it has {session.step_count})")
    if seq >= session.event_count:
        raise HttpError(400, f"seq: session {session_id} has no event {seq} (it has {session.event_count})")
    checkpoint = set_checkpoint(session=session, name=body.name, seq=seq, created_by=who(request), note=body.note)
    audit.record_on_session(request, "checkpoint.create", session, name=checkpoint.name, seq=checkpoint.seq)
    return json_response(_checkpoint_state(session, checkpoint), status=201)


@router.get(
    "/sessions/{session_id}/checkpoints/{name}", response={200: CheckpointStateOut, **NOT_FOUND}, url_name="checkpoint"
)
def get_checkpoint(request: HttpRequest, session_id: int, name: str):
    """A checkpoint with the full state at its position."""
    session = access.session_for(request, session_id)
    checkpoint = session.checkpoints.filter(name=name).first()
    if checkpoint is None:
        raise HttpError(404, f"session {session_id} has no checkpoint named {name!r}")
    return json_response(_checkpoint_state(session, checkpoint))


@router.delete(
    "/sessions/{session_id}/checkpoints/{name}", response={204: None, **NOT_FOUND}, url_name="delete_checkpoint"
)
def delete_checkpoint(request: HttpRequest, session_id: int, name: str):
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    deleted, _ = session.checkpoints.filter(name=name).delete()
    if not deleted:
        raise HttpError(404, f"session {session_id} has no checkpoint named {name!r}")
    audit.record_on_session(request, "checkpoint.delete", session, name=name)
    return Status(204, None)
