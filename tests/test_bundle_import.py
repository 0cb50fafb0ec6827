"""Importing an evidence bundle into another Replay: the same events (link for link), comments
and sign-offs, marked with the key that signed it; nothing stored from a bundle that fails."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import orjson
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import OperationalError

from sessions_app.chain import CONTENT_FIELDS, RECORDED_FIELDS
from sessions_app.ingest.bundles import import_bundle
from sessions_app.ingest.importing import import_file
from sessions_app.models import Comment, Event, ImportJob, Project, Review, Role, Session
from sessions_app.replay.exports import export_original
from sessions_app.signing import grouped
from sessions_app.verification import verify_session

from .builders_teams import acme, member  # noqa: F401  (fixtures)
from .test_bundles import SOURCE, bundle, rezip, session, viewer  # noqa: F401  (fixtures)

COMPARED = ("seq", *RECORDED_FIELDS, *CONTENT_FIELDS, "salt", "hash", "prev_hash", "step_pos", "pair_seq",
            "cost_total", "tokens_total", "errors_total", "steps_total", "kind_counts")  # fmt: skip


def stored(session: Session) -> list[tuple]:
    return list(Event.objects.filter(session=session).order_by("seq").values_list(*COMPARED))


def threads(session: Session) -> list[tuple]:
    return [
        (c.seq, c.author_name, c.body, c.parent.body if c.parent else None, [r.body for r in c.revisions.all()])
        for c in Comment.objects.filter(session=session).order_by("seq", "created_at", "id")
    ]


def sign_offs(session: Session) -> list[tuple]:
    return list(
        Review.objects.filter(session=session).values_list(
            "reviewer_name", "verdict", "note", "chain_head", "chain_valid", "first_seq", "last_seq"
        )
    )


@pytest.fixture
def elsewhere(db) -> Project:
    return Project.objects.create(name="Elsewhere", slug="elsewhere")


def test_a_bundle_round_trip_restores_the_same_events_comments_and_sign_offs(bundle, session, elsewhere):
    events, comments, reviews = stored(session), threads(session), sign_offs(session)
    original = b"".join(export_original(session=session))
    head = session.head_hash
    session.delete()  # what the other server never had

    (outcome,) = import_file(path=bundle, project=elsewhere)
    assert outcome.error is None and not outcome.duplicate and outcome.format == "replay_bundle"
    copy = Session.objects.get(pk=outcome.session.pk)
    assert copy.project == elsewhere and copy.head_hash == head
    assert stored(copy) == events  # every column, links and salts included
    assert threads(copy) == comments and sign_offs(copy) == reviews
    assert b"".join(export_original(session=copy)) == original == SOURCE.read_bytes()
    assert copy.bundle_origin["fingerprint"] and copy.bundle_origin["head"] == head
    assert verify_session(session=copy).valid


def test_the_player_says_which_key_signed_the_bundle_a_session_came_from(bundle, session, elsewhere, client):
    (outcome,) = import_file(path=bundle, project=elsewhere)
    client.force_login(member("ida", elsewhere, Role.VIEWER))
    page = client.get(f"/sessions/{outcome.session.pk}/").content.decode()
    fingerprint = outcome.session.bundle_origin["fingerprint"]
    # Grouped as the about page and verify_bundle write it, to compare by eye.
    assert f"imported from a bundle signed by {grouped(fingerprint)}</span>" in page
    # The list says where it came from, its original kept (a file) or not (the bundle itself).
    assert "sent live through the API" not in client.get("/sessions/").content.decode()
    Session.objects.filter(pk=outcome.session.pk).update(import_job=None)  # as with no original kept
    listed = client.get("/sessions/").content.decode()
    assert "restored from an evidence bundle" in listed and "sent live through the API" not in listed


def test_the_same_bundle_imported_twice_is_one_session(bundle, elsewhere):
    (first,) = import_file(path=bundle, project=elsewhere)
    (again,) = import_file(path=bundle, project=elsewhere)
    assert again.duplicate and again.session.pk == first.session.pk
    assert Session.objects.filter(project=elsewhere).count() == 1


def test_a_tampered_bundle_stores_nothing_and_says_what_changed(bundle, elsewhere):
    changed = rezip(bundle, {"comments.json": lambda data: data.replace(b"Fixed wording", b"Fixed wordinG")})
    (outcome,) = import_file(path=changed, project=elsewhere)
    assert outcome.session is None and "comments.json" in outcome.error
    assert not Session.objects.filter(project=elsewhere).exists()


def test_a_busy_database_during_a_bundle_restore_is_said_as_such_not_blamed_on_the_bundle(
    bundle, elsewhere, monkeypatch
):
    def busy(*args, **kwargs):
        raise OperationalError("database is locked")

    def kept_files() -> set[Path]:
        return set((Path(settings.DATA_DIR) / "uploads").rglob("*.*"))

    before = kept_files()
    for target in (
        "sessions_app.ingest.bundles.append_stored_events",
        "sessions_app.ingest.uploads.ImportJob.objects.create",
    ):
        # Failing while the events are written, or while the kept original's job row is.
        monkeypatch.setattr(target, busy)
        with pytest.raises(OperationalError):  # the API's handler makes it a 503, a job says it
            import_bundle(path=bundle, project=elsewhere)
        monkeypatch.undo()
        assert not Session.objects.filter(project=elsewhere).exists()
        assert not ImportJob.objects.filter(project=elsewhere).exists()
        assert kept_files() == before, target  # nor the kept original's file
    session, _bundle, duplicate = import_bundle(path=bundle, project=elsewhere)
    assert not duplicate and session.event_count > 0


def test_a_bundle_uploads_like_any_file(bundle, elsewhere, client, django_capture_on_commit_callbacks):
    client.force_login(member("max", elsewhere, Role.MAINTAINER))
    with bundle.open("rb") as handle, django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/imports", {"file": handle, "project": "elsewhere"})
    assert response.status_code == 202, response.content
    from sessions_app.jobs import run_import

    run_import(job_id=response.json()["job"])
    status = client.get(response.json()["status_url"]).json()
    assert status["status"] == "done" and status["detected_format"] == "replay_bundle"
    assert status["sessions"][0]["events"] == Session.objects.get(project=elsewhere).event_count > 0
    # The original the bundle carries is kept as its own upload: its job is the uploader's and
    # names the session restored, so the imports list does not show an import that stored nothing.
    restored = Session.objects.get(project=elsewhere)
    kept = ImportJob.objects.get(pk=restored.import_job_id)
    assert kept.pk != response.json()["job"] and kept.created_by == "max"
    assert kept.sessions_done == 1 and kept.result[0]["session"] == restored.pk
    assert kept.result[0]["events"] == restored.event_count
    page = client.get(f"/imports/{kept.pk}/").content.decode()
    assert "No session was stored" not in page and f"/sessions/{restored.pk}/" in page
    # Listed as the original inside the bundle, its events counted once (on the bundle's row).
    assert kept.carried_by == bundle.name and kept.events_done == 0
    listing = client.get("/imports/").content.decode()
    row = listing[listing.index(f'<tr data-job="{kept.pk}">') :]
    row = row[: row.index("</tr>")]
    assert f"(the original inside <bdi>{bundle.name}</bdi>)" in row and ">–</span></td>" in row
    bundle_row = listing[listing.index(f'<tr data-job="{response.json()["job"]}">') :]
    assert f'<td class="num">{restored.event_count}</td>' in bundle_row[: bundle_row.index("</tr>")]


def test_the_command_line_imports_a_bundle(bundle, elsewhere):
    call_command("import_sessions", str(bundle), "--project", "elsewhere")
    copy = Session.objects.get(project=elsewhere)
    assert copy.bundle_origin["exported_by"] == "vera" and Comment.objects.filter(session=copy).count() == 2


def test_the_bundle_is_a_format_one_may_choose_and_a_wrong_choice_is_one_clear_error(
    bundle, elsewhere, client, tmp_path
):
    # Offered wherever a format is chosen: the upload form, the API and the command line.
    client.force_login(member("max", elsewhere, Role.MAINTAINER))
    page = client.get("/sessions/").content.decode()
    select = page[page.index('id="upload_format"') :]
    assert '<option value="replay_bundle">' in select[: select.index("</select>")]
    with bundle.open("rb") as handle:
        response = client.post("/api/imports", {"file": handle, "project": "elsewhere", "format": "replay_bundle"})
    assert response.status_code == 202, response.content
    from sessions_app.jobs import run_import

    run_import(job_id=response.json()["job"])
    status = client.get(response.json()["status_url"]).json()
    assert status["status"] == "done" and status["detected_format"] == "replay_bundle"
    restored = Session.objects.get(project=elsewhere)
    # The command line takes it too: the same bundle, recognised as the session restored already.
    call_command("import_sessions", str(bundle), "--project", "elsewhere", "--format", "replay_bundle")
    assert list(Session.objects.filter(project=elsewhere)) == [restored]

    # Chosen for a file that is none, it says so and stores nothing.
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(SOURCE.read_bytes())
    [outcome] = import_file(path=plain, project=elsewhere, format="replay_bundle")
    assert outcome.session is None
    assert outcome.error.startswith("plain.jsonl: format replay_bundle was chosen, but the file is not")
    assert Session.objects.filter(project=elsewhere).count() == 1


def test_a_bundle_whose_signer_wrote_hostile_rows_is_refused_whole(bundle, elsewhere, tmp_path):
    """The signer of a bundle can re-hash anything: its lines are checked like any input."""
    import base64

    import orjson
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from sessions_app.chain import GENESIS_HASH, commitments, link_hash, recorded_values

    def forged(change, name: str) -> Path:
        """The bundle with its events changed by `change`, re-chained and re-signed by a stranger."""
        with zipfile.ZipFile(bundle) as archive:
            members = {n: archive.read(n) for n in archive.namelist()}
        prev, lines = GENESIS_HASH, []
        for line in members["events.jsonl"].splitlines():
            event = orjson.loads(line)
            change(event)
            event["prev_hash"] = prev
            recorded = recorded_values([event[f] for f in RECORDED_FIELDS])
            event["hash"] = prev = link_hash(prev, event["seq"], recorded,
                                             commitments(event["salt"], [event[f] for f in CONTENT_FIELDS]))  # fmt: skip
            lines.append(orjson.dumps(event))
        members["events.jsonl"] = b"\n".join(lines) + b"\n"
        manifest = orjson.loads(members["manifest.json"])
        manifest["files"]["events.jsonl"] = hashlib.sha256(members["events.jsonl"]).hexdigest()
        manifest["chain"]["head"] = prev
        key = Ed25519PrivateKey.generate()
        manifest["public_key"] = base64.b64encode(
            key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        ).decode()
        members["manifest.json"] = orjson.dumps(manifest)
        members["manifest.sig"] = base64.b64encode(key.sign(members["manifest.json"]))
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as archive:
            for member, data in members.items():
                archive.writestr(member, data)
        return path

    def splice(event):
        if event["seq"] == 3:
            event["payload"] = '{"text": "hi"}, "kind": "INJECTED"'

    def wrong_type(event):
        if event["seq"] == 2:
            event["tokens"] = "many"

    untouched = forged(lambda event: None, "untouched.zip")
    (fine,) = import_file(path=untouched, project=elsewhere)
    assert fine.error is None  # re-signing alone is not what is refused
    Session.objects.filter(project=elsewhere).delete()
    for change, field in ((splice, "payload"), (wrong_type, "tokens")):
        (outcome,) = import_file(path=forged(change, f"{field}.zip"), project=elsewhere)
        assert outcome.session is None and f"field {field}:" in outcome.error, outcome.error
    assert not Session.objects.filter(project=elsewhere).exists()


def test_session_metadata_cannot_claim_a_bundle_origin(client, elsewhere):
    client.force_login(member("max", elsewhere, Role.MAINTAINER))
    made = client.post("/api/sessions", {"project": "elsewhere", "metadata": {"bundle": {"fingerprint": "abcd"}}},
                       content_type="application/json")  # fmt: skip
    assert made.status_code == 201
    page = client.get(f"/sessions/{made.json()['id']}/").content.decode()
    assert "imported from a bundle signed by" not in page


def _resigned(
    bundle: Path,
    tmp_path: Path,
    files: dict[str, bytes] | None = None,
    session: dict | None = None,
    **replaced: list[dict],
) -> Path:
    """The bundle with members replaced (`reviews=[...]`: reviews.json; `files`: any member by its
    name, as bytes) and the manifest's `session` fields given in `session`, re-hashed and
    re-signed by a stranger's key."""
    import base64

    import orjson
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    with zipfile.ZipFile(bundle) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    manifest = orjson.loads(members["manifest.json"])
    manifest["session"].update(session or {})
    if "exported_at" in manifest["session"]:  # the manifest's own, given with the session's
        manifest["exported_at"] = manifest["session"].pop("exported_at")
    files = {**(files or {}), **{f"{name}.json": orjson.dumps(value) for name, value in replaced.items()}}
    for name, data in files.items():
        members[name] = data
        manifest["files"][name] = hashlib.sha256(data).hexdigest()
    key = Ed25519PrivateKey.generate()
    manifest["public_key"] = base64.b64encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
    members["manifest.json"] = orjson.dumps(manifest)
    members["manifest.sig"] = base64.b64encode(key.sign(members["manifest.json"]))
    path = tmp_path / "resigned.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize("value", [[1], 7, 1.5, {"a": 1}])
