"""A writer whose session (or tour) is deleted between its lookup and its write: a 404 saying so,
nothing half-written, no audit entry for what is gone. Each race is made deterministic by
deleting (committed) right after the step before the write; a helper's sweep (RACES) found every
one of these answering a 500 (the foreign key failed at commit)."""

from __future__ import annotations

import threading

import orjson
import pytest
from django.db import connection
from django.test import Client

from sessions_app import access, audit, comments, tours
from sessions_app.access import Actor
from sessions_app.deletion import delete_session
from sessions_app.models import (
    AuditEntry,
    Checkpoint,
    Comment,
    RedactionJob,
    RedactionRules,
    Review,
    Role,
    Session,
    ShareLink,
    Tour,
    TourStop,
    VerificationRun,
)

from .builders_teams import acme, key_of, member, recorded  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def deleted_after(monkeypatch, module, name: str, delete) -> None:
    """`module.name` runs, then `delete()` (once)."""
    original, done = getattr(module, name), []

    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        if not done:
            done.append(True)  # first: the delete may call it too
            delete()
        return result

    monkeypatch.setattr(module, name, wrapped)


def deleting(session_pk: int):
    return lambda: delete_session(actor="racer", session=Session.objects.get(pk=session_pk))


def assert_cut_short(response) -> None:
    """The download stops with the session's deletion named, before any signature is sent."""
    sent = []
    with pytest.raises(access.NotVisible, match="deleted while it was exported"):
        for part in response.streaming_content:
            sent.append(part)
    assert b"manifest.sig" not in b"".join(sent)


WRITERS = {
    "comment": ("post", "/api/sessions/{s}/comments", {"seq": 0, "body": "hi"}),
    "sign-off": ("post", "/api/sessions/{s}/reviews", {"verdict": "approved"}),
    "verify": ("post", "/api/sessions/{s}/verify", {}),
    "share link": ("post", "/api/sessions/{s}/share-links", {}),
    "checkpoint": ("post", "/api/sessions/{s}/checkpoints", {"name": "cp", "seq": 0}),
    "rules job": ("post", "/api/sessions/{s}/redactions/apply-rules", {}),
    "reply": ("post", "/api/sessions/{s}/comments", {"parent": "{c}", "body": "hi"}),
    "redaction": ("post", "/api/sessions/{s}/redactions", {"seq": 0, "text": "event", "label": "x"}),
}
LEFT = (Comment, Review, ShareLink, Checkpoint, RedactionJob, VerificationRun, TourStop)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_writer_on_a_session_deleted_after_its_lookup_gets_a_404_and_writes_nothing(monkeypatch, acme, writer):
    method, url, body = WRITERS[writer]
    RedactionRules.objects.create(project=acme, detectors=["email"])
    session = recorded(acme, events=5)
    ada = member("ada", acme, Role.ADMIN)
    thread = comments.create_comment(actor=Actor(user=ada), session=session, body="first", seq=0)
    body = {name: thread.pk if value == "{c}" else value for name, value in body.items()}
    logged_before = AuditEntry.objects.count()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(ada)}")
    deleted_after(monkeypatch, access, "session_for", deleting(session.pk))
    response = getattr(client, method)(url.format(s=session.pk), orjson.dumps(body), content_type="application/json")
    assert response.status_code == 404, response.content
    assert b"not found" in response.content
    assert not any(model.objects.filter(session_id=session.pk).exists() for model in LEFT)
    log = AuditEntry.objects.order_by("pk").values_list("action", flat=True)[logged_before:]
    assert list(log) == ["session.delete"]


def test_a_comment_from_the_page_on_a_session_just_deleted_is_a_404(monkeypatch, acme):
    session = recorded(acme, events=5)
    client = Client()
    client.force_login(member("ada", acme, Role.ADMIN))
    deleted_after(monkeypatch, access, "session_for", deleting(session.pk))
    response = client.post(f"/sessions/{session.pk}/comments/", {"seq": 0, "body": "hi"})
    assert response.status_code == 404 and not Comment.objects.exists()


def test_a_comment_whose_session_goes_after_every_check_is_a_404(monkeypatch, acme):
    # The delete commits from another connection as the comment's transaction begins: past the
    # lookup and the comment's own checks, so only a look inside the transaction sees it.
    session = recorded(acme, events=3)
    mia = Actor(user=member("mia", acme, Role.REVIEWER))

    def in_another_connection() -> None:
        def remove() -> None:
            deleting(session.pk)()
            connection.close()

        thread = threading.Thread(target=remove)
        thread.start()
        thread.join(10)

    deleted_after(monkeypatch, comments.transaction, "atomic", in_another_connection)
    with pytest.raises(access.NotVisible):
        comments.create_comment(actor=mia, session=session, body="hi", seq=0)
    assert not Comment.objects.exists()


