"""AgentLens's own ingest, `POST /api/events` (agentkitai/agentlens packages/server/src/routes/
events.ts), so that an agent instrumented with an AgentLens SDK records into Replay by changing
only its base URL and key.

A batch holds events of one or more AgentLens sessions. As AgentLens's server does, each
session's events are put in time order (a stable sort: the llm_call and llm_response an SDK
sends with one timestamp keep their order), given an id and the time of arrival where they have
none, and chained and hashed (prevHash / hash) after the session's last event. They are then
converted by formats/agentlens.py's Converter and appended by the live ingest (ingest/live.py,
through the one writer): the same canonical events as the same stored events imported from an
AgentLens file. Each AgentLens session is one live session of the project, found by its
sessionId; its `session_ended` ends it, as the end of a file ends an imported one. An event
received before under the same id with the same content (a client's retry) is answered as it
was stored and not stored again; the same id with other content is a 409 naming the event's
index and id (IdempotencyConflict), never new data dropped without a word. The whole batch is
one transaction: refused, it leaves nothing behind.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from django.db import transaction
from django.utils import timezone

from ..canonical import SessionMeta
from ..formats import agentlens
from ..models import Project, ReceivedEvent, Session
from ..models.planning import planned_for_values
from .live import IdempotencyConflict, IngestError, SessionNotLive, append_batch, storable_records
from .quotas import check_new_session
from .writer import create_session, finish_session, merge_session_metadata

# AgentLens's own bound on a batch (its ingestBatchSchema).
MAX_EVENTS = 1000
# Marks the live sessions this endpoint keeps, so a file imported with the same sessionId (or a
# session of the generic live API) is never appended to by it.
INGEST_MARK = "agentlens_events"


@dataclass
class PostedEvent:
    index: int  # its place in the request, which every error and warning names
    record: dict[str, Any]  # the event as validated: AgentLens's members only
    at: datetime  # its time: its own, else the arrival's
    timestamp: str  # that time as text: the event's own, unchanged, else the arrival's
    id: str = ""
    hash: str = ""
    digest: str = ""  # content_digest(record)


def content_digest(record: dict[str, Any]) -> str:
    """sha256 of the event as posted (its members, keys sorted), to tell a retry from other
    content under the same id. Not source_hash: that chain hash also covers prevHash, which
    depends on what came before, not on what the client sent."""
    return hashlib.sha256(orjson.dumps(record, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass
class SessionOutcome:
    session: Session
    created: bool
    stored: int = 0
    ended: bool = False


@dataclass
class EventsResult:
    events: list[PostedEvent]  # in AgentLens's order: by session, each in time order
    sessions: list[SessionOutcome]
    warnings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def stored(self) -> int:
        return sum(outcome.stored for outcome in self.sessions)


def ingest_agentlens_events(
    *, project: Project, events: list[dict[str, Any]], now: datetime | None = None
) -> EventsResult:
    """Store a batch of AgentLens events (validated by the API's schema: each has sessionId,
    agentId, eventType and an object payload; severity, metadata, timestamp and id are optional)
    in the project's live sessions.

    Raises IngestError (400) naming the index and field of an event that cannot be stored (a
    lone surrogate, nesting past live.MAX_NESTING: live.storable_record; integers past 64 bits
    are read as the floats orjson reads them as, formats.int_as_orjson_reads),
    SessionNotLive (409) for new events of a session that already ended, or quotas.QuotaExceeded
    (409) for a new session past the project's quota; nothing is stored then.
    """
    if not 1 <= len(events) <= MAX_EVENTS:
        raise IngestError(f"a batch holds 1 to {MAX_EVENTS} events, got {len(events)}")
    # Before its hash (agentlens.source_hash writes it as orjson does): 400 for what cannot be stored.
    events = storable_records(events)
    groups = _by_session(events, now or timezone.now())
    result = EventsResult(events=[], sessions=[])
    with transaction.atomic():
        found = {source_id: _live_session(project, source_id, group[0]) for source_id, group in groups.items()}
        # Locked in one order (by id): two batches naming the same sessions cannot deadlock.
        locked = Session.objects.select_for_update(no_key=True).filter(pk__in=[s.pk for s, _ in found.values()])
        sessions = {session.pk: session for session in locked.order_by("pk")}
        for source_id, group in groups.items():
            session, created = found[source_id]
            outcome = SessionOutcome(session=sessions[session.pk], created=created)
            result.warnings += _append(outcome, group)
            result.sessions.append(outcome)
            result.events += group
    return result


def _by_session(events: list[dict[str, Any]], now: datetime) -> dict[str, list[PostedEvent]]:
    """The events of each session in order of first appearance, each session's in time order,
    each with its id."""
    arrival = now.astimezone(UTC)
    # JavaScript's toISOString, as AgentLens's server stamps an event that has no time.
    arrival_text = arrival.strftime("%Y-%m-%dT%H:%M:%S.") + f"{arrival.microsecond // 1000:03d}Z"
    groups: dict[str, list[PostedEvent]] = {}
    for index, record in enumerate(events):
        own = record.get("timestamp")
        at = _parse_time(own) if own else arrival
        posted = PostedEvent(index=index, record=record, at=at, timestamp=own or arrival_text)
        posted.id = record.get("id") or agentlens.posted_event_id(record, at if own else None)
        groups.setdefault(record["sessionId"], []).append(posted)
    for group in groups.values():
        group.sort(key=lambda posted: posted.at)
    return groups


def _parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _live_session(project: Project, source_id: str, first: PostedEvent) -> tuple[Session, bool]:
    """The project's session this endpoint keeps for an AgentLens sessionId, or a new live one.

    Returns (session, created)."""
    existing = _kept(project, source_id).first()
    if existing is not None:
        return existing, False
    # Two first batches of one session at once: the project's row makes them take turns, and
    # the second finds the session the first made.
    Project.lock(project.pk)
    existing = _kept(project, source_id).first()
    if existing is not None:
        return existing, False
    check_new_session(project=project, what=f"AgentLens session {source_id[:100]!r}")
    meta = SessionMeta(source_session_id=source_id, agent_id=first.record["agentId"], metadata={"ingest": INGEST_MARK})
    return create_session(project=project, source_format=agentlens.NAME, meta=meta), True


def _kept(project: Project, source_id: str):
    # Served by the session_dedupe_digest index (project, source_format, source_session_id, ...).
    return Session.objects.filter(
        project=project, source_format=agentlens.NAME, source_session_id=source_id, metadata__ingest=INGEST_MARK
    ).order_by("pk")


def _append(outcome: SessionOutcome, group: list[PostedEvent]) -> list[dict[str, Any]]:
    """Store the events of `group` not received before; every event of it gets its id and hash.
    Returns the batch's warnings, each naming its event's index in the request."""
    session = outcome.session
    received: dict[str, str] = {}
    digests: dict[str, str] = {}  # "" for an event received before digests were kept: a retry, as then
    rows = ReceivedEvent.objects.filter(session=session, source_id__in={p.id for p in group})
    with planned_for_values():  # (a list beside the session's own index: planning.py says why)
        for source_id, source_hash, digest in rows.values_list("source_id", "source_hash", "content_digest"):
            received[source_id], digests[source_id] = source_hash, digest
    new: list[PostedEvent] = []
    for posted in group:
        posted.digest = content_digest(posted.record)
        if posted.id in received:
            if digests[posted.id] and digests[posted.id] != posted.digest:
                _conflict(session, posted)
            posted.hash = received[posted.id]
        else:
            # The same id twice in one batch: stored once (the second, if it differs, is refused).
            received[posted.id], digests[posted.id] = "", posted.digest
            new.append(posted)
    if not new:
        _answer_repeats(group, received)
        return []
    if session.status != Session.Status.LIVE:
        first = new[0]
        raise SessionNotLive(
            f"events[{first.index}]: AgentLens session {session.source_session_id!r} (session {session.pk}) "
            f"has ended; nothing after its session_ended is stored",
            [{"index": first.index, "field": "sessionId", "message": f"session {session.pk} is {session.status}"}],
        )
    state = ((session.ingest_state or {}).get("format_state") or {}).get(agentlens.NAME) or {}
    prev_hash = state.get("last_hash")
    records = []
    for posted in new:
        record = agentlens.stored_event(
            posted.record, event_id=posted.id, timestamp=posted.timestamp, prev_hash=prev_hash
        )
        posted.hash = prev_hash = received[posted.id] = record["hash"]
        records.append(record)
    try:
        batch = append_batch(session_id=session.pk, records=records, format=agentlens.NAME)
    except IngestError as exc:
        exc.errors = [_in_request(problem, new) for problem in exc.errors]
        raise
    ReceivedEvent.objects.bulk_create(
        ReceivedEvent(
            session=session, source_id=p.id, seq=batch.first_seq + i, source_hash=p.hash, content_digest=p.digest
        )  # fmt: skip
        for i, p in enumerate(new)
    )
    _answer_repeats(group, received)
    outcome.stored = batch.stored
    session.refresh_from_db()
    _note_meta(session, batch.meta)
    if any(p.record["eventType"] == "session_ended" for p in new):
        _end(session, batch.meta)
        outcome.ended = True
    return [_in_request(warning, new) for warning in batch.warnings]


def _conflict(session: Session, posted: PostedEvent) -> None:
    # A 409, as this endpoint answers its other refusals (an ended session, a quota), and as
    # issue 20 asks of a reused idempotency key: a 2xx with a warning would let an SDK that reads
    # only the status believe the new content was kept. An SDK's genuine retry sends the same
    # content and still gets its 2xx; a 4xx is not retried, so no retry loop follows.
    message = (
        f"events[{posted.index}]: an event with id {posted.id!r} was already received in AgentLens session "
        f"{session.source_session_id!r} (session {session.pk}) with other content; send new content under a new id"
    )
    raise IdempotencyConflict(
        message,
        [{"index": posted.index, "field": "id", "message": f"id {posted.id!r} was received with other content"}],
    )


def _answer_repeats(group: list[PostedEvent], received: dict[str, str]) -> None:
    for posted in group:
        posted.hash = posted.hash or received[posted.id]


def _in_request(problem: dict[str, Any], new: list[PostedEvent]) -> dict[str, Any]:
    """A problem of the converted list, named by its event's index in the request."""
    index = problem.get("index")
    if isinstance(index, int) and 0 <= index < len(new):
        return {**problem, "index": new[index].index}
    return problem