@pytest.mark.parametrize("field", ["raw", "step_state", "payload"])
def test_an_events_content_that_is_not_text_refuses_the_bundle_by_line_and_field(
    bundle, elsewhere, tmp_path, field, value
):
    # A list there reached the hashing: a traceback from the command, the upload and the verifier.
    import orjson

    from sessions_app.formats.fields import json_kind

    with zipfile.ZipFile(bundle) as archive:
        lines = archive.read("events.jsonl").splitlines()
    event = orjson.loads(lines[1])
    event[field] = value
    lines[1] = orjson.dumps(event)
    forged = _resigned(bundle, tmp_path, files={"events.jsonl": b"\n".join(lines) + b"\n"})
    (outcome,) = import_file(path=forged, project=elsewhere)
    assert outcome.session is None
    assert outcome.error.endswith(
        f"events.jsonl line 2 (seq {event['seq']}): field {field}: not text (the event's stored JSON), "
        f"got {json_kind(value)}"
    ), outcome.error
    assert not Session.objects.filter(project=elsewhere).exists()


@pytest.mark.parametrize(
    "change, said",
    [
        (("drop", "hash"), "line 2: field hash: missing"),
        (("drop", "ts"), "line 2: field ts: missing"),
        (("set", "seq", "1"), "line 2: field seq: not a non-negative integer, got '1'"),
        (("set", "duration_ms", "x"), "line 2 (seq 1): field duration_ms: not a number"),
        (("set", "cost_usd", [1]), "line 2 (seq 1): field cost_usd: not a number"),
        (("set", "salt", 5), "line 2 (seq 1): field salt: not 32 hexadecimal digits"),
        (("set", "redacted", 5), "line 2 (seq 1): field redacted: an event with removed values has their record"),
        (("line", b"[1, 2]"), "line 2: not an event (a JSON object), got a list"),
        (("line", b"not json"), "line 2: not JSON (invalid literal"),
    ],
)  # fmt: skip
def test_an_event_line_of_the_wrong_shape_refuses_the_bundle_by_line_and_field(
    bundle, elsewhere, tmp_path, change, said
):
    # These were "not an event line (KeyError('hash'))", "(TypeError('fromhex() argument must
    # be str, not int'))" and the like: Python's words, not the field's name.
    with zipfile.ZipFile(bundle) as archive:
        lines = archive.read("events.jsonl").splitlines()
    event = orjson.loads(lines[1])
    if change[0] == "drop":
        del event[change[1]]
    elif change[0] == "set":
        event[change[1]] = change[2]
    lines[1] = change[1] if change[0] == "line" else orjson.dumps(event)
    forged = _resigned(bundle, tmp_path, files={"events.jsonl": b"\n".join(lines) + b"\n"})
    (outcome,) = import_file(path=forged, project=elsewhere)
    assert outcome.session is None
    assert f"resigned.zip: events.jsonl {said}" in outcome.error, outcome.error
    assert "Error" not in outcome.error
    assert not Session.objects.filter(project=elsewhere).exists()


