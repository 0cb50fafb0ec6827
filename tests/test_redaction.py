"""Redaction at ingest (issue 22 items 1-2, docs/redaction.md): a project's rules, set by its
admins, applied by every ingest path before anything is stored.

Each built-in detector's sample secret goes into a session (payload, step state, state change,
source record, task, final answer, metadata, checkpoint) imported through an upload, the command
line, the live API and an evidence bundle; with the rules on, no page, API answer, export,
bundle, search, byte of the database or file of the data folder holds it. The database's bytes:
on SQLite the test database is in memory, and `sqlite3.Connection.serialize()` gives exactly the
bytes a file of it would hold (free pages included); on PostgreSQL every row of every table is
read as text instead.
"""

from __future__ import annotations

import io
import logging
import random
import re
import string
import time
import zipfile
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from sessions_app.access import Actor
from sessions_app.bundles import stream_bundle
from sessions_app.ingest.importing import import_local_file
from sessions_app.jobs import run_import
from sessions_app.mcp import discussion as mcp_discussion
from sessions_app.mcp import finding as mcp_finding
from sessions_app.mcp import state as mcp_state
from sessions_app.mcp import timeline as mcp_timeline
from sessions_app.models import AuditEntry, Event, ImportJob, OtlpSpan, Project, RedactionRules, Role, Session
from sessions_app.redaction import DETECTORS, Redactor, RuleError, check_custom_rule
from sessions_app.verification import verify_session
from tests.builders_teams import key_of, member

ALL = list(DETECTORS)
_ALNUM = string.ascii_letters + string.digits


def _luhn_completed(digits: str) -> str:
    total = 0
    for i, d in enumerate(reversed(digits)):
        d = int(d)
        if i % 2 == 0:  # doubled once the check digit is appended
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return digits + str((10 - total % 10) % 10)


def fresh_samples() -> dict[str, str]:
    """One new secret per detector, random where the format allows: an earlier test's rolled-back
    rows can leave their bytes in the in-memory database's pages, and must not be mistaken for
    this test's. Drawn again while another detector would also take one of them (a random digit
    run inside an IBAN or a Slack token passes the card detector's Luhn check one time in ten)."""
    for _ in range(200):
        samples = _random_samples()
        if not any(_OWN_ONLY[other].text(sample) != sample for name, sample in samples.items()
                   for other in ALL if other != name):  # fmt: skip
            return samples
    raise AssertionError("no set of samples that only their own detector takes")


_OWN_ONLY = {name: Redactor.from_rules([name]) for name in ALL}


def _random_samples() -> dict[str, str]:
    rand = random.SystemRandom()

    def chars(n: int, alphabet: str = _ALNUM) -> str:
        return "".join(rand.choice(alphabet) for _ in range(n))

    card = _luhn_completed("4" + chars(14, string.digits))
    bban = chars(18, string.digits)
    check = 98 - int(bban + "131400") % 97  # "DE00" moved to the end, letters as numbers
    iban = f"DE{check:02d}{bban}"
    return {
        "anthropic_key": f"sk-ant-api03-{chars(80)}",
        "openai_key": f"sk-proj-{chars(60)}",
        "aws_access_key": "AKIA" + chars(16, string.ascii_uppercase + string.digits),
        "github_token": f"ghp_{chars(36)}",
        "slack_token": f"xoxb-{chars(10, string.digits)}-{chars(13, string.digits)}-{chars(24)}",
        "google_api_key": f"AIza{chars(35)}",
        "stripe_key": f"sk_live_{chars(40)}",
        "jwt": f"eyJhbGciOiJIUzI1NiJ9.eyJ{chars(30)}.{chars(43)}",
        "private_key": f"-----BEGIN PRIVATE KEY-----\n{chars(64)}\n{chars(40)}==\n-----END PRIVATE KEY-----",
        "email": f"{chars(12, string.ascii_lowercase)}@example.org",
        "phone": f"+44 20 {chars(4, string.digits)} {chars(4, string.digits)}",
        "card_number": " ".join(card[i : i + 4] for i in range(0, 16, 4)),
        "iban": " ".join(iban[i : i + 4] for i in range(0, len(iban), 4)),
        "ipv4": ".".join(str(rand.randint(1, 254)) for _ in range(4)),
        "ipv6": f"2001:db8:{chars(4, '0123456789abcdef')}::{chars(4, '123456789abcdef')}",
    }


def test_the_samples_are_what_their_detector_redacts():
    samples = fresh_samples()
    assert set(samples) == set(DETECTORS)
    for name, sample in samples.items():
        assert Redactor.from_rules([name]).text(f"x {sample} y") == f"x [REDACTED:{name}] y", name
        assert Redactor.from_rules([name]).text(f"x {DETECTORS[name].example} y") == f"x [REDACTED:{name}] y"


