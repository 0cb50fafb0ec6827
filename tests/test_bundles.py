"""The signed evidence bundle: export, the signing key, and verify_bundle naming what changed."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.http import StreamingHttpResponse
from django.test import Client

from sessions_app import signing
from sessions_app.bundle_reader import BundleError, read_bundle
from sessions_app.ingest.bundles import import_bundle
from sessions_app.ingest.importing import import_local_file
from sessions_app.models import AuditEntry, Comment, CommentRevision, Event, Project, Review, Role, Session

from .builders_teams import acme, member  # noqa: F401  (fixtures)

ROOT = Path(settings.BASE_DIR)
SOURCE = ROOT / "demo" / "rlm_success.jsonl"
HOSTILE = '</script><script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def session(acme, tmp_path) -> Session:
    """A session imported from a file (its original kept), with a thread, a reply with an edit,
    and a sign-off."""
    copy = tmp_path / SOURCE.name
    copy.write_bytes(SOURCE.read_bytes())
    (outcome,) = import_local_file(path=copy, project=acme)
    found = Session.objects.get(pk=outcome.session.pk)
    thread = Comment.objects.create(session=found, seq=3, author_name="rita", body="Why this query? " + HOSTILE)
    reply = Comment.objects.create(session=found, seq=3, parent=thread, author_name="mia", body="Fixed wording")
    CommentRevision.objects.create(comment=reply, body="first wording", written_at=reply.created_at)
    Review.objects.create(session=found, reviewer_name="rita", verdict=Review.Verdict.APPROVED, note="fine",
                          chain_head=found.head_hash, chain_valid=True, first_seq=0,
                          last_seq=found.event_count - 1)  # fmt: skip
    return found


@pytest.fixture
def viewer(acme) -> Client:
    client = Client()
    client.force_login(member("vera", acme, Role.VIEWER))
    return client


def export(client: Client, session: Session, folder: Path) -> Path:
    response = client.get(f"/api/sessions/{session.pk}/bundle")
    assert response.status_code == 200, response.content
    path = folder / "bundle.zip"
    path.write_bytes(b"".join(response.streaming_content))
    return path


@pytest.fixture
def bundle(viewer, session, tmp_path) -> Path:
    return export(viewer, session, tmp_path)


def server_key() -> str:
    return signing.server_key().public_key


def verify(path: Path, key: str | None = None) -> str:
    out = io.StringIO()
    call_command("verify_bundle", str(path), *(["--key", key] if key else []), stdout=out)
    return out.getvalue()


def refused(path: Path, key: str | None = None) -> str:
    with pytest.raises(CommandError) as raised:
        verify(path, key)
    return str(raised.value)


def rezip(path: Path, changes: dict[str, Callable[[bytes], bytes]], target: Path | None = None) -> Path:
    """The bundle again, members in the same order, with some members' bytes changed."""
    target = target or path.with_name("changed.zip")
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for name in source.namelist():
            data = source.read(name)
            out.writestr(name, changes[name](data) if name in changes else data)
    return target


def flip_in(needle: bytes, replacement: bytes, occurrence: int = 0) -> Callable[[bytes], bytes]:
    def change(data: bytes) -> bytes:
        at = -1
        for _ in range(occurrence + 1):
            at = data.index(needle, at + 1)
        return data[:at] + replacement + data[at + len(needle) :]

    return change