@pytest.mark.parametrize(
    "comments, reviews, said",
    [
        ([7], [], "comments.json: thread 1: not an object, got 7"),
        ([{"id": 1, "seq": 1, "body": "ok", "replies": [{"id": 2, "body": {"a": 1}}]}], [],
         "comments.json: comment 2: field body: not text, got {'a': 1}"),
        ([{"id": 1, "seq": 1, "body": "ok", "created_at": []}], [], "comments.json: comment 1: field created_at: not a time"),
        ([{"id": 1, "seq": 1, "body": "ok", "author": 5}], [], "comments.json: comment 1: field author: not text, got 5"),
        ([{"id": 1, "seq": 1, "body": "ok", "replies": {"x": 1}}], [], "comments.json: comment 1: field replies: not a list"),
        ([], [{"id": 1, "verdict": {}}], "reviews.json: sign-off 1 has no known verdict"),
        ([], [{"id": 1, "verdict": "approved", "first_seq": 0, "last_seq": 1, "reviewer": {}}],
         "reviews.json: sign-off 1: field reviewer: not text, got {}"),
        ([], [{"id": 1, "verdict": "approved", "first_seq": 0, "last_seq": 1, "chain_valid": "false"}],
         "reviews.json: sign-off 1: field chain_valid: not true or false, got 'false'"),
        ([], ["x"], "reviews.json: sign-off 1: not an object, got 'x'"),
        ([{"id": 1, "seq": 1, "body": "ok", "revisions": {"x": 1}}], [],
         "comments.json: comment 1: field revisions: not a list, got {'x': 1}"),
        ([{"id": 1, "seq": 1, "body": "ok", "replies": [5]}], [], "comments.json: comment 1: replies 1: not an object, got 5"),
        ([{"id": 1, "seq": 1, "body": "ok", "revisions": ["old"]}], [],
         "comments.json: comment 1: revisions 1: not an object, got 'old'"),
        ([{"id": 1, "seq": 1, "body": "ok", "resolved_by": 5, "resolved_at": "2026-01-01T00:00:00+00:00"}], [],
         "comments.json: comment 1: field resolved_by: not text, got 5"),
        ([{"id": 1, "seq": 1, "body": "ok", "redacted_by": [], "redacted_at": "2026-01-01T00:00:00+00:00"}], [],
         "comments.json: comment 1: field redacted_by: not text, got []"),
        ([{"id": 1, "seq": 1, "body": "ok", "revisions": [{"body": "b", "written_at": 7}]}], [],
         "comments.json: comment 1's revision 1: field written_at: not a time (ISO 8601, years 1-9999 in UTC), got 7"),
        ([], [{"id": 1, "verdict": "approved", "first_seq": 0, "last_seq": 1, "note": 3}],
         "reviews.json: sign-off 1: field note: not text, got 3"),
        ([], [{"id": 1, "verdict": "approved", "first_seq": 0, "last_seq": 1, "chain_head": []}],
         "reviews.json: sign-off 1: field chain_head: not text, got []"),
        ([], [{"id": 1, "verdict": "approved", "first_seq": 0, "last_seq": 1, "created_at": {}}],
         "reviews.json: sign-off 1: field created_at: not a time (ISO 8601, years 1-9999 in UTC), got {}"),

    ],
)  # fmt: skip
def test_a_restored_comment_or_sign_off_of_the_wrong_type_refuses_the_bundle_by_name(
    bundle, session, elsewhere, tmp_path, comments, reviews, said
):
    # Read with str() and bool(), a reply body {"a": 1} was stored as "{'a': 1}", a created_at of
    # [] became another time and "false" a valid chain, unsaid; others named Python's internals.
    session.delete()
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, comments=comments, reviews=reviews), project=elsewhere)
    assert outcome.session is None and said in outcome.error, outcome.error
    assert not Session.objects.filter(project=elsewhere).exists()


