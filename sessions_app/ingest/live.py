"""Live ingest: agents stream batches of events into a session while they run.

A batch is converted to canonical events by its format's `Converter` (formats/__init__.py) and
appended in one transaction with the session row locked, so concurrent writers take turns and
seqs stay unique and gap-free. A batch carrying an `idempotency_key` is recorded (IngestBatch) in
that same transaction: a retry of it returns the first result and writes nothing. The
converter's state (open steps, pending LLM calls ...) is saved on the session between batches.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.db import IntegrityError, transaction

from ..canonical import CanonicalEvent, CheckpointSpec, Kind, Problems, SessionMeta, without_nul
from ..formats import MAX_DEPTH
from ..formats.fields import json_kind
from ..models import IngestBatch, Project, Session
from .quotas import check_new_session
from .writer import (
    AppendResult,
    append_events,
    create_session,
    finish_session,
    recorded_name,
    redactor_of,
    set_checkpoint,
    short_text,
    text_redactor,
)

# Formats an agent can stream, and the module holding each one's Converter.
LIVE_FORMATS = {
    "canonical": "sessions_app.formats.canonical_json",
    "rlm_native": "sessions_app.formats.rlm_native",
    "agentlens": "sessions_app.formats.agentlens",
}
MAX_BATCH = 5000
# A live session's source_format until its first batch says which format it streams.
UNDECIDED_FORMAT = "live"
_META_FIELDS = ("source_session_id", "run_id", "agent_id", "task", "environment", "model")


class IngestError(Exception):
    """A request the writer refuses; `status` is the HTTP status, `errors` name index + field."""

    status = 400

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or []


class SessionNotLive(IngestError):
    status = 409


class IdempotencyConflict(IngestError):
    """An idempotency key used again with another request: answering the first request's result
    would silently drop the new data, so it is refused (409)."""

    status = 409


def request_digest(value: Any) -> str:
    """SHA-256 of a request as parsed, keys sorted: the same request sent again (however its
    keys were ordered) has the same digest."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)).hexdigest()


@dataclass
class BatchResult:
    stored: int
    first_seq: int
    event_count: int
    head_hash: str
    format: str
    replayed: bool = False  # a retry of a batch already stored under the same key
    warnings: list[dict[str, Any]] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)  # by label, the project's rules
    # What the batch's own events said of the session (a start, an end, names); None on a retry.
    meta: SessionMeta | None = None


def create_live_session(
    *,
    project: Project,
    meta: SessionMeta,
    format: str = "",
    idempotency_key: str = "",
) -> tuple[Session, bool]:
    """A new live session, or (with a key) the one an earlier attempt of this request created.

    Returns (session, created). Raises IdempotencyConflict (409) for a key an earlier, different
    request used, and quotas.QuotaExceeded (409) when the project holds its quota of sessions."""
    if format and format not in LIVE_FORMATS:
        raise IngestError(f"format must be one of {', '.join(LIVE_FORMATS)}, got {format!r}")
    meta.metadata = _storable_meta(meta)
    digest = request_digest({"format": format, "meta": [getattr(meta, name) for name in _REQUEST_FIELDS]})
    with transaction.atomic():
        # Lock the project row so two retries of one create cannot both miss each other, and two
        # creates cannot both take the last session its quota allows.
        Project.lock(project.pk)
        if idempotency_key:
            existing = (
                Session.objects.filter(project=project, metadata__idempotency_key=idempotency_key)
                .order_by("pk")
                .first()
            )
            if existing is not None:
                if existing.idempotency_digest and existing.idempotency_digest != digest:
                    raise IdempotencyConflict(
                        f"idempotency_key {idempotency_key!r} created session {existing.pk} with a different "
                        "request; send a new key for a new session"
                    )
                return existing, False
            meta.metadata = {**meta.metadata, "idempotency_key": idempotency_key}
        check_new_session(project=project)
        session = create_session(project=project, source_format=format or UNDECIDED_FORMAT, meta=meta)
        if idempotency_key:
            session.idempotency_digest = digest
            session.save(update_fields=["idempotency_digest"])
    return session, True


# What a create request says of its session (its digest covers these, and the format).
_REQUEST_FIELDS = (*_META_FIELDS, "started_at", "metadata")


