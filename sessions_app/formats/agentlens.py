"""AgentLens events (agentkitai/agentlens; docs/formats.md, "AgentLens").

An event: `{id, timestamp, sessionId, agentId, eventType, severity, payload, metadata, prevHash,
hash}`. A file holds them as JSON lines, a JSON array, or the `{"events": [...]}` body of
`POST /api/events` (also one such body a line). One file may hold several sessions: the one pass
over the file lists the session ids (and whether each session is stored newest first, as
AgentLens' event query returns it) and spools each event to its session's file on disk
(`records.RecordSpool`); each session is then converted from its own spool, newest-first
ones read backwards. Two passes over the events whatever the number of sessions, and memory
holds one read block, one event and the spool's write buffers.

Mapping (docs/formats.md "AgentLens"): eventType -> canonical kind as in KINDS; pairs by
`callId` (tool and LLM calls) and `requestId` (approvals); tokens from `usage`, cost from
`costUsd`, latency from `latencyMs` / `durationMs`; severity error/critical, tool_error and an
LLM finishReason "error" are errors. A step closes at each llm_response, tool_response,
tool_error and approval decision.

Cost is counted once: every llm_response and cost_tracked `costUsd` counts (AgentLens adds both
too), except a cost_tracked that restates an llm_response already priced: one naming its callId
(payload or metadata `callId`), or the one right after a priced llm_response with the same
model, cost and token total. That one keeps its figures in its payload but adds nothing. A
cost_tracked naming an llm_response that had tokens but no price supplies the price and adds its
cost only. Tokens used without any price mark the event `cost_unpriced` (never a silent $0).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson
from ulid import ULID

from ..canonical import CanonicalEvent, Kind, ParsedSession, Problems, SessionMeta
from . import Head, Source
from .fields import amount, clip, json_kind, parse_iso, payload_object, record_kind, text
from .records import DiscardProblems, Record, RecordSpool, iter_records
from .step_state import STEP_TEXT_LIMIT, unrewarded_step_state

NAME = "agentlens"
Json = dict[str, Any]
BODY_KEYS = ("events",)

KINDS: dict[str, str] = {
    "session_started": Kind.SESSION_START,
    "session_ended": Kind.SESSION_END,
    "llm_call": Kind.LLM_CALL,
    "llm_response": Kind.LLM_RESPONSE,
    "tool_call": Kind.TOOL_CALL,
    "tool_response": Kind.TOOL_RESPONSE,
    "tool_error": Kind.TOOL_ERROR,
    "approval_requested": Kind.APPROVAL_REQUESTED,
    "approval_granted": Kind.APPROVAL_GRANTED,
    "approval_denied": Kind.APPROVAL_DENIED,
    "approval_expired": Kind.APPROVAL_EXPIRED,
    "cost_tracked": Kind.COST,
    "custom": Kind.CUSTOM,
    # FormBridge forms and AgentLens' own alerts carry no step content of their own.
    "form_submitted": Kind.CUSTOM,
    "form_completed": Kind.CUSTOM,
    "form_expired": Kind.CUSTOM,
    # Its observation taxonomy (retrievals, embeddings, steps of a chain): no step content either.
    "retrieval": Kind.CUSTOM,
    "embedding": Kind.CUSTOM,
    "chain_step": Kind.CUSTOM,
    "alert_triggered": Kind.NOTE,
    "alert_resolved": Kind.NOTE,
    # Older servers' replay endpoint still lists these types.
    "error": Kind.ERROR,
    "decision": Kind.CUSTOM,
    "observation": Kind.CUSTOM,
}
SEVERITIES = frozenset({"debug", "info", "warn", "error", "critical"})
ERROR_SEVERITIES = frozenset({"error", "critical"})
APPROVAL_OUTCOME = {
    Kind.APPROVAL_GRANTED: "granted",
    Kind.APPROVAL_DENIED: "denied",
    Kind.APPROVAL_EXPIRED: "expired",
}

# Open calls and priced responses remembered for pairing details and cost de-duplication; a
# session that never answers its calls cannot grow the (JSON) converter state without bound.
MAX_REMEMBERED = 2000
# Unknown event types all become `custom`: past this many, which ones is no longer told apart.
MAX_TYPES_PER_KIND = 20

_HAS_EVENT_TYPE = re.compile(rb'"eventType"\s*:')
_HAS_SESSION_ID = re.compile(rb'"sessionId"\s*:')


def sniff(head: Head) -> bool:
    records = head.records[:10]
    for record in records:
        events = record.get("events")
        if isinstance(events, list) and events and isinstance(events[0], dict):
            return "eventType" in events[0]
    if records:
        # JSON lines: AgentLens when most of the first ones are its events. One AgentLens line
        # pasted into another format's file took the whole file, every other line then skipped
        # as an event without a sessionId.
        # An event without its sessionId is still AgentLens's (reported, skipped): one at least
        # must name its session.
        events = sum("eventType" in r for r in records)
        return events * 2 > len(records) and any("sessionId" in r for r in records if "eventType" in r)
    # A document (an array, or {"events": [...]} spread over lines): no line is a record.
    lead = head.text.lstrip()[:1]
    if lead not in (b"[", b"{"):
        return False
    return bool(_HAS_EVENT_TYPE.search(head.text) and _HAS_SESSION_ID.search(head.text))


@dataclass
class _SessionInfo:
    count: int = 0
    first_line: int = 0
    agent_id: str = ""
    increases: int = 0
    decreases: int = 0
    last_ts: datetime | None = None

    @property
    def order(self) -> str:
        if self.decreases and not self.increases:
            return "newest_first"
        return "mixed" if self.decreases else "ascending"


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    with RecordSpool.of(source) as spool:
        sessions = _list_sessions(source, problems, spool)
        for session_id, info in sessions.items():
            converter = Converter()
            meta = converter.meta
            meta.source_session_id = session_id
            meta.agent_id = info.agent_id
            order = info.order
            meta.metadata["agentlens"] = {"time_order": order}
            if order == "newest_first":
                meta.metadata["agentlens"]["reversed"] = True
            elif order == "mixed":
                problems.add(
                    info.first_line, "timestamp",
                    f"session {session_id}: events are not in time order; kept in file order",
                )  # fmt: skip
            records = spool.records(session_id, newest_first=order == "newest_first")
            yield ParsedSession(meta=meta, events=_convert_all(converter, records, problems))


def source_chain_summary(chain: Json) -> Json | None:
    """What a session's metadata says of its source chain (None: the source has no hashes)."""
    if not chain.get("hashed"):
        return None
    broken = chain.get("broken")
    if broken is None:
        return {"valid": True, "chained": bool(chain.get("chained"))}
    return {
        "valid": False,
        "broken_at": broken["index"],
        "event_id": broken["id"],
        "line": broken["line"],
        "field": broken["field"],
        "reason": broken["reason"],
    }


