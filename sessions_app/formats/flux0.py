"""flux0 recordings (flux0-ai/flux0; docs/formats.md, "flux0").

A record: `{id, recording_id, offset, kind, created_at, payload}`, kind `header` (offset 0,
`{source_session_id}`), `chunk` (`{correlation_id, event_id, seq, patches, metadata}`) or
`emitted` (`{id, source, type, correlation_id, data, metadata}`). One recording is one session,
named by the header's source_session_id (else the recording id); a file holding several
recordings yields one session each (the pass over the file lists them and spools each record to
its recording's file on disk, `records.RecordSpool`; each recording is then read from its
own spool: two passes whatever the number of recordings).

Mapping (docs/formats.md "flux0"):
- header -> session_start; emitted user message -> user_message, the turn anchor; emitted
  status -> status; emitted tool -> tool_response; other emitted -> agent_message / custom.
- Every chunk stays a `chunk` event with its own created_at, so the paced stream can replay it
  chunk by chunk at recorded pace. Its patches are applied, in recorded order, to the document of
  its event_id exactly as flux0's event store does (missing parent containers are created first;
  `add` and `replace` only). At the end of each correlation (its `completed` status, the next
  user message, or the end of the file) the rebuilt documents become derived events (empty raw):
  tool-call documents -> tool_call, tool-result documents -> tool_response, and one
  agent_message holding the rebuilt text of the correlation's messages. That agent_message
  closes the turn's step. Derived events carry the line and raw record of the record that ended
  the correlation (the original export writes each source line once).
"""

from __future__ import annotations

import copy
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from ..canonical import INT64_MAX, INT64_MIN, CanonicalEvent, Kind, ParsedSession, Problems, SessionMeta
from . import Head, Source
from .fields import clip, json_kind, parse_iso, payload_object, text
from .records import Record, RecordSpool, iter_records
from .step_state import STEP_TEXT_LIMIT, unrewarded_step_state

NAME = "flux0"
RECORD_KINDS = ("header", "chunk", "emitted")
ERROR_STATUSES = frozenset({"error", "failed"})


_RECORDING_ID_IN_TEXT = re.compile(rb'"recording_id"\s*:')
_KIND_IN_TEXT = re.compile(rb'"kind"\s*:\s*"(header|chunk|emitted)"')


def sniff(head: Head) -> bool:
    for record in head.records[:10]:
        if "recording_id" in record and record.get("kind") in RECORD_KINDS and "offset" in record:
            return True
    # A JSON array of records (an export of the recording store).
    return head.text.lstrip()[:1] == b"[" and bool(
        _RECORDING_ID_IN_TEXT.search(head.text) and _KIND_IN_TEXT.search(head.text)
    )


@dataclass
class _RecordingInfo:
    first_line: int
    source_session_id: str = ""
    header_at: datetime | None = None
    # Each record's offset, in file order (a record without one, or past 64 bits: its
    # predecessor's, so it stays after it), and whether they ever went back: the recording is
    # then read in offset order. Eight bytes a record (a list of ints had been 40).
    offsets: array = field(default_factory=lambda: array("q"))
    out_of_order: bool = False

    def note_offset(self, value: Any, line: int, problems: Problems) -> None:
        last = self.offsets[-1] if self.offsets else -1
        offset = value if type(value) is int and INT64_MIN <= value <= INT64_MAX else last
        if offset < last and not self.out_of_order:
            self.out_of_order = True
            problems.add(line, "offset", f"offset {offset} after {last}: the recording is replayed in offset "
                         "order, as flux0's store reads it")  # fmt: skip
        self.offsets.append(offset)


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    with RecordSpool.of(source) as spool:
        recordings = _list_recordings(source, problems, spool)
        for recording_id, info in recordings.items():
            meta = SessionMeta(
                source_session_id=info.source_session_id or recording_id,
                run_id=recording_id,
                metadata={"recording_id": recording_id},
            )
            if info.source_session_id:
                meta.metadata["source_session_id"] = info.source_session_id
            recording = _Recording(meta, problems)
            records = spool.records(recording_id, sort_keys=info.offsets if info.out_of_order else None)
            yield ParsedSession(meta=meta, events=recording.events(records))


