"""Request checks that apply to every view."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core.handlers.wsgi import WSGIRequest
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from sessions_app.models.bounds import MAX_ID

from .errors import refusal

logger = logging.getLogger("replay.requests")


def refuse_nul_in_query(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """A query string holding a NUL character (`%00`) is answered 400 before any view runs:
    PostgreSQL refuses the character in any text it compares, so a filter or search holding it
    would otherwise fail inside the database (a 500), and no real search contains it."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if "%00" in request.META.get("QUERY_STRING", ""):
            detail = "the query string holds a NUL character (%00), which no parameter accepts"
            if request.path.startswith(_MACHINE_PATHS):  # programs: JSON under /api/, else a line of text
                return _plain_or_json(request, detail, status=400)
            # The site's refusal page (below the CSP middleware in settings, so it has its policy).
            return refusal(request, status=400, title="Bad request", reason=detail)
        return get_response(request)

    return middleware


# SQLite's messages when its busy timeout ran out, or (shared cache, the tests' in-memory
# database) a table is locked by another connection.
_SQLITE_BUSY = ("database is locked", "database table is locked", "database schema is locked")
# PostgreSQL's SQLSTATEs that mean "try again shortly": lock_not_available (lock_timeout),
# query_canceled (statement_timeout), too_many_connections, cannot_connect_now (starting up),
# serialization_failure and deadlock_detected (the transaction was rolled back whole).
_POSTGRES_BUSY = {"55P03", "57014", "53300", "57P03", "40001", "40P01"}
RETRY_AFTER_SECONDS = 2
BUSY_MESSAGE = "the database is busy; try again in a few seconds"


def database_busy(exc: BaseException) -> bool:
    """Whether an exception says the database could not serve the request *now* (a lock held
    too long, no free connection), which a retry fixes: answered 503 with Retry-After, never
    500, and never mistaken for a bug."""
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) in _POSTGRES_BUSY:
        return True
    message = str(exc).lower()
    return any(text in message for text in _SQLITE_BUSY) or "too many connections" in message


def out_of_range_parameters(request: HttpRequest) -> list[str]:
    """The path and query parameters holding an integer no 64-bit column holds: what an
    OverflowError from the database driver was about, to name in the 400."""
    found = request.resolver_match.kwargs if request.resolver_match else {}
    named = {**{name: str(value) for name, value in found.items()}, **request.GET.dict()}
    return [name for name, value in named.items() if _beyond_64_bits(value)]


def _beyond_64_bits(value: str) -> bool:
    digits = value.strip().lstrip("+-")
    # Past 19 digits no value fits; int() of a very long string is refused by Python itself.
    return digits.isdigit() and (len(digits) > 19 or int(digits) > MAX_ID)


def out_of_range_message(request: HttpRequest) -> str:
    names = out_of_range_parameters(request)
    where = ", ".join(names) if names else "a number in the request"
    return f"{where}: out of range (integers run from {-MAX_ID - 1} to {MAX_ID})"