def resign(manifest_change: Callable[[dict], None], key: Ed25519PrivateKey | None = None):
    """Changes that rewrite the manifest and sign it with `key` (a stranger's key, named in
    the manifest as its public key)."""
    key = key or Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    state: dict = {}

    def manifest(data: bytes) -> bytes:
        parsed = orjson.loads(data)
        parsed["public_key"] = base64.b64encode(raw).decode()
        manifest_change(parsed)
        state["bytes"] = orjson.dumps(parsed, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
        return state["bytes"]

    def signature(_data: bytes) -> bytes:
        return base64.b64encode(key.sign(state["bytes"]))

    return {"manifest.json": manifest, "manifest.sig": signature}, base64.b64encode(raw).decode()


# --- export ---------------------------------------------------------------------------------


def test_an_exported_bundle_verifies_against_the_servers_key(bundle):
    out = verify(bundle, server_key())
    assert out.startswith("bundle OK")
    assert "by the pinned key" in out
    assert "events.jsonl" in out and "original/rlm_success.jsonl" in out


def test_without_a_key_the_embedded_key_is_used_and_said_to_be_unpinned(bundle):
    assert "NOT pinned" in verify(bundle)


def test_the_bundle_holds_the_events_original_comments_and_sign_offs_as_stored(bundle, session):
    read = read_bundle(bundle, key=server_key())
    assert read.pinned and read.signature_valid and read.files_valid and read.chain_valid
    stored = list(Event.objects.filter(session=session).order_by("seq").values_list("seq", "hash", "payload", "salt"))
    assert [(e["seq"], e["hash"], e["payload"], e["salt"]) for e in read.events()] == stored
    assert read.chain == {"head": session.head_hash, "first_seq": 0, "last_seq": session.event_count - 1}
    assert read.original_name == "rlm_success.jsonl"
    with read.open_original() as original:
        assert original.read() == SOURCE.read_bytes()
    (thread,) = read.comments
    assert (thread["seq"], thread["author"], thread["body"]) == (3, "rita", "Why this query? " + HOSTILE)
    assert thread["replies"][0]["revisions"][0]["body"] == "first wording"
    (review,) = read.reviews
    assert (review["verdict"], review["chain_head"], review["last_seq"]) == (
        "approved", session.head_hash, session.event_count - 1)  # fmt: skip
    assert read.session["project"] == "acme" and read.session["counts"]["events"] == session.event_count


def test_the_manifest_names_every_file_with_its_sha256_and_is_signed(bundle):
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        manifest_bytes = archive.read("manifest.json")
        manifest = orjson.loads(manifest_bytes)
        assert set(names) == set(manifest["files"]) | {"manifest.json", "manifest.sig"}
        for name, digest in manifest["files"].items():
            assert hashlib.sha256(archive.read(name)).hexdigest() == digest
        public, _ = signing.public_key_from_text(manifest["public_key"])
        assert signing.verify(public, archive.read("manifest.sig").decode(), manifest_bytes)
    assert manifest["format"] == "replay-bundle/1" and manifest["exported_by"] == "vera"
    assert manifest["public_key"] == server_key()


def test_the_bundle_is_streamed_as_a_zip(viewer, session):
    response = viewer.get(f"/api/sessions/{session.pk}/bundle")
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].endswith('.replay-bundle.zip"')
    chunks = list(response.streaming_content)
    assert len(chunks) > 3  # written out member by member, not built first
    zipfile.ZipFile(io.BytesIO(b"".join(chunks))).testzip()


def test_exporting_a_bundle_is_bundle_export_in_the_audit_log(viewer, session):
    export_ = viewer.get(f"/api/sessions/{session.pk}/bundle")
    b"".join(export_.streaming_content)
    entry = AuditEntry.objects.get(action="bundle.export")
    assert (entry.actor, entry.target, entry.project_id) == ("vera", f"session:{session.pk}", session.project_id)
    assert orjson.loads(entry.detail) == {"events": session.event_count, "head": session.head_hash}


def test_a_non_member_gets_404_and_an_anonymous_caller_401(session, db):
    outsider = Client()
    outsider.force_login(member("olga"))  # a maintainer of the default project only
    response = outsider.get(f"/api/sessions/{session.pk}/bundle")
    assert response.status_code == 404
    assert response.json() == {"detail": f"session {session.pk} not found"}
    assert Client().get(f"/api/sessions/{session.pk}/bundle").status_code == 401
    assert not AuditEntry.objects.filter(action="bundle.export").exists()


def test_the_player_offers_the_bundle(viewer, session):
    page = viewer.get(f"/sessions/{session.pk}/")
    assert f'href="/api/sessions/{session.pk}/bundle"'.encode() in page.content


def test_the_offline_player_can_make_no_request_and_holds_the_session_as_data_only(bundle):
    with zipfile.ZipFile(bundle) as archive:
        html = archive.read("index.html").decode()
    assert "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:" in html
    assert html.count("<script") == 2  # the JSON data block and the one inline script
    assert "</script><script>alert" not in html and "<img src=x" not in html
    data = html.split('<script type="application/json" id="bundle-data">', 1)[1].split("</script>", 1)[0]
    parsed = orjson.loads(data)
    assert parsed["comments"][0]["body"].endswith(HOSTILE)
    assert "innerHTML" not in html and "insertAdjacentHTML" not in html and "src=" not in html.split("</style>")[0]