def _note_meta(session: Session, meta: SessionMeta | None) -> None:
    """What session_started said (agentName, tags) is kept in the session's metadata as an
    import keeps it; the converter of a later batch no longer knows it."""
    info = (meta.metadata.get("agentlens") if meta is not None else None) or {}
    if info:
        # As the payload is stored (orjson writes a NaN or infinity as null): the database's JSON
        # check refuses the NaN Django's JSONField would write for `tags: [NaN]`.
        info = orjson.loads(orjson.dumps(info))
        # Through the writer: the project's redaction rules apply to what session_started said.
        merge_session_metadata(
            session=session, metadata={"agentlens": {**((session.metadata or {}).get("agentlens") or {}), **info}}
        )


def _end(session: Session, meta: SessionMeta | None) -> None:
    """End the session as the end of an imported file does: status from session_ended's reason,
    the source chain's verdict and the types behind each kind in its metadata."""
    state = ((session.ingest_state or {}).get("format_state") or {}).get(agentlens.NAME)
    converter = agentlens.Converter(state)
    converter.finish()
    metadata = dict(converter.meta.metadata)
    metadata["agentlens"] = {**((session.metadata or {}).get("agentlens") or {}), **metadata["agentlens"]}
    end = SessionMeta(
        ended_at=meta.ended_at if meta else None,
        completed=meta.completed if meta else None,
        failed=meta.failed if meta else None,
        metadata=metadata,
    )
    finish_session(session=session, meta=end)
