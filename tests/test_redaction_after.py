"""Redaction after the fact (issue 22, items 3-5): a maintainer removes a value from a stored
session, from every copy the server holds and from the database file itself, and the chain still
proves everything else: verify stays valid and lists the redaction, another edit is still found
at its seq, sign-offs stay valid, bundles carry the redactions and verify_bundle checks them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import orjson
import pytest
from django.apps import apps
from django.conf import settings
from django.db import connection
from django.test import Client

from sessions_app import comments, jobs, sharing, stored_redaction, tours
from sessions_app.access import Actor
from sessions_app.bundle_reader import BundleError, read_bundle
from sessions_app.ingest.bundles import import_bundle
from sessions_app.ingest.importing import import_local_file
from sessions_app.ingest.writer import set_checkpoint
from sessions_app.mcp import discussion, finding, state, timeline
from sessions_app.models import (
    AuditEntry,
    Checkpoint,
    Comment,
    CommentRevision,
    Event,
    ImportJob,
    OtlpSpan,
    OtlpTrace,
    Project,
    RedactionJob,
    RedactionRules,
    Review,
    Role,
    Session,
    Tour,
    TourStop,
)
from sessions_app.replay.sign_offs import sign_offs_of
from sessions_app.reviews import sign_off
from sessions_app.stored_redaction import RedactionRefused, redact_text
from sessions_app.verification import verify_session

from .builders_teams import acme, member  # noqa: F401  (fixtures)
from .redaction_file_db import CHANGE_SEQ, SECRET, SECRET_SEQS, STEP_SEQ, TAMPERED_SEQ, session_lines

ROOT = Path(__file__).resolve().parent.parent
SMALL = 600  # events of the in-process session; the database-file tests use 10,000
SMALL_SEQS = (3, 400, 598)
SMALL_STEP, SMALL_CHANGE = 501, 502
CHANGE_EVENT = SMALL_CHANGE + 1  # the MCP tools count events from 1, as people do
PLACEHOLDER = "[REDACTED:apikey]"


def small_lines() -> bytes:
    """session_lines' shape at SMALL events: the secret at SMALL_SEQS, a step and a change."""
    lines = session_lines(count=SMALL, secret="SECRETPLACE").splitlines()
    out = []
    for i, line in enumerate(lines):
        record = orjson.loads(line)
        if i in SMALL_SEQS:
            record["payload"]["prompt"] = f"use the key {SECRET} please"
        if i == SMALL_STEP:
            record.update(kind="step_end", step_state={"step": 1, "output": f"got {SECRET}", "success": True})
        if i == SMALL_CHANGE:
            record["state_change"] = {"variables": {"api_key": SECRET}, "memory": [f"remember {SECRET}"]}
        out.append(orjson.dumps(record))
    return b"\n".join(out) + b"\n"


@pytest.fixture
def mia(acme):  # noqa: F811
    return member("mia", acme, Role.MAINTAINER)


@pytest.fixture
def stored(acme, mia, tmp_path) -> Session:  # noqa: F811
    """A session imported from a file (its original kept) holding the secret in three payloads, a
    step's output, a state change (so in keyframes and the saved writer state), its task, a
    comment and an edited reply, a checkpoint's note, a tour (and one deleted) and its stop, a share link's note, a
    sign-off's note, its import job's problems and an OpenTelemetry span waiting to be written."""
    path = tmp_path / "with-secret.jsonl"
    path.write_bytes(small_lines())
    (outcome,) = import_local_file(path=path, project=acme)
    session = outcome.session
    # As a writer stores a task: with its seal (verify would otherwise report the edit).
    Session.objects.filter(pk=session.pk).update(task=f"Call the API with {SECRET}")
    Session.objects.filter(pk=session.pk).reseal(["task"])
    actor = Actor(user=mia)
    comments.create_comment(actor=actor, session=session, seq=3, body=f"Is `{SECRET}` live?")
    reply = comments.create_comment(actor=actor, session=session, seq=3, body=f"yes: {SECRET}",
                                    parent=None)  # fmt: skip
    comments.edit_comment(actor=actor, comment=reply, body="it was revoked")
    set_checkpoint(session=session, name="leak", seq=3, created_by="mia", note=f"the key {SECRET} leaks here")
    # Made and deleted as users do, with their audit entries: the log, never rewritten, must
    # not have kept a title (it did, in tour.create and tour.delete).
    tour = tours.create_tour(
        actor=actor, project=acme, title=f"onboarding {SECRET}", description=f"how {SECRET} leaked"
    )
    gone = tours.create_tour(actor=actor, project=acme, title=f"draft about {SECRET}")
    tours.delete_tour(actor=actor, tour=gone)
    TourStop.objects.create(tour=tour, position=0, session=session, seq=3, title="the leak",
                            narration=f"see {SECRET}")  # fmt: skip
    sharing.create_link(actor=actor, session=session, note=f"for the vendor, key {SECRET}")
    sharing.create_link(actor=actor, tour=tour, note=f"the tour of {SECRET}")
    trace = OtlpTrace.objects.create(project=acme, trace_id="ab" * 16, session=session)
    OtlpSpan.objects.create(trace=trace, span_id="cd" * 8, operation="chat", start_ns=1,
                            record=orjson.dumps({"attributes": {"prompt": f"key {SECRET}"}}).decode())  # fmt: skip
    job = session.import_job
    job.problems = [{"line": 9, "field": "payload", "message": f"odd value {SECRET}"}]
    job.save(update_fields=["problems"])
    sign_off(session=session, reviewer=actor, verdict="approved", note=f"checked {SECRET}")
    return Session.objects.get(pk=session.pk)


@pytest.fixture
def maintainer(mia) -> Client:
    client = Client()
    client.force_login(mia)
    return client


@pytest.fixture
def viewer(acme) -> Client:  # noqa: F811
    client = Client()
    client.force_login(member("vic", acme, Role.VIEWER))
    return client