@pytest.mark.parametrize(
    "fields, said",
    [
        ({"format": "x" * 41}, "manifest.json: session: field format: 41 characters, at most 40"),
        ({"model": ["m"]}, "manifest.json: session: field model: not text, got ['m']"),
        ({"task": {"a": 1}}, "manifest.json: session: field task: not text, got {'a': 1}"),
        ({"status": "done"}, "manifest.json: session: field status: not one of live, completed"),
        ({"completed": "yes"}, "manifest.json: session: field completed: not true or false, got 'yes'"),
        ({"started_at": "0001-01-01T00:00:00+14:00"},
         "manifest.json: session: field started_at: not a time (ISO 8601, years 1-9999 in UTC)"),
        ({"ended_at": 5}, "manifest.json: session: field ended_at: not a time"),
        ({"id": "7"}, "manifest.json: session: field id: not a whole number, got '7'"),
        ({"exported_at": {"a": [1, 2]}}, "manifest.json: field exported_at: not a time"),
    ],
)  # fmt: skip
def test_a_manifests_session_field_of_the_wrong_type_or_size_refuses_the_bundle_by_name(
    bundle, session, elsewhere, tmp_path, fields, said
):
    # Read with str(), a list became its Python text and an unknown status "completed"; a long
    # format or a time without a UTC instant failed the write, blamed on comments or sign-offs.
    session.delete()
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, session=fields), project=elsewhere)
    assert outcome.session is None and said in outcome.error, outcome.error
    assert not Session.objects.filter(project=elsewhere).exists()


def test_a_manifests_session_fields_as_replay_writes_them_are_restored(bundle, session, elsewhere, tmp_path):
    fields = {"model": "m2", "status": "failed", "completed": False, "ended_at": "2026-03-01T10:00:00Z",
              "final_answer": "none", "format": "a_newer_format"}  # fmt: skip
    session.delete()
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, session=fields), project=elsewhere)
    restored = outcome.session
    assert outcome.error is None and restored is not None, outcome.error
    assert (restored.model, restored.status, restored.completed, restored.final_answer, restored.source_format) == (
        "m2", "failed", False, "none", "a_newer_format"
    )  # fmt: skip
    assert restored.ended_at.isoformat() == "2026-03-01T10:00:00+00:00"