# orjson writes containers nested up to this many levels (the record itself the first); every
# stored column is written by it. The file importer's number: one limit, one wording.
MAX_NESTING = MAX_DEPTH
# The standard json module pairs a surrogate pair's escapes into one character: what is left is lone.
_SURROGATE = re.compile("[\ud800-\udfff]")
_LONE_SURROGATE = "cannot be stored: a lone surrogate escape (\\ud800-\\udfff), which no UTF-8 text holds"


class Unstorable(Exception):
    """A record no stored column can hold; `field` is the path of the value within it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def storable_record(record: Any) -> Any:
    """The record, when a stored column can hold it (orjson writes every one); else Unstorable,
    naming where: a string or key holding a lone surrogate escape (a body holding one is read by
    the standard json module, api/bodies.py; no UTF-8 text can hold it), containers nested
    deeper than MAX_NESTING. The file importer skips such a record for the same reason
    (formats.storable)."""
    try:
        orjson.dumps(record)  # nearly every record
        return record
    except orjson.JSONEncodeError as exc:
        _check_storable(record, "", 1)
        # Nothing _check_storable knows of: said as orjson says it.
        raise Unstorable("event", f"cannot be stored: {exc}") from None


def storable_records(records: list[Any]) -> list[Any]:
    """`storable_record` of each record of a batch; IngestError (400) names the index and field
    of each one that cannot be stored."""
    try:
        orjson.dumps(records)  # nearly every batch: one call for all
        return records
    except orjson.JSONEncodeError:
        pass
    kept: list[Any] = []
    errors: list[dict[str, Any]] = []
    for index, record in enumerate(records):
        try:
            kept.append(storable_record(record))
        except Unstorable as exc:
            errors.append({"index": index, "field": exc.field, "message": exc.message})
    if errors:
        raise _refused(errors)
    return kept


def _storable_meta(meta: SessionMeta) -> dict[str, Any]:
    """A new session's metadata as it can be stored (`storable_record`); IngestError (400) names
    the field of the request that cannot be."""
    for name in _META_FIELDS:
        value = getattr(meta, name)
        if type(value) is str and _SURROGATE.search(value):
            raise IngestError(
                f"{name}: {_LONE_SURROGATE}", [{"index": None, "field": name, "message": _LONE_SURROGATE}]
            )
    try:
        # Written and read again: a NaN or infinity becomes null, as in an event's payload (the
        # database's JSON check refuses the NaN Django's JSONField would write).
        return orjson.loads(orjson.dumps(storable_record(meta.metadata)))
    except Unstorable as exc:
        field = "metadata" if exc.field == "event" else f"metadata.{exc.field}"
        raise IngestError(
            f"{field}: {exc.message}", [{"index": None, "field": field, "message": exc.message}]
        ) from None


def _check_storable(value: Any, path: str, depth: int) -> None:
    """Unstorable for the first value (at `path`, `depth` containers deep) no stored column can
    hold. The recursion is bounded by MAX_NESTING."""
    kind = type(value)
    if kind is dict or kind is list:
        if depth > MAX_NESTING:
            # The member of the record it is in: a path 254 levels long would name nothing better.
            top = re.split(r"[.\[]", path.lstrip("."), maxsplit=1)[0] or "event"
            raise Unstorable(top, f"cannot be stored: nested deeper than {MAX_NESTING} levels")
        if kind is list:
            for i, item in enumerate(value):
                _check_storable(item, f"{path}[{i}]", depth + 1)
            return
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if type(key) is str and _SURROGATE.search(key):
                raise Unstorable(_shown(where), _LONE_SURROGATE)
            _check_storable(item, where, depth + 1)
    elif kind is str and _SURROGATE.search(value):
        raise Unstorable(_shown(path) or "event", _LONE_SURROGATE)


def _shown(path: str) -> str:
    """A field's path as an answer can show it: a lone surrogate escaped, the length bounded."""
    return path.encode("utf-8", "backslashreplace").decode()[:200]


def _refused(errors: list[dict[str, Any]]) -> IngestError:
    first = errors[0]
    return IngestError(
        f"events[{first['index']}].{first['field']}: {first['message']}"
        + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
        + "; nothing was stored",
        errors[:100],
    )


def detect_batch_format(records: list[Any]) -> str | None:
    first = records[0] if records else None
    if not isinstance(first, dict):
        return None
    if "event_type" in first:
        return "rlm_native"
    if "eventType" in first:
        return "agentlens"
    if "kind" in first:
        return "canonical"
    return None


