"""Promises of docs/bundles.md no other test held the code to: a comment past the session's last
event refuses the bundle, a round trip keeps a thread's resolution, a deleted reply and an edit,
a re-signed bundle whose chain does not end where its manifest says is refused, and reviews.json
lists sign-offs oldest first."""

from __future__ import annotations

import hashlib
import zipfile
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from django.utils import timezone

from sessions_app import comments
from sessions_app.access import Actor
from sessions_app.bundle_reader import BundleError, read_bundle
from sessions_app.ingest.importing import import_file
from sessions_app.models import Comment, Review, Role, Session

from .builders_teams import acme, member  # noqa: F401  (fixtures)
from .test_bundle_import import _resigned, elsewhere  # noqa: F401  (fixtures)
from .test_bundles import bundle, export, refused, resign, rezip, session, viewer  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


def test_a_comment_on_the_seq_just_past_the_last_event_refuses_the_bundle(bundle, session, elsewhere, tmp_path):
    # Seqs run 0 to event_count - 1: event_count itself is no event of the session.
    held = session.event_count
    session.delete()
    past = {"id": 9, "seq": held, "author": "rita", "body": "one past the end"}
    (refusal,) = import_file(path=_resigned(bundle, tmp_path, comments=[past]), project=elsewhere)
    assert refusal.session is None
    assert f"comments.json: comment 9 is on event {held}, outside the session" in refusal.error
    assert not Session.objects.filter(project=elsewhere).exists()
    # The last event itself takes a comment.
    last = dict(past, seq=held - 1)
    (outcome,) = import_file(path=_resigned(bundle, tmp_path, comments=[last]), project=elsewhere)
    assert outcome.error is None and Comment.objects.get(session=outcome.session).seq == held - 1


def test_a_round_trip_keeps_a_resolved_thread_a_deleted_reply_and_an_edit(session, viewer, elsewhere, tmp_path):
    # docs/bundles.md: comments.json carries resolved_at/by, edited_at and deleted_at (a deleted
    # comment keeping its place with no body); the restored copy is to say the same.
    rita = Actor(user=member("rita", session.project, Role.REVIEWER))
    mia = Actor(user=member("mia", session.project, Role.MAINTAINER))
    thread = comments.create_comment(actor=rita, session=session, seq=5, body="Why retry here?")
    comments.edit_comment(actor=rita, comment=thread, body="Why retry twice here?")
    reply = comments.create_comment(actor=mia, session=session, parent=thread.pk, body="WORDS-TO-BE-DELETED")
    comments.delete_comment(actor=mia, comment=reply, role=Role.MAINTAINER)
    comments.resolve_thread(actor=mia, comment=thread)
    thread, reply = Comment.objects.get(pk=thread.pk), Comment.objects.get(pk=reply.pk)
    assert thread.edited_at and thread.resolved_at and thread.resolved_by == "mia" and reply.deleted_at

    path = export(viewer, session, tmp_path)
    (outcome,) = import_file(path=path, project=elsewhere)
    assert outcome.error is None, outcome.error
    copy_thread = Comment.objects.get(session=outcome.session, seq=5, parent=None)
    copy_reply = Comment.objects.get(session=outcome.session, parent=copy_thread)
    assert copy_thread.session.project == elsewhere
    assert (copy_thread.body, copy_thread.author_name) == ("Why retry twice here?", "rita")
    assert copy_thread.edited_at == thread.edited_at
    assert [r.body for r in copy_thread.revisions.all()] == ["Why retry here?"]
    assert (copy_thread.resolved_at, copy_thread.resolved_by) == (thread.resolved_at, "mia")
    assert copy_reply.deleted_at == reply.deleted_at and copy_reply.body == ""
    assert copy_reply.author_name == "mia" and not copy_reply.revisions.exists()


def _events(path: Path) -> bytes:
    with zipfile.ZipFile(path) as archive:
        return archive.read("events.jsonl")


def test_a_re_signed_bundle_whose_chain_head_is_not_the_events_head_is_refused(bundle, elsewhere):
    # A stranger's key may sign anything: the chain is what holds the events to the manifest.
    changes, _ = resign(lambda m: m["chain"].update(head="ab" * 32))
    forged = rezip(bundle, changes)
    said = "events.jsonl: the last event's hash is not manifest.json's chain.head"
    assert said in refused(forged)
    with pytest.raises(BundleError, match=said):
        read_bundle(forged)
    (refusal,) = import_file(path=forged, project=elsewhere)
    assert refusal.session is None and said in refusal.error
    assert not Session.objects.filter(project=elsewhere).exists()


def test_a_re_signed_bundle_missing_its_last_event_line_is_refused(bundle, session, elsewhere):
    # The last line dropped, events.jsonl re-hashed in the manifest and the manifest re-signed:
    # every line left still links, so only the manifest's chain end tells what is missing.
    last_seq = session.event_count - 1
    lines = _events(bundle).splitlines(keepends=True)
    assert orjson.loads(lines[-1])["seq"] == last_seq
    shorter = b"".join(lines[:-1])
    changes, _ = resign(lambda m: m["files"].update({"events.jsonl": hashlib.sha256(shorter).hexdigest()}))
    forged = rezip(bundle, {"events.jsonl": lambda _: shorter, **changes})
    said = f"events.jsonl: ends at seq {last_seq - 1}, manifest.json's chain.last_seq is {last_seq}"
    assert said in refused(forged)
    session.delete()
    (refusal,) = import_file(path=forged, project=elsewhere)
    assert refusal.session is None and said in refusal.error
    assert not Session.objects.filter(project=elsewhere).exists()


def test_reviews_json_lists_the_sign_offs_oldest_first(session, viewer, tmp_path):
    # The fixture's sign-off is rita's, made now; one made a day earlier is stored after it
    # (a higher id), as a restored one is: reviews.json goes by when each was made.
    older = Review.objects.create(session=session, reviewer_name="otto", verdict=Review.Verdict.CHANGES_REQUESTED,
                                  note="earlier", chain_head=session.head_hash, chain_valid=True, first_seq=0,
                                  last_seq=1)  # fmt: skip
    Review.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(days=1))
    with zipfile.ZipFile(export(viewer, session, tmp_path)) as archive:
        listed = orjson.loads(archive.read("reviews.json"))
    assert [(r["reviewer"], r["note"]) for r in listed] == [("otto", "earlier"), ("rita", "fine")]
