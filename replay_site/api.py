"""The NinjaAPI: JSON under /api/, OpenAPI at /api/openapi.json, interactive docs at /api/docs.

Errors are always JSON `{"detail": "..."}`: 400 for a bad parameter, body or multipart upload
(ninja's own 422 for a failed validation is turned into 400 with a message naming the field),
401 without a valid key, 403 for a role too low, 404 for what does not exist (and for any URL
under /api/ that names no operation), 413 for a body too large, 503 with Retry-After when the
database is busy, and, only as a last resort for a bug, a logged 500 without a traceback.
"""

import json
import logging
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import BadRequest as DjangoBadRequest
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.db import OperationalError
from django.http import Http404, HttpRequest, HttpResponse, UnreadablePostError
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render
from django.views.decorators.http import require_GET
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from ninja.openapi.docs import Swagger
from ninja.operation import Operation
from ninja.parser import Parser
from ninja.renderers import BaseRenderer

from replay_site.middleware import (
    BUSY_MESSAGE,
    RETRY_AFTER_SECONDS,
    database_busy,
    out_of_range_message,
)
from sessions_app.api import router
from sessions_app.api.responses import BadRequest
from sessions_app.replay import ReplayParameterError

logger = logging.getLogger("replay.api")


class OrjsonRenderer(BaseRenderer):
    # The stdlib json module is 3-5x slower on replay pages (docs/benchmarks.md).
    media_type = "application/json"

    def render(self, request, data, *, response_status):
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


class JsonParser(Parser):
    def parse_body(self, request: HttpRequest) -> Any:
        # Half of a UTF-16 pair alone is no text either database driver encodes (a 500 at the
        # first text column it reached). Strict UTF-8 refuses one written as bytes (the stdlib
        # would let it pass, and would read a UTF-16 body too); orjson refuses one written as an
        # escape ("\ud800"), naming the line and column.
        text = request.body.decode("utf-8-sig")  # a leading BOM read as the stdlib reads it
        if "\\u" in text:
            orjson.loads(text)
        # The stdlib's numbers, though: orjson reads an integer past 64 bits as a float, and the
        # 400 should name the field whose bound it passed (api/schemas.Id), not the body.
        return json.loads(text)


class ReplayAPI(NinjaAPI):
    def get_openapi_operation_id(self, operation: Operation) -> str:
        # Clients generated from /api/openapi.json name their methods after these ids, which
        # date from when the read side was sessions_app/api.py and the write side (tagged
        # "ingest") api_write.py; moving a view to another module must not rename them.
        module = "api_write" if "ingest" in (operation.tags or ()) else "api"
        return f"sessions_app_{module}_{operation.view_func.__name__}"

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        for path, operations in schema["paths"].items():
            for operation in operations.values():
                _document_common_errors(path, operation)
        return schema


# What the API's own machinery answers for any operation (not what a view decides), documented
# on each operation that can get it: the validation handler's 400, the authentication's 401, a
# path naming nothing's 404, a body over DATA_UPLOAD_MAX_MEMORY_SIZE's 413, a busy database's 503.
_COMMON_ERRORS = {
    "400": "a parameter or the body is invalid (the message names the field)",
    "401": "no valid API key or login cookie",
    "404": "the object the path names does not exist or is not visible to the caller",
    "413": "the request body is too large",
    "503": "the database is busy; retry after the Retry-After header's seconds",
}


def _document_common_errors(path: str, operation: dict) -> None:
    applies = {
        "400": bool(operation.get("parameters") or operation.get("requestBody")),
        "401": bool(operation.get("security")),
        "404": "{" in path,
        "413": "requestBody" in operation,
        "503": True,
    }
    # ninja keys the declared responses by int; JSON has only text keys, and an int 404 beside a
    # text "404" would be written twice (js-yaml, in the docs page, refuses duplicated keys).
    responses = operation["responses"] = {str(status): value for status, value in operation["responses"].items()}
    for status, description in _COMMON_ERRORS.items():
        if applies[status] and status not in responses:
            responses[status] = {
                "description": description,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
            }
    if "503" in responses:
        responses["503"]["headers"] = {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}}


class VendoredSwagger(Swagger):
    """Swagger UI from our own static files (static/vendor/swagger-ui/), started by a static
    script reading its settings from a json_script: ninja's page loads it from a CDN and starts
    it inline, both of which the CSP forbids (the page stayed blank)."""

    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        self.settings["url"] = self.get_openapi_url(api, kwargs)
        return render(request, "api_docs.html", {"api": api, "swagger_settings": self.settings})


api = ReplayAPI(
    title="Replay API",
    version="1.0",
    description="Replay recorded LLM-agent sessions: any step, with its full context, a page at a time.",
    renderer=OrjsonRenderer(),
    parser=JsonParser(),
    urls_namespace="api",
    # No validator badge: it would ask validator.swagger.io, which the CSP (rightly) refuses.
    docs=VendoredSwagger(settings={"validatorUrl": None}),
    # The schema and its page are read, never written: ninja serves them to any method.
    docs_decorator=require_GET,
)


