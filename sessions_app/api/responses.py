"""How the API answers besides ninja's own validation: orjson bodies, 404 for a missing session,
and the write side's `ErrorOut` answers."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpResponse
from ninja import Status

from ..ingest.live import IngestError
from ..ingest.quotas import QuotaExceeded
from ..ingest.uploads import UploadRejected


def json_response(data: Any, status: int = 200, *, str_keys: bool = False) -> HttpResponse:
    """Replay pages, steps and contexts straight from the workflow's dicts (stored payloads
    spliced in as `orjson.Fragment`s, never decoded), bypassing ninja's response validation;
    tests/test_api_schema.py checks them against their declared schemas.

    `str_keys`: the caller made its dicts' keys text. orjson's OPT_NON_STR_KEYS (integer keys
    written as text) nearly doubles the time to write a 1000-event replay page (2.2 -> 4 ms),
    so it is used only if a dict with other keys is met after all."""
    if str_keys:
        try:
            return HttpResponse(orjson.dumps(data), status=status, content_type="application/json")
        except orjson.JSONEncodeError:
            pass
    try:
        body = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError as error:
        if "ecursion" not in str(error):
            raise
        body = orjson.dumps(_written_ahead(data), option=orjson.OPT_NON_STR_KEYS)
    return HttpResponse(body, status=status, content_type="application/json")


def _written_ahead(value: Any) -> Any:
    """`value` with its deepest parts already written (orjson Fragments, which orjson splices in
    without counting their depth). A stored value may be nested as deep as orjson writes
    (formats.MAX_DEPTH); an answer puts it a few levels further in (a context's events, a
    search's hits), past what orjson writes in one go. Each part is written whole where it can
    be, so the recursion goes only as deep as the answer's own levels around the value."""
    try:
        return orjson.Fragment(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))
    except orjson.JSONEncodeError as error:
        if "ecursion" not in str(error):
            raise
    if isinstance(value, dict):
        return {key: _written_ahead(item) for key, item in value.items()}
    return [_written_ahead(item) for item in value]


class BadRequest(Exception):
    """A write the API refuses before any workflow sees it; answered as `ErrorOut`."""

    def __init__(self, status: int, detail: str, errors: list[dict] | None = None) -> None:
        self.status, self.detail, self.errors = status, detail, errors or []


def error(exc: BadRequest | IngestError | UploadRejected | QuotaExceeded) -> Status:
    if isinstance(exc, BadRequest):
        return Status(exc.status, {"detail": exc.detail, "errors": exc.errors})
    if isinstance(exc, IngestError):
        return Status(exc.status, {"detail": exc.message, "errors": exc.errors})
    return Status(exc.status, {"detail": exc.message, "errors": []})


def not_found(what: str, pk: int) -> Status:
    return Status(404, {"detail": f"{what} {pk} not found", "errors": []})
