"""Checkpoints: named positions in a session, each answered with the full state at it."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from .. import access, audit, checkpoints, replay
from ..models import Checkpoint, Role, Session
from .responses import json_response
from .schemas import BAD, DENIED, NOT_FOUND, BodyIn, CheckpointOut, ContextOut, DetailOut, Id, Position, StepStateOut

router = Router(tags=["sessions"])


class CheckpointIn(BodyIn):
    name: str = Field(..., min_length=1, max_length=200)
    seq: Position | None = Field(None, description="the event to name; or give `step`")
    step: Position | None = Field(None, description="0-based step position; its closing event is named")
    note: str = Field("", max_length=2000)
    replace: bool = Field(False, description="move the name if a checkpoint has it; without it a taken name is a 409")


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
def list_checkpoints(request: HttpRequest, session_id: Id):
    """The session's named positions, in seq order."""
    session = access.session_for(request, session_id)
    return [checkpoint_row(c) for c in session.checkpoints.order_by("seq", "name")]


@router.post(
    "/sessions/{session_id}/checkpoints",
    response={201: CheckpointStateOut, 409: DetailOut, **BAD, **DENIED},
    url_name="create_checkpoint",
)
def create_checkpoint(request: HttpRequest, session_id: Id, body: CheckpointIn):
    """Name an event (`seq`) or a step (`step`). A name in use is a 409 unless `replace` is
    true, which moves it. Returns the full state."""
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    if (body.seq is None) == (body.step is None):
        raise HttpError(400, "give exactly one of seq or step")
    seq = body.seq
    if body.step is not None:
        seq = replay.step_seq(session=session, index=body.step)
        if seq is None:
            span = f"its step indexes are 0 to {session.step_count - 1}" if session.step_count else "it has no steps"
            raise HttpError(400, f"step: session {session_id} has no step at index {body.step} ({span})")
    try:
        checkpoint = checkpoints.save_checkpoint(
            actor=access.actor_of(request), session=session, name=body.name, seq=seq, note=body.note,
            replace=body.replace, ip=audit.client_ip(request),
        )  # fmt: skip
    except checkpoints.CheckpointExists as exc:
        raise HttpError(409, f'{exc}; send "replace": true to move it')
    except checkpoints.CheckpointError as exc:
        raise HttpError(400, str(exc))
    return json_response(_checkpoint_state(session, checkpoint), status=201)


@router.get(
    "/sessions/{session_id}/checkpoints/{path:name}",
    response={200: CheckpointStateOut, **NOT_FOUND},
    url_name="checkpoint",
)
def get_checkpoint(request: HttpRequest, session_id: Id, name: str):
    """A checkpoint with the full state at its position."""
    session = access.session_for(request, session_id)
    checkpoint = checkpoints.checkpoint_named(session=session, name=name)
    if checkpoint is None:
        raise HttpError(404, f"session {session_id} has no checkpoint named {name!r}")
    return json_response(_checkpoint_state(session, checkpoint))


@router.delete(
    "/sessions/{session_id}/checkpoints/{path:name}",
    response={204: None, **NOT_FOUND, **DENIED},
    url_name="delete_checkpoint",
)
def delete_checkpoint(request: HttpRequest, session_id: Id, name: str):
    session = access.session_for(request, session_id, need=Role.MAINTAINER)
    checkpoint = checkpoints.checkpoint_named(session=session, name=name)
    if checkpoint is None:
        raise HttpError(404, f"session {session_id} has no checkpoint named {name!r}")
    checkpoints.delete_checkpoint(actor=access.actor_of(request), checkpoint=checkpoint, ip=audit.client_ip(request))
    return Status(204, None)
