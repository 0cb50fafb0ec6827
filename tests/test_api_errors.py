"""Authentication (401), parameter errors as 400 with a message (never ninja's 422), and the
last-resort JSON 500. Never a 500 for a client's mistake: integers past 64 bits, malformed
multipart, bodies that are not JSON objects, URLs naming no operation, a busy database (503
with Retry-After); every such answer documented in the schema; reads that write nothing; the
docs page from our own files; no-store on session data. tests/test_api_fuzz.py generates the
rest."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from html.parser import HTMLParser

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.db import OperationalError, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions_app.ingest import writer
from sessions_app.ingest.writer import finish_session
from sessions_app.models import ApiKey, AuditEntry, Event, Role, Session

from .builders_ingest import canonical_records
from .builders_replay import api, api_key, get_json  # noqa: F401  (fixture)
from .builders_teams import key_of, member

pytestmark = pytest.mark.django_db

READ_URLS = [
    "/api/sessions",
    "/api/sessions/{id}",
    "/api/sessions/{id}/replay",
    "/api/sessions/{id}/summary",
    "/api/sessions/{id}/steps",
    "/api/sessions/{id}/steps/0",
    "/api/sessions/{id}/context?seq=0",
    "/api/sessions/{id}/search?q=x",
    "/api/sessions/{id}/checkpoints",
    "/api/sessions/{id}/export",
    "/api/sessions/{id}/verify",
    "/api/compare?a={id}&b={id}",
]


@pytest.mark.parametrize("url", READ_URLS)
def test_every_read_endpoint_needs_a_valid_key(make_session, url):
    session = make_session(events=10)
    url = url.format(id=session.pk)
    for client in (Client(), Client(HTTP_AUTHORIZATION="Bearer rpl_not-a-key"), Client(HTTP_AUTHORIZATION="Basic abc")):
        response = client.get(url)
        assert response.status_code == 401
        assert orjson.loads(response.content) == {"detail": "Unauthorized"}
    assert Client(HTTP_AUTHORIZATION=f"Bearer {api_key()}").get(url).status_code == 200


def test_a_revoked_key_is_refused(make_session):
    key = api_key("old")
    ApiKey.objects.update(revoked_at=timezone.now())
    assert Client(HTTP_AUTHORIZATION=f"Bearer {key}").get("/api/sessions").status_code == 401


def test_unknown_sessions_are_404_on_every_endpoint(api):
    for url in READ_URLS[1:-1]:
        response = api.get(url.format(id=31337))
        assert response.status_code == 404, url
        assert orjson.loads(response.content) == {"detail": "session 31337 not found"}


def test_the_dashboard_login_can_read_the_api(make_session):
    user = member("ana")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    session = make_session(events=4)
    assert client.get(f"/api/sessions/{session.pk}/summary").status_code == 200
    # Unsafe methods with the login cookie need the CSRF token.
    assert client.delete(f"/api/sessions/{session.pk}").status_code in (401, 403)
    assert Session.objects.filter(pk=session.pk).exists()


def test_validation_errors_are_400_naming_the_field(api, make_session):
    session = make_session(events=4)
    body = get_json(api, f"/api/sessions/{session.pk}/steps?offset=x&limit=0", 400)
    assert "offset: Input should be a valid integer" in body["detail"]
    assert "limit: Input should be greater than or equal to 1" in body["detail"]
    assert {e["field"] for e in body["errors"]} == {"offset", "limit"}
    assert "session_id: Input should be a valid integer" in get_json(api, "/api/sessions/abc/summary", 400)["detail"]


@pytest.mark.parametrize("nan", [False, True])
def test_a_body_nested_past_any_parser_is_a_400_not_a_500(api, nan):
    # orjson refuses 1024 levels; the standard json module it falls back to (for NaN) then ran
    # out of recursion, and every JSON write endpoint answered 500.
    inner = b"[NaN]" if nan else b"[]"
    body = b'{"events": ' + b"[" * 100_000 + inner + b"]" * 100_000 + b"}"
    response = api.post("/api/events", body, content_type="application/json")
    assert response.status_code == 400, response.content[:200]
    assert orjson.loads(response.content)["detail"].startswith("The body is not valid JSON")


def test_a_bug_is_a_logged_json_500_without_traceback(api, make_session, monkeypatch, caplog):
    session = make_session(events=4)

    def broken(**kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("sessions_app.replay.get_summary", broken)
    with caplog.at_level(logging.ERROR, logger="replay.api"):
        response = api.get(f"/api/sessions/{session.pk}/summary")
    assert response.status_code == 500
    assert orjson.loads(response.content) == {"detail": "internal error; it has been logged"}
    assert b"secret" not in response.content and b"Traceback" not in response.content
    assert "secret internals" in caplog.text


def test_openapi_schema_and_docs_are_served(client):
    schema = client.get("/api/openapi.json")
    assert schema.status_code == 200
    paths = orjson.loads(schema.content)["paths"]
    for path in (
        "/api/sessions",
        "/api/sessions/{session_id}/replay",
        "/api/compare",
        "/api/sessions/{session_id}/checkpoints/{name}",
        "/api/sessions/{session_id}/verify",
    ):
        assert path in paths
    replay_params = {p["name"] for p in paths["/api/sessions/{session_id}/replay"]["get"]["parameters"]}
    assert {"offset", "limit", "eventTypes", "includeContext"} <= replay_params
    docs = client.get("/api/docs")
    assert docs.status_code == 200 and b"openapi.json" in docs.content


# --- never a 500 for a client's mistake (issue 20) ---------------------------------------------

BEYOND = 2**64  # no 64-bit column holds it: SQLite's driver raised OverflowError, a 500


def post_json(client: Client, url: str, body: bytes | dict, content_type: str = "application/json"):
    return client.post(url, body if isinstance(body, bytes) else orjson.dumps(body), content_type=content_type)


def test_integers_beyond_64_bits_are_400_naming_the_parameter(api, make_session):
    session = make_session(events=10)
    reads = {
        f"/api/sessions/{BEYOND}": "session_id",
        f"/api/sessions/{session.pk}/replay?offset={BEYOND}": "offset",
        f"/api/sessions/{session.pk}/steps?offset={BEYOND}": "offset",
        f"/api/sessions/{session.pk}/steps/{BEYOND}": "index",
        f"/api/sessions/{session.pk}/context?seq={BEYOND}": "seq",
        f"/api/sessions/{session.pk}/search?q=x&from={BEYOND}": "from",
        f"/api/sessions/{session.pk}/search?q=x&at={BEYOND}": "at",
        f"/api/sessions?before={BEYOND}": "before",
        f"/api/compare?a={BEYOND}&b={session.pk}": "a",
        f"/api/compare?a={session.pk}&b={session.pk}&offset={BEYOND}": "offset",
        f"/api/sessions/{session.pk}/stream?after={BEYOND}": "after",
        f"/api/sessions/{session.pk}/tail?after={BEYOND}": "after",
        f"/api/imports/{BEYOND}": "job_id",
    }
    for url, name in reads.items():
        body = get_json(api, url, 400)
        assert body["detail"].startswith(f"{name}: Input should be less than or equal to"), url
    tail = api.get(f"/api/sessions/{session.pk}/tail", headers={"Last-Event-ID": str(BEYOND)})
    assert tail.status_code == 400 and tail.json()["detail"].startswith("Last-Event-ID:")
    # Bodies too, checked before any row is looked at.
    checkpoint = post_json(api, f"/api/sessions/{session.pk}/checkpoints", b'{"name": "x", "seq": %d}' % BEYOND)
    assert checkpoint.status_code == 400 and checkpoint.json()["errors"][0]["field"] == "seq"
    reply = post_json(api, f"/api/sessions/{session.pk}/comments", b'{"body": "x", "parent": %d}' % BEYOND)
    assert reply.status_code == 400 and reply.json()["errors"][0]["field"] == "parent"


def test_the_largest_allowed_positions_still_answer(api, make_session):
    # The bound leaves room for offset + limit: the page's end must fit the column too.
    session = make_session(events=10)
    top = 2**62
    assert get_json(api, f"/api/sessions/{session.pk}/replay?offset={top}&limit=5000")["steps"] == []
    assert get_json(api, f"/api/sessions/{session.pk}/search?q=x&from={top}&at={top}")["results"] == []
    assert get_json(api, f"/api/sessions/{session.pk}/steps?offset={top}")["steps"] == []
    assert api.get(f"/api/sessions/{2**63 - 1}").status_code == 404


def test_an_integer_that_reaches_the_database_unbounded_is_still_a_400_naming_it(api, make_session, monkeypatch):
    session = make_session(events=4)

    def unbounded(**kwargs):
        raise OverflowError("Python int too large to convert to SQLite INTEGER")

    monkeypatch.setattr("sessions_app.replay.get_summary", unbounded)
    body = get_json(api, f"/api/sessions/{session.pk}/summary?cursor={BEYOND}", 400)
    assert body["detail"].startswith("cursor: out of range")


MULTIPART_FILE = b'--x\r\nContent-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n{}\r\n--x--\r\n'


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (MULTIPART_FILE, "multipart/form-data", "the multipart body cannot be read: Invalid boundary"),
        (MULTIPART_FILE, "multipart/form-data; boundary=", "the multipart body cannot be read: Invalid boundary"),
        (MULTIPART_FILE, "multipart/form-data; boundary=\u00ff", "the multipart body cannot be read"),
        (b"not multipart", "text/plain", "file: a multipart field named 'file' is required"),
        # A part whose file name Django will not take is no file (the message says which ones).
        (
            MULTIPART_FILE.replace(b'"a.jsonl"', b'".."'),
            "multipart/form-data; boundary=x",
            "file: a multipart field named 'file' is required, holding a file with a name (none came: no such field, "
            "a file name empty or '..', or a body cut off)",
        ),
        # Two files: one upload is one job, so the first is not dropped unsaid.
        (
            MULTIPART_FILE.replace(b"--x--", b"--x" + MULTIPART_FILE[3:-7].replace(b"a.jsonl", b"b.jsonl") + b"--x--"),
            "multipart/form-data; boundary=x",
            "file: one file per upload, 2 were sent (send each on its own)",
        ),
    ],
)
def test_malformed_multipart_uploads_are_400_with_a_message(api, project, body, content_type, message):
    response = api.post("/api/imports", data=body, content_type=content_type)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["detail"].startswith(message)


def test_a_body_past_the_upload_limit_is_413(api, make_session, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    session = make_session(events=3)
    response = post_json(api, f"/api/sessions/{session.pk}/checkpoints", {"name": "x" * 2000, "seq": 1})
    assert response.status_code == 413 and response.json()["detail"] == "the request body exceeds 0 MB"


def test_a_chunked_body_without_a_length_is_411_not_read_as_empty(api, make_session, client):
    session = make_session(events=3)
    body = orjson.dumps({"name": "kept", "seq": 1})
    chunked = {"HTTP_TRANSFER_ENCODING": "chunked", "CONTENT_LENGTH": ""}
    response = api.post(f"/api/sessions/{session.pk}/checkpoints", body, content_type="application/json", **chunked)
    assert response.status_code == 411
    assert response.json()["detail"] == "send the body with a Content-Length (a chunked body is not read)"
    page = client.post("/accounts/login/", b"username=a&password=b", content_type="application/x-www-form-urlencoded",
                       **chunked)  # fmt: skip
    assert page.status_code == 411 and page["Content-Type"].startswith("text/plain")
    # With its length the same body is read.
    assert api.post(f"/api/sessions/{session.pk}/checkpoints", body, content_type="application/json").status_code == 201


@pytest.mark.parametrize(
    ("body", "content_type", "detail"),
    [
        (b"{bad", "application/json", "the body is not valid JSON: Expecting property name"),
        (b"name=x&seq=1", "application/x-www-form-urlencoded", "the body is not valid JSON: Expecting value"),
        (b'"x"', "application/json", "body: the body must be a JSON object"),
        (b"", "application/json", "body: Field required"),
        (b'{"seq": 1}', "application/json", "name: Field required"),
        (b'{"name": 5, "seq": 1}', "text/plain", "name: Input should be a valid string"),
    ],
)
def test_bodies_that_are_no_valid_json_object_are_400_with_a_message(api, make_session, body, content_type, detail):
    session = make_session(events=3)
    response = post_json(api, f"/api/sessions/{session.pk}/checkpoints", body, content_type)
    assert response.status_code == 400, response.content
    assert response.json()["detail"].startswith(detail)


def test_urls_under_api_naming_no_operation_are_json_404_and_pages_keep_html(api, make_session):
    session = make_session(events=3)
    for url in ("/api/nope", "/api/", f"/api/sessions/{session.pk}/summary/", f"/api/sessions/{session.pk}/x/y"):
        response = api.get(url)
        assert response.status_code == 404 and response.json() == {"detail": f"no API operation at {url}"}
    # A non-integer id is a 400 naming it (the route matches; its parameter does not).
    assert get_json(api, "/api/sessions/abc", 400)["errors"][0]["field"] == "session_id"
    page = Client().get("/no-such-page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_a_method_an_operation_does_not_take_is_a_json_405_naming_the_ones_it_does(api, make_session):
    session = make_session(events=3)
    for method, url in (("patch", f"/api/sessions/{session.pk}"), ("put", "/api/imports"),
                        ("get", "/api/share-links/1")):  # fmt: skip
        for client in (api, Client()):  # with a key, and with none
            response = getattr(client, method)(url)
            assert response.status_code == 405 and response["Content-Type"] == "application/json", (method, url)
            allowed = response["Allow"]
            assert allowed and response.json() == {"detail": f"{method.upper()} is not allowed here; use {allowed}"}


def _without_duplicated_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), keys  # JSON.parse keeps the last, YAML parsers refuse
    return dict(pairs)


def test_every_operation_documents_the_errors_the_api_answers(client):
    schema = json.loads(client.get("/api/openapi.json").content, object_pairs_hook=_without_duplicated_keys)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            responses = operation["responses"]
            assert "401" in responses and "503" in responses, where
            assert "Retry-After" in responses["503"]["headers"], where
            if operation.get("parameters") or operation.get("requestBody"):
                assert "400" in responses, where
            if "{" in path:
                assert "404" in responses, where
            if "requestBody" in operation:
                assert "413" in responses, where
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    # AgentLensErrorOut: ErrorOut plus the members AgentLens's SDKs read (POST /api/events).
                    assert ref.rsplit("/", 1)[1] in {"ErrorOut", "DetailOut", "AgentLensErrorOut"}, (where, status)
            for parameter in operation.get("parameters", []):  # every integer a client names is bounded
                for option in parameter["schema"].get("anyOf", [parameter["schema"]]):
                    assert option.get("type") != "integer" or "maximum" in option, (where, parameter["name"])
    # Ids by their column, positions leaving room for a page's end.
    replay = {p["name"]: p["schema"] for p in schema["paths"]["/api/sessions/{session_id}/replay"]["get"]["parameters"]}
    assert replay["session_id"]["maximum"] == 2**63 - 1 and replay["offset"]["maximum"] == 2**62


def _lock_every_session_row() -> object:
    """Another connection holding the write lock on the sessions table, as an import does."""
    other = connection.copy()
    other.connect()
    with other.cursor() as cursor:
        if other.vendor == "sqlite":
            cursor.execute("BEGIN IMMEDIATE")
            cursor.execute("UPDATE sessions_app_session SET task = task")
        else:
            other.set_autocommit(False)
            cursor.execute("LOCK TABLE sessions_app_session IN ACCESS EXCLUSIVE MODE")
    return other


@pytest.mark.django_db(transaction=True)
def test_a_busy_database_is_503_with_retry_after_not_a_500(make_session):
    session = make_session(events=4)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {api_key()}")
    page = Client()
    page.force_login(member("owner-of-tests"))
    # Waiting for the lock at most 0.2 s (SQLite's busy timeout, PostgreSQL's lock_timeout).
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 200" if connection.vendor == "sqlite" else "SET lock_timeout = '200ms'")
    holder = _lock_every_session_row()
    try:
        read = api.get(f"/api/sessions/{session.pk}/summary")
        write = post_json(api, f"/api/sessions/{session.pk}/checkpoints", {"name": "x", "seq": 1})
        player = page.get(f"/sessions/{session.pk}/")
    finally:
        holder.rollback() if holder.vendor != "sqlite" else holder.cursor().execute("ROLLBACK")
        holder.close()
    for response in (read, write):
        assert response.status_code == 503, response.content
        assert response["Retry-After"] == "2"
        assert response.json() == {"detail": "the database is busy; try again in a few seconds"}
    assert player.status_code == 503 and player["Retry-After"] == "2"
    assert player["Content-Type"].startswith("text/plain")
    assert api.get(f"/api/sessions/{session.pk}/summary").status_code == 200  # the lock gone, all is well


@pytest.mark.django_db(transaction=True)
def test_a_busy_database_met_by_the_bulk_write_of_events_is_a_503_too(db, monkeypatch):
    # A batch's events go by the driver's own bulk path (a COPY on PostgreSQL, executemany on
    # SQLite), not Django's cursor: its errors must still become Django's, or a lock held too
    # long is a 500 ("a bug") instead of a 503 to retry.
    api = Client(HTTP_AUTHORIZATION=f"Bearer {api_key()}")
    created = post_json(api, "/api/sessions", {"task": "busy"})
    assert created.status_code == 201, created.content
    session_id = created.json()["id"]
    batch = {"events": list(canonical_records(6))}
    holder = None
    if connection.vendor == "sqlite":
        # A transaction takes SQLite's write lock at its BEGIN (IMMEDIATE, settings.py), so the
        # bulk insert itself never waits for it: the driver's own error is raised there instead.
        def locked(rows):
            raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(writer, "partial", lambda method, sql: locked)
    else:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        holder = connection.copy()
        holder.connect()
        holder.set_autocommit(False)  # the events table alone: the session row stays free
        with holder.cursor() as cursor:
            cursor.execute("LOCK TABLE sessions_app_event IN SHARE MODE")
    try:
        refused = post_json(api, f"/api/sessions/{session_id}/events", batch)
    finally:
        if holder is not None:
            holder.rollback()
            holder.close()
        monkeypatch.undo()
    assert refused.status_code == 503, refused.content
    assert refused["Retry-After"] == "2" and Event.objects.filter(session_id=session_id).count() == 0
    assert post_json(api, f"/api/sessions/{session_id}/events", batch).status_code == 200  # the retry
    assert Event.objects.filter(session_id=session_id).count() == 6


def _writes(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]


def test_reads_never_write_but_exports_leave_their_audit_entry(make_session, settings):
    settings.TAIL_MAX_SECONDS = 1
    # An admin's key: every GET operation of the schema answers it, the admins-only ones too.
    key = key_of(member("admin-of-reads", role=Role.ADMIN))
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    session = make_session(events=12)
    finish_session(session=session)
    assert post_json(api, f"/api/sessions/{session.pk}/checkpoints", {"name": "cp", "seq": 2}).status_code == 201
    comment = post_json(api, f"/api/sessions/{session.pk}/comments", {"seq": 1, "body": "hm"}).json()["id"]
    values = {"session_id": session.pk, "comment_id": comment, "name": "cp", "index": 0, "slug": session.project.slug}
    query = {"context": "?seq=1", "compare": f"?a={session.pk}&b={session.pk}", "stream": "?pacing=0"}
    api.get("/api/sessions")  # the key's last use is noted at most once a minute: now, not below
    paths = Client().get("/api/openapi.json").json()["paths"]
    for path, operations in paths.items():
        if "get" not in operations or "{tour_id}" in path or "{job_id}" in path:
            continue
        url = path.format(**values) + query.get(path.rsplit("/", 1)[-1], "")
        with CaptureQueriesContext(connection) as queries:
            response = api.get(url)
            if response.streaming:
                b"".join(response.streaming_content)
        assert response.status_code == 200, (url, response.status_code)
        writes = _writes(queries)
        if path.endswith(("{session_id}/export", "{session_id}/bundle")):
            # Evidence: who took a copy of what, recorded before the first byte goes out.
            assert writes and all("auditentry" in sql or "auditlog" in sql for sql in writes), (url, writes)
        else:
            assert writes == [], (url, writes)


def test_verify_by_get_is_a_read_and_by_post_records_the_result(api, make_session):
    session = make_session(events=20)
    Event.objects.filter(session=session, seq=7).update(raw='{"edited": true}')
    assert get_json(api, f"/api/sessions/{session.pk}/verify")["firstBrokenSeq"] == 7
    session.refresh_from_db()
    assert session.chain_checked_at is None and not AuditEntry.objects.filter(action="session.verify").exists()
    assert api.post(f"/api/sessions/{session.pk}/verify").json()["firstBrokenSeq"] == 7
    session.refresh_from_db()
    assert (session.chain_valid, session.chain_broken_seq) == (False, 7)
    assert AuditEntry.objects.filter(action="session.verify").count() == 1


def test_api_docs_load_only_our_own_files_and_no_inline_script(client):
    docs = client.get("/api/docs")
    # No address of another host anywhere in the page (a substring test for "cdn" once met the
    # letters inside the page's random CSRF token).
    assert docs.status_code == 200 and not re.search(
        r'(?:src|href|url)\s*[=(:]\s*["\']?(?:https?:)?//', docs.content.decode()
    )
    parser = _Assets()
    parser.feed(docs.content.decode())
    assert parser.scripts == ["/static/vendor/swagger-ui/swagger-ui-bundle.js", "/static/js/api-docs.js"]
    assert "/static/vendor/swagger-ui/swagger-ui.css" in parser.links
    assert all(link.startswith("/static/") for link in parser.links)
    # The one <script> without src holds data (json_script), which the CSP does not run.
    assert parser.inline == ["application/json"]
    settings_json = docs.content.decode().split('id="swagger-settings" type="application/json">')[1].split("<")[0]
    assert orjson.loads(settings_json)["url"] == "/api/openapi.json"
    assert "script-src 'self'" in docs["Content-Security-Policy"]
    for asset in parser.scripts + parser.links:
        served = client.get(asset)
        assert served.status_code == 200, asset
        assert "max-age" in served["Cache-Control"], asset  # static files keep their long caching


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.links: list[str] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        found = dict(attrs)
        if tag == "script" and found.get("src"):
            self.scripts.append(found["src"])
        elif tag == "script":
            self.inline.append(found.get("type", ""))
        elif tag == "link":
            self.links.append(found["href"])


def test_session_data_is_never_stored_by_caches(api, make_session):
    session = make_session(events=5)
    for url in (f"/api/sessions/{session.pk}/replay", f"/api/sessions/{session.pk}/export", "/api/sessions"):
        assert api.get(url)["Cache-Control"] == "no-store", url
    assert api.get("/api/nope")["Cache-Control"] == "no-store"
    page = Client()
    page.force_login(member("owner-of-tests"))
    for url in (f"/sessions/{session.pk}/", f"/sessions/{session.pk}/search/?q=event", "/sessions/"):
        assert page.get(url)["Cache-Control"] == "no-store", url


def test_an_export_that_cannot_be_recorded_is_refused_not_served_unrecorded(api, make_session, monkeypatch):
    session = make_session(events=5)

    def busy(**kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr("sessions_app.audit.record", busy)
    for url in (f"/api/sessions/{session.pk}/export", f"/api/sessions/{session.pk}/bundle"):
        response = api.get(url)
        assert response.status_code == 503 and response["Retry-After"] == "2", url
        assert not response.streaming


def test_answers_made_before_a_view_carry_the_frame_and_content_policies(client, db):
    # A bad Host's 400 (CommonMiddleware) and an oversized body's 413 were answered above the
    # middlewares that add them: the only pages without a CSP or X-Frame-Options.
    bad_host = client.get("/accounts/login/", HTTP_HOST="evil.example")
    oversized = client.generic("POST", "/sessions/upload/", b"", CONTENT_TYPE="application/x-www-form-urlencoded",
                               CONTENT_LENGTH="9999999999")  # fmt: skip
    for response, status in ((bad_host, 400), (oversized, 413)):
        assert response.status_code == status
        assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
        assert response["X-Frame-Options"] == "DENY"