def _convert_all(converter: Converter, records: Iterator[Record], problems: Problems) -> Iterator[CanonicalEvent]:
    for record in records:
        yield from converter.convert(record.value, record.text, record.line, problems)
    converter.finish()


def _list_sessions(source: Source, problems: Problems, spool: RecordSpool) -> dict[str, _SessionInfo]:
    """The pass over the file: session ids in order of appearance, with their size and time
    order; each event goes to its session's spool.

    File-level problems (malformed lines, BOM, ...) are reported here, once; the conversion of
    each session reports only field problems of its own events.
    """
    sessions: dict[str, _SessionInfo] = {}
    for record in iter_records(source, problems, body_keys=BODY_KEYS):
        session_id = record.value.get("sessionId")
        if not isinstance(session_id, str) or not session_id.strip():
            problems.add(record.line, "sessionId", "missing or empty sessionId: event skipped")
            continue
        info = sessions.get(session_id)
        if info is None:
            info = sessions[session_id] = _SessionInfo(first_line=record.line)
        info.count += 1
        spool.add(session_id, record.line, record.raw)
        agent_id = record.value.get("agentId")
        if not info.agent_id and isinstance(agent_id, str):
            info.agent_id = agent_id
        ts = _quiet_timestamp(record.value.get("timestamp"))
        if ts is not None:
            if info.last_ts is not None:
                if ts > info.last_ts:
                    info.increases += 1
                elif ts < info.last_ts:
                    info.decreases += 1
            info.last_ts = ts
    return sessions


def _quiet_timestamp(value: Any) -> datetime | None:
    # The session's own pass reports a bad timestamp; the listing pass only orders by it.
    return parse_iso(value, "", None, _SILENT) if isinstance(value, str) else None


_SILENT = DiscardProblems(limit=0)


def _str(payload: dict[str, Any], key: str) -> str:
    value = payload.get(key)
    if value is None:
        return ""
    return value if isinstance(value, str) else text(value)