def test_a_restored_sign_off_that_says_nothing_of_its_chain_claims_no_valid_one(bundle, session, elsewhere, tmp_path):
    # Read leniently, a sign-off with no chain_valid, or an empty time, had claimed a valid chain
    # or another time; it claims what it says, and an empty time is none (the export's).
    session.delete()
    reviews = [{"id": 1, "verdict": "approved", "first_seq": 0, "last_seq": 1, "created_at": ""}]
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, reviews=reviews), project=elsewhere)
    assert outcome.error is None, outcome.error
    review = Review.objects.get(session=outcome.session)
    assert review.chain_valid is False and review.created_at <= outcome.session.created_at


def test_a_lone_surrogate_in_a_bundles_list_refuses_it_by_file(bundle, session, elsewhere, tmp_path):
    # yajl passes "\udfff" on as bytes no UTF-8 decoder takes: a traceback.
    session.delete()
    reviews = b'[{"id": 1, "verdict": "approved", "first_seq": 0, "last_seq": 1, "note": "\\udfff"}]'
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, files={"reviews.json": reviews}), project=elsewhere)
    assert outcome.session is None and outcome.error.endswith(
        "reviews.json: not readable JSON (a text holding a lone surrogate escape, which no UTF-8 text holds)"
    ), outcome.error


def _kept_files() -> set[Path]:
    return set(Path(settings.DATA_DIR).rglob("*"))


def test_a_bundle_holding_more_than_the_upload_limit_uncompressed_is_refused_before_it_is_read(
    bundle, elsewhere, tmp_path, settings
):
    with zipfile.ZipFile(bundle) as archive:
        [original] = [name for name in archive.namelist() if name.startswith("original/")]
        padded = archive.read(original) + b" " * (3 << 20)  # a few kilobytes zipped
    forged = _resigned(bundle, tmp_path, files={original: padded})
    assert forged.stat().st_size < 1 << 20
    settings.MAX_UPLOAD_MB = 2
    before = _kept_files()
    (refused,) = import_file(path=forged, project=elsewhere)
    assert "original/: 3,1" in refused.error and "more than this server's upload limit of 2,097,152" in refused.error
    assert refused.error.count(forged.name) == 1  # named once, by the importer
    assert not Session.objects.filter(project=elsewhere).exists() and _kept_files() == before
    # The rest may hold four uploads' worth (events.jsonl is about three times its source).
    events = b"\n" * (9 << 20)
    (refused,) = import_file(path=_resigned(bundle, tmp_path, files={"index.html": events}), project=elsewhere)
    assert "besides the original, more than 4 times this server's upload limit" in refused.error
    settings.MAX_UPLOAD_MB = 8  # within it, the same bundle is restored
    (outcome,) = import_file(path=forged, project=elsewhere)
    assert outcome.error is None and outcome.session is not None


def test_a_bundle_is_held_to_the_projects_quotas_at_its_events_size_not_the_zips(bundle, session, elsewhere):
    members = zipfile.ZipFile(bundle).infolist()
    events_size = sum(
        i.file_size for i in members if i.filename == "events.jsonl" or i.filename.startswith("original/")
    )
    assert events_size > zipfile.ZipFile(bundle).getinfo("events.jsonl").file_size  # its original counts too
    Session.objects.create(project=elsewhere, source_format="canonical")
    Project.objects.filter(pk=elsewhere.pk).update(max_sessions=1)
    (refused,) = import_file(path=bundle, project=Project.objects.get(pk=elsewhere.pk))
    assert "The bundle's session would exceed project elsewhere's quota of 1 sessions" in refused.error
    Project.objects.filter(pk=elsewhere.pk).update(max_sessions=None, max_stored_bytes=events_size - 1)
    (refused,) = import_file(path=bundle, project=Project.objects.get(pk=elsewhere.pk))
    assert (
        "The bundle's events and original" in refused.error
        and "exceeds project elsewhere's storage quota" in refused.error
    )
    assert Session.objects.filter(project=elsewhere).count() == 1
    Project.objects.filter(pk=elsewhere.pk).update(max_stored_bytes=events_size + 10_000)
    (outcome,) = import_file(path=bundle, project=Project.objects.get(pk=elsewhere.pk))
    assert outcome.error is None and outcome.session.event_count == session.event_count


def test_a_bundles_lists_are_read_an_entry_at_a_time_and_held_to_a_count(bundle, elsewhere, tmp_path, monkeypatch):
    from sessions_app import bundle_reader

    monkeypatch.setitem(bundle_reader.MAX_ENTRIES, "comments.json", 3)
    (refused,) = import_file(path=_resigned(bundle, tmp_path, comments=[{}] * 4), project=elsewhere)
    assert "comments.json: more than 3 entries" in refused.error
    (refused,) = import_file(path=_resigned(bundle, tmp_path, files={"reviews.json": b'{"a": []}'}), project=elsewhere)
    assert "reviews.json: not a list" in refused.error
    (refused,) = import_file(path=_resigned(bundle, tmp_path, files={"reviews.json": b"[{}, "}), project=elsewhere)
    assert "reviews.json: not readable JSON (" in refused.error and "\n" not in refused.error
    # A redactions.json entry no event names is refused as soon as it is read.
    (refused,) = import_file(path=_resigned(bundle, tmp_path, redactions=[{"seq": 1, "field": "payload",
                                                                           "label": "x"}] * 3), project=elsewhere)  # fmt: skip
    assert "redactions.json: lists the removal of 'x' from event 1's payload, unlike events.jsonl" in refused.error
    assert not Session.objects.filter(project=elsewhere).exists()