def test_what_an_agent_recorded_cannot_end_the_offline_players_data_early(acme, viewer, tmp_path):
    # The events' rows are escaped on their own path (comments on another): "</script>" in a
    # payload, a tool name or a step's output would have closed the data block and run.
    copy = tmp_path / "hostile.jsonl"
    lines = []
    for line in SOURCE.read_bytes().splitlines():
        record = orjson.loads(line)
        if record.get("event_type") == "llm_response":
            record["data"]["response"] = HOSTILE + " <!-- " + HOSTILE
        lines.append(orjson.dumps(record))
    copy.write_bytes(b"\n".join(lines) + b"\n")
    (outcome,) = import_local_file(path=copy, project=acme)
    payloads = "".join(Event.objects.filter(session=outcome.session).values_list("payload", flat=True))
    assert "</script><script>alert(" in payloads
    with zipfile.ZipFile(export(viewer, outcome.session, tmp_path)) as archive:
        html = archive.read("index.html").decode()
    assert html.count("<script") == 2 and "<!--" not in html.split('id="bundle-data">', 1)[1]
    data = html.split('<script type="application/json" id="bundle-data">', 1)[1].split("</script>", 1)[0]
    # The rows are whole again, the payloads as recorded (each the stored JSON text).
    assert any("</script><script>alert(" in (row[6] or "") for row in orjson.loads(data)["events"])


# --- verify_bundle finds what changed -------------------------------------------------------


def test_a_changed_payload_byte_is_named_by_its_line_and_seq(bundle):
    with zipfile.ZipFile(bundle) as archive:
        line = archive.read("events.jsonl").splitlines()[3]
    event = orjson.loads(line)
    payload = event["payload"]
    changed = payload.replace(payload[-2], "X" if payload[-2] != "X" else "Y", 1)
    edited = line.replace(orjson.dumps(payload)[1:-1], orjson.dumps(changed)[1:-1])
    assert edited != line
    message = refused(rezip(bundle, {"events.jsonl": flip_in(line, edited)}), server_key())
    assert message.startswith("bundle NOT OK: events.jsonl: its SHA-256 does not match manifest.json")
    assert "events.jsonl line 4 (seq 3): field hash" in message


def test_a_changed_event_is_found_by_the_chain_even_when_the_manifest_is_re_signed(bundle):
    """A stranger who rewrites an event, the manifest's hash of events.jsonl, and signs it all
    with their own key: the unpinned check catches the chain, the pinned one the signature."""
    with zipfile.ZipFile(bundle) as archive:
        events = archive.read("events.jsonl")
    line = events.splitlines()[5]
    edited = line.replace(b'"seq":5,', b'"seq":5,', 1).replace(b'"kind":"', b'"kind":"x', 1)
    new_events = events.replace(line, edited)
    changes, stranger = resign(lambda m: m["files"].update({"events.jsonl": hashlib.sha256(new_events).hexdigest()}))
    changed = rezip(bundle, {"events.jsonl": lambda _: new_events, **changes})
    message = refused(changed)
    assert "events.jsonl line 6 (seq 5): field hash" in message
    assert "SHA-256" not in message
    assert "not a signature of manifest.json by the pinned key" in refused(changed, server_key())


def test_verify_bundle_prints_a_forged_manifests_words_without_letting_a_terminal_obey_them(bundle):
    # A re-signed bundle whose exported_by moves the cursor up and prints "the pinned key" over
    # the line saying the key is NOT pinned: printed, the escapes are only their code points.
    forged_by = "vera\x1b[6A\r\x1b[2K  signature: Ed25519 by the pinned key\u202e\x1b[6B"
    changes, _ = resign(lambda m: m.update(exported_by=forged_by, exported_at="2026-01-01\x07"))
    out = verify(rezip(bundle, changes))
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "\r" not in out
    assert "by vera\\u001b[6A\\u000d\\u001b[2K  signature: Ed25519 by the pinned key\\u202e\\u001b[6B" in out
    assert "exported 2026-01-01\\u0007 by" in out
    assert "NOT pinned" in out.splitlines()[1]
    # Words a reader needs stay as they are.
    changes, _ = resign(lambda m: m.update(exported_by="José Müller 山田"))
    assert "by José Müller 山田" in verify(rezip(bundle, changes))