def _location(loc: list | tuple) -> str:
    # ninja prefixes the source ("query", "path", "body") and sometimes the schema's argument
    # name; the client only needs the field it sent.
    parts = [str(p) for p in loc if p not in ("query", "path", "body", "form", "header", "cookie")]
    if len(parts) > 1 and parts[0] in {"query", "params", "body", "payload"}:
        parts = parts[1:]
    return ".".join(parts) or ("body" if "body" in loc else "request")


# What pydantic says when the body is no JSON object: ninja reads a schema's fields as the
# attributes of whatever JSON came (a string body would be reported as a failing str.replace()),
# and a schema that forbids unknown fields (api/schemas.BodyIn) asks for a dictionary instead.
_NOT_AN_OBJECT = frozenset({"get_attribute_error", "model_attributes_type"})


def _message(error: dict) -> str:
    if error.get("type") in _NOT_AN_OBJECT:
        # The body itself, or an item of it (`stops.0`), as the location says.
        return "the body must be a JSON object" if _at_root(error) else "must be a JSON object"
    # Worded as the validator words it: pydantic puts "Value error, " before a ValueError's text.
    return error.get("msg", "invalid value").removeprefix("Value error, ")


def _at_root(error: dict) -> bool:
    return _location(error.get("loc", ())) == "body"


def validation_message(errors: list[dict]) -> str:
    """'limit: Input should be less than or equal to 5000; offset: ...'"""
    messages = []
    for error in errors:
        messages.append(f"{_location(error.get('loc', ()))}: {_message(error)}")
    return "; ".join(messages) or "invalid request"


@api.exception_handler(ValidationError)
def bad_parameters(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = exc.errors
    if any(e.get("type") in _NOT_AN_OBJECT and _at_root(e) for e in errors):  # no object at all: say only that
        errors = [{"loc": ("body",), "type": "get_attribute_error"}]
    return api.create_response(
        request,
        {
            "detail": validation_message(errors),
            "errors": [{"field": _location(e.get("loc", ())), "message": _message(e)} for e in errors],
        },
        status=400,
    )


@api.exception_handler(ReplayParameterError)
def bad_replay_parameter(request: HttpRequest, exc: ReplayParameterError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=400)


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    # sessions_app/access.py words "not yours" exactly as "not there".
    return api.create_response(request, {"detail": str(exc) or "Not Found"}, status=404)


@api.exception_handler(PermissionDenied)
def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "Forbidden"}, status=403)


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    detail = str(exc)
    if detail == "Cannot parse request body":  # ninja's words for a JSON body that is not JSON
        detail = f"the body is not valid JSON: {exc.__cause__}" if exc.__cause__ else "the body is not valid JSON"
    return api.create_response(request, {"detail": detail}, status=exc.status_code)


@api.exception_handler(BadRequest)
def refused(request: HttpRequest, exc: BadRequest) -> HttpResponse:
    return api.create_response(request, {"detail": exc.detail, "errors": exc.errors}, status=exc.status)


@api.exception_handler(MultiPartParserError)
def bad_multipart(request: HttpRequest, exc: MultiPartParserError) -> HttpResponse:
    # Raised when request.POST or request.FILES is first read: a truncated body, a missing or
    # wrong boundary.
    return api.create_response(request, {"detail": f"the multipart body cannot be read: {exc}"}, status=400)


@api.exception_handler(RequestDataTooBig)
def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024 // 1024
    return api.create_response(request, {"detail": f"the request body exceeds {limit} MB"}, status=413)


@api.exception_handler(SuspiciousOperation)
@api.exception_handler(DjangoBadRequest)
@api.exception_handler(UnreadablePostError)
def unreadable(request: HttpRequest, exc: Exception) -> HttpResponse:
    # Too many fields, a body cut off by the client: Django's own 400s, in JSON.
    return api.create_response(request, {"detail": f"the request cannot be read: {exc}"}, status=400)


@api.exception_handler(OverflowError)
def out_of_range(request: HttpRequest, exc: OverflowError) -> HttpResponse:
    # The schemas bound every integer they take (sessions_app/api/schemas.py: Id, Position);
    # this is the net under a parameter that slipped through, still a 400 naming it.
    logger.warning("unbounded integer reached the database on %s %s: bound it in its schema", request.method,
                   request.path)  # fmt: skip
    return api.create_response(request, {"detail": out_of_range_message(request)}, status=400)


@api.exception_handler(OperationalError)
def database_error(request: HttpRequest, exc: OperationalError) -> HttpResponse:
    if not database_busy(exc):
        return unexpected(request, exc)
    logger.warning("database busy on %s %s: %s", request.method, request.path, exc)
    response = api.create_response(request, {"detail": BUSY_MESSAGE}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


@api.exception_handler(Exception)
def unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    # Last resort: a bug. Logged with its traceback for us, a clean message for the client.
    logger.exception("unhandled error on %s %s", request.method, request.path)
    return api.create_response(request, {"detail": "internal error; it has been logged"}, status=500)


api.add_router("", router)