def test_a_restored_sign_off_is_marked_dated_no_later_than_the_export_and_never_the_review_state(
    bundle, session, elsewhere, tmp_path, client
):
    from datetime import UTC, datetime

    from django.urls import reverse

    from sessions_app import reviews
    from sessions_app.access import Actor
    from sessions_app.replay.listing import filter_sessions
    from sessions_app.replay.sign_offs import sign_offs_of

    head = session.head_hash
    forged = {"id": 1, "reviewer": "adm", "verdict": "approved", "note": "all good", "chain_head": head,
              "chain_valid": True, "first_seq": 0, "last_seq": session.event_count - 1,
              "created_at": "2099-01-01T00:00:00+00:00"}  # fmt: skip
    session.delete()
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, reviews=[forged]), project=elsewhere)
    assert outcome.error is None, outcome.error
    copy = Session.objects.get(pk=outcome.session.pk)
    [restored] = Review.objects.filter(session=copy)
    assert restored.restored_from == copy.bundle_origin["fingerprint"] and restored.reviewer_name == "adm"
    assert restored.created_at <= datetime.now(UTC)  # not 2099: no later than the bundle's export
    # Shown as restored, and not the session's review state: the list counts it unreviewed.
    [shown] = sign_offs_of(session=copy)
    assert not shown.current
    in_project = Session.objects.filter(project=elsewhere)
    assert list(filter_sessions(in_project, project=None, review="unreviewed").values_list("pk", flat=True)) == [
        copy.pk
    ]
    assert not filter_sessions(in_project, project=None, review="approved").exists()
    # A sign-off made here is the review state, even though the restored one says 2099.
    rita = member("rita", elsewhere, Role.REVIEWER)
    reviews.sign_off(reviewer=Actor(user=rita), session=copy, verdict="rejected", note="checked here")
    first, second = sign_offs_of(session=copy)
    assert (first.review.verdict, first.current, second.current) == ("rejected", True, False)
    assert list(filter_sessions(in_project, project=None, review="rejected").values_list("pk", flat=True)) == [copy.pk]
    client.force_login(rita)
    page = client.get(reverse("sessions:player", args=[copy.pk])).content.decode()
    assert f"restored from a bundle signed by {grouped(copy.bundle_origin['fingerprint'])}" in page
    api = client.get(f"/api/sessions/{copy.pk}/reviews").json()
    assert [(r["verdict"], r["current"], bool(r["restored_from"])) for r in api] == [
        ("rejected", True, False), ("approved", False, True)
    ]  # fmt: skip


def test_restored_comments_are_marked_dated_no_later_than_the_export_and_held_to_the_body_limit(
    bundle, session, elsewhere, tmp_path, client
):
    """A bundle can be signed by anyone's key: its comments are that key's word, whatever author
    they name, so they are shown as restored wherever comments are read."""
    from datetime import UTC, datetime

    from sessions_app.access import Actor
    from sessions_app.comments import MAX_BODY
    from sessions_app.mcp.discussion import get_comments

    reply = {"id": 2, "author": "reviewer", "body": "+1 agreed", "created_at": "2099-01-02T00:00:00+00:00"}
    forged = {"id": 1, "seq": 1, "author": "admin1", "body": "Reviewed with security: **approved**, ship it.",
              "created_at": "2099-01-01T00:00:00+00:00", "replies": [reply]}  # fmt: skip
    session.delete()
    too_long = dict(forged, body="x" * (MAX_BODY + 1))
    (refused,) = import_file(path=_resigned(bundle, tmp_path, comments=[too_long]), project=elsewhere)
    assert refused.session is None and "comments.json: comment 1: body has 10,001 characters" in refused.error
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, comments=[forged]), project=elsewhere)
    assert outcome.error is None, outcome.error
    copy = Session.objects.get(pk=outcome.session.pk)
    fingerprint = copy.bundle_origin["fingerprint"]
    stored = list(Comment.objects.filter(session=copy).order_by("pk"))
    assert [(c.author_name, c.restored_from) for c in stored] == [("admin1", fingerprint), ("reviewer", fingerprint)]
    assert all(c.created_at <= datetime.now(UTC) for c in stored)  # not 2099
    viewer = member("vic", elsewhere, Role.VIEWER)
    client.force_login(viewer)
    page = client.get(f"/sessions/{copy.pk}/?step=1").content.decode()
    mark = f'author and time are what the bundle says">restored from a bundle signed by {grouped(fingerprint)}<'
    assert page.count(mark) == 3  # the thread's first comment and its reply, and the Discussion list
    # And wherever the page lists the thread: the Discussion list and the scrubber's mark.
    discussion = page[page.index('<section id="discussion"') :]
    assert mark in discussion[: discussion.index("</section>")]
    assert "<title>comment by admin1 (restored from a bundle) at #2</title>" in page
    [thread] = client.get(f"/api/sessions/{copy.pk}/comments").json()
    assert thread["restored_from"] == fingerprint and thread["replies"][0]["restored_from"] == fingerprint
    said = get_comments(actor=Actor(user=viewer), session_id=str(copy.pk))
    assert "by admin1 at" in said and f"(restored from a bundle signed by {fingerprint[:16]}…)" in said
    # One written here is not marked, and a bundle of this session carries the marks on.
    client.force_login(member("max", elsewhere, Role.MAINTAINER))
    assert client.post(f"/api/sessions/{copy.pk}/comments", {"seq": 1, "body": "mine"},
                       content_type="application/json").status_code == 201  # fmt: skip
    assert Comment.objects.get(session=copy, body="mine").restored_from == ""
    from sessions_app.bundles import comment_threads

    marks = [(t["author"], t["restored_from"]) for t in comment_threads(copy)]
    assert marks == [("admin1", fingerprint), ("max", "")]