def _lines(samples: dict[str, str], tag: str = "") -> bytes:
    """A canonical session holding every sample in every content field and session text."""
    every = " | ".join(samples.values())
    records = [
        {"kind": "session_start", "timestamp": "2026-02-08T10:00:00Z",
         "payload": {"task": f"task {tag} with {every}", "session_id": f"secrets{tag}",
                     "metadata": {"owner": samples["email"], "note": every}}},
    ]  # fmt: skip
    for i, (name, sample) in enumerate(samples.items()):
        records.append({"kind": "user_message", "timestamp": f"2026-02-08T10:00:{i + 1:02d}Z",
                        "payload": {"text": f"please use {sample} now", name: sample}})  # fmt: skip
    records += [
        {"kind": "tool_call", "timestamp": "2026-02-08T10:01:00Z", "tool": "shell", "pair_id": "c1",
         "payload": {"args": [every]}, "state_change": {"variables": {"secrets": every}, "memory": [every]}},
        {"kind": "tool_response", "timestamp": "2026-02-08T10:01:01Z", "tool": "shell", "pair_id": "c1",
         "payload": {"output": every}},
        {"kind": "step_end", "timestamp": "2026-02-08T10:01:02Z",
         "payload": {"step": 1}, "step_state": {"step": 1, "output": every, "action_code": every, "success": True}},
        {"kind": "checkpoint", "timestamp": "2026-02-08T10:01:03Z", "payload": {"name": "cp", "note": every}},
        {"kind": "session_end", "timestamp": "2026-02-08T10:01:04Z",
         "payload": {"status": "completed", "final_answer": f"answer {every}"}},
    ]  # fmt: skip
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


@pytest.fixture
def data_dir(settings, tmp_path) -> Path:
    settings.DATA_DIR = tmp_path / "data"
    return settings.DATA_DIR


@pytest.fixture
def samples() -> dict[str, str]:
    return fresh_samples()


@pytest.fixture
def admin(db):
    project = Project.objects.create(name="Acme", slug="acme")
    user = member("ada-admin", project, Role.ADMIN)
    return project, user


def _rules(project: Project, detectors: list[str], keep_originals: bool = False) -> None:
    RedactionRules.objects.update_or_create(
        project=project, defaults={"detectors": detectors, "custom": [], "keep_originals": keep_originals}
    )


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- the ingest paths ---------------------------------------------------------------------------


def _by_upload(project, user, tmp_path, samples, django_capture_on_commit_callbacks) -> list[Session]:
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    source = tmp_path / "upload.jsonl"
    source.write_bytes(_lines(samples, "u"))
    with source.open("rb") as handle, django_capture_on_commit_callbacks(execute=False):
        response = api.post("/api/imports", {"file": handle, "project": project.slug})
    assert response.status_code == 202, response.content
    run_import(job_id=response.json()["job"])
    return list(Session.objects.filter(project=project))


def _by_command(project, user, tmp_path, samples, django_capture_on_commit_callbacks) -> list[Session]:
    source = tmp_path / "command.jsonl"
    source.write_bytes(_lines(samples, "c"))
    with django_capture_on_commit_callbacks(execute=False):
        call_command("import_sessions", str(source), "--project", project.slug, stdout=io.StringIO())
    source.unlink()  # the caller's own file is not Replay's to keep
    return list(Session.objects.filter(project=project))


def _by_live_api(project, user, tmp_path, samples, django_capture_on_commit_callbacks) -> list[Session]:
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    every = " | ".join(samples.values())
    created = api.post(
        "/api/sessions", orjson.dumps({"project": project.slug, "task": f"live {every}", "metadata": {"k": every}}),
        content_type="application/json",
    )  # fmt: skip
    assert created.status_code == 201, created.content
    sid = created.json()["id"]
    records = [orjson.loads(line) for line in _lines(samples, "l").splitlines()[1:-1]]
    appended = api.post(
        f"/api/sessions/{sid}/events", orjson.dumps({"events": records}), content_type="application/json"
    )
    assert appended.status_code == 200, appended.content
    assert appended.json()["redactions"], "the answer counts what was redacted"
    ended = api.post(
        f"/api/sessions/{sid}/end", orjson.dumps({"status": "completed", "final_answer": f"done {every}"}),
        content_type="application/json",
    )  # fmt: skip
    assert ended.status_code == 200, ended.content
    return [Session.objects.get(pk=sid)]


def _by_live_stream_texts(project, user, tmp_path, samples, django_capture_on_commit_callbacks) -> list[Session]:
    """A live session created bare, whose stream says its task, ids and the rest itself (the
    session_start record): those fill the session's own texts, which were stored unredacted."""
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    created = api.post("/api/sessions", orjson.dumps({"project": project.slug}), content_type="application/json")
    assert created.status_code == 201, created.content
    sid = created.json()["id"]
    start = orjson.loads(_lines(samples, "s").splitlines()[0])
    every = " | ".join(samples.values())
    start["payload"] |= {"run_id": f"run {every}", "agent_id": f"agent {every}", "environment": f"env {every}",
                         "model": f"model {every}"}  # fmt: skip
    appended = api.post(f"/api/sessions/{sid}/events", orjson.dumps({"events": [start]}),
                        content_type="application/json")  # fmt: skip
    assert appended.status_code == 200, appended.content
    stored = Session.objects.get(pk=sid)
    assert stored.task.startswith("task s with") and stored.source_session_id  # filled from the stream
    return [stored]