class Converter:
    """AgentLens events of one session -> canonical events; also used for live ingest batches.

    Its state (open calls, the last priced LLM response, step count, source chain check) is
    plain JSON, so a later batch continues exactly where the last one stopped.
    """

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        state = state or {}
        self.meta = SessionMeta()
        self._calls: dict[str, dict[str, Any]] = dict(state.get("calls", {}))
        self._responses: dict[str, dict[str, Any]] = dict(state.get("responses", {}))
        self._last_priced: dict[str, Any] | None = state.get("last_priced")
        self._steps: int = state.get("steps", 0)
        self._last_hash: str | None = state.get("last_hash")
        self._seen: int = state.get("seen", 0)
        self._timestamp_text = ""
        self._source_chain: dict[str, Any] = dict(state.get("source_chain", {}))
        # Which AgentLens types each canonical kind stood for: the replay names its eventCounts
        # by them (several types share `custom` and `note`).
        self._types: dict[str, list[str]] = {k: list(v) for k, v in state.get("types", {}).items()}

    def state(self) -> dict[str, Any]:
        return {
            "calls": self._calls,
            "responses": self._responses,
            "last_priced": self._last_priced,
            "steps": self._steps,
            "last_hash": self._last_hash,
            "seen": self._seen,
            "source_chain": self._source_chain,
            "types": self._types,
        }

    def finish(self) -> None:
        """Record what only the whole session tells: whether the source's own hash chain held,
        and the AgentLens types behind each kind."""
        chain = source_chain_summary(self._source_chain)
        if chain is not None:
            self.meta.metadata["source_chain"] = chain
        info = self.meta.metadata.setdefault("agentlens", {})
        info["event_types"] = self._types
        if self._calls:
            info["unanswered_calls"] = len(self._calls)

    def convert(self, record: dict[str, Any], raw: str, line: int | None, problems: Problems) -> list[CanonicalEvent]:
        event_type, kind = record_kind(record, "eventType", KINDS, line, problems)
        timestamp = parse_iso(record.get("timestamp"), "timestamp", line, problems)
        self._timestamp_text = record.get("timestamp")
        severity = record.get("severity", "info")
        # A list or object is unhashable: the set lookup alone would raise.
        if not isinstance(severity, str) or severity not in SEVERITIES:
            problems.add(line, "severity", f"unknown severity {clip(text(severity), 40)!r}: taken as info")
            severity = "info"
        source_payload = _as_shown(kind, payload_object(record.get("payload", {}), line, problems))

        payload = dict(source_payload)
        envelope: dict[str, Any] = {"id": record.get("id"), "severity": severity}
        metadata = record.get("metadata")
        if metadata:
            envelope["metadata"] = metadata
        envelope["prevHash"] = record.get("prevHash")
        envelope["hash"] = record.get("hash")
        payload["_source"] = envelope

        agent_id = record.get("agentId")
        event = CanonicalEvent(
            kind=kind,
            source_type=event_type or "missing",
            raw=raw,
            payload=payload,
            timestamp=timestamp,
            line=line,
            agent_id=agent_id if isinstance(agent_id, str) else "",
            is_error=severity in ERROR_SEVERITIES or kind == Kind.ERROR,
        )
        self._check_source_chain(record, line, problems)
        self._note_type(kind, event.source_type)
        self._fill_meta(record, kind, source_payload, timestamp, event)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event, source_payload, metadata if isinstance(metadata, dict) else {}, line, problems)
        self._seen += 1
        return [event]

    # Per kind -----------------------------------------------------------------------------

    def _tool_call(
        self, event: CanonicalEvent, payload: Json, metadata: Json, line: int | None, problems: Problems
    ) -> None:
        event.tool = _str(payload, "toolName")
        call_id = _pair_id(event, payload, "callId", line, problems)
        if not call_id:
            return
        self._remember_call(call_id, {
            "kind": "tool", "name": event.tool, "ts": _ms(event.timestamp),
            **_call_arguments(payload.get("arguments")),
        })  # fmt: skip

    def _tool_outcome(
        self, event: CanonicalEvent, payload: Json, metadata: Json, line: int | None, problems: Problems
    ) -> None:
        call_id, call = self._answered_call(event, payload, "callId", line, problems)
        event.tool = _str(payload, "toolName") or (call or {}).get("name", "")
        event.duration_ms = amount(payload, "durationMs", "payload.durationMs", line, problems)
        failed = event.kind == Kind.TOOL_ERROR
        event.failed = failed
        if failed:
            event.is_error = True
            error = _str(payload, "error") or "tool error"
            code = _str(payload, "errorCode")
            output = ""
        else:
            error = ""
            code = ""
            output = text(payload.get("result"))
        self._close_step(
            event,
            action_type="tool_call",
            action_code=f"{event.tool}({(call or {}).get('arguments', '')})",
            success=not failed,
            output=output,
            error=f"{error} [{code}]" if code else error,
            duration_ms=self._duration(event, call),
            tokens=0,
            raw_action={"callId": call_id, "toolName": event.tool, "arguments": _recorded(call, "arguments")},
        )

    def _llm_call(
        self, event: CanonicalEvent, payload: Json, metadata: Json, line: int | None, problems: Problems
    ) -> None:
        event.tool = _str(payload, "model")
        call_id = _pair_id(event, payload, "callId", line, problems)
        if not call_id:
            return
        self._remember_call(call_id, {
            "kind": "llm", "name": event.tool, "ts": _ms(event.timestamp),
            "prompt": clip(_last_message(payload.get("messages"), line, problems), STEP_TEXT_LIMIT),
        })  # fmt: skip

    def _llm_response(
        self, event: CanonicalEvent, payload: Json, metadata: Json, line: int | None, problems: Problems
    ) -> None:
        call_id, call = self._answered_call(event, payload, "callId", line, problems)
        event.tool = _str(payload, "model") or (call or {}).get("name", "")
        tokens = _tokens(payload, "usage", line, problems)
        cost = amount(payload, "costUsd", "payload.costUsd", line, problems)
        event.tokens = tokens
        event.cost_usd = cost
        event.cost_unpriced = cost is None and bool(tokens)
        event.duration_ms = amount(payload, "latencyMs", "payload.latencyMs", line, problems)
        finish = _str(payload, "finishReason")
        if finish == "error":
            event.is_error = True
        key = call_id or f"#{self._seen}"
        self._remember(self._responses, key, {"model": event.tool, "cost": cost, "tokens": tokens})
        self._last_priced = (
            {"callId": key, "model": event.tool, "cost": cost, "tokens": tokens} if cost is not None else None
        )
        self._close_step(
            event,
            action_type="llm_call",
            # No code ran: the model is the event's tool and raw_action's `model`, never "code".
            action_code="",
            action_rationale=(call or {}).get("prompt", ""),
            success=not event.is_error,
            output=text(payload.get("completion")),
            error="LLM call ended with finishReason=error" if finish == "error" else "",
            duration_ms=self._duration(event, call),
            tokens=tokens or 0,
            raw_action={"callId": call_id, "model": event.tool, "provider": _str(payload, "provider")},
        )

    def _cost(self, event: CanonicalEvent, payload: Json, metadata: Json, line: int | None, problems: Problems) -> None:
        cost = amount(payload, "costUsd", "payload.costUsd", line, problems)
        tokens = _cost_tokens(payload, line, problems)
        model = _str(payload, "model")
        reference = _str(payload, "callId") or _str(metadata, "callId")
        if not reference:
            trigger = _str(payload, "trigger")
            reference = trigger if trigger in self._responses else ""
        response = self._responses.get(reference) if reference else None
        last = self._last_priced
        self._last_priced = None
        if (
            response is None
            and last is not None
            and (last["model"] == model and last["cost"] == cost and last["tokens"] == tokens)
        ):
            reference, response = last["callId"], self._responses.get(last["callId"])
        if response is not None and not response.get("costed"):
            response["costed"] = True
            if response["cost"] is not None:
                event.payload["_replay"] = {"counted_on": "llm_response", "callId": reference}
                return
            # The response used tokens without a price: this event supplies the price only.
            event.cost_usd = cost
            event.payload["_replay"] = {"prices": "llm_response", "callId": reference}
            return
        event.cost_usd = cost
        event.tokens = tokens
        event.cost_unpriced = cost is None and bool(tokens)

    def _approval_request(
        self, event: CanonicalEvent, payload: Json, metadata: Json, line: int | None, problems: Problems
    ) -> None:
        request_id = _pair_id(event, payload, "requestId", line, problems)
        if not request_id:
            return
        self._remember_call(request_id, {
            "kind": "approval", "name": _str(payload, "action"), "ts": _ms(event.timestamp),
            **_call_arguments(payload.get("params")),
        })  # fmt: skip

    def _approval_decision(
        self, event: CanonicalEvent, payload: Json, metadata: Json, line: int | None, problems: Problems
    ) -> None:
        request_id, request = self._answered_call(event, payload, "requestId", line, problems)
        outcome = APPROVAL_OUTCOME[event.kind]
        action = _str(payload, "action") or (request or {}).get("name", "")
        decided_by = _str(payload, "decidedBy")
        reason = _str(payload, "reason")
        output = outcome + (f" by {decided_by}" if decided_by else "") + (f": {reason}" if reason else "")
        self._close_step(
            event,
            action_type="approval",
            action_code=action,
            success=outcome == "granted",
            output=output,
            error="",
            duration_ms=self._duration(event, request),
            tokens=0,
            raw_action={"requestId": request_id, "action": action, "params": _recorded(request, "arguments")},
        )

    # Helpers ------------------------------------------------------------------------------

    def _fill_meta(self, record, kind, payload, timestamp, event) -> None:
        meta = self.meta
        session_id = record.get("sessionId")
        if not meta.source_session_id and isinstance(session_id, str):
            meta.source_session_id = session_id
        if not meta.agent_id and event.agent_id:
            meta.agent_id = event.agent_id
        if kind == Kind.SESSION_START:
            meta.started_at = meta.started_at or timestamp
            name = _str(payload, "agentName")
            if name:
                meta.metadata.setdefault("agentlens", {})["agentName"] = name
            task = _str(payload, "task")
            if task and not meta.task:
                meta.task = task
            tags = payload.get("tags")
            if tags:
                meta.metadata.setdefault("agentlens", {})["tags"] = tags
        elif kind == Kind.SESSION_END:
            meta.ended_at = timestamp or meta.ended_at
            reason = _str(payload, "reason")
            meta.completed = reason == "completed"
            meta.failed = reason in ("error", "timeout")
            info = meta.metadata.setdefault("agentlens", {})
            info["endReason"] = reason
            summary = _str(payload, "summary")
            if summary:
                info["summary"] = summary
        elif kind in (Kind.LLM_CALL, Kind.LLM_RESPONSE):
            model = _str(payload, "model")
            if model and not meta.model:
                meta.model = model

    def _check_source_chain(self, record: Json, line: int | None, problems: Problems) -> None:
        """AgentLens's own check (verifyChain in packages/core/src/hash.ts), event by event in
        the order they are converted: each hash recomputed from the event's fields, each
        prevHash the hash of the event before it, null on the first. A session whose events
        all have a null prevHash is unchained (AgentLens's OTLP events, checked by its
        verifyRecords): only each event's own hash counts there. The first break is reported;
        the events after it are not checked (nor does AgentLens check them).
        """
        chain = self._source_chain
        index = self._seen
        current = record.get("hash")
        prev = record.get("prevHash")
        here = {"index": index, "line": line, "id": clip(text(record.get("id")), 100)}
        if "hashed" not in chain:
            # A file without hashes (hand-made, or another tool's) has no chain to check.
            chain["hashed"] = isinstance(current, str)
            chain["head"] = here
        if "broken" in chain:
            return
        if not chain["hashed"]:
            if isinstance(current, str):
                self._break_source_chain(chain["head"], "hash", "it carries no hash, later events do", problems)
            return
        if not isinstance(current, str):
            found = ("hash", "it carries no hash")
        elif source_hash(record) != current:
            found = ("hash", "its hash does not match its content")
        elif index == 0:
            found = ("prevHash", "the first event's prevHash is not null") if prev is not None else None
        else:
            if "chained" not in chain:
                chain["chained"] = prev is not None
                chain["second"] = here
            found = None
            if chain["chained"] and prev != self._last_hash:
                found = ("prevHash", f"its prevHash is not the hash of event {index - 1}")
            elif not chain["chained"] and prev is not None:
                # Not every prevHash is null after all: AgentLens checks the links, and the
                # second event's null prevHash is the first that fails.
                reason = "its prevHash is null, later events are chained"
                self._break_source_chain(chain["second"], "prevHash", reason, problems)
        self._last_hash = current if isinstance(current, str) else None
        if found is not None:
            self._break_source_chain(here, found[0], found[1], problems)

    def _break_source_chain(self, where: Json, field: str, reason: str, problems: Problems) -> None:
        self._source_chain["broken"] = {**where, "field": field, "reason": reason}
        problems.add(
            where["line"], field, f"source chain broken at event {where['index']} (id {where['id']}): {reason}"
        )

    def _note_type(self, kind: str, source_type: str) -> None:
        types = self._types.setdefault(kind, [])
        if source_type not in types and len(types) < MAX_TYPES_PER_KIND:
            types.append(source_type)

    def _close_step(self, event: CanonicalEvent, **outcome: Any) -> None:
        """Close the next step on `event`; `outcome` holds the rest of unrewarded_step_state's
        arguments."""
        self._steps += 1
        event.step = self._steps
        event.step_state = unrewarded_step_state(
            step=self._steps,
            # The source's own ISO text (already validated), as rlm-code's StepState keeps it.
            timestamp=self._timestamp_text if event.timestamp is not None else "",
            raw_observation={"eventType": event.source_type, "id": event.payload["_source"].get("id")},
            **outcome,
        )

    def _answered_call(
        self, event: CanonicalEvent, payload: Json, key: str, line: int | None, problems: Problems
    ) -> tuple[str, dict[str, Any] | None]:
        """The id at `payload[key]` and the open call (or approval request) it answers, now
        closed: None without an id, or when the call was never seen or has been forgotten."""
        call_id = _pair_id(event, payload, key, line, problems)
        return call_id, self._calls.pop(call_id, None) if call_id else None

    def _duration(self, event: CanonicalEvent, call: dict[str, Any] | None) -> float | None:
        if event.duration_ms is not None:
            return event.duration_ms
        if call is not None and call.get("ts") is not None and event.timestamp is not None:
            return max(0.0, _ms(event.timestamp) - call["ts"])
        return None

    def _remember_call(self, key: str, value: dict[str, Any]) -> None:
        self._remember(self._calls, key, value)

    @staticmethod
    def _remember(store: dict[str, Any], key: str, value: dict[str, Any]) -> None:
        store.pop(key, None)
        store[key] = value
        if len(store) > MAX_REMEMBERED:
            # Keep the newer half. (Deleting the oldest key one at a time is quadratic: a dict
            # skips its deleted slots from the front on every `next(iter(...))`.)
            newer = list(store.items())[-(MAX_REMEMBERED // 2) :]
            store.clear()
            store.update(newer)


# What AgentLens's replay shows of content its SDK flagged `redacted: true` ("content was
# redacted for privacy"): builder.ts's maybeRedactEvent.
REDACTED = "[REDACTED]"


def _as_shown(kind: str, payload: Json) -> Json:
    """The payload as AgentLens shows it: a flagged llm_call's message contents and system
    prompt, and a flagged llm_response's completion, replaced by "[REDACTED]"; the model,
    tokens, cost and latency kept. Shown, searched and exported so; the original export keeps
    the record as received (docs/formats.md)."""
    if payload.get("redacted") is not True:
        return payload
    if kind == Kind.LLM_CALL:
        shown = dict(payload)
        if isinstance(payload.get("messages"), list):
            shown["messages"] = [
                {**message, "content": REDACTED} if isinstance(message, dict) else message
                for message in payload["messages"]
            ]
        if payload.get("systemPrompt"):
            shown["systemPrompt"] = REDACTED
        return shown
    if kind == Kind.LLM_RESPONSE:
        return payload | {"completion": REDACTED}
    return payload


_HANDLERS = {
    Kind.TOOL_CALL: Converter._tool_call,
    Kind.TOOL_RESPONSE: Converter._tool_outcome,
    Kind.TOOL_ERROR: Converter._tool_outcome,
    Kind.LLM_CALL: Converter._llm_call,
    Kind.LLM_RESPONSE: Converter._llm_response,
    Kind.COST: Converter._cost,
    Kind.APPROVAL_REQUESTED: Converter._approval_request,
    Kind.APPROVAL_GRANTED: Converter._approval_decision,
    Kind.APPROVAL_DENIED: Converter._approval_decision,
    Kind.APPROVAL_EXPIRED: Converter._approval_decision,
}


def _pair_id(event: CanonicalEvent, payload: Json, key: str, line: int | None, problems: Problems) -> str:
    """The id at `payload[key]` that pairs a call (or approval request) with its answer, set as
    the event's pair id; an event without one is reported."""
    pair_id = _str(payload, key)
    event.pair_id = pair_id
    if not pair_id:
        problems.add(line, f"payload.{key}", f"{event.source_type} without {key}: it cannot be paired")
    return pair_id


def _ms(value: datetime | None) -> float | None:
    return value.timestamp() * 1000.0 if value is not None else None


def _tokens(payload: dict[str, Any], key: str, line: int | None, problems: Problems) -> int | None:
    """Total tokens of a `usage` object: its total, else input + output (either spelling)."""
    if key not in payload:
        return None
    usage = payload[key]
    field = f"payload.{key}"
    if usage is None:
        problems.add(line, field, "null usage (no tokens counted)")
        return None
    if not isinstance(usage, dict):
        problems.add(line, field, f"usage is {json_kind(usage)}, not an object")
        return None
    return _token_total(usage, field, line, problems)


def _token_total(usage: dict[str, Any], field: str, line: int | None, problems: Problems) -> int | None:
    for name in ("totalTokens", "total"):
        if name in usage:
            total = amount(usage, name, f"{field}.{name}", line, problems)
            if total is not None:
                return int(total)
    parts = [
        amount(usage, name, f"{field}.{name}", line, problems)
        for name in ("inputTokens", "input", "outputTokens", "output")
        if name in usage
    ]
    present = [part for part in parts if part is not None]
    return int(sum(present)) if present else None


def _cost_tokens(payload: dict[str, Any], line: int | None, problems: Problems) -> int | None:
    """cost_tracked tokens: flat inputTokens/outputTokens/totalTokens, or a `tokens` number or
    object (the format's description we started from writes `tokens`)."""
    if "tokens" in payload:
        tokens = payload["tokens"]
        if isinstance(tokens, dict):
            return _token_total(tokens, "payload.tokens", line, problems)
        value = amount(payload, "tokens", "payload.tokens", line, problems)
        return int(value) if value is not None else None
    return _token_total(payload, "payload", line, problems)


def _call_arguments(value: Any) -> dict[str, Any]:
    """What an open call remembers of its arguments (its state, saved between live batches):
    `arguments`, their text clipped for the step's action code, and `raw`, the value as recorded
    for the step's `raw_action` where it is small (None past the clip). Read back from its JSON
    text, so `raw` is plain JSON (a NaN became null there: a database's JSON column refuses it,
    and the batch would fail)."""
    written = text(value)
    if len(written) > STEP_TEXT_LIMIT:
        return {"arguments": clip(written, STEP_TEXT_LIMIT), "raw": None}
    if isinstance(value, str):
        return {"arguments": written, "raw": value}
    try:
        raw = orjson.loads(written)
    except orjson.JSONDecodeError:  # past what orjson reads back (an integer beyond 64 bits)
        raw = None
    return {"arguments": written, "raw": raw}


def _recorded(call: dict[str, Any] | None, key: str) -> Any:
    """A remembered call's arguments as recorded, else as clipped text ("" for no call)."""
    if call is None:
        return ""
    raw = call.get("raw")
    return raw if raw is not None else call.get(key, "")


def _last_message(messages: Any, line: int | None, problems: Problems) -> str:
    """The last message sent to the model, as text: the prompt a step's rationale shows."""
    if not isinstance(messages, list) or not messages:
        return ""
    last = messages[-1]
    if not isinstance(last, dict):
        return text(last)
    content = last.get("content")
    if not isinstance(content, list):
        return text(content)
    texts = []
    for index, part in enumerate(content):
        value = part.get("text") if isinstance(part, dict) else None
        if isinstance(value, str):
            if value:
                texts.append(value)
        elif value is not None:
            # join() refuses anything but text; the block stays whole in the event's payload.
            field = f"payload.messages[{len(messages) - 1}].content[{index}].text"
            problems.add(line, field, f"{json_kind(value)}, not text: left out of the step's prompt")
    return "\n".join(texts)  # a line apart, as the other formats join text parts (a space doubled spaces)


# --------------------------------------------------------------------------------------------
# AgentLens's own event hash (agentkitai/agentlens packages/core/src/hash.ts, computeEventHash):
# SHA-256 of JSON.stringify({v: 2, id, timestamp, sessionId, agentId, eventType, severity,
# payload, metadata, prevHash}). It is JavaScript's serialisation, not a canonical JSON: members
# in the order the event holds them (JavaScript lists integer-like keys first, ascending), no
# spaces, numbers as JavaScript prints them, non-ASCII unescaped. Events hashed before
# HASH_VERSION 2 (February 2026: no `v`, severity or metadata) fail it, as they fail AgentLens's
# own verifyChain.

SOURCE_HASH_VERSION = 2
SOURCE_HASHED_FIELDS = (
    "id", "timestamp", "sessionId", "agentId", "eventType", "severity", "payload", "metadata", "prevHash",
)  # fmt: skip
# JavaScript parses every JSON number to a double: integers past 2**53 lose digits there.
_EXACT_INTEGER = 2**53
# An array index (ECMA-262 6.1.7): the integer-like keys an object lists before all others.
_ARRAY_INDEX_LIMIT = 2**32 - 1
_SURROGATES = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")


def stored_event(posted: Json, *, event_id: str, timestamp: str, prev_hash: str | None) -> Json:
    """A posted event (POST /api/events) as AgentLens's server stores it (routes/events.ts): its
    members in the stored order, severity `info` and metadata `{}` when left out, chained to
    `prev_hash` and hashed. Members AgentLens does not know are dropped (its schema strips
    them), and so are a client's own prevHash and hash: the server is the chain's author."""
    event = {
        "id": event_id, "timestamp": timestamp, "sessionId": posted["sessionId"], "agentId": posted["agentId"],
        "eventType": posted["eventType"], "severity": posted.get("severity") or "info",
        "payload": posted["payload"], "metadata": posted.get("metadata") or {}, "prevHash": prev_hash,
    }  # fmt: skip
    event["hash"] = source_hash(event)
    return event


# A ULID's time: 48 bits of milliseconds since 1970.
_ULID_MS = 2**48 - 1


def posted_event_id(posted: Json, at: datetime | None) -> str:
    """The id of a posted event that names none: a ULID, as AgentLens's server gives.

    An event that names its own time (`at`) gets one derived from that time and its content:
    a client re-sending a batch whose answer it lost (the SDKs retry on a timeout) names the
    same ids, and the batch is stored once. One without gets a random one (its time is the
    arrival's, so equal content is no evidence of a retry)."""
    if at is None:
        return str(ULID())
    ms = min(max(int(at.timestamp() * 1000), 0), _ULID_MS)
    # json, not orjson: it writes the integers past 64 bits and the NaN a body may hold.
    content = json.dumps(posted, sort_keys=True, separators=(",", ":")).encode()
    return str(ULID.from_bytes(ms.to_bytes(6, "big") + hashlib.sha256(content).digest()[:10]))


def source_hash(record: Json) -> str:
    """The hash AgentLens gives this event (hex), recomputed from its fields."""
    hashed: Json = {"v": SOURCE_HASH_VERSION}
    for name in SOURCE_HASHED_FIELDS:
        # JSON.stringify leaves out a member whose value is undefined.
        if name in record:
            hashed[name] = record[name]
    text = orjson.dumps(hashed) if _written_alike(hashed) else _javascript_json(hashed).encode()
    return hashlib.sha256(text).hexdigest()


def _written_alike(value: Any) -> bool:
    """Whether orjson writes `value` exactly as JSON.stringify does (nearly every event: only
    walking it costs, where rewriting it would cost four times as much).

    They differ only on integral floats (`1.0`: JavaScript writes `1`), on floats from 1e-6 to
    1e-5 (JavaScript writes them plainly), integers past 2**53, integer-like keys and lone
    surrogates; orjson writes every other float with the same shortest digits.
    """
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and _SURROGATES.search(item):
                return False
        elif kind is dict:
            for key in item:
                if (key[:1].isdigit() and _is_array_index(key)) or (not key.isascii() and _SURROGATES.search(key)):
                    return False
            extend(item.values())
        elif kind is list:
            extend(item)
        elif kind is float:
            if item.is_integer() or not math.isfinite(item) or 1e-6 <= abs(item) < 1e-5:
                return False
        elif kind is int:
            if not -_EXACT_INTEGER <= item <= _EXACT_INTEGER:
                return False
        elif kind is not bool and item is not None:
            return False
    return True


def _javascript_json(value: Any) -> str:
    return orjson.dumps(_as_javascript(value)).decode()


def _as_javascript(value: Any) -> Any:
    """`value` made ready for orjson to write exactly what JSON.stringify writes: orjson already
    writes strings, integers, booleans and null the same way; numbers JavaScript prints
    otherwise, strings with lone surrogates and objects with integer-like keys are rewritten."""
    kind = type(value)
    if kind is str:
        if value.isascii() or not _SURROGATES.search(value):
            return value
        return orjson.Fragment(_javascript_string(value))
    if kind is dict:
        keys = list(value)
        indexes = [key for key in keys if _is_array_index(key)]
        if indexes:
            indexes.sort(key=int)
            keys = indexes + [key for key in keys if not _is_array_index(key)]
        if any(not key.isascii() and _SURROGATES.search(key) for key in keys):
            members = ",".join(f"{_javascript_string(key)}:{_javascript_json(value[key])}" for key in keys)
            return orjson.Fragment("{" + members + "}")
        return {key: _as_javascript(value[key]) for key in keys}
    if kind is list:
        return [_as_javascript(item) for item in value]
    if kind is int:
        if -_EXACT_INTEGER <= value <= _EXACT_INTEGER:
            return value
        try:
            return orjson.Fragment(javascript_number(float(value)))
        except OverflowError:  # past the largest double: Infinity, which JSON.stringify writes as null
            return None
    if kind is float or kind is Decimal:
        return orjson.Fragment(javascript_number(float(value)))
    return value


def _is_array_index(key: str) -> bool:
    if not (key.isascii() and key.isdigit()) or (key[0] == "0" and key != "0"):
        return False
    return int(key) < _ARRAY_INDEX_LIMIT


def _javascript_string(text: str) -> str:
    """A JSON string as JSON.stringify writes it: a surrogate pair is one character, a lone
    surrogate is escaped as \\uXXXX (orjson refuses both)."""
    out = ['"']
    last = 0
    for found in _SURROGATES.finditer(text):
        out.append(orjson.dumps(text[last : found.start()]).decode()[1:-1])
        pair = found.group()
        if len(pair) == 2:
            out.append(chr(0x10000 + ((ord(pair[0]) - 0xD800) << 10) + ord(pair[1]) - 0xDC00))
        else:
            out.append(f"\\u{ord(pair):04x}")
        last = found.end()
    out.append(orjson.dumps(text[last:]).decode()[1:-1])
    out.append('"')
    return "".join(out)


def javascript_number(value: float) -> str:
    """Number.prototype.toString (ECMA-262 6.1.6.1.20) as JSON.stringify writes it: the same
    shortest digits as Python's repr, but plain notation from 1e-6 up to 1e21 and no `.0`."""
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    leading = len(digits) - len(digits.lstrip("0"))
    digits = digits.strip("0")
    # The value is 0.<digits> x 10**point.
    point = len(whole) + int(exponent or 0) - leading
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    power = point - 1
    shown = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{shown}e{'+' if power > 0 else '-'}{abs(power)}"