def append_batch(
    *,
    session_id: int,
    records: list[Any],
    format: str | None = None,
    idempotency_key: str = "",
) -> BatchResult:
    """Convert and append one batch (1..MAX_BATCH JSON records) to a live session.

    Raises IngestError (400: names each bad record's index and field; nothing is stored),
    SessionNotLive (409) or Session.DoesNotExist.
    """
    if not 1 <= len(records) <= MAX_BATCH:
        raise IngestError(f"a batch holds 1 to {MAX_BATCH} events, got {len(records)}")
    if idempotency_key:
        # Its digest is of the records as stored (orjson writes it): one it cannot is refused first.
        records = storable_records(records)
    digest = request_digest({"format": format, "events": records}) if idempotency_key else ""
    try:
        with transaction.atomic():
            session = Session.objects.select_for_update(no_key=True).get(pk=session_id)
            if idempotency_key:
                done = IngestBatch.objects.filter(session=session, idempotency_key=idempotency_key).first()
                if done is not None:
                    return _replayed(done, session, digest)
            if session.status != Session.Status.LIVE:
                raise SessionNotLive(
                    f"session {session.pk} is {session.status}; events can only be appended to a live session"
                )
            name = format or detect_batch_format(records)
            if name is None and type(records[0]) is not dict:
                got = json_kind(records[0])
                raise IngestError(
                    f"events[0].event: expected a JSON object, got {got}",
                    [{"index": 0, "field": "event", "message": f"expected a JSON object, got {got}"}],
                )
            if name is None:
                raise IngestError(
                    'cannot tell the format of events[0]; set "format" to one of ' + ", ".join(LIVE_FORMATS),
                    [{"index": 0, "field": "format", "message": "unrecognised event shape"}],
                )
            saved_states = dict((session.ingest_state or {}).get("format_state") or {})
            converter = _converter(name, saved_states.get(name))
            specs_before = len(converter.meta.checkpoints)
            events, warnings = _convert(converter, name, records)
            saved_states[name] = converter.state()
            result = append_events(session=session, events=events, format_state=saved_states)
            _note_format_and_meta(session, name, converter.meta)
            _write_checkpoints(session, events, converter.meta.checkpoints[specs_before:], result)
            if idempotency_key:
                IngestBatch.objects.create(
                    session=session,
                    idempotency_key=idempotency_key,
                    body_digest=digest,
                    first_seq=result.first_seq,
                    count=result.stored,
                    head_hash=result.head_hash,
                )
    except IntegrityError:
        # Another request stored this key between our check and our insert (only possible if
        # the session lock did not serialise them): the batch is stored once, answer as a retry.
        if idempotency_key:
            done = IngestBatch.objects.filter(session_id=session_id, idempotency_key=idempotency_key).first()
            if done is not None:
                return _replayed(done, Session.objects.get(pk=session_id), digest)
        raise
    return _result(result, name, warnings, converter.meta)


def _result(result: AppendResult, name: str, warnings: list[dict[str, Any]], meta: SessionMeta) -> BatchResult:
    return BatchResult(
        stored=result.stored,
        first_seq=result.first_seq,
        event_count=result.event_count,
        head_hash=result.head_hash,
        format=name,
        warnings=warnings,
        redactions=result.redactions,
        meta=meta,
    )


def _replayed(done: IngestBatch, session: Session, digest: str) -> BatchResult:
    """The first answer to a batch sent again under its key; a different batch under the same
    key is refused (batches stored before digests were kept have none: taken as the same)."""
    if done.body_digest and done.body_digest != digest:
        raise IdempotencyConflict(
            f"idempotency_key {done.idempotency_key!r} was used for a different batch of session {session.pk} "
            f"(seqs {done.first_seq}-{done.first_seq + done.count - 1}); send a new key for new events"
        )
    return BatchResult(
        stored=done.count,
        first_seq=done.first_seq,
        event_count=done.first_seq + done.count,
        head_hash=done.head_hash,
        format=session.source_format,
        replayed=True,
    )


def _converter(name: str, state: dict | None):
    if name not in LIVE_FORMATS:
        raise IngestError(
            f"format must be one of {', '.join(LIVE_FORMATS)}, got {name!r}",
            [{"index": None, "field": "format", "message": f"unknown format {name!r}"}],
        )
    module = importlib.import_module(LIVE_FORMATS[name])
    converter_class = getattr(module, "Converter", None)
    if converter_class is None:
        raise IngestError(f"the {name} format cannot be streamed live yet")
    return converter_class(state or None)