def _by_bundle(project, user, tmp_path, samples, django_capture_on_commit_callbacks) -> list[Session]:
    """A bundle exported from a project without rules, imported into this one. The source
    session is then deleted with SQLite's secure_delete on (its freed pages zeroed) and its kept
    file removed, so what remains is only what the bundle's import stored."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA secure_delete = ON")
    plain = Project.objects.create(name="Plain", slug="plain")
    source = tmp_path / "plain.jsonl"
    source.write_bytes(_lines(samples, "b"))
    with django_capture_on_commit_callbacks(execute=False):
        (outcome,) = import_local_file(path=source, project=plain)
    origin = outcome.session
    bundle = tmp_path / "secrets.replay-bundle.zip"
    bundle.write_bytes(b"".join(stream_bundle(session=origin, exported_by="tests")))
    head = origin.head_hash
    kept = Path(origin.import_job.stored_path)
    Session.objects.filter(pk=origin.pk).delete()
    ImportJob.objects.filter(project=plain).delete()
    kept.unlink()
    source.unlink()
    with django_capture_on_commit_callbacks(execute=False):
        (imported,) = import_local_file(path=bundle, project=project)
    assert imported.error is None, imported.error
    session = imported.session
    assert session.head_hash == head, "the bundle's chain, head and all, survives the redaction"
    result = verify_session(session=session)
    assert result.valid, result.findings
    bundle.unlink()
    return [session]


def _by_agentlens_api(project, user, tmp_path, samples, django_capture_on_commit_callbacks) -> list[Session]:
    """AgentLens's own POST /api/events (sessions_app/api/agentlens.py)."""
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    every = " | ".join(samples.values())
    events = [
        {"sessionId": "al-secrets", "agentId": "agent", "eventType": "session_started",
         "timestamp": "2026-02-08T10:00:00Z", "payload": {"agentName": "a", "tags": [every]}},
        *({"sessionId": "al-secrets", "agentId": "agent", "eventType": "custom",
           "timestamp": f"2026-02-08T10:00:{i + 1:02d}Z", "payload": {"type": name, "data": {"text": sample}}}
          for i, (name, sample) in enumerate(samples.items())),
        {"sessionId": "al-secrets", "agentId": "agent", "eventType": "tool_call",
         "timestamp": "2026-02-08T10:01:00Z", "payload": {"toolName": "shell", "callId": "c1",
                                                         "arguments": {"cmd": every}}},
    ]  # fmt: skip
    response = api.post(
        f"/api/events?project={project.slug}", orjson.dumps({"events": events}), content_type="application/json"
    )
    assert response.status_code in (200, 201), response.content
    return list(Session.objects.filter(project=project))