def _list_recordings(source: Source, problems: Problems, spool: RecordSpool) -> dict[str, _RecordingInfo]:
    """The pass over the file: recordings in order of appearance, each record to its spool.
    File-level problems are reported here, once."""
    recordings: dict[str, _RecordingInfo] = {}
    for record in iter_records(source, problems):
        recording_id = record.value.get("recording_id")
        if not isinstance(recording_id, str) or not recording_id:
            problems.add(record.line, "recording_id", "missing recording_id: record skipped")
            continue
        info = recordings.get(recording_id)
        if info is None:
            info = recordings[recording_id] = _RecordingInfo(first_line=record.line)
        spool.add(recording_id, record.line, record.raw)
        info.note_offset(record.value.get("offset"), record.line, problems)
        if record.value.get("kind") == "header" and not info.source_session_id:
            payload = record.value.get("payload")
            if isinstance(payload, dict) and isinstance(payload.get("source_session_id"), str):
                info.source_session_id = payload["source_session_id"]
    return recordings


# JSON Patch -------------------------------------------------------------------------------------


class PatchError(ValueError):
    pass


def _pointer(path: str) -> list[str]:
    if path in ("", "/"):
        return []
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} does not start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _is_index(part: str) -> bool:
    # str.isdigit() also accepts "²" and other Unicode digits, which int() refuses.
    return part.isascii() and part.isdigit()


def _index_within(part: str, size: int) -> int | None:
    """The array index `part` names when it is at most `size` (RFC 6902: "-" or len appends)."""
    digits = part.lstrip("0") or "0"
    # Lengths first: int() refuses over 4300 digits, and such an index is past any end anyway.
    if len(digits) > len(str(size)) or int(digits) > size:
        return None
    return int(digits)


def _ensure_structure(doc: Any, parts: list[str]) -> Any:
    """Create the missing parent containers of a path, as flux0's `ensure_structure_for_patch`
    does before every operation (its chunks add `/tool_calls/0` to an empty document)."""
    if not parts:
        return {} if doc is None else doc
    if doc is None:
        doc = [] if parts[0] == "-" or _is_index(parts[0]) else {}
    current = doc
    for index, part in enumerate(parts[:-1]):
        following = parts[index + 1]
        if part == "-":
            raise PatchError("'-' in the middle of a path")
        if _is_index(part):
            if not isinstance(current, list):
                raise PatchError(f"segment {part!r} indexes {json_kind(current)}, not a list")
            # A missing parent is created only right at the end of its list: a far index
            # would have filled memory with millions of empty containers.
            position = _index_within(part, len(current))
            if position is None:
                raise PatchError(f"index {clip(part, 20)} is past the end of an array of {len(current)}")
            if position == len(current):
                current.append([] if _is_index(following) else {})
            current = current[position]
        else:
            if not isinstance(current, dict):
                raise PatchError(f"segment {part!r} names a key of {json_kind(current)}, not an object")
            if part not in current:
                current[part] = [] if _is_index(following) else {}
            elif _is_index(following) and not isinstance(current[part], list):
                current[part] = []
            current = current[part]
    return doc


def apply_operation(doc: Any, operation: Any) -> Any:
    """Apply one RFC 6902 `add` or `replace` to `doc` (flux0 streams only these); returns the
    new document. Raises PatchError for anything it cannot apply."""
    if not isinstance(operation, dict):
        raise PatchError("operation is not an object")
    op = operation.get("op")
    if op not in ("add", "replace"):
        raise PatchError(f"unsupported op {clip(text(op), 40)!r} (flux0 streams add and replace)")
    path = operation.get("path")
    if not isinstance(path, str):
        raise PatchError("path is not text")
    if "value" not in operation:
        raise PatchError("missing value")
    value = operation["value"]
    if isinstance(value, (dict, list)):
        value = copy.deepcopy(value)  # the chunk's own payload must not change with the document
    parts = _pointer(path)
    doc = _ensure_structure(doc, parts)
    if not parts:
        return value
    parent = doc
    for part in parts[:-1]:
        parent = parent[_index_within(part, len(parent))] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    if isinstance(parent, list):
        if last == "-":
            if op == "replace":
                raise PatchError("replace cannot target '-'")
            parent.append(value)
            return doc
        if not _is_index(last) or (len(last) > 1 and last.startswith("0")):
            raise PatchError(f"{clip(last, 20)!r} is not an array index")
        position = _index_within(last, len(parent))
        if op == "add":
            if position is None:
                raise PatchError(f"index {clip(last, 20)} is past the end of an array of {len(parent)}")
            parent.insert(position, value)
        else:
            if position is None or position == len(parent):
                raise PatchError(f"index {clip(last, 20)} does not exist (array of {len(parent)})")
            parent[position] = value
        return doc
    if isinstance(parent, dict):
        if op == "replace" and last not in parent:
            raise PatchError(f"replace of missing key {last!r}")
        parent[last] = value
        return doc
    raise PatchError(f"cannot set {last!r} inside {json_kind(parent)}")