def redact_by_api(client: Client, session: Session, text: str = SECRET, seq: int = 3, label: str = "apikey"):
    return client.post(f"/api/sessions/{session.pk}/redactions", {"text": text, "seq": seq, "label": label},
                       content_type="application/json")  # fmt: skip


def rows_holding(value: str) -> list[str]:
    """Every row of every table of the app (and Django's) whose values hold `value`."""
    found = []
    for model in apps.get_models():
        for row in model.objects.values():
            if value in str(row) or value.encode() in repr(row).encode():
                found.append(f"{model._meta.label} {row.get('id')}")
    return found


def files_holding(value: str, folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]


def body_of(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


# --- the value leaves every stored copy -------------------------------------------------------


def test_a_redacted_value_is_gone_from_every_row_and_file_and_becomes_its_placeholder(stored, maintainer):
    assert rows_holding(SECRET) and files_holding(SECRET, Path(settings.DATA_DIR))  # it was there
    response = redact_by_api(maintainer, stored)
    assert response.status_code == 200, response.content
    result = response.json()
    assert result["events"] == 5 and result["seqs"] == [[3, 3], [400, 400], [501, 502], [598, 598]]
    assert result["byLabel"] == {"apikey": 6}  # three prompts, a step output, a variable and a note
    assert result["fields"] == {"payload": 3, "step_state": 1, "state_change": 1}
    assert result["original"] == "rewritten"
    assert {"session", "snapshots", "comment", "commentrevision", "checkpoint", "tourstop", "tour", "sharelink", "review",
            "import_job", "otlp_span"} <= set(result["elsewhere"])  # fmt: skip
    assert rows_holding(SECRET) == []
    assert files_holding(SECRET, Path(settings.DATA_DIR)) == []
    event = Event.objects.get(session=stored, seq=3)
    assert orjson.loads(event.payload)["prompt"] == f"use the key {PLACEHOLDER} please"
    assert event.salt == "" and orjson.loads(event.redacted)["fields"]["payload"]["labels"] == ["apikey"]
    stored.refresh_from_db()
    assert stored.task == f"Call the API with {PLACEHOLDER}"
    assert stored.ingest_state["variables"]["api_key"] == PLACEHOLDER
    # The staged span's trace counts its record as it is now (the storage quota reads that count).
    span = OtlpSpan.objects.get(trace__session=stored)
    assert PLACEHOLDER in span.record and span.trace.staged_chars == len(span.record)


def test_a_value_selected_as_shown_in_json_is_found_in_its_decoded_string(stored, maintainer):
    # The player shows payloads as JSON: a selected line break is the two characters \n.
    Event.objects.filter(session=stored, seq=7).update(payload=orjson.dumps({"note": "first\nsecond line"}).decode())
    Event.objects.filter(session=stored, seq=7).update(redacted=None)
    response = redact_by_api(maintainer, stored, text='"first\\nsecond"', seq=7, label="note")
    assert response.status_code == 200, response.content
    assert orjson.loads(Event.objects.get(session=stored, seq=7).payload) == {"note": "[REDACTED:note] line"}


def test_an_original_with_a_line_too_long_to_rewrite_is_deleted(stored, settings):
    # Its lines are redacted one by one, each decoded whole: past the import's record limit a line
    # is not (a 477 MiB line took 2 GiB), and the original is not kept as received either.
    kept = Path(stored.import_job.stored_path)
    assert max(len(line) for line in kept.read_bytes().splitlines()) > 40
    settings.MAX_RECORD_BYTES = 40
    result = redact_text(session=stored, seq=3, text=SECRET, label="apikey", actor="mia")
    assert result.original == "deleted" and not kept.exists() and result.seqs
    assert files_holding(SECRET, Path(settings.DATA_DIR)) == []


def test_an_original_a_rewrite_cannot_rid_of_the_value_is_deleted(stored, monkeypatch):
    kept = Path(stored.import_job.stored_path)
    # A rewrite that leaves a spelling of the value (a text file's record spanning lines, say).
    monkeypatch.setattr("sessions_app.redaction.Redactor.lines", lambda self, source, max_line: iter(source))
    result = redact_text(session=stored, seq=3, text=SECRET, label="apikey", actor="mia")
    assert result.original == "deleted" and not kept.exists()
    assert files_holding(SECRET, Path(settings.DATA_DIR)) == []
    assert Session.objects.get(pk=stored.pk).import_job.original_deleted_at is not None


def test_the_audit_entry_names_who_which_seqs_and_labels_but_never_the_value(stored, maintainer):
    redact_by_api(maintainer, stored)
    entry = AuditEntry.objects.get(action="session.redact")
    detail = orjson.loads(entry.detail)
    assert entry.actor == "mia" and entry.target == f"session:{stored.pk}" and entry.ip == "127.0.0.1"
    assert detail["seqs"] == "3,400,501-502,598" and detail["labels"] == {"apikey": 6}
    assert detail["how"] == "selection" and detail["selected_at"] == 3
    assert SECRET not in entry.detail


def test_the_value_is_in_no_page_api_answer_search_export_or_bundle(stored, maintainer, viewer, mia):
    link, token = sharing.create_link(actor=Actor(user=mia), session=stored, note="", allow_export=True)
    assert redact_by_api(maintainer, stored).status_code == 200
    base = f"/api/sessions/{stored.pk}"
    answers = {
        url: viewer.get(url)
        for url in (
            f"{base}", f"{base}/summary", f"{base}/replay?limit=1000", f"{base}/steps", f"{base}/context?seq=502",
            f"{base}/context?seq=3", f"{base}/search?q=TOPSECRET", f"{base}/comments", f"{base}/reviews",
            f"{base}/checkpoints", f"{base}/verify", f"{base}/redactions", f"{base}/export?format=jsonl",
            f"{base}/export?format=snapshot", f"{base}/export?format=original", f"{base}/bundle",
            f"/sessions/{stored.pk}/", f"/sessions/{stored.pk}/?step=3", f"/sessions/{stored.pk}/?step=502",
            f"/sessions/{stored.pk}/?step=501", f"/sessions/{stored.pk}/charts/", f"/sessions/{stored.pk}/redactions/",
            f"/sessions/{stored.pk}/search/?q=TOPSECRET", "/search/?q=TOPSECRET", "/sessions/?q=TOPSECRET",
            f"/imports/{stored.import_job_id}/", "/api/sessions?q=Call",
        )
    }  # fmt: skip
    visitor = Client()
    answers["share link"] = visitor.get(f"/s/{token}", follow=True)
    answers["share link export"] = visitor.get(f"/sessions/{stored.pk}/export/?format=original")
    for where, response in answers.items():
        assert response.status_code == 200, (where, response.status_code)
        assert SECRET.encode() not in body_of(response), where
    # The MCP tools' answers (each tool is one of these read functions, sessions_app/mcp/server.py).
    actor = Actor(user=member("vic", stored.project, Role.VIEWER))
    for tool, answer in {
        "replay_session": timeline.replay_session(actor=actor, session_id=str(stored.pk)),
        "step_state": state.step_state(actor=actor, session_id=str(stored.pk), event=CHANGE_EVENT),
        "search_events": finding.search_events(actor=actor, text="TOPSECRET"),
        "list_sessions": finding.list_sessions(actor=actor),
        "get_comments": discussion.get_comments(actor=actor, session_id=str(stored.pk)),
    }.items():
        assert SECRET not in answer, tool
    assert "[REDACTED:apikey]" in state.step_state(actor=actor, session_id=str(stored.pk), event=CHANGE_EVENT)
    assert viewer.get(f"{base}/search?q=TOPSECRET").json()["results"] == []
    found = viewer.get(f"{base}/search", {"q": PLACEHOLDER}).json()["results"]
    assert [hit["seq"] for hit in found] == [3, 400, 501, 598]  # search reads payloads and step states


# --- the chain survives -------------------------------------------------------------------------


def test_verify_stays_valid_and_lists_the_redactions(stored, maintainer, viewer):
    head = stored.head_hash
    redact_by_api(maintainer, stored)
    body = viewer.get(f"/api/sessions/{stored.pk}/verify").json()
    assert body["chainValid"] is True and body["findings"] == [] and body["head"] == head
    assert body["redactionCount"] == 5
    assert [(r["seq"], r["field"], r["label"], r["by"]) for r in body["redactions"]] == [
        (3, "payload", "apikey", "mia"), (400, "payload", "apikey", "mia"), (501, "step_state", "apikey", "mia"),
        (502, "state_change", "apikey", "mia"), (598, "payload", "apikey", "mia"),
    ]  # fmt: skip
    page = viewer.post(f"/sessions/{stored.pk}/verify/", HTTP_HX_REQUEST="true")
    assert b"verified at" in page.content and b"5 redactions" in page.content
    listed = viewer.get(f"/sessions/{stored.pk}/redactions/", HTTP_HX_REQUEST="true").content.decode()
    assert "5 events with redacted values" in listed and "state_change" in listed and "mia" in listed
    # Each removal's time as every time on the page reads (it had shown "2026-11-29T02:55").
    when = re.findall(r'<time datetime="([^"]+)">([^<]+)</time></td></tr>', listed)
    assert len(when) == 5 and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", shown) for _, shown in when), when
    assert all(moment.endswith("+00:00") for moment, _ in when)
    # A time UTC takes past the calendar (a bundle restored from elsewhere may hold any): shown
    # as recorded, where it had made the panel a 400.
    event = Event.objects.get(session=stored, seq=3)
    form = orjson.loads(event.redacted)
    form["fields"]["payload"]["at"] = "0001-01-01T00:00:00+14:00"
    Event.objects.filter(pk=event.pk).update(redacted=orjson.dumps(form).decode())
    listed = viewer.get(f"/sessions/{stored.pk}/redactions/", HTTP_HX_REQUEST="true")
    assert listed.status_code == 200 and "0001-01-01T00:00:00+14:00" in listed.content.decode()


@pytest.mark.parametrize("seq", [TAMPERED_SEQ % SMALL, SMALL_SEQS[0]])
def test_an_edit_to_another_event_or_another_field_is_still_found_at_its_seq(stored, maintainer, seq):
    redact_by_api(maintainer, stored)
    # seq 3's payload was redacted: its step_state (kept, with its own salt) is the other field.
    column, value = ("payload", '{"i":1}') if seq != SMALL_SEQS[0] else ("step_state", '{"step":9}')
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Event._meta.db_table} SET {column} = %s WHERE session_id = %s AND seq = %s",
                       [value, stored.pk, seq])  # fmt: skip
    result = verify_session(session=stored, record=False)
    assert not result.valid and result.first_broken_seq == seq