def _by_otlp(project, user, tmp_path, samples, django_capture_on_commit_callbacks) -> list[Session]:
    """OpenTelemetry's POST /v1/traces: spans staged until their trace settles, then events."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    from sessions_app.ingest.traces import settle_traces

    every = " | ".join(samples.values())
    t0 = 1_770_000_000_000_000_000

    def span(span_id: str, parent: str, name: str, start: int, **attributes: str) -> Span:
        return Span(
            trace_id=bytes.fromhex("ab" * 16), span_id=bytes.fromhex(span_id), parent_span_id=bytes.fromhex(parent),
            name=name, start_time_unix_nano=t0 + start * 1_000_000, end_time_unix_nano=t0 + (start + 50) * 1_000_000,
            attributes=[KeyValue(key=k.replace("__", "."), value=AnyValue(string_value=v)) for k, v in attributes.items()],
            status=Status(code=Status.STATUS_CODE_ERROR, message=f"failed with {every}"),
        )  # fmt: skip

    root = "a0000000000000a1"
    spans = [
        span(root, "", "invoke_agent helper", 0, gen_ai__operation__name="invoke_agent", gen_ai__agent__name="helper"),
        span("b0000000000000b1", root, "chat m", 100, gen_ai__operation__name="chat", gen_ai__request__model="m",
             gen_ai__prompt=every, gen_ai__completion=every),
        span("b0000000000000b2", root, "execute_tool t", 300, gen_ai__operation__name="execute_tool",
             gen_ai__tool__name="t", gen_ai__tool__call__id="c1", gen_ai__tool__call__arguments=every),
    ]  # fmt: skip
    body = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])])
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    response = api.post("/v1/traces", body.SerializeToString(), content_type="application/x-protobuf")
    assert response.status_code == 200, response.content
    # Staged until the trace settles: stored already, so redacted already.
    staged = "\n".join(OtlpSpan.objects.filter(trace__project=project).values_list("record", flat=True))
    assert staged and not any(_found(staged.encode(), sample) for sample in samples.values())
    with django_capture_on_commit_callbacks(execute=False):
        settle_traces(quiet_seconds=0, orphan_seconds=0, now=timezone.now() + timedelta(seconds=1))
    sessions = list(Session.objects.filter(project=project))
    assert sessions and sum(s.event_count for s in sessions) >= 3
    return sessions


PATHS = {
    "upload": _by_upload, "command": _by_command, "live_api": _by_live_api,
    "live_stream_texts": _by_live_stream_texts, "bundle": _by_bundle,
    "agentlens_api": _by_agentlens_api, "otlp": _by_otlp,
}  # fmt: skip


# --- where a secret could be ----------------------------------------------------------------------


def _database_bytes(*, files: bool = True) -> bytes:
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        return connection.connection.serialize()
    # PostgreSQL: every row of every table, as text (compressed values too, decompressed)...
    out = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT t::text FROM "{table}" t')
            out.extend(row[0].encode() for row in cursor.fetchall())
        if files:
            out.extend(_postgres_files(cursor))
    return b"\n".join(out)


def _postgres_files(cursor) -> list[bytes]:
    """...and the bytes of the test database's files and of the WAL written lately, once a
    CHECKPOINT has written every page out (the test's rows are not committed, but their pages and
    WAL records are written all the same). Only where the server's data directory is on this
    machine and readable, as under .ci/with_postgres.py (a superuser of a throw-away server)."""
    try:
        cursor.execute("CHECKPOINT")
        cursor.execute(
            "SELECT current_setting('data_directory'), (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    except Exception:
        return []
    folder, oid = cursor.fetchone()
    base, wal = Path(folder) / "base" / str(oid), Path(folder) / "pg_wal"
    if not base.is_dir():
        return []
    lately = time.time() - 600
    files = [path for path in base.iterdir() if path.is_file()]
    files += [path for path in wal.iterdir() if path.is_file() and path.stat().st_mtime > lately]
    return [path.read_bytes() for path in files]


def _data_folder_bytes(data_dir: Path) -> bytes:
    if not data_dir.exists():
        return b""
    return b"\n".join(path.read_bytes() for path in sorted(data_dir.rglob("*")) if path.is_file())


def _responses(client: Client, session: Session) -> dict[str, bytes]:
    """Every page, API answer and export of the session (a bundle unpacked)."""
    sid = session.pk
    urls = [
        f"/api/sessions/{sid}", f"/api/sessions/{sid}/summary", f"/api/sessions/{sid}/replay",
        f"/api/sessions/{sid}/steps", f"/api/sessions/{sid}/checkpoints", f"/api/sessions/{sid}/comments",
        f"/api/sessions/{sid}/reviews", "/api/sessions", f"/sessions/{sid}/", f"/sessions/{sid}/charts/",
        "/sessions/", f"/api/sessions/{sid}/verify",
        *(f"/api/sessions/{sid}/export?format={f}" for f in ("jsonl", "snapshot", "original")),
        *(f"/sessions/{sid}/export/?format={f}" for f in ("jsonl", "snapshot", "original")),
        *(f"/sessions/{sid}/?step={seq}" for seq in range(session.event_count)),
        *(f"/api/sessions/{sid}/context?seq={seq}" for seq in range(session.event_count)),
    ]  # fmt: skip
    answers: dict[str, bytes] = {}
    for url in urls:
        response = client.get(url)
        if url.endswith("format=original") and response.status_code == 404:
            # No original records kept (the rules keep none): said, naming why, not an empty file.
            assert b"no original records are kept" in response.content, (url, response.content)
        else:
            assert response.status_code == 200, (url, response.status_code)
        answers[url] = b"".join(response.streaming_content) if response.streaming else response.content
    response = client.get(f"/api/sessions/{sid}/bundle")
    assert response.status_code == 200
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as archive:
        for name in archive.namelist():
            answers[f"bundle:{name}"] = archive.read(name)
    return answers


def _mcp_answers(user, session: Session) -> dict[str, bytes]:
    """What the MCP tools answer about the session (the functions behind the tools, called as
    the server calls them; tests/test_mcp.py drives the transports)."""
    actor, sid = Actor(user=user), str(session.pk)
    answers = {
        "mcp:replay_session": mcp_timeline.replay_session(actor=actor, session_id=sid),
        "mcp:find_errors": mcp_timeline.find_errors(actor=actor, session_id=sid),
        "mcp:list_sessions": mcp_finding.list_sessions(actor=actor),
        "mcp:get_comments": mcp_discussion.get_comments(actor=actor, session_id=sid),
    }
    for event in range(1, session.event_count + 1):
        answers[f"mcp:step_state {event}"] = mcp_state.step_state(actor=actor, session_id=sid, event=event)
    return {name: text.encode() for name, text in answers.items()}


def _found(haystack: bytes, needle: str) -> bool:
    # As stored, and as JSON writes it (a key block's lines joined by \n escapes).
    return needle.encode() in haystack or orjson.dumps(needle)[1:-1] in haystack


def _probe(needle: str) -> str:
    """What a search looks for: a secret's longest line (a key block's lines are stored joined by
    JSON's \\n escapes, which a search for the whole block would not match)."""
    return max(needle.splitlines(), key=len)


def _searches_find(client: Client, session: Session, needle: str) -> bool:
    hits = client.get(f"/api/sessions/{session.pk}/search", {"q": _probe(needle)}).json()["results"]
    page = client.get("/search/", {"q": _probe(needle)}).content.decode()
    return bool(hits) or "Nothing found" not in page


# --- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_with_every_detector_on_no_secret_is_stored_or_shown_by_any_ingest_path(
    admin, data_dir, tmp_path, samples, path, django_capture_on_commit_callbacks, caplog
):
    project, user = admin
    _rules(project, ALL)
    caplog.set_level(logging.DEBUG)
    sessions = PATHS[path](project, user, tmp_path, samples, django_capture_on_commit_callbacks)
    assert sessions
    client = _signed_in(user)
    # The bundle's source session held the secrets in this database before it was deleted: on
    # PostgreSQL its dead rows stay in the files until a VACUUM, which cannot run inside the
    # test's transaction, so there only the rows are read (SQLite's secure_delete zeroes them).
    database = _database_bytes(files=path != "bundle")
    files = _data_folder_bytes(data_dir)
    for session in sessions:
        answers = _responses(client, session) | _mcp_answers(user, session)
        for name, needle in samples.items():
            found_by_mcp = mcp_finding.search_events(actor=Actor(user=user), text=_probe(needle))
            assert found_by_mcp.startswith("No events in "), f"MCP's search_events finds {name} ({path})"
            assert not _found(database, needle), f"{name} is in the database ({path})"
            assert not _found(files, needle), f"{name} is in the data folder ({path})"
            for url, body in answers.items():
                assert not _found(body, needle), f"{name} is in {url} ({path})"
            assert not _searches_find(client, session, needle), f"search finds {name} ({path})"
            assert not _found(caplog.text.encode(), needle), f"{name} is in a log line ({path})"
        # What took its place says which rule removed it.
        payloads = " ".join(Event.objects.filter(session=session).values_list("payload", flat=True))
        for name in DETECTORS:
            assert f"[REDACTED:{name}]" in payloads, (name, path)