def _convert(converter, name: str, records: list[Any]) -> tuple[list[CanonicalEvent], list[dict]]:
    """All events of the batch, or IngestError naming every record that cannot be used.

    Canonical events follow our own schema, so any problem refuses the batch. A foreign format's
    converter reports soft problems on records it still converts (an unknown rlm-code event type
    becomes a custom event): those are stored and returned as warnings, like the file importer
    reports them; a record it cannot convert at all refuses the batch.
    """
    problems = Problems(limit=100)
    events: list[CanonicalEvent] = []
    errors: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []
    dumps = orjson.dumps
    for index, record in enumerate(records):
        if type(record) is not dict:
            errors.append(
                {"index": index, "field": "event",
                 "message": f"expected a JSON object, got {json_kind(record)}"}
            )  # fmt: skip
            continue
        try:
            raw = dumps(record)
        except orjson.JSONEncodeError:
            try:
                record = storable_record(record)
            except Unstorable as exc:
                errors.append({"index": index, "field": exc.field, "message": exc.message})
                continue
            raw = dumps(record)
        before = problems.count
        kept = len(problems.items)
        # The original record as received: its JSON text as orjson writes it (compact, keys in
        # the order sent). The hash chain covers these bytes.
        converted = converter.convert(record, raw.decode(), index, problems)
        if problems.count != before:
            found = [{"index": index, "field": p.field, "message": p.message} for p in problems.items[kept:]] or [
                {"index": index, "field": "event", "message": "invalid event"}
            ]
            if converted and name != "canonical":
                warnings.extend(found)
            else:
                errors.extend(found)
        events.extend(converted)
    if errors:
        raise _refused(errors)
    return events, warnings[:100]


def _note_format_and_meta(session: Session, name: str, meta: SessionMeta) -> None:
    """What the stream itself says (rlm-code's session_start task/model ...) fills the session's
    empty fields, through the project's redaction rules as every write; values given when the
    session was created win."""
    changed = []
    if session.source_format == UNDECIDED_FORMAT:
        session.source_format = name
        changed.append("source_format")
    filled = [
        (name_, value) for name_ in _META_FIELDS if (value := getattr(meta, name_, "")) and not getattr(session, name_)
    ]
    # The rules are read only when a field is filled (a stream's first batch, nearly always), not
    # on every batch.
    redact = text_redactor(redactor_of(session.project_id, None)) if filled else None
    for name_, value in filled:
        setattr(session, name_, redact(without_nul(value)) if name_ == "task" else short_text(redact, value))
        changed.append(name_)
    if changed:
        session.save(update_fields=changed)
        Session.objects.filter(pk=session.pk).reseal(changed)


def _write_checkpoints(
    session: Session, events: list[CanonicalEvent], specs: list[CheckpointSpec], result: AppendResult
) -> None:
    """A checkpoint event names its position, as it does in an imported file; the seq is the
    event's own (a converter's count would drift if a session mixed formats)."""
    positions = [i for i, event in enumerate(events) if event.kind == Kind.CHECKPOINT]
    for spec, index in zip(specs, positions):
        set_checkpoint(
            session=session, name=spec.name[:200], seq=result.first_seq + index,
            created_by=recorded_name(spec.created_by or "live ingest")[:150], note=spec.note,
        )  # fmt: skip


def end_live_session(*, session_id: int, status: str, final_answer: str | None = None) -> tuple[Session, bool]:
    """Close a live session as completed or failed; (the session, whether this call ended it).
    Ending it again with the same status is a no-op (a client retrying after a lost response);
    a different status is refused (409)."""
    if status not in (Session.Status.COMPLETED, Session.Status.FAILED):
        raise IngestError(f"status must be completed or failed, got {status!r}")
    if final_answer and _SURROGATE.search(final_answer):  # the session's row would refuse it: a 500
        raise IngestError(
            f"final_answer: {_LONE_SURROGATE}", [{"index": None, "field": "final_answer", "message": _LONE_SURROGATE}]
        )
    with transaction.atomic():
        session = Session.objects.select_for_update(no_key=True).get(pk=session_id)
        if session.status == status:
            return session, False
        if session.status != Session.Status.LIVE:
            raise SessionNotLive(f"session {session.pk} is already {session.status}")
        return finish_session(session=session, status=status, final_answer=final_answer), True