def test_an_edit_of_the_text_a_redaction_left_is_found_at_its_seq(stored, maintainer):
    redact_by_api(maintainer, stored)
    Event.objects.filter(session=stored, seq=400).update(payload='{"i":400,"prompt":"approve the transfer"}')
    result = verify_session(session=stored, record=False)
    assert not result.valid and result.first_broken_seq == 400
    assert result.findings[0]["field"] == "payload" and "redaction left" in result.findings[0]["why"]


def test_a_sign_off_made_before_the_redaction_stays_valid(stored, maintainer):
    (before,) = sign_offs_of(session=stored)
    assert before.coverage.unchanged
    redact_by_api(maintainer, stored)
    (after,) = sign_offs_of(session=stored)
    assert after.coverage.unchanged and after.review.chain_head == Session.objects.get(pk=stored.pk).head_hash
    page = maintainer.get(f"/sessions/{stored.pk}/").content.decode()
    assert "the events it covered changed" not in page


def test_comments_and_notes_a_redaction_changed_say_who_changed_them_and_when(stored, maintainer, viewer, mia, other,
                                                                              tmp_path):  # fmt: skip
    # Their authors did not write the placeholders: every place that shows them says so.
    untouched = comments.create_comment(actor=Actor(user=mia), session=stored, seq=3, body="nothing secret here")
    assert not Comment.objects.filter(redacted_at__isnull=False).exists()
    assert redact_by_api(maintainer, stored).status_code == 200
    first, edited, plain = Comment.objects.filter(session=stored).order_by("pk")
    assert plain.pk == untouched.pk and (plain.redacted_by, plain.redacted_at) == ("", None)
    assert first.redacted_by == "mia" and first.redacted_at is not None and PLACEHOLDER in first.body
    # The second's body never held the value, its earlier revision did: the comment is marked.
    assert edited.body == "it was revoked" and edited.redacted_by == "mia" and edited.redacted_at == first.redacted_at
    review = Review.objects.get(session=stored)
    assert review.redacted_by == "mia" and review.redacted_at == first.redacted_at
    base = f"/api/sessions/{stored.pk}"
    threads = viewer.get(f"{base}/comments").json()
    marks = [(c["body"][:9], c["redacted_by"], c["redacted_at"] is not None) for c in threads]
    assert marks == [("Is `[REDA", "mia", True), ("it was re", "mia", True), ("nothing s", "", False)]
    [signed] = viewer.get(f"{base}/reviews").json()
    assert signed["redacted_by"] == "mia" and signed["redacted_at"].startswith(str(review.redacted_at.year))
    page = viewer.get(f"/sessions/{stored.pk}/?step=3").content.decode()
    assert page.count("changed by a redaction by <bdi>mia</bdi>, <time") == 3  # two comments and the note
    assert "note changed by a redaction by <bdi>mia</bdi>" in page
    actor = Actor(user=member("vic", stored.project, Role.VIEWER))
    said = discussion.get_comments(actor=actor, session_id=str(stored.pk))
    assert said.count("(changed by a redaction by mia at ") == 2
    # A bundle carries the marks, and a copy restored from it keeps them (the bundle's word).
    path = tmp_path / "marked.zip"
    path.write_bytes(body_of(viewer.get(f"{base}/bundle")))
    listed = orjson.loads(zipfile.ZipFile(path).read("comments.json"))
    assert [(c["redacted_by"], bool(c["redacted_at"])) for c in listed] == [
        ("mia", True), ("mia", True), ("", False)
    ]  # fmt: skip
    copy, _bundle, _existing = import_bundle(path=path, project=other)
    restored = Comment.objects.filter(session=copy).order_by("pk")
    assert [c.redacted_by for c in restored] == ["mia", "mia", ""]
    assert Review.objects.get(session=copy).redacted_by == "mia"