def test_with_no_rule_on_every_secret_is_kept_as_received(
    admin, data_dir, tmp_path, samples, django_capture_on_commit_callbacks
):
    project, user = admin
    (session,) = _by_command(project, user, tmp_path, samples, django_capture_on_commit_callbacks)
    database = _database_bytes()
    answers = _responses(_signed_in(user), session)
    shown_by_mcp = b"".join(_mcp_answers(user, session).values())
    if connection.vendor == "postgresql":  # the files' check finds a secret that is there
        with connection.cursor() as cursor:
            assert _found(b"".join(_postgres_files(cursor)), samples["email"])
    for name, needle in samples.items():
        assert _found(database, needle), name
        assert _found(answers[f"/api/sessions/{session.pk}/replay"], needle), name
        assert _found(shown_by_mcp, needle), name  # so the MCP check above can fail
        assert not mcp_finding.search_events(actor=Actor(user=user), text=_probe(needle)).startswith("No events in ")
        assert _searches_find(_signed_in(user), session, needle), name
    assert Path(session.import_job.stored_path).is_file(), "the original is kept as it always was"


@pytest.mark.parametrize("name", ALL)
def test_each_detector_redacts_its_own_secrets_and_an_off_detector_keeps_its_own(
    admin, data_dir, tmp_path, samples, name, django_capture_on_commit_callbacks
):
    project, user = admin
    _rules(project, [name])
    (session,) = _by_command(project, user, tmp_path, samples, django_capture_on_commit_callbacks)
    database = _database_bytes()
    assert not _found(database, samples[name])
    # Every other detector is off: its sample is stored.
    for other, needle in samples.items():
        if other != name:
            assert _found(database, needle), (name, other)
    report = session.import_job.result[0]["redactions"]
    assert set(report) == {name} and report[name] >= 5, report


def test_the_import_report_counts_redactions_by_label(
    admin, data_dir, tmp_path, samples, django_capture_on_commit_callbacks
):
    project, user = admin
    _rules(project, ["email", "ipv4"])
    (session,) = _by_upload(project, user, tmp_path, samples, django_capture_on_commit_callbacks)
    job = ImportJob.objects.get(pk=session.import_job_id)
    (entry,) = job.result
    assert set(entry["redactions"]) == {"email", "ipv4"} and entry["redactions"]["email"] >= 5
    status = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"}).get(f"/api/imports/{job.pk}")
    assert status.json()["sessions"][0]["redactions"] == entry["redactions"]
    page = _signed_in(user).get(f"/imports/{job.pk}/").content.decode()
    assert "email" in page and "Redacted" in page


def test_a_kept_original_is_kept_redacted(admin, data_dir, tmp_path, samples, django_capture_on_commit_callbacks):
    project, user = admin
    _rules(project, ALL, keep_originals=True)
    (session,) = _by_upload(project, user, tmp_path, samples, django_capture_on_commit_callbacks)
    kept = Path(session.import_job.stored_path).read_bytes()
    assert b"[REDACTED:email]" in kept and b"[REDACTED:private_key]" in kept
    for needle in samples.values():
        assert not _found(kept, needle)
    for line in kept.splitlines():
        orjson.loads(line)  # still one JSON record a line
    original = _signed_in(user).get(f"/api/sessions/{session.pk}/export?format=original")
    assert b"".join(original.streaming_content) == kept


def test_a_kept_original_with_a_line_too_long_to_redact_is_deleted_and_says_so(admin, data_dir, tmp_path, settings):
    # Redacting it meant decoding it whole: a 477 MiB line took 2 GiB (security sweep). It was
    # skipped by the import as over REPLAY_MAX_RECORD_BYTES; the kept copy cannot hold it as
    # received either, so the original goes, and the import's problems say why.
    project, user = admin
    _rules(project, ["email"], keep_originals=True)
    settings.MAX_RECORD_BYTES = 2048
    lines = _lines({"email": "ana@example.org"}).splitlines()
    long_line = orjson.dumps({"kind": "user_message", "payload": {"text": "ana@example.org " + "a" * 5000}})
    source = tmp_path / "long.jsonl"
    source.write_bytes(b"\n".join([lines[0], long_line, *lines[1:]]) + b"\n")
    (outcome,) = import_local_file(path=source, project=project)
    assert outcome.error is None and outcome.session.event_count == len(lines)
    job = ImportJob.objects.get(pk=outcome.session.import_job_id)
    problems = [p for p in job.problems if p["field"] == "original"]
    assert problems == [{"line": 2, "field": "original", "message":
                         "line 2 is over 2,048 bytes (REPLAY_MAX_RECORD_BYTES), too long to redact: "
                         "the kept original was deleted"}]  # fmt: skip
    assert not Path(job.stored_path).exists()
    assert not _found(_data_folder_bytes(data_dir), "ana@example.org")
    # Lines within the limit, a long one among them, are redacted as before.
    settings.MAX_RECORD_BYTES = 16 * 1024 * 1024
    source.write_bytes(b"\n".join([lines[0], long_line, *lines[1:]]) + b"\n")
    (again,) = import_local_file(path=source, project=project, replace=True)
    kept = Path(ImportJob.objects.get(pk=again.session.import_job_id).stored_path).read_bytes()
    assert b"[REDACTED:email]" in kept and not _found(kept, "ana@example.org") and b"a" * 5000 in kept


