"""JSON bodies of the write side, read with orjson and validated here, so a bad event is
answered 400 naming its index and field (a 1000-event batch would otherwise go through the
standard json module and come back as a generic 422)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from pydantic import BaseModel, ValidationError

from ..formats import int_as_orjson_reads
from ..formats.canonical_json import validation_problems
from .responses import BadRequest


def json_body(schema: type[BaseModel]) -> dict:
    """OpenAPI for a JSON body we read ourselves. pydantic refers to a nested model as
    `#/$defs/Name`, which in the OpenAPI document points at its root, where no `$defs` is (an
    unresolvable reference to schemathesis and generated clients): the models are inlined."""
    found = schema.model_json_schema()
    defs = found.pop("$defs", {})

    def inlined(node: Any, seen: tuple[str, ...] = ()) -> Any:
        if type(node) is list:
            return [inlined(item, seen) for item in node]
        if type(node) is not dict:
            return node
        ref = node.get("$ref")
        if type(ref) is str and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if name in seen:  # a model holding itself could not be inlined: none of ours does
                raise ValueError(f"{schema.__name__}: {name} refers to itself")
            rest = {key: value for key, value in node.items() if key != "$ref"}
            return inlined({**defs[name], **rest}, (*seen, name))
        return {key: inlined(value, seen) for key, value in node.items()}

    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inlined(found)}}}}


def declared_length(request: HttpRequest) -> int:
    """The body's size as its Content-Length declares it (0 when absent or not a number): what a
    quota is checked against before the body is read."""
    try:
        return max(0, int(request.META.get("CONTENT_LENGTH") or 0))
    except ValueError:
        return 0


def read_body(request: HttpRequest, schema: type[BaseModel]) -> Any:
    try:
        body = request.body
    except RequestDataTooBig:
        raise BadRequest(
            413,
            f"The request body exceeds {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024 // 1024} MB; send smaller batches.",
        )
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError as exc:
        # rlm-code's records may hold the bare NaN / Infinity Python's json module writes.
        try:
            data = json.loads(body.decode("utf-8"), parse_int=int_as_orjson_reads)
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested past ~1000 levels
            raise BadRequest(400, f"The body is not valid JSON: {exc}") from None
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        errors = []
        # The messages as an event's own validators word them (no pydantic "Value error, ").
        for error, (_, message) in zip(exc.errors(include_url=False), validation_problems(exc), strict=True):
            loc = error["loc"]
            index = loc[1] if len(loc) > 1 and loc[0] == "events" and isinstance(loc[1], int) else None
            errors.append({"index": index, "field": ".".join(map(str, loc)) or "body", "message": message})
        first = errors[0]
        raise BadRequest(400, f"{first['field']}: {first['message']}", errors)