def test_verify_bundle_says_a_manifest_names_no_export_time_or_exporter_rather_than_failing(bundle):
    # A KeyError traceback before (a retest): the import takes such a bundle.
    changes, _ = resign(lambda m: [m.pop("exported_at"), m.pop("exported_by")])
    out = verify(rezip(bundle, changes))
    assert "bundle OK" in out and "exported at no stated time by no one named" in out


def test_a_changed_original_byte_is_named(bundle):
    message = refused(rezip(bundle, {"original/rlm_success.jsonl": flip_in(b"revenue", b"Revenue")}), server_key())
    assert message == (
        "bundle NOT OK: original/rlm_success.jsonl: its SHA-256 does not match manifest.json (the file was changed)"
    )


def test_a_changed_comment_is_named(bundle):
    message = refused(rezip(bundle, {"comments.json": flip_in(b"Why this query?", b"Why that query?")}))
    assert message.startswith("bundle NOT OK: comments.json: its SHA-256 does not match")


def test_a_changed_manifest_breaks_the_signature(bundle):
    message = refused(rezip(bundle, {"manifest.json": flip_in(b'"vera"', b'"eve"')}), server_key())
    assert message.startswith("bundle NOT OK: manifest.sig: not a signature of manifest.json by the pinned key")
    assert "not a signature of manifest.json by the key the manifest names" in refused(
        rezip(bundle, {"manifest.json": flip_in(b'"vera"', b'"eve"')}, bundle.with_name("b.zip"))
    )


def test_a_signature_by_another_key_fails_against_the_pinned_key(bundle):
    changes, stranger = resign(lambda m: m.update({"exported_by": "eve"}))
    changed = rezip(bundle, changes)
    assert "NOT pinned" in verify(changed)  # whole, and signed by the key it carries ...
    message = refused(changed, server_key())  # ... which is not the server's
    assert f"by the pinned key {signing.grouped(signing.server_key().fingerprint)}" in message
    assert "the manifest names the key" in message
    assert verify(changed, stranger).startswith("bundle OK")


def test_pinning_another_key_refuses_a_genuine_bundle(bundle):
    other = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    assert "by the pinned key" in refused(bundle, base64.b64encode(other).decode())
    assert "--key: not an Ed25519 public key" in refused(bundle, "not-a-key")


def test_a_missing_or_extra_file_is_named(bundle):
    target = bundle.with_name("extra.zip")
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(target, "w") as out:
        for name in source.namelist():
            if name != "reviews.json":
                out.writestr(name, source.read(name))
        out.writestr("payload.exe", b"MZ")
    message = refused(target, server_key())
    assert message == "bundle NOT OK: reviews.json: listed in manifest.json but missing from the bundle"


def repack_with_folders(path: Path, extra: dict[str, bytes] | None = None) -> Path:
    """The bundle unzipped and zipped again as `zip -qr x.zip .` does: an entry of its own
    (a name ending in "/", no bytes) for each folder before the files in it."""
    target = path.with_name("repacked.zip")
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        written: set[str] = set()
        for name in source.namelist():
            parts = name.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                folder = "/".join(parts[:depth]) + "/"
                if folder not in written:
                    out.mkdir(folder)
                    written.add(folder)
            out.writestr(name, source.read(name))
        for name, data in (extra or {}).items():
            out.writestr(name, data)
    return target


def test_a_bundle_re_zipped_with_folder_entries_still_verifies_and_an_added_file_is_still_named(bundle):
    repacked = repack_with_folders(bundle)
    with zipfile.ZipFile(repacked) as archive:
        folders = [info.filename for info in archive.infolist() if info.is_dir()]
    assert "original/" in folders  # as `zip -r` writes it
    assert verify(repacked, server_key()).startswith("bundle OK")
    added = repack_with_folders(bundle, {"original/notes.txt": b"not from the server"})
    assert refused(added, server_key()) == (
        "bundle NOT OK: original/notes.txt: in the bundle but not listed in manifest.json"
    )


def test_a_bundle_holding_a_name_twice_is_refused(bundle, tmp_path):
    """A page slipped in before the genuine index.html: Python reads a name's last copy, an
    unzip tool may show the first, so the bundle is refused rather than said to match."""
    target = tmp_path / "twice.zip"
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(target, "w") as out:
        out.writestr("index.html", b"<script>alert(1)</script>")
        with pytest.warns(UserWarning, match="Duplicate name: 'index.html'"):
            for name in source.namelist():
                out.writestr(name, source.read(name))
    assert refused(target, server_key()) == "bundle NOT OK: index.html: in the bundle more than once"


