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
    return HttpResponse(
        orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), status=status, content_type="application/json"
    )


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