def test_live_events_keep_no_source_record_when_originals_are_not_kept(
    admin, data_dir, tmp_path, samples, django_capture_on_commit_callbacks
):
    project, user = admin
    _rules(project, ["email"])
    (session,) = _by_live_api(project, user, tmp_path, samples, django_capture_on_commit_callbacks)
    assert not Event.objects.filter(session=session, raw__isnull=False).exists()
    _rules(project, ["email"], keep_originals=True)
    (kept,) = [s for s in _by_live_api(project, user, tmp_path, samples, django_capture_on_commit_callbacks)]
    raws = list(Event.objects.filter(session=kept).values_list("raw", flat=True))
    assert all(raws) and any("[REDACTED:email]" in raw for raw in raws)
    assert verify_session(session=kept).valid


def test_a_card_number_failing_luhn_is_not_redacted():
    redactor = Redactor.from_rules(["card_number"])
    assert redactor.text("card 4111 1111 1111 1112 end") == "card 4111 1111 1111 1112 end"
    assert redactor.text("card 4111111111111111 end") == "card [REDACTED:card_number] end"
    # Neither milliseconds since 1970 nor the digits of a float, even when they pass Luhn.
    assert redactor.text("at 1700000000007 and 2.4000000000000004") == "at 1700000000007 and 2.4000000000000004"


def test_a_card_number_written_as_a_json_number_is_redacted():
    redactor = Redactor.from_rules(["card_number"])
    text = orjson.dumps({"card": 4111111111111111, "ms": 1700000000007, "n": 42}).decode()
    assert orjson.loads(redactor.json_text(text)) == {"card": "[REDACTED:card_number]", "ms": 1700000000007, "n": 42}


def test_validators_run_on_candidates_only():
    redactor = Redactor.from_rules(["iban", "ipv6", "phone", "ipv4"])
    assert redactor.text("DE89 3704 0044 0532 0130 00 ABCD") == "[REDACTED:iban] ABCD"
    assert redactor.text("DE00 3704 0044 0532 0130 00") == "DE00 3704 0044 0532 0130 00"  # mod 97 fails
    assert redactor.text("at 12:30:45 and std::vector") == "at 12:30:45 and std::vector"
    assert redactor.text("v 999.1.2.3 ok") == "v 999.1.2.3 ok"
    assert redactor.text("call +1 2") == "call +1 2"  # too few digits for a number
    assert dict(redactor.counts) == {"iban": 1}


def test_a_secret_after_a_json_escape_is_found():
    """JSON writes a newline before a key as \\n: the scan reads the JSON text, so a key right
    after it must still be found (the built-in screens need nothing before their match)."""
    redactor = Redactor.from_rules(["openai_key", "email"])
    value = {"text": "line one\n" + DETECTORS["openai_key"].example + "\tada.lovelace@example.org"}
    text = orjson.dumps(value).decode()
    assert (
        redactor.json_text(text) == orjson.dumps({"text": "line one\n[REDACTED:openai_key]\t[REDACTED:email]"}).decode()
    )


def test_custom_rules_redact_with_their_label_and_match_whole_strings():
    redactor = Redactor.from_rules([], [("ticket", r"ACME-[0-9]{6}"), ("whole", r"^internal-only$")])
    value = {"a": "see ACME-123456", "b": "internal-only", "c": "not internal-only"}
    out = orjson.loads(redactor.json_text(orjson.dumps(value).decode()))
    assert out == {"a": "see [REDACTED:ticket]", "b": "[REDACTED:whole]", "c": "not internal-only"}


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(?<=a)b", "not a valid RE2"), ("(a)\\1", "not a valid RE2"), ("[", "missing ]"), ("a*", "empty string"),
        ("(?P<x>a)", "named groups"), ("a" * 501, "at most 500"), ("(a{1,1000}){1,1000}", "not a valid RE2"),
    ],
)  # fmt: skip
def test_an_unusable_custom_rule_is_refused_naming_it(pattern, why):
    with pytest.raises(RuleError) as refused:
        check_custom_rule(pattern, "custom[3].pattern")
    assert refused.value.field == "custom[3].pattern" and why in str(refused.value)


def test_a_catastrophic_pattern_cannot_hang_a_scan():
    """RE2 runs in linear time: the classic (a+)+$ over a long run of a's returns at once."""
    redactor = Redactor.from_rules([], [("evil", r"(a+)+$")])
    assert redactor.text("a" * 100_000 + "!") == "a" * 100_000 + "!"


# --- the API and the page ------------------------------------------------------------------------