# Markdown spellings that hold no SECRET as written, yet show it on the page or reach it by a click.
_DISGUISED = (
    SECRET[:-5] + "&#" + str(ord(SECRET[-5])) + ";" + SECRET[-4:],  # a character reference
    SECRET.replace("-", "\\-"),  # backslash escapes
    SECRET[:10] + "**" + SECRET[10:14] + "**" + SECRET[14:],  # emphasis splitting it
    SECRET[:10] + "`" + SECRET[10:14] + "`" + SECRET[14:],  # a code span in its middle
    "[the docs](https://x.example/" + SECRET[:-1] + "%" + format(ord(SECRET[-1]), "02X") + ")",  # a link's target
    SECRET[:12] + "&shy;" + SECRET[12:],  # characters that show nothing: a soft hyphen,
    SECRET[:12] + "&#8203;" + SECRET[12:],  # a zero-width space by reference,
    SECRET[:12] + "\ufeff" + SECRET[12:],  # a byte order mark as it is
)


def _shows(html: str) -> str:
    import html as html_module
    from urllib.parse import unquote

    from sessions_app.lookalikes import without_hidden

    # What a reader sees (tags gone, references read) and what a link reaches or says on hover.
    targets = " ".join(re.findall(r'(?:href|title)="([^"]*)"', html))
    return without_hidden(unquote(html_module.unescape(re.sub(r"<[^>]+>", "", html) + " " + targets)))


@pytest.mark.parametrize("spelling", _DISGUISED)
def test_a_redaction_covers_what_markdown_shows_not_only_how_it_is_spelled(stored, maintainer, viewer, mia, spelling):
    # A comment, an earlier body, a tour's description and a stop's narration spelling the value
    # with an entity, an escape, emphasis or a percent-encoded link showed it after the redaction.
    from sessions_app.markdown import render_markdown

    actor = Actor(user=mia)
    assert SECRET not in spelling and SECRET in _shows(str(render_markdown(spelling)))
    comment = comments.create_comment(actor=actor, session=stored, seq=3, body=f"see {spelling} *here*")
    comments.edit_comment(actor=actor, comment=comment, body=f"again {spelling}")
    tour = Tour.objects.get(title__startswith="onboarding")
    tours.change_tour(actor=actor, tour=tour, title=tour.title, description=f"how {spelling} leaked")
    TourStop.objects.filter(tour=tour).update(narration=f"look: {spelling}")
    fine = comments.create_comment(actor=actor, session=stored, seq=3, body="*nothing* [here](https://x.example/a)")
    assert redact_by_api(maintainer, stored).status_code == 200
    for model, field in ((Comment, "body"), (CommentRevision, "body"), (Tour, "description"), (TourStop, "narration")):
        for text in model.objects.values_list(field, flat=True):
            assert SECRET not in _shows(str(render_markdown(text))), (model.__name__, text)
    player = viewer.get(f"/sessions/{stored.pk}/?step=3").content.decode()
    tour_page = viewer.get(f"/tours/{tour.pk}/").content.decode()
    assert SECRET not in _shows(player) and SECRET not in _shows(tour_page)
    assert "[REDACTED:apikey]" in _shows(tour_page)
    fine.refresh_from_db()
    assert fine.body == "*nothing* [here](https://x.example/a)" and fine.redacted_at is None  # Markdown kept