def test_a_carried_original_too_long_to_redact_is_not_kept_and_its_job_says_why(bundle, session, elsewhere, settings):
    from pathlib import Path

    from sessions_app.models import RedactionRules

    RedactionRules.objects.create(project=elsewhere, detectors=["email"], custom=[], keep_originals=True)
    settings.MAX_RECORD_BYTES = 40  # below the carried original's lines
    session.delete()
    (outcome,) = import_file(path=bundle, project=elsewhere)
    assert outcome.error is None
    kept = ImportJob.objects.filter(project=elsewhere, problem_count=1).get()
    assert kept.problems[0]["field"] == "original" and "too long to redact" in kept.problems[0]["message"]
    assert not Path(kept.stored_path).exists()


def test_a_restored_comment_or_note_keeps_the_bundles_redaction_mark_or_names_whose_import_redacted_it(
    bundle, session, elsewhere, tmp_path
):
    from datetime import UTC, datetime

    from sessions_app.models import RedactionRules

    RedactionRules.objects.create(project=elsewhere, detectors=["email"], custom=[], keep_originals=True)
    marked = {"redacted_by": "ada", "redacted_at": "2099-01-01T00:00:00+00:00"}  # after the export: held to it
    threads = [
        {"id": 1, "seq": 1, "author": "rita", "body": "ask [REDACTED:apikey]", **marked,
         "replies": [{"id": 2, "author": "otto", "body": "mail bo@example.org", "revisions": []}]},
        {"id": 3, "seq": 1, "author": "mia", "body": "now fine",
         "revisions": [{"body": "was ana@example.org", "written_at": "2026-01-01T00:00:00+00:00"}]},
        {"id": 4, "seq": 1, "author": "vic", "body": "plain"},
    ]  # fmt: skip
    reviews = [
        {"reviewer": "rita", "verdict": "approved", "note": "ok", "chain_head": "0" * 64, "chain_valid": True,
         "first_seq": 0, "last_seq": 1, **marked},
        {"reviewer": "otto", "verdict": "approved", "note": "told cy@example.org", "chain_head": "0" * 64,
         "chain_valid": True, "first_seq": 0, "last_seq": 1},
    ]  # fmt: skip
    session.delete()
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, comments=threads, reviews=reviews), project=elsewhere,
                             created_by="max")  # fmt: skip
    assert outcome.error is None, outcome.error
    stored = Comment.objects.filter(session=outcome.session).order_by("pk")
    # The bundle's mark, dated no later than its export; this import's rules, the importer and now.
    assert [(c.author_name, c.redacted_by) for c in stored] == [("rita", "ada"), ("otto", "max"), ("mia", "max"),
                                                               ("vic", "")]  # fmt: skip
    first, reply, revised, plain = stored
    assert first.redacted_at < datetime.now(UTC) and plain.redacted_at is None
    assert "[REDACTED:email]" in reply.body and revised.body == "now fine"
    assert "[REDACTED:email]" in revised.revisions.get().body
    notes = Review.objects.filter(session=outcome.session).order_by("pk")
    assert [(r.reviewer_name, r.redacted_by) for r in notes] == [("rita", "ada"), ("otto", "max")]


@pytest.mark.parametrize(
    "first, last",
    [(0, 1_000_000_000), (-1, 1), (2, 1), ("0", 1), (0, None)],
    ids=["past", "before", "reversed", "text", "none"],
)
def test_a_restored_sign_off_covering_events_the_session_lacks_refuses_the_bundle(
    bundle, session, elsewhere, tmp_path, first, last
):
    # Its cover would read "events 1-1000000001 of 38": a bundle refused whole, as for a comment.
    held = session.event_count
    review = {"id": 7, "reviewer": "rita", "verdict": "approved", "chain_head": "0" * 64, "chain_valid": True,
              "first_seq": first, "last_seq": last}  # fmt: skip
    session.delete()
    (refused,) = import_file(path=_resigned(bundle, tmp_path, reviews=[review]), project=elsewhere)
    assert refused.session is None
    assert f"reviews.json: sign-off 7 covers seqs {first!r} to {last!r}, outside the session's 0 to {held - 1}" in (
        refused.error
    )
    assert not Session.objects.filter(project=elsewhere).exists() and not Review.objects.exists()
    whole = dict(review, first_seq=0, last_seq=held - 1)
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, reviews=[whole]), project=elsewhere)
    assert outcome.error is None and Review.objects.get().last_seq == held - 1


@pytest.mark.parametrize("seq", [1.9, True, "3", -1, 2**64 - 1], ids=["float", "bool", "text", "negative", "huge"])
def test_a_restored_comment_on_no_event_of_the_session_refuses_the_bundle(bundle, session, elsewhere, tmp_path, seq):
    # 1.9 or true would have been taken as event #2, as the API refuses them.
    comment = {"id": 9, "seq": seq, "author": "rita", "body": "here"}
    session.delete()
    (refused,) = import_file(path=_resigned(bundle, tmp_path, comments=[comment]), project=elsewhere)
    shown = repr(seq) if len(repr(seq)) <= 40 else repr(seq)[:40] + "…"
    assert refused.session is None
    if seq == 2**64 - 1:  # past any 64-bit integer: the streaming reader refuses it as it reads it
        assert "comments.json: not readable JSON (parse error: integer overflow)" in refused.error
    else:
        assert f"comments.json: comment 9 is on event {shown}, outside the session" in refused.error


