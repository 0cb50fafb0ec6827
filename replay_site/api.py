"""The NinjaAPI: JSON under /api/, OpenAPI at /api/openapi.json, interactive docs at /api/docs.

Errors are always JSON `{"detail": "..."}`: 400 for a bad parameter (ninja's own 422 for a
failed validation is turned into 400 with a message naming the field), 401 without a valid key,
404 for what does not exist, and, only as a last resort for a bug, a logged 500 without a
traceback.
"""

import logging

import orjson
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import ValidationError
from ninja.operation import Operation
from ninja.renderers import BaseRenderer

from sessions_app.api import router
from sessions_app.replay import ReplayParameterError

logger = logging.getLogger("replay.api")


class OrjsonRenderer(BaseRenderer):
    # The stdlib json module is 3-5x slower on replay pages (../shared/PERFORMANCE.md).
    media_type = "application/json"

    def render(self, request, data, *, response_status):
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


class ReplayAPI(NinjaAPI):
    def get_openapi_operation_id(self, operation: Operation) -> str:
        # Clients generated from /api/openapi.json name their methods after these ids, which
        # date from when the read side was sessions_app/api.py and the write side (tagged
        # "ingest") api_write.py; moving a view to another module must not rename them.
        module = "api_write" if "ingest" in (operation.tags or ()) else "api"
        return f"sessions_app_{module}_{operation.view_func.__name__}"


api = ReplayAPI(
    title="Replay API",
    version="1.0",
    description="Replay recorded LLM-agent sessions: any step, with its full context, a page at a time.",
    renderer=OrjsonRenderer(),
    urls_namespace="api",
)


def _location(loc: list | tuple) -> str:
    # ninja prefixes the source ("query", "path", "body") and sometimes the schema's argument
    # name; the client only needs the field it sent.
    parts = [str(p) for p in loc if p not in ("query", "path", "body", "form", "header", "cookie")]
    if len(parts) > 1 and parts[0] in {"query", "params", "body", "payload"}:
        parts = parts[1:]
    return ".".join(parts) or "request"


def validation_message(errors: list[dict]) -> str:
    """'limit: Input should be less than or equal to 5000; offset: ...'"""
    messages = []
    for error in errors:
        messages.append(f"{_location(error.get('loc', ()))}: {error.get('msg', 'invalid value')}")
    return "; ".join(messages) or "invalid request"


@api.exception_handler(ValidationError)
def bad_parameters(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    return api.create_response(
        request,
        {
            "detail": validation_message(exc.errors),
            "errors": [{"field": _location(e.get("loc", ())), "message": e.get("msg", "")} for e in exc.errors],
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


@api.exception_handler(Exception)
def unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    # Last resort: a bug. Logged with its traceback for us, a clean message for the client.
    logger.exception("unhandled error on %s %s", request.method, request.path)
    return api.create_response(request, {"detail": "internal error; it has been logged"}, status=500)


api.add_router("", router)