def test_admins_read_and_replace_the_rules_and_the_change_is_audited_without_patterns(admin):
    project, user = admin
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    assert api.get("/api/projects/acme/redaction").json()["detectors"] == dict.fromkeys(DETECTORS, False)
    body = {"detectors": {"email": True, "jwt": True}, "custom": [{"label": "ticket", "pattern": "ACME-[0-9]{6}"}]}
    response = api.put("/api/projects/acme/redaction", orjson.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    rules = response.json()
    assert [name for name, on in rules["detectors"].items() if on] == ["jwt", "email"]
    assert rules["custom"] == body["custom"] and rules["keep_originals"] is False
    assert rules["updated_by"] == "ada-admin"
    entry = AuditEntry.objects.get(action="redaction.change")
    assert "ACME-" not in entry.detail and orjson.loads(entry.detail)["custom_added"] == ["ticket"]


def test_a_rule_that_cannot_be_used_is_a_422_naming_it(admin):
    project, user = admin
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    body = {"custom": [{"label": "ok", "pattern": "x+"}, {"label": "bad", "pattern": "(unclosed"}]}
    response = api.put("/api/projects/acme/redaction", orjson.dumps(body), content_type="application/json")
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {"index": None, "field": "custom[1].pattern", "message": response.json()["errors"][0]["message"]}
    ]
    assert response.json()["detail"].startswith("custom[1].pattern: not a valid RE2 regular expression")
    unknown = api.put(
        "/api/projects/acme/redaction", b'{"detectors": {"emial": true}}', content_type="application/json"
    )
    assert unknown.status_code == 422 and unknown.json()["detail"].startswith("detectors.emial: unknown detector")
    assert not RedactionRules.objects.filter(project=project).exists()


def test_a_misspelt_field_is_refused_naming_it_and_changes_nothing(admin):
    project, user = admin
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    on = {"detectors": {"email": True}, "custom": [{"label": "ticket", "pattern": "T-[0-9]+"}]}
    assert api.put("/api/projects/acme/redaction", orjson.dumps(on), content_type="application/json").status_code == 200
    for body, field in (
        ({"detecters": {"email": True}}, "detecters"),
        ({"detectors": {"email": True}, "customs": []}, "customs"),
        ({"detectors": {}, "custom": [{"label": "x", "pattern": "y", "flags": "i"}]}, "custom.0.flags"),
    ):
        response = api.put("/api/projects/acme/redaction", orjson.dumps(body), content_type="application/json")
        assert response.status_code == 400, response.content
        assert response.json()["detail"] == f"{field}: Extra inputs are not permitted"
    rules = RedactionRules.objects.get(project=project)
    assert rules.detectors == ["email"] and rules.custom == [{"label": "ticket", "pattern": "T-[0-9]+"}]
    # What a GET answers (with its read-only updated_at and updated_by) may be sent back changed.
    read = api.get("/api/projects/acme/redaction").json()
    assert read["updated_by"] and read["updated_at"]
    read["detectors"]["ipv4"] = True
    sent = api.put("/api/projects/acme/redaction", orjson.dumps(read), content_type="application/json")
    assert sent.status_code == 200, sent.content
    assert RedactionRules.objects.get(project=project).detectors == ["email", "ipv4"]


def test_a_maintainer_may_neither_read_nor_change_the_rules(admin):
    project, _ = admin
    maintainer = member("max", project, Role.MAINTAINER)
    api = Client(headers={"authorization": f"Bearer {key_of(maintainer, project=project)}"})
    assert api.get("/api/projects/acme/redaction").status_code == 403
    assert api.put("/api/projects/acme/redaction", b"{}", content_type="application/json").status_code == 403
    assert _signed_in(maintainer).get("/projects/acme/redaction/").status_code == 403


def test_the_page_saves_the_rules_and_shows_a_refused_rule_by_its_line(admin):
    project, user = admin
    client = _signed_in(user)
    page = client.get("/projects/acme/redaction/")
    assert page.status_code == 200 and "Redaction is <strong>off</strong>" in page.content.decode()
    saved = client.post(
        "/projects/acme/redaction/", {"detectors": ["email", "ipv4"], "custom": "ticket = ACME-[0-9]{6}\n"}
    )
    assert saved.status_code == 302
    assert RedactionRules.objects.get(project=project).detectors == ["email", "ipv4"]
    assert "Redaction is <strong>on</strong>" in client.get("/projects/acme/redaction/").content.decode()
    refused = client.post("/projects/acme/redaction/", {"custom": "ok = x+\n\nbad = (unclosed\n"})
    assert refused.status_code == 400
    assert "line 3 (bad): not a valid RE2 regular expression" in refused.content.decode()


def test_the_page_names_every_line_to_mend_in_one_answer(admin):
    project, user = admin
    client = _signed_in(user)
    written = "ok = x+\nno equals sign\nempty = a*\nok = y+\n = z\nbad = (unclosed\n"
    refused = client.post("/projects/acme/redaction/", {"custom": written})
    assert refused.status_code == 400
    errors = re.findall(r"<p class=\"error\">(line \d[^<]*)</p>", refused.content.decode())
    assert [error.split(":")[0] for error in errors] == [
        "line 2",
        "line 3 (empty)",
        "line 4 (ok)",
        "line 5",
        "line 6 (bad)",
    ]
    assert "the pattern matches the empty string" in errors[1] and "is taken already" in errors[2]
    # Every line well written: the rules' own checks, every one named too.
    refused = client.post("/projects/acme/redaction/", {"custom": "empty = a*\nfine = b+\nbad = (unclosed\n"})
    errors = re.findall(r"<p class=\"error\">(line \d[^<]*)</p>", refused.content.decode())
    assert [error.split(":")[0] for error in errors] == ["line 1 (empty)", "line 3 (bad)"]
    assert not RedactionRules.objects.filter(project=project).exists()
    # The API lists every one too; its detail names the first.
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    body = {"custom": [{"label": "e", "pattern": "a*"}, {"label": "f", "pattern": "b"}, {"label": "g", "pattern": "("}]}
    response = api.put("/api/projects/acme/redaction", orjson.dumps(body), content_type="application/json")
    assert response.status_code == 422 and response.json()["detail"].startswith("custom[0].pattern: the pattern")
    assert [e["field"] for e in response.json()["errors"]] == ["custom[0].pattern", "custom[2].pattern"]