class ClientAndBusyErrors:
    """Pages' answers to what the database driver refuses for the client's sake: a busy
    database is a 503 with Retry-After (not a 500 after the busy timeout), an integer beyond
    64 bits that reached a query a 400. The API answers the same through its own handlers
    (replay_site/api.py), in JSON."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if database_busy(exc):
            logger.warning("database busy on %s %s: %s", request.method, request.path, exc)
            response = _plain_or_json(request, BUSY_MESSAGE, status=503)
            response["Retry-After"] = str(RETRY_AFTER_SECONDS)
            return response
        if isinstance(exc, OverflowError):
            return _plain_or_json(request, out_of_range_message(request), status=400)
        return None


def _plain_or_json(request: HttpRequest, detail: str, *, status: int, errors: list | None = None) -> HttpResponse:
    """JSON under /api/ (with `errors`, the API's ErrorOut shape, when given), else a line of text."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": detail} | ({} if errors is None else {"errors": errors}), status=status)
    return HttpResponse(detail, status=status, content_type="text/plain; charset=utf-8")


def no_store(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """`Cache-Control: no-store` on every response a view made: pages, partials, API answers,
    exports and bundles hold recorded sessions, which no shared or browser cache may keep (a
    proxy, or the next user of a shared computer). A view that chose its own caching keeps it;
    the API and its streams always get no-store. Static files never come here: whitenoise,
    above this middleware, answers them with its own caching (a minute)."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if request.path.startswith("/api/") or not response.has_header("Cache-Control"):
            response["Cache-Control"] = "no-store"
        return response

    return middleware


def refuse_oversized_bodies(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """A request declaring a body larger than any the server takes (an upload at
    REPLAY_MAX_UPLOAD_MB with its multipart envelope) is answered 413 before anything reads it:
    Django's CSRF check reads a page's form (a whole multipart upload, spooled to disk) before
    the view could refuse it, and DATA_UPLOAD_MAX_MEMORY_SIZE does not cover files. A chunked
    body without a Content-Length, which Django's WSGI request would read as empty, is a 411."""
    from sessions_app.ingest.uploads import MULTIPART_ENVELOPE, max_upload_bytes, too_large_message

    def middleware(request: HttpRequest) -> HttpResponse:
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > max_upload_bytes() + MULTIPART_ENVELOPE:
            return _said_at_once(request, too_large_message(declared, what="request body"), status=413)
        if _chunked_without_length(request):
            # Django's WSGI request reads CONTENT_LENGTH bytes of a body, none without it: a
            # chunked body would be taken for an empty one ("body: Field required").
            return _said_at_once(
                request, "send the body with a Content-Length (a chunked body is not read)", status=411
            )
        return get_response(request)

    return middleware


def _chunked_without_length(request: HttpRequest) -> bool:
    return (
        isinstance(request, WSGIRequest)  # Django's ASGI handler reads a chunked body whole
        and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        and not request.META.get("CONTENT_LENGTH")
    )


def _said_at_once(request: HttpRequest, message: str, *, status: int) -> HttpResponse:
    response = _plain_or_json(request, message, status=status, errors=[])
    # Said here (CommonMiddleware, below, would): a client still sending its body can read the
    # whole answer without waiting for a close that comes only after the body.
    response["Content-Length"] = str(len(response.content))
    return response


def method_not_allowed_page(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """A page's 405 (Django's require_POST answers an empty body) to a browser opening it (a GET)
    becomes a small page saying that the address is a form button's, with a way back: a link
    followed or typed into the address bar otherwise shows the browser's own error page. The
    status and its Allow header stay. Any other method (a post to a page that only shows) and
    the machine endpoints (OTLP, MCP) keep their own answers; the API's is JSON with a `detail`,
    as its every error is (docs/api.md)."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if response.status_code == 405 and request.path.startswith("/api/"):
            return _api_method_not_allowed(request, response)
        if (
            response.status_code != 405
            or request.method not in ("GET", "HEAD")
            or request.path.startswith(_MACHINE_PATHS)
            or _has_body(response)
        ):
            return response
        found = request.resolver_match.kwargs if request.resolver_match else {}
        # Back to what the address names: a refused form on a project's or a tour's page had left
        # the browser at its post-only address, and this page offered only the sessions list.
        back = {name: found.get(name) for name in ("session_id", "slug", "tour_id")}
        page = render(request, "405.html", back | {"allowed": response.get("Allow", "")}, status=405)
        if response.has_header("Allow"):
            page["Allow"] = response["Allow"]
        return page

    return middleware


def _api_method_not_allowed(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    allowed = response.get("Allow", "")
    answer = JsonResponse(
        # Not the path: it may name another project's member or object, which a refusal never echoes.
        {"detail": f"{request.method} is not allowed here" + (f"; use {allowed}" if allowed else "")},
        status=405,
    )
    if allowed:
        answer["Allow"] = allowed
    return answer


# Addresses for programs, not browsers: their 405s stay as their frameworks answer them.
_MACHINE_PATHS = ("/api/", "/v1/", "/mcp")


def _has_body(response: HttpResponse) -> bool:
    return getattr(response, "streaming", False) or bool(response.content)
