"""OpenTelemetry traces (OTLP) following the GenAI semantic conventions -> canonical events.

Not a file format: OTLP arrives in export requests (`POST /v1/traces`, api/otlp.py), so this
module has no `sniff`/`parse`. It does the two pure steps of that path, free of Django:

1. `read_request(body, json=...)`: an ExportTraceServiceRequest, binary protobuf or OTLP/JSON
   (hex trace and span ids, enums as integers), parsed by the `opentelemetry-proto` classes, and
   `span_records(request)`: each span as a plain JSON-ready dict (its `record`), which the ingest
   side stages until the span's trace has settled (ingest/traces.py says why).
2. `timeline(placed, first_step=...)`: the records of one session, each with its place there
   (`Placed`), as canonical events in time order: every span opens at its start time and closes
   at its end time, so spans land in the order they started; a chat span is an llm_call and its
   llm_response, a tool span a tool_call and its tool_response or tool_error (paired by
   gen_ai.tool.call.id), an agent span the user's request and the agent's answer, a sub-agent's
   span a child_spawn and child_result in its parent's session (docs/formats.md, "OpenTelemetry").
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from operator import itemgetter
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ..canonical import INT64_MAX, CanonicalEvent, Kind, without_nul
from .fields import clip, json_kind, text, too_many_containers
from .step_state import STEP_TEXT_LIMIT, unrewarded_step_state

NAME = "otlp"

STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR

# gen_ai.operation.name values that call a model: one llm_call and its llm_response.
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
TOOL_OPERATION = "execute_tool"
AGENT_OPERATION = "invoke_agent"
CREATE_AGENT_OPERATION = "create_agent"

# Resource attributes kept on each record (the rest, process and SDK details, say nothing of
# the agent's run and would be repeated on every span).
_RESOURCE_PREFIXES = ("service.", "gen_ai.")
# A recorded text kept whole in the payload; stack traces are clipped to this.
STACKTRACE_LIMIT = 8000
# What one span may carry, as OpenTelemetry's SDKs limit it (their defaults are 128): the
# attributes of a span, of an event and of the resource, and a span's events and links, are
# kept up to ITEMS_LIMIT each; the values inside one attribute (arrays and key-value lists, at
# every level) up to VALUES_LIMIT in all; the rest is dropped, as an SDK drops it. A request of
# a few megabytes can hold millions of empty attributes, each of which cost a conversion.
ITEMS_LIMIT = 1000
VALUES_LIMIT = 10_000
# Spans a request may hold, and resources and scopes (an SDK's batch is 512 spans of one of
# each; a collector's, a few thousand): past it, export smaller batches (a 413). Each span,
# empty or not, is staged as a row.
SPANS_LIMIT = 10_000
# Attributes, events and links a request may hold in all (a batch of 512 spans of 30 attributes
# holds some 15,000): the per-span limits alone left 10,000 spans of 1,000 empty events each,
# 5 s and 1.3 GiB for a 57 KB gzip.
ITEMS_PER_REQUEST = 200_000


class RequestTooLarge(Exception):
    """A request past SPANS_LIMIT or ITEMS_PER_REQUEST: the exporter's batches should be smaller."""


class NotOtlp(ValueError):
    """A body that is no ExportTraceServiceRequest; the message names where it fails."""


# --- 1. requests -----------------------------------------------------------------------------