PATH_LIKE = "a character a tool may read as part of a path (a colon, or a slash or dot that is not one)"


@pytest.mark.parametrize(
    "name, why",
    [
        ("original/../../../tmp/evil.jsonl", "not a plain path inside the bundle"),
        ("/etc/evil", "not a plain path inside the bundle"),
        ("original\\..\\evil", "not a plain path inside the bundle"),
        ("original//evil", "not a plain path inside the bundle"),
        ("notes/evil.txt", "a folder no bundle has (only original/ holds a file)"),
        ("original/a/b.jsonl", "a folder no bundle has (only original/ holds a file)"),
        ("original/bell\x07.jsonl", "characters that hide or turn what a reader sees (U+0007)"),
        ("original/report\u202egpj.exe", "characters that hide or turn what a reader sees (U+202E)"),
        ("original/a\u200bb.jsonl", "characters that hide or turn what a reader sees (U+200B)"),
        ("original/..\uff0f..\uff0fevil.jsonl", PATH_LIKE),
        ("original/a.jsonl:stream", PATH_LIKE),
        ("original/" + "x" * 256, "a name over 255 bytes"),
    ],
)  # fmt: skip
def test_a_member_an_unzip_tool_would_write_outside_its_folder_is_refused(bundle, tmp_path, name, why):
    # Nothing writes a member out under its name here; an auditor's unzip tool would.
    target = tmp_path / "named.zip"
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(target, "w") as out:
        for member in source.namelist():
            out.writestr(member, source.read(member))
        out.writestr(zipfile.ZipInfo(name), b"x")
    assert refused(target, server_key()) == f"bundle NOT OK: {name!r}: {why}"


def test_a_folder_given_instead_of_the_zip_is_said_to_be_a_folder(tmp_path):
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    message = refused(unpacked)
    assert "a folder" in message and ".zip" in message
    assert "Errno" not in message


