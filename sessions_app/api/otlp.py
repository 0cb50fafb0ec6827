"""`POST /v1/traces`: OpenTelemetry's OTLP/HTTP trace export, so an agent instrumented with the
GenAI semantic conventions needs only an exporter pointed at Replay:

    OTEL_EXPORTER_OTLP_ENDPOINT=https://replay.example.com
    OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer rpl_..."

Binary protobuf (`application/x-protobuf`) or OTLP/JSON (`application/json`), gzip or not; the
answer is an ExportTraceServiceResponse in the request's encoding, every failure a
google.rpc.Status (the OTLP specification's shapes and status codes). The spans go to the key's
project and need the role appending to a live session needs (maintainer); ingest/traces.py says
how they become sessions. Not an operation of the JSON API under /api/: OTLP exporters append
/v1/traces to the endpoint they are given, and speak protobuf.
"""

from __future__ import annotations

import logging
import zlib

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .. import access, audit, jobs
from ..formats import otlp
from ..ingest import traces
from ..ingest.quotas import QuotaExceeded, check_bytes
from ..ingest.writer import collector_paused
from ..models import ApiKey
from .bodies import declared_length

logger = logging.getLogger("replay.otlp")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# google.rpc.Code values of the failures (the HTTP status says the same; clients log the code).
_INVALID_ARGUMENT, _NOT_FOUND, _PERMISSION_DENIED, _RESOURCE_EXHAUSTED, _UNAUTHENTICATED = 3, 5, 7, 8, 16


class Refused(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        self.status, self.code, self.message = status, code, message


@csrf_exempt  # a key in the Authorization header, never a cookie: nothing for CSRF to protect
@never_cache
@require_POST
def export_traces(request: HttpRequest) -> HttpResponse:
    json = request.content_type == JSON
    try:
        request.auth = _api_key(request)  # first: a caller without a key learns nothing else
        if request.content_type not in (PROTOBUF, JSON):
            raise Refused(
                415, _INVALID_ARGUMENT, f"Content-Type must be {PROTOBUF} or {JSON}, got {request.content_type!r}"
            )
        # A key of one project writes there; a key of several names one in X-Replay-Project.
        project = access.project_to_write(request, request.headers.get("X-Replay-Project", "").strip())
        # The project's storage quota, on the declared size, before the body is read (as live batches).
        check_bytes(project=project, size=declared_length(request), what="export")
        body = _body(request)  # (read before the pause: a slow client's upload takes its time)
        if len(body) > declared_length(request):  # gzip undone: the quota on what it holds
            check_bytes(project=project, size=len(body), what="export")
        # The cyclic collector paused as in a settling (writer.collector_paused): a request of
        # 512 spans makes some hundred thousand short-lived objects, which it kept rescanning
        # (0.4 s of bench/otlp_bench.py's 100,000 spans).
        with collector_paused():
            parsed = otlp.read_request(body, json=json)
            # The spans and the audit entries of the sessions they made in one transaction: one
            # commit (SQLite's dearest statement) for the request, not two.
            with transaction.atomic():
                staged = traces.stage_spans(project=project, records=otlp.span_records(parsed))
                _audit_created(request, project, staged.created)
    except Refused as refused:
        return _failure(refused, json)
    except PermissionDenied as exc:
        return _failure(Refused(403, _PERMISSION_DENIED, str(exc)), json)
    except Http404 as exc:  # X-Replay-Project names no project the key may write to (Django's page was HTML)
        return _failure(Refused(404, _NOT_FOUND, f"X-Replay-Project: {exc}"), json)
    except QuotaExceeded as exc:
        return _failure(Refused(exc.status, _RESOURCE_EXHAUSTED, exc.message), json)
    except otlp.RequestTooLarge as exc:
        return _failure(Refused(413, _RESOURCE_EXHAUSTED, str(exc)), json)
    except (ValueError, otlp.NotOtlp) as exc:  # NotOtlp, or a key of several projects (which to name)
        return _failure(Refused(400, _INVALID_ARGUMENT, str(exc)), json)
    _settle_due(project)
    body = otlp.response_body(json=json, rejected=staged.rejected, message=staged.message)
    return HttpResponse(body, content_type=JSON if json else PROTOBUF)


def _audit_created(request: HttpRequest, project, created: list) -> None:
    """Each conversation's new session is audited, the request's entries in one write."""
    audit.record_request_many(
        request, action="session.create_live", project=project, entries=[
            (f"session:{session.pk}", {"source_session_id": session.source_session_id, "via": "POST /v1/traces"})
            for session in created
        ],
    )  # fmt: skip


def _settle_due(project) -> None:
    """Write the traces of this project that became quiet meanwhile now, not at the job's next
    run. The spans of this request are stored already: a failure here is logged, and the job
    settles them later."""
    try:
        settled = traces.settle_traces(
            project=project, quiet_seconds=settings.OTLP_SETTLE_SECONDS,
            orphan_seconds=settings.OTLP_ORPHAN_SECONDS, limit=traces.SETTLE_PER_REQUEST,
        )  # fmt: skip
    except Exception:
        logger.exception("settling the traces of project %s failed; the job will try again", project.pk)
        return
    jobs.enqueue_verify_after_commit(session_ids=settled.finished)


def _api_key(request: HttpRequest) -> ApiKey:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    key = ApiKey.authenticate(token.strip()) if scheme.lower() == "bearer" else None
    if key is None:
        raise Refused(401, _UNAUTHENTICATED, "an API key is needed: Authorization: Bearer <key>")
    return key


def _body(request: HttpRequest) -> bytes:
    """The request's body, gzip undone, within the size the server takes (before and after)."""
    limit = settings.OTLP_MAX_BYTES
    too_big = Refused(413, _RESOURCE_EXHAUSTED, f"the request body exceeds {limit / 1024 / 1024:g} MiB "
                                                "(REPLAY_OTLP_MAX_MB); export smaller batches")  # fmt: skip
    if declared_length(request) > limit:
        raise too_big  # not read at all
    try:
        body = request.body
    except RequestDataTooBig:  # past the server's own limit, which no Content-Length declared
        raise too_big
    if len(body) > limit:
        raise too_big
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise Refused(415, _INVALID_ARGUMENT, f"Content-Encoding must be gzip or none, got {encoding!r}")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        inflated = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise Refused(400, _INVALID_ARGUMENT, f"the body is not valid gzip: {exc}")
    if len(inflated) > limit:
        raise Refused(413, _RESOURCE_EXHAUSTED, f"the body exceeds {limit / 1024 / 1024:g} MiB once decompressed "
                                                "(REPLAY_OTLP_MAX_MB); export smaller batches")  # fmt: skip
    if not inflater.eof:
        raise Refused(400, _INVALID_ARGUMENT, "the gzip body is truncated")
    return inflated


def _failure(refused: Refused, json: bool) -> HttpResponse:
    response = HttpResponse(
        otlp.status_body(json=json, message=refused.message, code=refused.code),
        status=refused.status,
        content_type=JSON if json else PROTOBUF,
    )
    if refused.status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response