def content_text(content: Any) -> str:
    """A rebuilt message document as text, the way flux0 finalises it (a list of strings is
    joined; anything else that is not text is shown as JSON)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(item, str) for item in content):
        return "".join(content)
    return text(content)


# One recording ----------------------------------------------------------------------------------


@dataclass
class _Doc:
    correlation_id: str
    content: Any = None
    chunks: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    broken: bool = False


class _Recording:
    def __init__(self, meta: SessionMeta, problems: Problems) -> None:
        self.meta = meta
        self.problems = problems
        self.docs: dict[str, _Doc] = {}  # open message documents by event_id, in arrival order
        self.turn = 0
        self.turn_text = ""
        self.turn_at: datetime | None = None
        self.correlation_errors: dict[str, str] = {}
        self.last_offset: int | None = None
        self.last_ts: datetime | None = None
        self.last_line: int | None = None
        self.last_raw = ""
        self.turns: int = 0
        self.messages: int = 0
        self.last_status = ""
        self.turn_correlation = ""  # the correlation id of the open turn's user message
        self.started = False

    def events(self, records: Iterator[Record]) -> Iterator[CanonicalEvent]:
        for record in records:
            yield from self.convert(record.value, record.text, record.line)
        yield from self.end_correlations(None, self.last_ts, self.last_line, self.last_raw, unfinished=True)
        # A recording whose agent reported `completed` last finished its turn; one cut off
        # mid-turn (the end of the file reached with the agent still streaming) did not.
        self.meta.completed = self.last_status == "completed"
        # Its status says so too: one cut off mid-turn was shown "completed" beside completed
        # false. A last turn that failed is a failed session, as a recording of daycare's is.
        self.meta.failed = self.last_status in ERROR_STATUSES
        self.meta.interrupted = not self.meta.completed and not self.meta.failed
        self.meta.metadata["turns"] = self.turns
        self.meta.metadata["agent_messages"] = self.messages

    def convert(self, record: dict[str, Any], raw: str, line: int) -> list[CanonicalEvent]:
        problems = self.problems
        kind_name = record.get("kind")
        if not self.started:
            self.started = True
            if kind_name != "header":
                # flux0's recording store keeps a recording only under its header at offset 0
                # (packages/core/src/flux0_core/recordings.py; storage/nanodb_memory.py refuses
                # every frame of a recording whose header it cannot find).
                problems.add(
                    line, "kind",
                    f"invalid recording: its first record is {clip(text(kind_name), 40)!r}, not its header "
                    "(flux0 refuses a recording without its header at offset 0); imported as it is",
                )  # fmt: skip
        timestamp = parse_iso(record.get("created_at"), "created_at", line, problems)
        self._check_offset(record, line)
        payload = payload_object(record.get("payload"), line, problems)
        out = dict(payload)
        out["_source"] = {"id": record.get("id"), "offset": record.get("offset"), "kind": kind_name}
        event = CanonicalEvent(
            kind=Kind.CUSTOM, source_type=kind_name if isinstance(kind_name, str) and kind_name else "missing",
            raw=raw, payload=out, timestamp=timestamp, line=line, step=self.turn,
        )  # fmt: skip
        if timestamp is not None:
            self.last_ts = timestamp
            if self.meta.started_at is None:
                self.meta.started_at = timestamp
            self.meta.ended_at = timestamp
        self.last_line = line
        self.last_raw = raw
        if kind_name == "header":
            event.kind = Kind.SESSION_START
            if record.get("offset") not in (0, None):
                problems.add(line, "offset", f"header at offset {record.get('offset')} (expected 0)")
            return [event]
        if kind_name == "chunk":
            event.kind = Kind.CHUNK
            self._chunk(event, payload, line)
            return [event]
        if kind_name == "emitted":
            return self._emitted(event, payload, timestamp, line)
        if kind_name is None:
            problems.add(line, "kind", "missing kind: kept as a custom event")
        else:
            problems.add(line, "kind", f"unknown kind {clip(text(kind_name), 40)!r}: kept as a custom event")
        return [event]

    def _check_offset(self, record: dict[str, Any], line: int) -> None:
        offset = record.get("offset")
        if offset is None:
            self.problems.add(line, "offset", "missing offset")
            return
        if isinstance(offset, bool) or not isinstance(offset, int):
            self.problems.add(line, "offset", f"offset is not an integer: {clip(text(offset), 40)}")
            return
        if self.last_offset is not None and offset == self.last_offset:  # read in offset order: only a repeat
            self.problems.add(line, "offset", f"offset {offset} repeated: kept in file order")
        self.last_offset = offset

    def _chunk(self, event: CanonicalEvent, payload: dict[str, Any], line: int) -> None:
        problems = self.problems
        event_id = payload.get("event_id")
        correlation_id = payload.get("correlation_id")
        metadata = payload.get("metadata") if isinstance(payload.get("metadata"), dict) else {}
        agent_id = metadata.get("agent_id")
        if isinstance(agent_id, str):
            event.agent_id = agent_id
            if not self.meta.agent_id:
                self.meta.agent_id = agent_id
        if not isinstance(event_id, str) or not event_id:
            problems.add(line, "payload.event_id", "chunk without event_id: its patches are not applied")
            return
        if not isinstance(correlation_id, str):
            problems.add(line, "payload.correlation_id", "chunk without correlation_id")
            correlation_id = ""
        doc = self.docs.get(event_id)
        if doc is None:
            doc = self.docs[event_id] = _Doc(correlation_id=correlation_id, metadata=dict(metadata))
        doc.chunks += 1
        patches = payload.get("patches")
        if not isinstance(patches, list):
            problems.add(line, "payload.patches", "patches is not a list: chunk not applied")
            doc.broken = True
            return
        for index, operation in enumerate(patches):
            try:
                doc.content = apply_operation(doc.content, operation)
            except PatchError as exc:
                problems.add(line, f"payload.patches[{index}]", f"{exc}: operation skipped")
                doc.broken = True
            except (KeyError, IndexError, TypeError) as exc:
                problems.add(
                    line, f"payload.patches[{index}]",
                    f"cannot apply ({type(exc).__name__}: {exc}): operation skipped",
                )  # fmt: skip
                doc.broken = True

    def _emitted(
        self, event: CanonicalEvent, payload: dict[str, Any], timestamp: datetime | None, line: int
    ) -> list[CanonicalEvent]:
        problems = self.problems
        source = payload.get("source")
        event_type = payload.get("type")
        correlation_id = payload.get("correlation_id") if isinstance(payload.get("correlation_id"), str) else ""
        data = payload.get("data", {})
        if not isinstance(data, dict):  # null too: flux0's emitted events all carry their data
            problems.add(line, "payload.data", f"data is {json_kind(data)}, not an object")
            data = {}
        event.source_type = f"emitted.{event_type}" if isinstance(event_type, str) else "emitted"
        if source is None:
            problems.add(line, "payload.source", "missing source")
        elif source not in ("user", "ai_agent", "system"):
            problems.add(line, "payload.source", f"unknown source {clip(text(source), 40)!r}")

        if event_type == "message":
            message = _parts_text(data.get("parts"))
            event.payload["text"] = message
            if source == "user":
                # A user message anchors the next turn; whatever the agent was still doing ends.
                before = self.end_correlations(None, timestamp, line, event.raw, unfinished=True)
                # The new turn is not completed until the agent says so: a recording that ends
                # on it (unanswered, or cut off mid-answer) showed the turn before's `completed`.
                self.last_status = ""
                self.turn_correlation = correlation_id
                self.turn += 1
                self.turns += 1
                self.turn_text = message
                self.turn_at = timestamp
                event.kind = Kind.USER_MESSAGE
                event.step = self.turn
                if not self.meta.task:
                    self.meta.task = clip(message, 500)
                return [*before, event]
            event.kind = Kind.AGENT_MESSAGE
            self.messages += 1
            self._close_step(event, message, correlation_id)
            return [event]
        if event_type == "status":
            status = data.get("status")
            event.kind = Kind.STATUS
            if not isinstance(status, str):
                problems.add(line, "payload.data.status", "status event without a status")
                return [event]
            event.payload["status"] = status
            # Only the open turn's own status says whether the recording ends answered (a late
            # `completed` of the turn before, recorded after the next question, did not).
            if not self.turn_correlation or correlation_id == self.turn_correlation:
                self.last_status = status
            if status in ERROR_STATUSES:
                event.is_error = True
                self.correlation_errors[correlation_id] = text(data.get("data")) or status
            if status == "completed":
                return [event, *self.end_correlations(correlation_id, timestamp, line, event.raw)]
            return [event]
        if event_type == "tool":
            event.kind = Kind.TOOL_RESPONSE
            calls = data.get("tool_calls") if isinstance(data.get("tool_calls"), list) else []
            derived = self._tool_results(calls, event, line)
            return [event, *derived]
        if event_type == "custom":
            event.kind = Kind.CUSTOM
            return [event]
        if event_type is None:
            problems.add(line, "payload.type", "missing type: kept as a custom event")
        else:
            kept = f"unknown emitted type {clip(text(event_type), 40)!r}: kept as a custom event"
            problems.add(line, "payload.type", kept)
        return [event]

    def _tool_results(self, calls: list[Any], event: CanonicalEvent, line: int) -> list[CanonicalEvent]:
        """The first result is the record's own event; further ones become derived events."""
        derived: list[CanonicalEvent] = []
        for index, call in enumerate(calls):
            if not isinstance(call, dict):
                continue
            target = event if index == 0 else CanonicalEvent(
                kind=Kind.TOOL_RESPONSE, source_type="emitted.tool", raw=event.raw,
                payload={"tool_call": call, "derived_from_line": line}, timestamp=event.timestamp,
                line=line, step=self.turn,
            )  # fmt: skip
            _fill_tool_result(target, call)
            if index:
                derived.append(target)
        return derived

    def end_correlations(
        self,
        correlation_id: str | None,
        timestamp: datetime | None,
        line: int | None,
        raw: str,
        *,
        unfinished: bool = False,
    ) -> list[CanonicalEvent]:
        """Turn the open documents (of one correlation, or all) into derived events.

        Derived events carry the line and raw text of the record that ended the correlation, so
        they sit next to it and the original export writes that record once.
        """
        chosen = [
            (event_id, doc) for event_id, doc in self.docs.items()
            if correlation_id is None or doc.correlation_id == correlation_id
        ]  # fmt: skip
        if not chosen:
            return []
        out: list[CanonicalEvent] = []
        texts: list[dict[str, Any]] = []
        for event_id, doc in chosen:
            del self.docs[event_id]
            content = doc.content
            if isinstance(content, dict) and isinstance(content.get("tool_calls"), list):
                out.extend(self._rebuilt_tool_calls(content["tool_calls"], event_id, timestamp, line, raw))
            elif isinstance(content, dict) and isinstance(content.get("tool_call_results"), list):
                for call in content["tool_call_results"]:
                    if isinstance(call, dict):
                        result = CanonicalEvent(
                            kind=Kind.TOOL_RESPONSE, source_type="rebuilt_tool_result", raw=raw,
                            payload={"event_id": event_id, "tool_call": call}, timestamp=timestamp,
                            line=line, step=self.turn,
                        )  # fmt: skip
                        _fill_tool_result(result, call)
                        out.append(result)
            else:
                entry = {"event_id": event_id, "text": content_text(content), "chunks": doc.chunks}
                if content is not None and not isinstance(content, str):
                    # Pieces stay pieces, as they were streamed (`text` holds them joined).
                    entry["content"] = content
                if doc.metadata.get("kind") == "reasoning":
                    # flux0's store makes such a document a reasoning part, not the reply's
                    # content (MemoryEventStore.finalize_event): kept in `messages`, marked, and
                    # left out of the reply's text.
                    entry["reasoning"] = True
                if doc.broken:
                    entry["incomplete"] = True
                texts.append(entry)
        correlation = chosen[0][1].correlation_id
        metadata = chosen[0][1].metadata
        combined = "\n\n".join(entry["text"] for entry in texts if entry["text"] and not entry.get("reasoning"))
        message = CanonicalEvent(
            kind=Kind.AGENT_MESSAGE, source_type="rebuilt_message", raw=raw,
            payload={
                "text": combined, "messages": texts, "correlation_id": correlation,
                "chunks": sum(doc.chunks for _, doc in chosen),
                "agent_id": metadata.get("agent_id"), "agent_name": metadata.get("agent_name"),
            },
            timestamp=timestamp, line=line, step=self.turn,
            agent_id=metadata.get("agent_id") if isinstance(metadata.get("agent_id"), str) else "",
        )  # fmt: skip
        if unfinished:
            message.payload["unfinished"] = True
        self.messages += 1
        self._close_step(message, combined, correlation)
        out.append(message)
        return out

    def _rebuilt_tool_calls(
        self, calls: list[Any], event_id: str, timestamp: datetime | None, line: int | None, raw: str
    ) -> list[CanonicalEvent]:
        out = []
        for call in calls:
            if not isinstance(call, dict):
                continue
            args = call.get("args")
            if isinstance(args, list) and all(isinstance(piece, str) for piece in args):
                joined = "".join(args)
                try:
                    args = orjson.loads(joined) if joined else {}
                except orjson.JSONDecodeError:
                    self.problems.add(
                        line, "payload.patches",
                        f"tool call {call.get('tool_call_id')!r}: streamed args are not JSON; kept as text",
                    )  # fmt: skip
                    args = joined
            name = call.get("tool_name") if isinstance(call.get("tool_name"), str) else ""
            call_id = call.get("tool_call_id") if isinstance(call.get("tool_call_id"), str) else ""
            out.append(
                CanonicalEvent(
                    kind=Kind.TOOL_CALL,
                    source_type="rebuilt_tool_call",
                    raw=raw,
                    payload={"event_id": event_id, "tool_call_id": call_id, "tool_name": name, "args": args},
                    timestamp=timestamp,
                    line=line,
                    step=self.turn,
                    tool=name,
                    pair_id=call_id,
                )  # fmt: skip
            )
        return out

    def _close_step(self, event: CanonicalEvent, message: str, correlation_id: str) -> None:
        error = self.correlation_errors.pop(correlation_id, "")
        duration = None
        if self.turn_at is not None and event.timestamp is not None:
            duration = max(0.0, (event.timestamp - self.turn_at).total_seconds() * 1000.0)
        event.step_state = unrewarded_step_state(
            step=self.turn,
            timestamp=event.timestamp.isoformat() if event.timestamp is not None else "",
            action_type="agent_turn",
            action_code="",
            action_rationale=clip(self.turn_text, STEP_TEXT_LIMIT),
            success=not error,
            output=message,
            error=error,
            duration_ms=duration,
            tokens=0,
            raw_action={"correlation_id": correlation_id},
            raw_observation={"unfinished": bool(event.payload.get("unfinished"))},
        )


def _fill_tool_result(event: CanonicalEvent, call: dict[str, Any]) -> None:
    event.pair_id = call.get("tool_call_id") if isinstance(call.get("tool_call_id"), str) else ""
    event.tool = call.get("tool_name") if isinstance(call.get("tool_name"), str) else ""
    error = call.get("error")
    failed = bool(error)
    event.failed = failed
    if failed:
        event.kind = Kind.TOOL_ERROR
        event.is_error = True


def _parts_text(parts: Any) -> str:
    """The text of a flux0 message's parts (content parts; others shown as JSON)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    pieces = []
    for part in parts:
        if isinstance(part, dict):
            if part.get("type") == "content":
                pieces.append(content_text(part.get("content")))
            elif part.get("type") == "reasoning":
                continue
            else:
                pieces.append(text(part))
        elif isinstance(part, str):
            pieces.append(part)
    return "".join(pieces)