def test_bundles_carry_the_redactions_and_verify_bundle_checks_them(stored, maintainer, viewer, tmp_path, other):
    redact_by_api(maintainer, stored)
    path = tmp_path / "bundle.zip"
    path.write_bytes(body_of(viewer.get(f"/api/sessions/{stored.pk}/bundle")))
    assert SECRET.encode() not in b"".join(zipfile.ZipFile(path).read(n) for n in zipfile.ZipFile(path).namelist())
    bundle = read_bundle(path)
    assert bundle.chain_valid and len(bundle.redactions) == 5
    assert {(r["seq"], r["field"], r["label"]) for r in bundle.redactions} >= {(502, "state_change", "apikey")}
    # The redaction list must say what the events' records say, no less...
    listed = orjson.loads(zipfile.ZipFile(path).read("redactions.json"))
    with pytest.raises(BundleError, match="redactions.json"):
        read_bundle(_rewritten(path, "redactions.json", orjson.dumps(listed[1:]), tmp_path))
    # ...and a redacted event's kept commitment is what its link was sealed with.
    lines = zipfile.ZipFile(path).read("events.jsonl").splitlines()
    line = orjson.loads(lines[400])
    line["redacted"] = line["redacted"].replace(orjson.loads(line["redacted"])["fields"]["payload"]["commit"], "0" * 64)
    lines[400] = orjson.dumps(line)
    with pytest.raises(BundleError, match=r"seq 400\): field hash"):
        read_bundle(_rewritten(path, "events.jsonl", b"\n".join(lines) + b"\n", tmp_path))
    # Imported elsewhere, the session verifies and lists the same redactions.
    copy, _bundle, _existing = import_bundle(path=path, project=other)
    result = verify_session(session=copy, record=False)
    assert result.valid and result.redaction_count == 5


def test_a_bundle_uploaded_as_a_file_is_deleted_with_the_value(stored, viewer, other, tmp_path):
    path = tmp_path / "unredacted.replay-bundle.zip"
    path.write_bytes(body_of(viewer.get(f"/api/sessions/{stored.pk}/bundle")))
    (outcome,) = import_local_file(path=path, project=other)
    copy = outcome.session
    upload = ImportJob.objects.get(project=other, detected_format="replay_bundle", result__isnull=False,
                                   pk__lt=copy.import_job_id)  # fmt: skip
    kept_zip = Path(upload.stored_path)
    with zipfile.ZipFile(kept_zip) as kept:  # compressed: the secret is in its members' bytes
        assert SECRET.encode() in kept.read("events.jsonl")
    result = redact_text(session=copy, seq=3, text=SECRET, label="apikey", actor="mia")
    assert result.elsewhere["bundle_upload"] == 1 and result.original == "rewritten"
    assert not kept_zip.exists() and ImportJob.objects.get(pk=upload.pk).stored_path == ""
    assert verify_session(session=copy, record=False).valid


def _rewritten(path: Path, member: str, data: bytes, folder: Path) -> Path:
    """The bundle with one member's bytes replaced and the manifest's digest of it updated (so
    the check that fails is the redactions' own, not the file hash's) and re-signed."""
    import hashlib

    from sessions_app import signing

    target = folder / f"changed-{member}.zip"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        manifest = orjson.loads(source.read("manifest.json"))
        manifest["files"][member] = hashlib.sha256(data).hexdigest()
        manifest_bytes = orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
        for name in source.namelist():
            body = {member: data, "manifest.json": manifest_bytes}.get(name, source.read(name))
            if name == "manifest.sig":
                body = signing.server_key().sign(manifest_bytes).encode("ascii") + b"\n"
            out.writestr(name, body)
    return target


@pytest.fixture
def other(db) -> Project:
    return Project.objects.create(name="Other", slug="other")