def read_request(body: bytes, *, json: bool) -> ExportTraceServiceRequest:
    """The request in `body`; NotOtlp when it is none (a 400)."""
    request = ExportTraceServiceRequest()
    if json:
        try:
            document = orjson.loads(body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise NotOtlp(f"the body is not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise NotOtlp(f"the body must be a JSON object (ExportTraceServiceRequest), got {json_kind(document)}")
        _check_size(document)  # before anything walks them
        _ids_as_base64(document)
        try:
            _within_limits(document)
            # Unknown fields are ignored, as OTLP/JSON receivers must (enum values come as integers).
            json_format.ParseDict(document, request, ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
            raise NotOtlp(f"not an OTLP/JSON ExportTraceServiceRequest: {exc}") from None
    else:
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError) as exc:
            raise NotOtlp(f"not a protobuf ExportTraceServiceRequest: {exc}") from None
        _check_size(request)
    _check_ids(request)
    return request


def _ids_as_base64(document: dict[str, Any]) -> None:
    """OTLP/JSON writes trace and span ids as hex, where protobuf's JSON mapping reads base64."""
    for r, resource_spans in enumerate(_list(document, "resourceSpans", "resource_spans")):
        for s, scope_spans in enumerate(_list(resource_spans, "scopeSpans", "scope_spans")):
            for n, span in enumerate(_list(scope_spans, "spans", "spans")):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]"
                _hex_fields(span, where, ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"))
                for k, link in enumerate(_list(span, "links", "links")):
                    _hex_fields(link, f"{where}.links[{k}]", ("traceId", "trace_id", "spanId", "span_id"))


def _check_size(request: dict[str, Any] | ExportTraceServiceRequest) -> None:
    """RequestTooLarge past the request's limits (SPANS_LIMIT, ITEMS_PER_REQUEST), for an
    OTLP/JSON document before protobuf reads it and for a parsed protobuf request alike."""
    json = isinstance(request, dict)
    _count_spans(request, json)
    _count_items(request, json)


def _children(node: Any, camel: str, snake: str, json: bool) -> Any:
    """A repeated field of a request's part: a list of the JSON document, or the message's own."""
    return _list(node, camel, snake) if json else getattr(node, snake)


def _part(node: Any, name: str, json: bool) -> Any:
    """The resource of a ResourceSpans, the scope of a ScopeSpans."""
    return (node.get(name) if isinstance(node, dict) else None) if json else getattr(node, name)


def _count_spans(request: dict[str, Any] | ExportTraceServiceRequest, json: bool) -> None:
    """RequestTooLarge past SPANS_LIMIT spans, or resources and scopes (lengths only: stops at the
    limit, so a request of millions of empty ones costs no more than one of the limit)."""
    resources = _children(request, "resourceSpans", "resource_spans", json)
    containers = len(resources)
    spans = 0
    for resource in islice(resources, SPANS_LIMIT + 1):
        scopes = _children(resource, "scopeSpans", "scope_spans", json)
        containers += len(scopes)
        if containers > SPANS_LIMIT:
            break
        for scope in islice(scopes, SPANS_LIMIT + 1):
            spans += len(_children(scope, "spans", "spans", json))
            if spans > SPANS_LIMIT:
                break
        if spans > SPANS_LIMIT:
            break
    if containers > SPANS_LIMIT or spans > SPANS_LIMIT:
        raise RequestTooLarge(f"more than {SPANS_LIMIT:,} spans (or resources and scopes) in one request; "
                              "export smaller batches")  # fmt: skip


def _count_items(request: dict[str, Any] | ExportTraceServiceRequest, json: bool) -> None:
    """RequestTooLarge past ITEMS_PER_REQUEST attributes, events and links in all (lengths, and
    the events' and links' own attributes, read only while the count is within the limit)."""
    count = 0
    nested: list[Any] = []
    for resource in _children(request, "resourceSpans", "resource_spans", json):
        count += len(_children(_part(resource, "resource", json), "attributes", "attributes", json))
        for scope in _children(resource, "scopeSpans", "scope_spans", json):
            count += len(_children(_part(scope, "scope", json), "attributes", "attributes", json))
            for span in _children(scope, "spans", "spans", json):
                events = _children(span, "events", "events", json)
                links = _children(span, "links", "links", json)
                count += len(_children(span, "attributes", "attributes", json)) + len(events) + len(links)
                if count > ITEMS_PER_REQUEST:
                    break
                nested.append(events)
                nested.append(links)
    for group in nested:
        for item in group:
            if count > ITEMS_PER_REQUEST:
                break
            count += len(_children(item, "attributes", "attributes", json))
    if count > ITEMS_PER_REQUEST:
        raise RequestTooLarge(f"more than {ITEMS_PER_REQUEST:,} attributes, events and links in one request; "
                              "export smaller batches")  # fmt: skip


def _within_limits(document: dict[str, Any]) -> None:
    """The OTLP/JSON document cut to the limits span_records keeps (ITEMS_LIMIT, VALUES_LIMIT)
    before protobuf's ParseDict reads it, which is pure Python and the slowest step by far."""
    for r, resource_spans in enumerate(_list(document, "resourceSpans", "resource_spans")):
        where = f"resourceSpans[{r}]"
        _an_object(resource_spans, where)  # read as one here, it was a 500
        _cut_attributes(resource_spans.get("resource"))
        for s, scope_spans in enumerate(_list(resource_spans, "scopeSpans", "scope_spans")):
            _an_object(scope_spans, f"{where}.scopeSpans[{s}]")
            _cut_attributes(scope_spans.get("scope"))
            for n, span in enumerate(_list(scope_spans, "spans", "spans")):
                _an_object(span, f"{where}.scopeSpans[{s}].spans[{n}]")
                _cut_attributes(span)
                for name in ("events", "links"):
                    items = _cut(span, name)
                    for item in items:
                        _cut_attributes(item)


def _an_object(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise NotOtlp(f"{where}: expected an object, got {json_kind(value)}")


def _cut(container: Any, name: str) -> list[Any]:
    """container[name] cut to ITEMS_LIMIT (in place), or [] when it is no list."""
    if not isinstance(container, dict) or not isinstance(container.get(name), list):
        return []
    items = container[name]
    if len(items) > ITEMS_LIMIT:
        items = container[name] = items[:ITEMS_LIMIT]
    return items


def _cut_attributes(container: Any) -> None:
    for pair in _cut(container, "attributes"):
        if isinstance(pair, dict):
            _cut_value(pair.get("value"), [VALUES_LIMIT])


def _cut_value(value: Any, budget: list[int]) -> None:
    """An AnyValue's arrays and key-value lists cut to what is left of `budget` (one count for a
    whole attribute, at every level)."""
    if not isinstance(value, dict):
        return
    for name, nested in (("arrayValue", "values"), ("array_value", "values"), ("kvlistValue", "values"),
                         ("kvlist_value", "values")):  # fmt: skip
        inner = value.get(name)
        if not isinstance(inner, dict) or not isinstance(inner.get(nested), list):
            continue
        items = inner[nested][: max(budget[0], 0)]
        inner[nested] = items
        budget[0] -= len(items)
        for item in items:
            _cut_value(item.get("value") if name.startswith("kvlist") and isinstance(item, dict) else item, budget)


def _list(container: Any, camel: str, snake: str) -> list[Any]:
    if not isinstance(container, dict):
        return []
    value = container.get(camel, container.get(snake))
    return value if isinstance(value, list) else []


def _hex_fields(container: Any, where: str, names: tuple[str, ...]) -> None:
    if not isinstance(container, dict):
        return
    for name in names:
        value = container.get(name)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise NotOtlp(f"{where}.{name}: expected a hex string, got {json_kind(value)}")
        try:
            container[name] = base64.b64encode(bytes.fromhex(value)).decode()
        except ValueError:
            raise NotOtlp(f"{where}.{name}: not hex: {clip(value, 40)!r}") from None


def _check_ids(request: ExportTraceServiceRequest) -> None:
    """Every span names a 16-byte trace id and an 8-byte span id: a protobuf body of another
    message (metrics, logs, anything with a first length-delimited field) parses without error
    into something that is no trace, and is refused here."""
    for r, resource_spans in enumerate(request.resource_spans):
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for n, span in enumerate(scope_spans.spans):
                where = f"resource_spans[{r}].scope_spans[{s}].spans[{n}]"
                if len(span.trace_id) != 16 or not any(span.trace_id):
                    raise NotOtlp(f"{where}.trace_id: must be 16 bytes, not all zero (got {len(span.trace_id)} bytes)")
                if len(span.span_id) != 8 or not any(span.span_id):
                    raise NotOtlp(f"{where}.span_id: must be 8 bytes, not all zero (got {len(span.span_id)} bytes)")
                if span.parent_span_id and len(span.parent_span_id) != 8:
                    raise NotOtlp(f"{where}.parent_span_id: must be empty or 8 bytes (got {len(span.parent_span_id)})")


def span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


def span_records(request: ExportTraceServiceRequest) -> Iterator[dict[str, Any]]:
    """Each span as a JSON-ready dict: ids in hex, times in nanoseconds, attribute values as
    plain JSON values, the kept resource attributes and the instrumentation scope."""
    for resource_spans in request.resource_spans:
        resource = {
            kv.key: _value(kv.value)
            for kv in islice(resource_spans.resource.attributes, ITEMS_LIMIT)
            if kv.key.startswith(_RESOURCE_PREFIXES)
        }
        for scope_spans in resource_spans.scope_spans:
            scope = {"name": scope_spans.scope.name, "version": scope_spans.scope.version}
            for span in scope_spans.spans:
                record: dict[str, Any] = {
                    "traceId": span.trace_id.hex(),
                    "spanId": span.span_id.hex(),
                    "parentSpanId": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "attributes": _attributes(span.attributes),
                    "status": {"code": span.status.code, "message": span.status.message},
                    "resource": resource,
                    "scope": scope,
                }
                if span.events:
                    record["events"] = [
                        {"name": e.name, "time": e.time_unix_nano, "attributes": _attributes(e.attributes)}
                        for e in islice(span.events, ITEMS_LIMIT)
                    ]
                yield record


def _attributes(pairs: Any) -> dict[str, Any]:
    """The first ITEMS_LIMIT attributes (a protobuf list is read lazily: the rest costs nothing)."""
    return {kv.key: _value(kv.value) for kv in islice(pairs, ITEMS_LIMIT)}


def _value(value: Any, budget: list[int] | None = None) -> Any:
    """An AnyValue as a JSON value (bytes as base64 text); arrays and key-value lists hold up to
    VALUES_LIMIT values in all, at every level (`budget`, shared by one attribute's levels)."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "bool_value":
        return value.bool_value
    if which == "double_value":
        number = value.double_value
        return number if number == number and abs(number) != float("inf") else None  # no NaN in JSON
    if which == "array_value" or which == "kvlist_value":
        if budget is None:
            budget = [VALUES_LIMIT]
        if which == "array_value":
            items = list(islice(value.array_value.values, max(budget[0], 0)))
            budget[0] -= len(items)
            return [_value(item, budget) for item in items]
        pairs = list(islice(value.kvlist_value.values, max(budget[0], 0)))
        budget[0] -= len(pairs)
        return {kv.key: _value(kv.value, budget) for kv in pairs}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return None


def operation_of(record: dict[str, Any]) -> str:
    """The span's gen_ai.operation.name; for older instrumentations without one, "chat" when it
    names a requested model and "gen_ai" for any other gen_ai.* span; "" for a span that is no
    GenAI operation (an HTTP or database span: it shapes the tree but becomes no event)."""
    attributes = record["attributes"]
    operation = attributes.get("gen_ai.operation.name")
    if isinstance(operation, str) and operation:
        # Stored in a text column and compared by the database (PostgreSQL refuses U+0000).
        return without_nul(operation[:64])
    if "gen_ai.request.model" in attributes:
        return "chat"
    if any(key.startswith("gen_ai.") for key in attributes):
        return "gen_ai"
    return ""


def conversation_of(record: dict[str, Any]) -> str:
    value = record["attributes"].get("gen_ai.conversation.id")
    # Whole: what finds the conversation's session again (two ids alike in their first 200
    # characters, as much as the session's source id keeps, are two conversations). No U+0000,
    # as the writer stores it.
    return without_nul(value) if isinstance(value, str) else ""


def response_body(*, json: bool, rejected: int = 0, message: str = "") -> bytes:
    """ExportTraceServiceResponse: empty on full success, partial_success when spans were
    rejected (their number and why)."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.CopyFrom(ExportTracePartialSuccess(rejected_spans=rejected, error_message=message))
    return _encode(response, json)


def status_body(*, json: bool, message: str, code: int) -> bytes:
    """The google.rpc.Status every OTLP/HTTP failure answers with (`code` a gRPC code)."""
    return _encode(status_pb2.Status(code=code, message=message), json)


def _encode(message: Any, json: bool) -> bytes:
    if json:
        return orjson.dumps(json_format.MessageToDict(message))
    return message.SerializeToString()


# --- 2. spans -> events --------------------------------------------------------------------


@dataclass(slots=True)
class Placed:
    """A span's record as one session sees it.

    role: "agent" (an invoke_agent span whose events are this session's own), "spawn" (a
    sub-agent's invoke_agent span seen from its parent: child_spawn and child_result, the
    sub-agent's events being in `child_session`), or "span" (any other span).
    depth: levels below the trace's root, so a parent opens before a child starting with it.
    late: written after its trace had settled (its start may be earlier than events before it).
    raw: the record's JSON text when the caller holds it already.
    """

    record: dict[str, Any]
    operation: str
    raw: str = ""
    role: str = "span"
    depth: int = 0
    late: bool = False
    child_key: str = ""
    child_session: int | None = None


def timeline(placed: list[Placed], *, first_step: int = 0) -> list[CanonicalEvent]:
    """The events of one session's spans in time order: each span opens at its start and
    closes at its end; at one instant closes come first (deepest first), then opens (outermost
    first). Steps (a model's answer, a tool's outcome) are numbered from `first_step` + 1."""
    keyed: list[tuple[tuple, CanonicalEvent]] = []
    for item in placed:
        record = item.record
        span_id = record["spanId"]
        opened, closed = _events_of(item)
        for event in opened:
            keyed.append(((record["start"], 1, item.depth, span_id), event))
        for event in closed:
            keyed.append(((record["end"], 0, -item.depth, span_id), event))
    keyed.sort(key=itemgetter(0))
    events = [event for _, event in keyed]
    step = first_step
    for event in events:
        if event.step_state is not None:
            step += 1
            event.step = step
            event.step_state["step"] = step
    return events


def _events_of(item: Placed) -> tuple[list[CanonicalEvent], list[CanonicalEvent]]:
    operation = item.operation
    if not operation:
        return [], []
    if item.role == "spawn":
        return _spawn(item)
    if item.role == "agent" or operation == AGENT_OPERATION:
        return _agent(item)
    if operation in LLM_OPERATIONS:
        return _llm(item)
    if operation == TOOL_OPERATION:
        return _tool(item)
    return _other(item)


class _Span:
    """What every event of one span shares."""

    def __init__(self, item: Placed) -> None:
        record = item.record
        self.record = record
        self.attributes: dict[str, Any] = record["attributes"]
        self.operation = item.operation
        self.raw = item.raw or orjson.dumps(record).decode()
        self.start = time_of(record["start"])
        self.end = time_of(record["end"]) if record["end"] else self.start
        # Each instant formatted once, as the writer stores it on SQLite (naive UTC text: the
        # events' timestamp_text) and, from that, as a step's timestamp: formatting a datetime
        # was the dearest step of turning a span into events (bench/otlp_bench.py).
        # (Written from the naive copy: an aware datetime's isoformat, "+00:00" cut off, took
        # half as long again.)
        self.start_text = self.start.replace(tzinfo=None).isoformat(" ")  # UTC, from time_of
        self.end_text = self.end.replace(tzinfo=None).isoformat(" ") if record["end"] else self.start_text
        self.end_iso = self.end_text.replace(" ", "T", 1) + "Z"  # what _iso(self.end) gives
        self.duration_ms = max(0, record["end"] - record["start"]) / 1e6 if record["end"] else None
        status = record["status"]
        self.failed = status.get("code") == STATUS_ERROR
        self.error = _error_text(record) if self.failed else ""
        self.ids = {
            "traceId": record["traceId"], "spanId": record["spanId"], "parentSpanId": record["parentSpanId"],
            "name": record["name"],
        }  # fmt: skip
        if item.late:
            self.ids["late"] = True
        self.agent_name = _str(self.attributes, "gen_ai.agent.name") or _str(self.attributes, "gen_ai.agent.id")

    def event(self, kind: str, payload: dict[str, Any], *, closing: bool, **fields: Any) -> CanonicalEvent:
        payload["span"] = self.ids
        return CanonicalEvent(
            kind=kind,
            source_type=self.operation,
            # The span's record, once per span (on its first event): what the chain covers of
            # the source, and what an export gives back.
            raw=None if closing else self.raw,
            payload=payload,
            timestamp=self.end if closing else self.start,
            timestamp_text=self.end_text if closing else self.start_text,
            agent_id=self.agent_name[:200],
            **fields,
        )

    def error_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"error": self.error}
        error_type = _str(self.attributes, "error.type")
        if error_type:
            payload["errorType"] = error_type
        exception = _exception(self.record)
        if exception:
            payload["exception"] = exception
        return payload


def _llm(item: Placed) -> tuple[list[CanonicalEvent], list[CanonicalEvent]]:
    span = _Span(item)
    attributes = span.attributes
    model = _str(attributes, "gen_ai.request.model")
    response_model = _str(attributes, "gen_ai.response.model") or model
    pair_id = item.record["spanId"]
    call_payload: dict[str, Any] = {"model": model, "messages": input_messages(item.record)}
    provider = _str(attributes, "gen_ai.provider.name") or _str(attributes, "gen_ai.system")
    if provider:
        call_payload["provider"] = provider
    parameters = {
        key.removeprefix("gen_ai.request."): value
        for key, value in attributes.items()
        if key.startswith("gen_ai.request.") and key != "gen_ai.request.model"
    }
    if parameters:
        call_payload["parameters"] = parameters
    if "gen_ai.tool.definitions" in attributes:
        call_payload["tools"] = _json_value(attributes["gen_ai.tool.definitions"])
    call = span.event(Kind.LLM_CALL, call_payload, closing=False, tool=model[:200], pair_id=pair_id)

    output = output_messages(item.record)
    completion = "\n".join(m["content"] for m in output if m.get("content"))
    tool_calls = [call for m in output for call in m.get("toolCalls", ())]
    usage = _usage(attributes)
    tokens = (usage.get("input") or 0) + (usage.get("output") or 0) if usage else None
    payload: dict[str, Any] = {"model": response_model, "completion": completion, "messages": output}
    if tool_calls:
        payload["toolCalls"] = tool_calls
    finish = attributes.get("gen_ai.response.finish_reasons")
    if finish:
        payload["finishReasons"] = finish
    if usage:
        payload["usage"] = {**usage, "total": tokens}
    response_id = _str(attributes, "gen_ai.response.id")
    if response_id:
        payload["responseId"] = response_id
    if span.failed:
        payload.update(span.error_payload())
    response = span.event(
        Kind.LLM_RESPONSE, payload, closing=True, tool=response_model[:200], pair_id=pair_id,
        tokens=tokens, duration_ms=span.duration_ms, cost_unpriced=bool(tokens), is_error=span.failed,
    )  # fmt: skip
    last_input = call_payload["messages"][-1]["content"] if call_payload["messages"] else ""
    response.step_state = unrewarded_step_state(
        step=0, timestamp=span.end_iso, action_type="llm_call", action_code="",
        action_rationale=clip(last_input, STEP_TEXT_LIMIT), success=not span.failed, output=completion,
        error=span.error, duration_ms=span.duration_ms, tokens=tokens or 0,
        raw_action={"model": response_model, "provider": provider, "spanId": pair_id},
        raw_observation={"operation": span.operation, "spanId": pair_id},
    )  # fmt: skip
    return [call], [response]


def _tool(item: Placed) -> tuple[list[CanonicalEvent], list[CanonicalEvent]]:
    span = _Span(item)
    attributes = span.attributes
    name = _str(attributes, "gen_ai.tool.name") or item.record["name"].removeprefix("execute_tool ").strip()
    call_id = _str(attributes, "gen_ai.tool.call.id") or item.record["spanId"]
    arguments = _json_value(attributes.get("gen_ai.tool.call.arguments"))
    payload: dict[str, Any] = {"toolName": name, "callId": call_id, "arguments": arguments}
    for key, field in (("gen_ai.tool.description", "description"), ("gen_ai.tool.type", "type")):
        if key in attributes:
            payload[field] = attributes[key]
    call = span.event(Kind.TOOL_CALL, payload, closing=False, tool=name[:200], pair_id=call_id[:200])

    result = _json_value(attributes.get("gen_ai.tool.call.result"))
    outcome: dict[str, Any] = {"toolName": name, "callId": call_id, "result": result}
    if span.failed:
        outcome.update(span.error_payload())
    closed = span.event(
        Kind.TOOL_ERROR if span.failed else Kind.TOOL_RESPONSE, outcome, closing=True, tool=name[:200],
        pair_id=call_id[:200], duration_ms=span.duration_ms, is_error=span.failed, failed=span.failed,
    )  # fmt: skip
    closed.step_state = unrewarded_step_state(
        step=0, timestamp=span.end_iso, action_type="tool_call",
        action_code=clip(f"{name}({text(arguments)})", STEP_TEXT_LIMIT), success=not span.failed,
        output=text(result), error=span.error, duration_ms=span.duration_ms, tokens=0,
        raw_action={"callId": call_id, "toolName": name, "arguments": arguments},
        raw_observation={"operation": span.operation, "spanId": item.record["spanId"]},
    )  # fmt: skip
    return [call], [closed]


def _agent(item: Placed) -> tuple[list[CanonicalEvent], list[CanonicalEvent]]:
    """The agent's run in its own session: the request it was given (a user_message, or a
    status when it carries none) and its answer (an agent_message, a status, or an error)."""
    span = _Span(item)
    agent = _agent_info(span.attributes)
    request = _last_text(input_messages(item.record), role="user")
    opened_payload: dict[str, Any] = {"agent": agent}
    if request:
        opened_payload["text"] = request
        opened = span.event(Kind.USER_MESSAGE, opened_payload, closing=False)
    else:
        opened_payload["status"] = "started"
        opened = span.event(Kind.STATUS, opened_payload, closing=False)
    answer = "\n".join(m["content"] for m in output_messages(item.record) if m.get("content"))
    closed_payload: dict[str, Any] = {"agent": agent}
    usage = _usage(span.attributes)
    if usage:
        # The agent's own totals: its model calls are counted on their own spans, not again here.
        closed_payload["usage"] = usage
    if span.failed:
        closed_payload.update(span.error_payload())
        closed = span.event(Kind.ERROR, closed_payload, closing=True, is_error=True, duration_ms=span.duration_ms)
    elif answer:
        closed_payload["text"] = answer
        closed = span.event(Kind.AGENT_MESSAGE, closed_payload, closing=True, duration_ms=span.duration_ms)
    else:
        closed_payload["status"] = "completed"
        closed = span.event(Kind.STATUS, closed_payload, closing=True, duration_ms=span.duration_ms)
    return [opened], [closed]


def _spawn(item: Placed) -> tuple[list[CanonicalEvent], list[CanonicalEvent]]:
    """A sub-agent as its parent sees it: spawned, then its result; its own events are in its
    own session (`sessionId`)."""
    span = _Span(item)
    agent = _agent_info(span.attributes)
    task = _last_text(input_messages(item.record), role="user") or agent.get("description", "") or agent.get("name", "")
    key = item.child_key[:200]
    spawned = span.event(
        Kind.CHILD_SPAWN,
        {"child_id": key, "task": task, "agent": agent, "sessionId": item.child_session},
        closing=False, child_id=key, pair_id=key, depth=1,
    )  # fmt: skip
    answer = "\n".join(m["content"] for m in output_messages(item.record) if m.get("content"))
    result: dict[str, Any] = {"child_id": key, "success": not span.failed, "result": answer,
                              "sessionId": item.child_session}  # fmt: skip
    if span.failed:
        result.update(span.error_payload())
    finished = span.event(
        Kind.CHILD_RESULT, result, closing=True, child_id=key, pair_id=key, depth=1,
        duration_ms=span.duration_ms, is_error=span.failed, failed=span.failed,
    )  # fmt: skip
    return [spawned], [finished]


def _other(item: Placed) -> tuple[list[CanonicalEvent], list[CanonicalEvent]]:
    """create_agent, embeddings, retrieval and any other GenAI operation: one event at its
    start (a note for create_agent, else custom), marked as an error when the span failed."""
    span = _Span(item)
    payload: dict[str, Any] = {
        "type": span.operation,
        "name": item.record["name"],
        "attributes": {k: v for k, v in span.attributes.items() if k.startswith("gen_ai.")},
    }
    if span.operation == CREATE_AGENT_OPERATION:
        agent = _agent_info(span.attributes)
        payload["agent"] = agent
        payload["text"] = f"created agent {agent.get('name') or agent.get('id') or ''}".strip()
    if span.failed:
        payload.update(span.error_payload())
    kind = Kind.NOTE if span.operation == CREATE_AGENT_OPERATION else Kind.CUSTOM
    model = _str(span.attributes, "gen_ai.request.model")
    return [
        span.event(
            kind, payload, closing=False, tool=model[:200], duration_ms=span.duration_ms, is_error=span.failed
        )  # fmt: skip
    ], []


# --- messages ------------------------------------------------------------------------------

# Span events of the conventions before gen_ai.input/output.messages (v1.36 and earlier), by role.
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
# Where an event's body may be: the attribute an SDK copied it into, or the fields themselves.
_BODY_KEYS = ("gen_ai.event.content", "event.body", "body")


def input_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The prompt as [{role, content, ...}]: from gen_ai.input.messages (and
    gen_ai.system_instructions), else the older span events (gen_ai.user.message ...,
    gen_ai.content.prompt), else flattened gen_ai.prompt.N.* attributes."""
    attributes = record["attributes"]
    messages: list[dict[str, Any]] = []
    instructions = _json_value(attributes.get("gen_ai.system_instructions"))
    if instructions:
        messages.append({"role": "system", "content": _parts_text(instructions)})
    found = _json_value(attributes.get("gen_ai.input.messages"))
    if found is None:
        found = _details(record, "gen_ai.input.messages")
    if isinstance(found, list):
        return messages + [_message(m) for m in found]
    for event in record.get("events", ()):
        role = _MESSAGE_EVENTS.get(event["name"])
        if role is not None:
            messages.append(_message({"role": role, **_event_body(event)}))
        elif event["name"] == "gen_ai.content.prompt":
            prompt = _json_value(event["attributes"].get("gen_ai.prompt"))
            if isinstance(prompt, list):
                messages.extend(_message(m) for m in prompt)
            else:
                messages.append({"role": "user", "content": text(prompt)})
    return messages or _flattened(attributes, "gen_ai.prompt.")


def output_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer as [{role, content, toolCalls?, finishReason?}]: from gen_ai.output.messages,
    else gen_ai.choice / gen_ai.content.completion span events, else gen_ai.completion.N.*."""
    attributes = record["attributes"]
    found = _json_value(attributes.get("gen_ai.output.messages"))
    if found is None:
        found = _details(record, "gen_ai.output.messages")
    if isinstance(found, list):
        return [_message(m, role="assistant") for m in found]
    messages: list[dict[str, Any]] = []
    for event in record.get("events", ()):
        if event["name"] == "gen_ai.choice":
            body = _event_body(event)
            message = body.get("message") if isinstance(body.get("message"), dict) else body
            messages.append(_message({"role": "assistant", **message, "finish_reason": body.get("finish_reason")}))
        elif event["name"] == "gen_ai.content.completion":
            completion = _json_value(event["attributes"].get("gen_ai.completion"))
            if isinstance(completion, list):
                messages.extend(_message(m, role="assistant") for m in completion)
            else:
                messages.append({"role": "assistant", "content": text(completion)})
    return messages or _flattened(attributes, "gen_ai.completion.")


def _details(record: dict[str, Any], key: str) -> Any:
    """The messages a gen_ai.client.inference.operation.details span event carries."""
    for event in record.get("events", ()):
        if event["name"] == "gen_ai.client.inference.operation.details" and key in event["attributes"]:
            return _json_value(event["attributes"][key])
    return None


def _event_body(event: dict[str, Any]) -> dict[str, Any]:
    attributes = event["attributes"]
    for key in _BODY_KEYS:
        body = _json_value(attributes.get(key))
        if isinstance(body, dict):
            return body
    return {k.removeprefix("gen_ai."): v for k, v in attributes.items() if k not in ("gen_ai.system", "event.name")}


def _message(value: Any, role: str = "") -> dict[str, Any]:
    """One message as the player and the exports read it: role, content (the text), and the
    tool calls it asks for or the call it answers (one pass over its parts: every model call's
    prompt and answer come through here)."""
    if type(value) is not dict:
        return {"role": role or "user", "content": text(value)}
    message: dict[str, Any] = {"role": str(value.get("role") or role or "user")}
    parts = value.get("parts")
    calls: list[dict[str, Any]] = []
    if type(parts) is list:
        texts, answered, other = [], None, False
        for part in parts:
            if type(part) is not dict:
                continue
            kind = part.get("type", "text")
            if kind == "text":
                texts.append(text(part.get("content", part.get("text"))))
                continue
            other = True
            if kind == "tool_call":
                calls.append(_tool_call(part))
            elif kind == "tool_call_response" and answered is None:
                answered = part
        message["content"] = "\n".join(texts)
        if answered is not None:
            message["toolCallId"] = text(answered.get("id"))
            if not message["content"]:
                message["content"] = text(answered.get("response", answered.get("result")))
        if other:
            message["parts"] = parts
    else:
        message["content"] = text(_json_value(value.get("content")))
        calls = [_tool_call(c) for c in value.get("tool_calls") or () if type(c) is dict]
        if value.get("id") and message["role"] == "tool":
            message["toolCallId"] = text(value.get("id"))
    if calls:
        message["toolCalls"] = calls
    finish = value.get("finish_reason")
    if finish:
        message["finishReason"] = finish
    return message


def _tool_call(part: dict[str, Any]) -> dict[str, Any]:
    function = part.get("function") if isinstance(part.get("function"), dict) else {}
    return {
        "id": text(part.get("id")),
        "name": text(part.get("name") or function.get("name")),
        "arguments": _json_value(part.get("arguments", function.get("arguments"))),
    }


def _parts_text(parts: Any) -> str:
    """The text of message parts ([{type: text, content}] ...), or of a plain string."""
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        return "\n".join(
            text(p.get("content", p.get("text")))
            for p in parts
            if isinstance(p, dict) and p.get("type", "text") == "text"
        )
    return text(parts)


def _flattened(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenLLMetry's gen_ai.prompt.0.role / gen_ai.prompt.0.content attributes."""
    by_index: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        index, _, field = key[len(prefix) :].partition(".")
        if index.isdigit() and field in ("role", "content"):
            by_index.setdefault(int(index), {})[field] = value
    return [
        {"role": text(m.get("role") or "user"), "content": text(m.get("content"))} for _, m in sorted(by_index.items())
    ]


def _last_text(messages: list[dict[str, Any]], *, role: str) -> str:
    for message in reversed(messages):
        if message.get("role") == role and message.get("content"):
            return message["content"]
    return ""


# --- attributes ----------------------------------------------------------------------------


def _usage(attributes: dict[str, Any]) -> dict[str, int]:
    """Input and output tokens (gen_ai.usage.input_tokens / output_tokens, or the older
    prompt_tokens / completion_tokens); negative or non-integer counts are left out."""
    usage = {}
    for field, keys in (
        ("input", ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")),
        ("output", ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")),
    ):
        for key in keys:
            value = attributes.get(key)
            if type(value) is int and 0 <= value <= INT64_MAX // 4:
                usage[field] = value
                break
    return usage


def _agent_info(attributes: dict[str, Any]) -> dict[str, Any]:
    return {
        field: attributes[key]
        for key, field in (
            ("gen_ai.agent.name", "name"),
            ("gen_ai.agent.id", "id"),
            ("gen_ai.agent.description", "description"),
        )  # fmt: skip
        if isinstance(attributes.get(key), str)
    }


def _error_text(record: dict[str, Any]) -> str:
    """Why a span failed: its status message, else its exception's, else error.type."""
    message = record["status"].get("message") or ""
    if message:
        return message
    exception = _exception(record)
    if exception.get("message"):
        return exception["message"]
    return _str(record["attributes"], "error.type") or exception.get("type", "") or "error"


def _exception(record: dict[str, Any]) -> dict[str, Any]:
    for event in record.get("events", ()):
        if event["name"] == "exception":
            attributes = event["attributes"]
            found = {
                field: text(attributes[key])
                for key, field in (
                    ("exception.type", "type"),
                    ("exception.message", "message"),
                    ("exception.stacktrace", "stacktrace"),
                )  # fmt: skip
                if key in attributes
            }
            if "stacktrace" in found:
                found["stacktrace"] = clip(found["stacktrace"], STACKTRACE_LIMIT)
            return found
    return {}


def _json_value(value: Any) -> Any:
    """An attribute that holds JSON text (most SDKs write structured values that way) as its
    value; any other value as it is."""
    if isinstance(value, str) and value[:1] in ("[", "{") and not too_many_containers(value):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _str(attributes: dict[str, Any], key: str) -> str:
    value = attributes.get(key)
    return value if isinstance(value, str) else ""


def time_of(nanoseconds: int) -> datetime:
    return datetime.fromtimestamp(nanoseconds / 1e9, tz=UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