def test_stops_on_a_session_deleted_after_they_were_checked_are_a_404(monkeypatch, acme):
    session = recorded(acme, events=3)
    user = member("ada", acme, Role.ADMIN)
    tour = tours.create_tour(actor=Actor(user=user), project=acme, title="T")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(user)}")
    deleted_after(monkeypatch, tours, "_checked", deleting(session.pk))
    stops = [{"session": session.pk, "seq": 0, "title": "x"}]
    response = client.put(f"/api/tours/{tour.pk}/stops", orjson.dumps(stops), content_type="application/json")
    assert response.status_code == 404, response.content
    assert not TourStop.objects.exists()


@pytest.mark.parametrize("writer", ["share link", "stops"])
def test_a_writer_on_a_tour_deleted_after_its_lookup_gets_a_404(monkeypatch, acme, writer):
    session = recorded(acme, events=3)
    user = member("ada", acme, Role.ADMIN)
    tour = tours.create_tour(actor=Actor(user=user), project=acme, title="T")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(user)}")
    delete = lambda: tours.delete_tour(actor=Actor(user=user), tour=Tour.objects.get(pk=tour.pk))  # noqa: E731
    deleted_after(monkeypatch, access, "tour_for", delete)
    if writer == "share link":
        response = client.post(f"/api/tours/{tour.pk}/share-links", b"{}", content_type="application/json")
    else:
        stops = [{"session": session.pk, "seq": 0, "title": "x"}]
        response = client.put(f"/api/tours/{tour.pk}/stops", orjson.dumps(stops), content_type="application/json")
    assert response.status_code == 404, response.content
    assert not ShareLink.objects.exists() and not TourStop.objects.exists()
    assert not AuditEntry.objects.filter(action__in=["share_link.create", "tour.change"]).exists()


def test_the_audit_log_still_verifies_after_the_races(monkeypatch, acme):
    session = recorded(acme, events=3)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('ada', acme, Role.ADMIN))}")
    deleted_after(monkeypatch, access, "session_for", deleting(session.pk))
    client.post(f"/api/sessions/{session.pk}/comments", b'{"seq": 0, "body": "x"}', content_type="application/json")
    assert audit.verify_log(project=acme).valid


def test_a_member_added_as_their_account_is_deleted_is_refused_with_a_400(monkeypatch, acme):
    from django.contrib.auth import get_user_model

    from sessions_app.models import Membership, Project

    newbie = get_user_model().objects.create_user("newbie")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('ada', acme, Role.ADMIN))}")
    # In the change's own transaction, after its lock: where another connection's delete would
    # land on SQLite (one writer at a time) as on PostgreSQL (the user's row not yet held).
    deleted_after(monkeypatch, Project, "lock", newbie.delete)
    body = b'{"username": "newbie", "role": "viewer"}'
    response = client.post("/api/projects/acme/members", body, content_type="application/json")
    assert response.status_code == 400 and b"no active user 'newbie'" in response.content
    assert not Membership.objects.filter(user_id=newbie.pk).exists()
    assert not AuditEntry.objects.filter(action="member.add", target="user:newbie").exists()


def test_a_comment_made_as_a_replace_import_decides_what_to_keep_is_kept_or_refused(monkeypatch, acme, tmp_path):
    # PostgreSQL's row locks: the replace's transaction holds what it may delete before it looks
    # for people's work on it. A comment committed just after that look was deleted with its
    # session, though its writer was told it was saved (RACES M1). (SQLite writes one
    # transaction at a time: the comment waits for the import whatever it holds.)
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's")
    from sessions_app.ingest import importing

    from .builders_rlm import record_full_session

    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=3)
    first = importing.import_file(path=path, project=acme)[0].session
    rita = Actor(user=member("rita", acme, Role.REVIEWER))
    said: list[object] = []

    def comment() -> None:
        try:
            said.append(comments.create_comment(actor=rita, session=first, seq=1, body="keep this").pk)
        except access.NotVisible as exc:
            said.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=comment)

    def then_a_comment() -> None:
        thread.start()
        thread.join(2)  # it commits at once, or waits for the import's lock

    deleted_after(monkeypatch, importing, "holding_team_work", then_a_comment)
    [outcome] = importing.import_file(path=path, project=acme, replace=True)
    thread.join(10)
    kept = Session.objects.filter(pk=first.pk).exists()
    assert (kept and isinstance(said[0], int)) or (not kept and isinstance(said[0], access.NotVisible)), said
    assert Comment.objects.filter(session_id=first.pk).count() == (1 if kept else 0)