# --- the project's rules, as a job ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_applying_the_projects_rules_is_a_job_that_redacts_and_purges(maintainer, acme, tmp_path):  # noqa: F811
    path = tmp_path / "emails.jsonl"
    path.write_bytes(
        b"".join(
            orjson.dumps({"kind": "user_message", "payload": {"text": f"mail ada{i}@example.org"}}) + b"\n"
            for i in range(30)
        )  # fmt: skip
    )
    (outcome,) = import_local_file(path=path, project=acme)
    session = outcome.session
    refused = maintainer.post(f"/sessions/{session.pk}/redact-rules/", HTTP_HX_REQUEST="true")
    assert refused.status_code == 400 and b"no redaction rule on" in refused.content
    RedactionRules.objects.create(project=acme, detectors=["email"], keep_originals=False)
    response = maintainer.post(f"/api/sessions/{session.pk}/redactions/apply-rules")
    assert response.status_code == 202 and response.json()["status"] == "queued"
    job = RedactionJob.objects.get(pk=response.json()["id"])
    outcome = jobs.run_redaction(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "done" and job.events_redacted == 30 and job.counts == {"email": 30}, job.error
    assert outcome["purge"]["vacuumed"]
    assert not Event.objects.filter(session=session, payload__contains="@example.org").exists()
    assert verify_session(session=session, record=False).valid
    from django_q.models import OrmQ  # and it is verified again, as a selection's redaction is

    assert [t.task["kwargs"] for t in OrmQ.objects.all() if t.task["func"] == "sessions_app.jobs.run_verify"] == [
        {"session_ids": [session.pk]}
    ]
    # The project keeps no originals once redacted: the kept upload is gone.
    assert Session.objects.get(pk=session.pk).import_job.stored_path == ""
    assert files_holding("@example.org", Path(settings.DATA_DIR)) == []
    listed = maintainer.get(f"/api/sessions/{session.pk}/redactions").json()
    assert listed["count"] == 30 and listed["jobs"][0]["byLabel"] == {"email": 30}
    assert jobs.run_redaction(job_id=job.pk) == {}  # a finished job is not run again
    # From the player's panel: the run is queued and the list polls itself until it ends.
    queued = maintainer.post(f"/sessions/{session.pk}/redact-rules/", HTTP_HX_REQUEST="true")
    assert queued.status_code == 200 and b"queued (0 of 30 events)" in queued.content
    assert b'hx-trigger="load delay:1s"' in queued.content


# --- who may, and bad input --------------------------------------------------------------------


def test_a_viewer_may_list_redactions_but_not_redact(stored, viewer):
    assert viewer.get(f"/api/sessions/{stored.pk}/redactions").status_code == 200
    assert redact_by_api(viewer, stored).status_code == 403
    assert viewer.post(f"/sessions/{stored.pk}/redact/", {"text": SECRET, "seq": 3}).status_code == 403
    assert viewer.post(f"/api/sessions/{stored.pk}/redactions/apply-rules").status_code == 403
    assert SECRET in Session.objects.get(pk=stored.pk).task


@pytest.mark.parametrize(
    ("text", "seq", "label", "field"),
    [
        ("abc", 3, "apikey", "text"),
        ("not in this session at all", 3, "apikey", "text"),
        (SECRET, 10_000, "apikey", "seq"),
        (SECRET, 3, "Bad Label!", "label"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(stored, maintainer, text, seq, label, field):
    response = redact_by_api(maintainer, stored, text=text, seq=seq, label=label)
    assert response.status_code == 400 and response.json()["detail"].startswith(f"{field}:"), response.content
    assert rows_holding(SECRET) and not AuditEntry.objects.filter(action="session.redact").exists()


def test_a_value_in_no_events_content_is_refused_and_no_comment_or_note_is_rewritten(stored, mia):
    # Only in a comment and a sign-off's note: a maintainer could otherwise rewrite others' words
    # through a "selection", in a label of their own choosing (security sweep).
    actor = Actor(user=mia)
    comments.create_comment(actor=actor, session=stored, seq=3, body="the agent dropped the production table")
    before = (list(Comment.objects.order_by("pk").values_list("body", flat=True)),
              list(Review.objects.values_list("note", flat=True)), rows_holding(SECRET))  # fmt: skip
    with pytest.raises(RedactionRefused) as refused:
        redact_text(session=stored, seq=3, text="production table", label="fine", actor="mia")
    assert refused.value.field == "text" and "not found in the session's events" in refused.value.message
    after = (list(Comment.objects.order_by("pk").values_list("body", flat=True)),
             list(Review.objects.values_list("note", flat=True)), rows_holding(SECRET))  # fmt: skip
    assert after == before and not AuditEntry.objects.filter(action="session.redact").exists()
    # A value the player shows at an event from another one (the step, the history, the
    # variables) is still redacted from there: the selection names the event it was made at.
    elsewhere = next(seq for seq in range(stored.event_count) if seq not in (*SECRET_SEQS, STEP_SEQ, CHANGE_SEQ))
    result = redact_text(session=stored, seq=elsewhere, text=SECRET, label="apikey", actor="mia")
    assert result.seqs and not rows_holding(SECRET)


def test_recorded_fields_are_not_content_and_a_value_only_there_is_refused(stored):
    with pytest.raises(RedactionRefused) as refused:
        redact_text(session=stored, seq=3, text="tool_call", label="x1", actor="mia")  # a kind, not content
    assert refused.value.field == "text"


# --- the player -------------------------------------------------------------------------------------


def test_the_player_offers_redact_to_maintainers_only_and_loads_the_list_when_shown(stored, maintainer, viewer):
    page = maintainer.get(f"/sessions/{stored.pk}/?step=3").content.decode()
    assert 'id="redact-form"' in page and "js/redact.js" in page and 'name="seq" value="3"' in page
    assert 'id="redaction-list"' in page and 'hx-trigger="revealed"' in page
    seen = viewer.get(f"/sessions/{stored.pk}/").content.decode()
    assert 'id="redact-form"' not in seen and "js/redact.js" not in seen and 'id="redaction-list"' in seen


def test_the_redact_form_answers_htmx_with_the_list_and_asks_the_player_for_its_frame_again(stored, maintainer):
    response = maintainer.post(f"/sessions/{stored.pk}/redact/", {"text": SECRET, "seq": 3, "label": "apikey"},
                               HTTP_HX_REQUEST="true")  # fmt: skip
    assert response.status_code == 200
    assert orjson.loads(response["HX-Trigger"]) == {"replay:goto": {"seq": 3}}
    body = response.content.decode().strip()
    assert body.startswith('<div id="redaction-list"') and "Removed 6 values from 5 events" in body
    refused = maintainer.post(f"/sessions/{stored.pk}/redact/", {"text": "ab", "seq": 3}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 400 and "select at least 4 characters" in refused.content.decode()
    plain = maintainer.post(f"/sessions/{stored.pk}/redact/", {"text": "event 12", "seq": 12, "label": "x"})
    assert plain.status_code == 302 and plain["Location"] == f"/sessions/{stored.pk}/?step=12"


# --- the database file itself ---------------------------------------------------------------------


def test_sqlite_the_value_leaves_the_database_file_and_data_folder(tmp_path):
    """A 10,000-event session in a file-based SQLite database (a subprocess: pytest-django keeps
    SQLite in memory): the secret is in the file, the WAL and the kept original before, in no byte
    of them after; the chain verifies, lists the redactions and still finds another edit."""
    source = tmp_path / "session.jsonl"
    source.write_bytes(session_lines())
    db, data = tmp_path / "replay.sqlite3", tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAY_") and k != "DATABASE_URL"}
    env.update(DATABASE_URL=f"sqlite:///{db}", REPLAY_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="replay_site.settings")

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "tests.redaction_file_db", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip().splitlines()[-1]

    def holding() -> list[str]:
        files = [p for p in (*tmp_path.glob("replay.sqlite3*"), *data.rglob("*")) if p.is_file()]
        return [p.name for p in files if SECRET.encode() in p.read_bytes()]

    session_id = run("build", str(source))
    assert holding(), "the secret should be stored before the redaction"
    found = orjson.loads(run("redact", session_id, SECRET, str(SECRET_SEQS[0])))
    assert holding() == []
    assert found["valid"] and found["purge"]["wal_truncated"] is True
    assert found["result"]["events"] == len(SECRET_SEQS) + 2
    assert {(r["seq"], r["field"]) for r in found["redactions"]} == {
        *((seq, "payload") for seq in SECRET_SEQS), (STEP_SEQ, "step_state"), (CHANGE_SEQ, "state_change")
    }  # fmt: skip
    assert found["sign_offs_unchanged"] == [True]
    assert found["tampered_valid"] is False and found["tampered_seq"] == TAMPERED_SEQ


@pytest.mark.django_db(transaction=True)
def test_postgresql_no_live_or_dead_row_version_holds_the_value_after_the_purge(acme, tmp_path):  # noqa: F811
    """On PostgreSQL an UPDATE leaves the old row version dead in its page until VACUUM. After the
    purge no row version, live or dead, of the events, snapshots and their TOAST tables holds the
    value (pageinspect's heap_page_items), and no byte of the small tables' files does (they are
    rewritten whole). The large tables' free space is not checked: VACUUM does not zero it
    (docs/redaction.md)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only (run through .ci/with_postgres.py)")
    path = tmp_path / "session.jsonl"
    path.write_bytes(session_lines())
    (outcome,) = import_local_file(path=path, project=acme)
    session = outcome.session
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
    assert _row_versions_holding(SECRET) and _pages_holding(SECRET, stored_redaction.SMALL_MODELS)
    redact_text(session=session, seq=SECRET_SEQS[0], text=SECRET, label="apikey", actor="mia")
    assert _row_versions_holding(SECRET), "before the purge the old row versions are still there"
    purge = stored_redaction.purge_freed()
    assert "VACUUM sessions_app_event" in purge.vacuumed and "VACUUM FULL sessions_app_session" in purge.vacuumed
    assert _row_versions_holding(SECRET) == []
    assert _pages_holding(SECRET, stored_redaction.SMALL_MODELS) == []
    result = verify_session(session=session, record=False)
    assert result.valid and result.redaction_count == len(SECRET_SEQS) + 2


def _relations(models) -> list[str]:
    """The tables of `models` and their TOAST tables."""
    found = []
    with connection.cursor() as cursor:
        for model in models:
            cursor.execute(
                "SELECT c.oid::regclass::text, t.oid::regclass::text FROM pg_class c "
                "LEFT JOIN pg_class t ON t.oid = c.reltoastrelid WHERE c.oid = %s::regclass",
                [model._meta.db_table],
            )
            found.extend(filter(None, cursor.fetchone()))
    return found


def _blocks(relation: str) -> range:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size(%s) / current_setting('block_size')::int", [relation])
        return range(cursor.fetchone()[0])


def _row_versions_holding(value: str) -> list[str]:
    """Row versions, live or dead (not yet pruned), of the large tables holding `value`."""
    found = []
    with connection.cursor() as cursor:
        for relation in _relations(stored_redaction.LARGE_MODELS):
            for block in _blocks(relation):
                cursor.execute("SELECT lp, t_data FROM heap_page_items(get_raw_page(%s, %s))", [relation, block])
                found += [f"{relation} {block}.{lp}" for lp, data in cursor.fetchall()
                          if data is not None and value.encode() in bytes(data)]  # fmt: skip
    return found


def _pages_holding(value: str, models) -> list[str]:
    """Pages of these tables (and their TOAST tables) holding `value` anywhere in their bytes."""
    found = []
    with connection.cursor() as cursor:
        for relation in _relations(models):
            for block in _blocks(relation):
                cursor.execute("SELECT get_raw_page(%s, %s)", [relation, block])
                if value.encode() in bytes(cursor.fetchone()[0]):
                    found.append(f"{relation} block {block}")
    return found


# --- checkpoint names: unique in their session, and redacted as saved --------------------------


def test_checkpoint_names_that_become_one_once_redacted_are_numbered_apart(stored, maintainer, acme):  # noqa: F811
    """Two names the same but for a value: the redaction used to fail on the unique name after
    the events were rewritten, leaving the value in the kept original and no audit entry."""
    set_checkpoint(session=stored, name=f"key {SECRET}", seq=1)
    set_checkpoint(session=stored, name="key [REDACTED:apikey]", seq=2)
    response = redact_by_api(maintainer, stored)
    assert response.status_code == 200, response.content
    names = sorted(Checkpoint.objects.filter(session=stored).values_list("name", flat=True))
    assert names == ["key [REDACTED:apikey]", "key [REDACTED:apikey] (2)", "leak"]
    assert rows_holding(SECRET) == [] and files_holding(SECRET, Path(settings.DATA_DIR)) == []
    assert AuditEntry.objects.of_project(acme).filter(action="session.redact").count() == 1
    # The rules job the same way: two addresses, one text once redacted.
    set_checkpoint(session=stored, name="ping ana@example.org", seq=1)
    set_checkpoint(session=stored, name="ping bo@example.org", seq=2)
    RedactionRules.objects.create(project=acme, detectors=["email"])
    job = RedactionJob.objects.get(pk=maintainer.post(f"/api/sessions/{stored.pk}/redactions/apply-rules").json()["id"])
    jobs.run_redaction(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "done", job.error
    pings = Checkpoint.objects.filter(session=stored, name__startswith="ping").order_by("seq")
    assert list(pings.values_list("name", flat=True)) == ["ping [REDACTED:email]", "ping [REDACTED:email] (2)"]


def test_with_rules_on_a_checkpoint_name_is_redacted_before_it_is_compared_and_when_renamed(stored, maintainer, acme):  # noqa: F811
    RedactionRules.objects.create(project=acme, detectors=["email"])
    url = f"/api/sessions/{stored.pk}/checkpoints"
    made = maintainer.post(url, {"name": "ping alice@example.com", "seq": 0}, content_type="application/json")
    assert made.status_code == 201 and made.json()["checkpoint"]["name"] == "ping [REDACTED:email]"
    # Read and deleted by the name the client saved it under too, as well as by the one stored.
    assert maintainer.get(f"{url}/ping alice@example.com").json()["checkpoint"]["name"] == "ping [REDACTED:email]"
    assert maintainer.get(f"{url}/ping [REDACTED:email]").status_code == 200
    # Another address is the same name once redacted: asked about, not a silent move of the first.
    again = maintainer.post(url, {"name": "ping bob@example.com", "seq": 3}, content_type="application/json")
    assert again.status_code == 409 and Checkpoint.objects.get(session=stored, name__startswith="ping").seq == 0
    # A rename is held to the rules as a save is.
    mine = Checkpoint.objects.get(session=stored, name__startswith="ping")
    renamed = maintainer.post(
        f"/sessions/{stored.pk}/checkpoints/{mine.pk}/rename/", {"name": "call frank@example.com"}
    )
    assert renamed.status_code == 302
    assert Checkpoint.objects.get(pk=mine.pk).name == "call [REDACTED:email]"
    assert not AuditEntry.objects.filter(detail__contains="example.com").exists()


def test_a_saved_checkpoint_name_goes_through_the_rules_once(stored, maintainer, acme):  # noqa: F811
    """The workflow compares the redacted name, then the writer stored the rules' result of it
    again: a rule matching a placeholder made the stored name another than the one compared."""
    RedactionRules.objects.create(project=acme, detectors=["email"], custom=[{"label": "word", "pattern": "REDACTED"}])
    url = f"/api/sessions/{stored.pk}/checkpoints"
    made = maintainer.post(url, {"name": "ping ana@example.com", "seq": 0}, content_type="application/json")
    assert made.status_code == 201, made.content
    name = made.json()["checkpoint"]["name"]
    assert name == Checkpoint.objects.get(session=stored, seq=0, name__startswith="ping").name
    assert "example.com" not in name and name.count("[") == 1, name  # one pass: no placeholder inside another


def test_a_selection_is_held_to_its_length_limits_whichever_way_it_comes():
    """The page's form and MCP reach stored_redaction without the API's own schema limits."""
    from sessions_app.stored_redaction import MAX_TEXT, MIN_TEXT, RedactionRefused, selection_forms

    assert selection_forms("x" * MAX_TEXT)[0] == "x" * MAX_TEXT
    with pytest.raises(RedactionRefused, match=f"select at most {MAX_TEXT:,} characters"):
        selection_forms("x" * (MAX_TEXT + 1))
    with pytest.raises(RedactionRefused, match=f"select at least {MIN_TEXT} characters"):
        selection_forms("x" * (MIN_TEXT - 1))


def test_a_wiped_file_leaves_zeros_where_its_bytes_were_before_it_is_unlinked(tmp_path):
    """docs/redaction.md: the old file is overwritten with zeros and flushed before it is unlinked.
    A second name for the same file (a hard link) still reads its blocks afterwards."""
    import os

    from sessions_app.stored_redaction import wipe_file

    kept = tmp_path / "original.jsonl"
    kept.write_bytes(b'{"secret": "TOPSECRET"}\n' * 100_000)  # more than one chunk of zeros
    witness = tmp_path / "witness"
    os.link(kept, witness)
    wipe_file(kept)
    assert not kept.exists()
    left = witness.read_bytes()
    assert len(left) == 2_400_000 and left == bytes(len(left))


def test_a_session_deleted_while_its_redaction_runs_is_a_404_not_a_500(stored, maintainer, monkeypatch):
    # Security sweep: the redaction's second part found no session row (Session.DoesNotExist).
    from sessions_app import stored_redaction

    real = stored_redaction._redact_events

    def then_deleted(session, *args, **kwargs):
        real(session, *args, **kwargs)
        Session.objects.filter(pk=session.pk).delete()

    monkeypatch.setattr(stored_redaction, "_redact_events", then_deleted)
    response = redact_by_api(maintainer, stored)
    assert response.status_code == 404, response.content
    assert response.json()["detail"] == f"session {stored.pk} not found"


def test_a_redaction_is_verified_again_and_the_badge_counts_it_whenever_the_player_opens(
    stored, maintainer, viewer, django_capture_on_commit_callbacks
):
    # The count showed only in the answer to the verify button, gone at the next reload.
    from django_q.models import OrmQ

    with django_capture_on_commit_callbacks(execute=True):
        assert redact_by_api(maintainer, stored).status_code == 200
    queued = [
        t.task["kwargs"]["session_ids"] for t in OrmQ.objects.all() if t.task["func"] == "sessions_app.jobs.run_verify"
    ]
    assert queued == [[stored.pk]]
    jobs.run_verify(session_ids=[stored.pk])
    page = viewer.get(f"/sessions/{stored.pk}/").content.decode()
    badge = page[page.index('id="chain-badge"') :].split("</div>", 1)[0]
    assert "verified at" in badge and ">5 redactions</a>" in badge


def test_a_redaction_reaches_events_past_its_first_chunk(stored, maintainer, monkeypatch):
    # Read a chunk at a time: a mistake in where the next chunk starts left every later event
    # holding the value, and the chain still verified (nothing would have said so).
    from sessions_app import stored_redaction as module

    monkeypatch.setattr(module, "CHUNK", 2)
    assert redact_by_api(maintainer, stored).status_code == 200
    held = [
        seq for seq, payload in Event.objects.filter(session=stored).values_list("seq", "payload") if SECRET in payload
    ]
    assert held == [] and Event.objects.filter(session=stored, redacted__isnull=False).count() == 5
    assert verify_session(session=stored, record=False).valid