def test_saving_the_rules_does_not_need_a_sample_and_testing_does(admin):
    # "Save rules" and "Test" share one form: the browser must not demand a sample to save.
    project, user = admin
    client = _signed_in(user)
    page = client.get("/projects/acme/redaction/").content.decode()
    sample = re.search(r"<textarea[^>]*name=\"sample\"[^>]*>", page).group(0)
    assert "required" not in sample
    assert not re.search(r"<(input|textarea|select)[^>]*\srequired[\s>]", page[page.index('id="redaction-form"') :])
    assert client.post("/projects/acme/redaction/", {"detectors": ["email"]}).status_code == 302
    missing = client.post("/projects/acme/redaction/try/", {"detectors": ["email"]}, headers={"HX-Request": "true"})
    assert missing.status_code == 400 and "Sample text: This field is required." in missing.content.decode()
    # A save refused for a bad rule keeps the sample typed below it (a walkthrough lost it).
    refused = client.post("/projects/acme/redaction/", {"custom": "bad = (?<=x)y", "sample": "mail ada@example.org"})
    assert refused.status_code == 400
    kept = re.search(r"<textarea[^>]*name=\"sample\"[^>]*>(.*?)</textarea>", refused.content.decode(), re.S).group(1)
    assert kept.strip() == "mail ada@example.org"


def test_the_test_box_shows_what_a_sample_becomes_escaped_and_stores_nothing(admin):
    project, user = admin
    client = _signed_in(user)
    sample = '<script>alert("x")</script> mail ada.lovelace@example.org <b>bold</b>'
    before = (AuditEntry.objects.count(), RedactionRules.objects.count())
    response = client.post(
        "/projects/acme/redaction/try/", {"detectors": ["email"], "sample": sample}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="redaction-preview"'), "the partial alone"
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; mail [REDACTED:email] &lt;b&gt;bold&lt;/b&gt;" in body
    assert "<script>" not in body and "<b>" not in body and "email: 1" in body
    assert (AuditEntry.objects.count(), RedactionRules.objects.count()) == before
    # Without htmx the whole page answers, the preview in it.
    full = client.post("/projects/acme/redaction/try/", {"detectors": ["email"], "sample": "a ada@example.org"})
    assert full.status_code == 200 and "<h1" in full.content.decode() and "[REDACTED:email]" in full.content.decode()
    # A rule that cannot be used says so in the preview.
    bad = client.post(
        "/projects/acme/redaction/try/", {"custom": "x = (", "sample": "s"}, headers={"HX-Request": "true"}
    )
    assert bad.status_code == 400 and "not a valid RE2 regular expression" in bad.content.decode()


def test_the_api_test_box_answers_the_redacted_sample(admin):
    project, user = admin
    api = Client(headers={"authorization": f"Bearer {key_of(user, project=project)}"})
    body = {"detectors": {"phone": True}, "custom": [{"label": "ticket", "pattern": "ACME-[0-9]{6}"}],
            "text": "call +44 20 7946 0958 about ACME-123456"}  # fmt: skip
    response = api.post("/api/projects/acme/redaction/try", orjson.dumps(body), content_type="application/json")
    assert response.json() == {
        "text": "call [REDACTED:phone] about [REDACTED:ticket]",
        "redactions": {"phone": 1, "ticket": 1},
    }


def test_a_sessions_short_texts_are_redacted_before_they_are_cut(admin):
    # Cut first, a secret across the 200th character kept its first part ("ana@exam"), and a
    # placeholder longer than what it replaced could pass the column's size (review).
    from sessions_app.canonical import SessionMeta
    from sessions_app.ingest.writer import create_session

    project, _ = admin
    _rules(project, ["email"])
    near_the_end = "a" * 190 + " ana@example.org"
    session = create_session(project=project, source_format="canonical",
                             meta=SessionMeta(agent_id=near_the_end, model="m " + "x@y.io " * 40))  # fmt: skip
    stored = Session.objects.get(pk=session.pk)
    assert "ana@exam" not in stored.agent_id and stored.agent_id.startswith("a" * 190 + " [REDACTED")
    assert len(stored.agent_id) <= 200 and len(stored.model) <= 200 and "@" not in stored.model


def test_lines_up_to_the_limit_are_redacted_whatever_their_line_ending_and_one_past_it_is_refused():
    import io

    from sessions_app.redaction import LineTooLong

    redactor = Redactor.from_rules(["email"])
    body = b'{"m": "ana@example.org ' + b"x" * 20 + b'"}'
    for ending in (b"\n", b"\r\n", b""):
        out = b"".join(redactor.lines(io.BytesIO(body + ending), max_line=len(body)))
        assert b"[REDACTED:email]" in out and out.endswith(ending), ending
        with pytest.raises(LineTooLong, match="line 1 is over"):
            list(redactor.lines(io.BytesIO(body + ending), max_line=len(body) - 1))
