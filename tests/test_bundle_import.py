"""Importing an evidence bundle into another Replay: the same events (link for link), comments
and sign-offs, marked with the key that signed it; nothing stored from a bundle that fails."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from sessions_app.chain import CONTENT_FIELDS, RECORDED_FIELDS
from sessions_app.ingest.importing import import_file
from sessions_app.models import Comment, Event, Project, Review, Role, Session
from sessions_app.replay.exports import export_original
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
    assert copy.metadata["bundle"]["fingerprint"] and copy.metadata["bundle"]["head"] == head
    assert verify_session(session=copy).valid


def test_the_player_says_which_key_signed_the_bundle_a_session_came_from(bundle, session, elsewhere, client):
    (outcome,) = import_file(path=bundle, project=elsewhere)
    client.force_login(member("ida", elsewhere, Role.VIEWER))
    page = client.get(f"/sessions/{outcome.session.pk}/").content.decode()
    fingerprint = outcome.session.metadata["bundle"]["fingerprint"]
    assert "imported from a bundle signed by" in page and fingerprint in page


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


def test_the_command_line_imports_a_bundle(bundle, elsewhere):
    call_command("import_sessions", str(bundle), "--project", "elsewhere")
    copy = Session.objects.get(project=elsewhere)
    assert copy.metadata["bundle"]["exported_by"] == "vera" and Comment.objects.filter(session=copy).count() == 2