DOWNLOADS = ["/api/sessions/{s}/bundle", "/api/sessions/{s}/export?format=jsonl", "/sessions/{s}/export/?format=jsonl"]


@pytest.mark.parametrize("url", DOWNLOADS)
def test_a_download_of_a_session_deleted_after_its_lookup_is_a_404_and_logs_nothing(monkeypatch, acme, url):
    session = recorded(acme, events=6)
    user = member("ada", acme, Role.ADMIN)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(user)}")
    client.force_login(user)
    deleted_after(monkeypatch, access, "session_for", deleting(session.pk))
    response = client.get(url.format(s=session.pk))
    assert response.status_code == 404
    assert list(AuditEntry.objects.filter(target=f"session:{session.pk}").values_list("action", flat=True)) == [
        "session.delete"
    ]


@pytest.mark.parametrize("url", DOWNLOADS[:2])
def test_a_download_whose_session_is_deleted_midway_is_cut_short_never_signed_whole(monkeypatch, acme, url):
    from sessions_app import bundles
    from sessions_app.replay import exports

    monkeypatch.setattr(exports, "CHUNK", 2)
    session = recorded(acme, events=6)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('ada', acme, Role.ADMIN))}")
    chunks = exports.event_chunks

    def deleted_after_the_first(*args, **kwargs):
        for n, rows in enumerate(chunks(*args, **kwargs)):
            yield rows
            if n == 0:
                deleting(session.pk)()

    monkeypatch.setattr(exports, "event_chunks", deleted_after_the_first)
    monkeypatch.setattr(bundles, "event_chunks", deleted_after_the_first)
    response = client.get(url.format(s=session.pk))
    assert_cut_short(response)


def test_a_bundle_whose_session_goes_after_its_events_is_never_signed_without_its_comments(monkeypatch, acme):
    from sessions_app import bundles

    session = recorded(acme, events=6)
    ada = member("ada", acme, Role.ADMIN)
    comments.create_comment(actor=Actor(user=ada), session=session, body="a finding", seq=0)
    threads = bundles.comment_threads

    def deleted_first(*args):  # between the events (read) and the comments
        deleting(session.pk)()
        return threads(*args)

    monkeypatch.setattr(bundles, "comment_threads", deleted_first)
    response = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(ada)}").get(f"/api/sessions/{session.pk}/bundle")
    assert_cut_short(response)


def test_a_bundles_audit_entry_names_the_events_it_holds_of_a_growing_session(monkeypatch, acme):
    import io
    import zipfile

    from sessions_app.canonical import SessionMeta
    from sessions_app.ingest.writer import append_events, create_session

    from .conftest import synthetic_events

    session = create_session(project=acme, source_format="canonical", meta=SessionMeta(source_session_id="live"))
    append_events(session=session, events=synthetic_events(3))
    ada = member("ada", acme, Role.ADMIN)
    grown = lambda: append_events(session=Session.objects.get(pk=session.pk), events=synthetic_events(2, start=3))  # noqa: E731
    deleted_after(monkeypatch, access, "session_for", grown)  # grows after the lookup
    response = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(ada)}").get(f"/api/sessions/{session.pk}/bundle")
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as bundle:
        chain = orjson.loads(bundle.read("manifest.json"))["chain"]
    logged = orjson.loads(AuditEntry.objects.get(action="bundle.export").detail)
    assert (logged["events"], logged["head"]) == (chain["last_seq"] + 1, chain["head"]) == (5, logged["head"])


def test_a_bundle_download_closed_midway_closes_its_stream(acme):
    # A client gone mid-download: the server closes the response, which must close the stream
    # (its temporary file, its zip) at once.
    from django.http import StreamingHttpResponse

    from sessions_app import bundles

    stream = bundles.stream_bundle(session=recorded(acme, events=3), exported_by="t")
    response = StreamingHttpResponse(stream, content_type="application/zip")
    next(iter(response))
    response.close()
    assert stream.chunks.gi_frame is None