def test_a_bundles_lists_and_lines_are_held_to_their_depth_and_size_as_they_are_read(bundle, elsewhere, tmp_path):
    """What a retest built in small zips: a value nested 200,000 deep (20 GB), one entry of a
    million objects, one events.jsonl line of them, labels by the thousand on every line."""
    deep = "[" * 100 + "]" * 100
    cases = {
        "nested": ({"comments.json": orjson.dumps([{"id": 1, "seq": 0, "author": "a", "body": "b"}])[:-2]
                    + b', "x": ' + deep.encode() + b"}]"}, "comments.json: nested deeper than 16"),
        "objects": ({"reviews.json": b"[[" + b",".join([b"{}"] * 30_000) + b"]]"},
                    "reviews.json: more than 20,000 objects and lists"),
    }  # fmt: skip
    for name, (files, said) in cases.items():
        (refused,) = import_file(path=_resigned(bundle, tmp_path, files=files), project=elsewhere)
        assert refused.error and said in refused.error, (name, refused.error)
    with zipfile.ZipFile(bundle) as archive:
        lines = archive.read("events.jsonl").splitlines()
    nested_line = lines[0][:-1] + b', "x": [' + b",".join([b"{}"] * 20_000) + b"]}"
    events = b"\n".join([nested_line, *lines[1:]]) + b"\n"
    (refused,) = import_file(path=_resigned(bundle, tmp_path, files={"events.jsonl": events}), project=elsewhere)
    assert "events.jsonl line 1: not an event line (values nested in it)" in refused.error
    assert not Session.objects.filter(project=elsewhere).exists()


def test_a_deep_list_in_a_bundle_is_refused_before_its_parser_holds_it(tmp_path):
    """A guard on ijson's path-naming events came too late: it makes every event of a read
    buffer with its whole path first (100,000 deep, 27 KB: 10 GB). 8,000 deep took ~160 MB."""
    import io
    import tracemalloc

    from sessions_app.bundle_reader import BundleError, _list_items

    deep = b'[{"id": 1, "x": ' + b"[" * 8000 + b"]" * 8000 + b"}]"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("comments.json", deep)
        archive.writestr("reviews.json", b'[{"id": 1}, 2, [3, {"a": [4]}], "five"]')
    with zipfile.ZipFile(buffer) as archive:
        tracemalloc.start()
        try:
            with pytest.raises(BundleError, match="comments.json: nested deeper than 16"):
                list(_list_items(archive, "comments.json"))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 5_000_000, peak
        # Entries of every shape, each built whole.
        assert list(_list_items(archive, "reviews.json")) == [{"id": 1}, 2, [3, {"a": [4]}], "five"]


def test_a_failed_restore_leaves_no_kept_original_behind(bundle, elsewhere, tmp_path, monkeypatch):
    from sessions_app.ingest import bundles as restoring

    def broken(*args, **kwargs):
        raise KeyError("a bug")  # none of the errors a bundle's own content makes

    monkeypatch.setattr(restoring, "_restore_reviews", broken)
    before = _kept_files()
    with pytest.raises(KeyError):
        import_bundle(path=bundle, project=elsewhere)
    assert _kept_files() == before and not ImportJob.objects.filter(project=elsewhere).exists()


def test_names_a_bundle_restores_cannot_turn_the_text_after_them(bundle, session, elsewhere, tmp_path):
    # "mallory\u202e" had reversed the time after it in the Discussion list and the sign-off row
    # ("CTU 02:51 82-11-6202"): every restored name is isolated and its override written out.
    from django.test import Client

    turned = "\u202e"
    threads = [{"id": 1, "seq": 1, "author": f"mallory{turned}", "body": "look", "resolved_by": f"eve{turned}",
                "resolved_at": "2026-01-01T00:00:00+00:00", "redacted_by": f"rex{turned}",
                "redacted_at": "2026-01-01T00:00:00+00:00"}]  # fmt: skip
    reviews = [{"reviewer": f"ceo{turned}", "verdict": "approved", "note": "ok", "chain_head": "0" * 64,
                "chain_valid": True, "first_seq": 0, "last_seq": 1, "redacted_by": f"rex{turned}",
                "redacted_at": "2026-01-01T00:00:00+00:00"}]  # fmt: skip
    session.delete()
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, comments=threads, reviews=reviews), project=elsewhere)
    assert outcome.error is None, outcome.error
    client = Client()
    client.force_login(member("max", elsewhere, Role.VIEWER))
    page = client.get(f"/sessions/{outcome.session.pk}/?step=1").content.decode()
    assert turned not in page
    for name in ("mallory", "ceo", "eve", "rex"):
        assert f"<bdi>{name}\\u202e</bdi>" in page, name


def test_the_bundle_a_kept_original_came_in_is_named_plainly(bundle, elsewhere, client, tmp_path):
    # A bundle imported by its path (no upload's cleaned name) is named by its file's name, and a
    # right-to-left override in it would turn the name around where the imports list and the
    # job's page say which bundle carried the original: written out as its code point there,
    # as an upload's own name is.
    renamed = tmp_path / "evidence\u202eelif.zip"
    renamed.write_bytes(bundle.read_bytes())
    (outcome,) = import_file(path=renamed, project=elsewhere)
    kept = ImportJob.objects.get(pk=outcome.session.import_job_id)
    assert "\u202e" in kept.carried_by
    client.force_login(member("max", elsewhere, Role.MAINTAINER))
    for url in ("/imports/", f"/imports/{kept.pk}/", "/sessions/"):
        page = client.get(url)
        text = page.content.decode()
        assert page.status_code == 200 and "\u202e" not in text, url
    assert "evidence\\u202eelif.zip" in client.get(f"/imports/{kept.pk}/").content.decode()