def test_verify_bundle_needs_no_database_and_exits_non_zero(bundle, tmp_path):
    # A database that cannot be reached: any ORM use would fail.
    env = {**os.environ, "DATABASE_URL": "postgres://nobody@127.0.0.1:9/none", "REPLAY_DATA_DIR": str(tmp_path)}
    command = [sys.executable, str(ROOT / "manage.py"), "verify_bundle"]
    ok = subprocess.run([*command, str(bundle), "--key", server_key()], env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("bundle OK")
    broken = rezip(bundle, {"comments.json": flip_in(b"rita", b"rite")})
    failed = subprocess.run([*command, str(broken)], env=env, capture_output=True, text=True)
    assert failed.returncode != 0
    assert "comments.json: its SHA-256 does not match" in failed.stderr


def test_read_bundle_refuses_what_is_not_a_zip(tmp_path):
    path = tmp_path / "not.zip"
    path.write_bytes(b"hello")
    with pytest.raises(BundleError, match="not a readable zip file"):
        read_bundle(path)


# --- the signing key ------------------------------------------------------------------------


def test_the_signing_key_is_made_once_owner_only_and_outside_the_database(settings, tmp_path):
    settings.SIGNING_KEY_FILE = tmp_path / "keys" / "signing.pem"
    first = signing.load_or_create(settings.SIGNING_KEY_FILE)
    assert stat.S_IMODE(settings.SIGNING_KEY_FILE.stat().st_mode) == 0o600
    again = signing.load_or_create(settings.SIGNING_KEY_FILE)
    assert first.public_key == again.public_key and len(first.fingerprint) == 16
    assert len(base64.b64decode(first.public_key)) == 32


def test_a_bad_key_file_stops_with_improperly_configured(tmp_path):
    path = tmp_path / "bad.pem"
    path.write_text("not a key")
    with pytest.raises(ImproperlyConfigured, match="REPLAY_SIGNING_KEY_FILE"):
        signing.load_or_create(path)


def test_the_public_key_is_in_the_api_and_on_the_about_page(viewer):
    body = viewer.get("/api/signing-key").json()
    key = signing.server_key()
    assert body == {"algorithm": "Ed25519", "public_key": key.public_key, "fingerprint": key.fingerprint}
    page = viewer.get("/about/").content.decode()
    assert key.public_key in page and signing.grouped(key.fingerprint) in page and "verify_bundle" in page
    assert Client().get("/api/signing-key").status_code == 401
    assert Client().get("/about/").status_code == 302


def test_a_comment_or_sign_off_past_the_events_bundled_is_left_out_and_the_bundle_restores(
    viewer, session, tmp_path, acme
):
    # A live session grows while its bundle is written; what was said of its later events is not
    # in it (its import refuses a sign-off or comment outside the session).
    held = session.event_count
    Review.objects.create(session=session, reviewer_name="late", verdict="approved", chain_head="0" * 64,
                          chain_valid=True, first_seq=0, last_seq=held)  # fmt: skip
    Comment.objects.create(session=session, seq=held, author_name="late", body="on an event not bundled yet")
    path = export(viewer, session, tmp_path)
    with zipfile.ZipFile(path) as archive:
        reviews = orjson.loads(archive.read("reviews.json"))
        threads = orjson.loads(archive.read("comments.json"))
    assert [r["reviewer"] for r in reviews] and "late" not in [r["reviewer"] for r in reviews]
    assert threads and "late" not in [t["author"] for t in threads]
    other = Project.objects.create(name="Other", slug="other")
    copy, _bundle, _existing = import_bundle(path=path, project=other)
    assert Review.objects.filter(session=copy).count() == len(reviews)


@pytest.mark.parametrize(
    "name, member",
    [
        ("..", "original"), (".", "original"), ("a/..", "original"), ("x\\..", "original"), ("", "original"),
        ("run.jsonl", "run.jsonl"), ("dir/run.jsonl", "run.jsonl"), ("report\u202egpj.exe", "report_gpj.exe"),
        ("a:b\uff0fc.jsonl", "a_b_c.jsonl"), ("x" * 300, "x" * 255), ("é" * 200, "é" * 127),
        ("می\u200cخواهم.jsonl", "می\u200cخواهم.jsonl"),
    ],
)  # fmt: skip
def test_the_member_an_original_is_bundled_as_is_one_the_reader_takes(name, member):
    from sessions_app.bundle_reader import _unsafe_name
    from sessions_app.bundles import original_member

    assert original_member(name) == f"original/{member}" and _unsafe_name(f"original/{member}") == ""


def test_a_folder_entry_climbing_out_of_the_bundle_is_refused(bundle, tmp_path):
    target = tmp_path / "folder.zip"
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(target, "w") as out:
        for member in source.namelist():
            out.writestr(member, source.read(member))
        out.writestr(zipfile.ZipInfo("../outside/"), b"")
    assert refused(target, server_key()) == "bundle NOT OK: '../outside/': not a plain path inside the bundle"


def test_an_event_line_with_an_integer_past_4300_digits_is_refused_and_the_process_stays_sound():
    # A line with many brackets is first parsed by ijson's C parser to count what nests; asked for
    # exact numbers, it makes each integer with int(), whose refusal past 4,300 digits it does not
    # hand on (a SystemError at the next call, then a segmentation fault). In a process of its
    # own, as it would crash the suite's.
    import subprocess
    import sys

    script = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'replay_site.settings'); django.setup()\n"
        "from sessions_app.bundle_reader import BundleError, _event_line\n"
        "line = b'{\"seq\": 9' + b'9' * 5000 + b', \"payload\": \"' + b'{' * 10001 + b'\"}'\n"
        "said = []\n"
        "for _ in range(3):\n"
        "    try:\n"
        "        _event_line(line, 1)\n"
        "    except BundleError as error:\n"
        "        said.append(str(error)[:40])\n"
        "print(said)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-400:])
    assert done.stdout.count("events.jsonl line 1") == 3, done.stdout


def test_an_event_line_of_many_brackets_with_an_integer_past_64_bits_reads_as_orjson_reads_it():
    # Its brackets are counted by yajl's floats, which stop at an integer past 64 bits: read again
    # exactly, the line is what orjson makes of it (the integer as the double it rounds to).
    from sessions_app.bundle_reader import _event_line

    line = b'{"seq": 1, "big": 18446744073709551616, "payload": "' + b"{" * 10001 + b'"}'
    with pytest.raises(BundleError, match="line 1: field kind: missing"):  # read, then checked
        _event_line(line, 1)
