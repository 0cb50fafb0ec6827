"""Sign-offs: bound to the chain head and the seqs a verification covered, refused on a broken
chain unless they reject, shown as covering part of a session that grew, in the audit log, in
the session list's review filter (page and API) and in the player's panel."""

from __future__ import annotations

import hashlib
import re

import orjson
import pytest
from django.test import Client
from django.urls import reverse

from sessions_app import reviews
from sessions_app.access import Actor
from sessions_app.api.reviews import ReviewOut
from sessions_app.api.sessions import SessionListOut
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import AuditEntry, Event, Review, Role, Session
from sessions_app.replay import sign_offs
from sessions_app.verification import verify_session

from .builders_teams import acme, key_of, member, other  # noqa: F401  (fixtures)
from .conftest import synthetic_events

pytestmark = pytest.mark.django_db

TAMPERED = 4


def _session(project, events: int = 10, *, live: bool = False, task: str = "review me") -> Session:
    session = create_session(project=project, source_format="canonical", meta=SessionMeta(task=task))
    append_events(session=session, events=synthetic_events(events))
    if not live:
        finish_session(session=session)
    session.refresh_from_db()
    return session


def _tamper(session: Session, seq: int = TAMPERED) -> None:
    Event.objects.filter(session=session, seq=seq).update(payload=orjson.dumps({"edited": True}).decode())


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def session(acme) -> Session:
    return _session(acme)


@pytest.fixture
def rita(acme):
    return member("rita", acme, Role.REVIEWER)


@pytest.fixture
def vic(acme):
    return member("vic", acme, Role.VIEWER)


def _reviews_url(session: Session) -> str:
    return f"/api/sessions/{session.pk}/reviews"


def _post(client: Client, session: Session, verdict: str, note: str = "", **headers):
    body = orjson.dumps({"verdict": verdict, "note": note})
    return client.post(_reviews_url(session), body, content_type="application/json", headers=headers)


# --- the workflow ---------------------------------------------------------------------------


def test_sign_off_stores_the_verified_head_and_the_range_it_covered(session, rita):
    review = reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved", note="looks right")
    assert (review.first_seq, review.last_seq, review.chain_valid) == (0, 9, True)
    assert review.chain_head == session.head_hash == Event.objects.get(session=session, seq=9).hash
    assert (review.reviewer, review.reviewer_name, review.verdict, review.note) == (rita, "rita", "approved",
                                                                                     "looks right")  # fmt: skip
    assert Session.objects.get(pk=session.pk).chain_state == "verified"  # the verification it ran is stored


def test_sign_off_covers_what_was_verified_not_what_a_live_writer_appended_meanwhile(acme, rita, monkeypatch):
    live = _session(acme, 6, live=True)

    def verify_then_append(*, session, record=True):
        checked = verify_session(session=session, record=record)
        append_events(session=session, events=synthetic_events(4, start=6))  # a live batch lands meanwhile
        return checked

    monkeypatch.setattr(reviews, "verify_once", verify_then_append)
    review = reviews.sign_off(session=live, reviewer=Actor(user=rita), verdict="approved")
    assert (review.last_seq, review.chain_head) == (5, Event.objects.get(session=live, seq=5).hash)
    [found] = sign_offs.sign_offs_of(session=live)
    assert found.coverage.to_dict() == {"from": 1, "to": 6, "of": 10} and found.coverage.unchanged


@pytest.mark.parametrize("verdict", ["approved", "changes_requested"])
def test_a_sign_off_on_a_tampered_chain_is_refused_naming_the_broken_seq(session, rita, verdict):
    _tamper(session)
    with pytest.raises(
        reviews.SignOffRefused, match=f"broken at seq {TAMPERED} \\(event #{TAMPERED + 1}\\): it can only be rejected"
    ):
        reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict=verdict)
    assert not Review.objects.exists()
    assert not AuditEntry.objects.filter(action="review.create").exists()


def test_a_sign_off_after_an_edit_of_the_task_and_answer_is_refused_naming_them(session, rita):
    Session.objects.filter(pk=session.pk).update(task="a harmless task", final_answer="all fine")
    with pytest.raises(
        reviews.SignOffRefused,
        match=r"broken in the session's own fields \(final_answer, task\): it can only be rejected",
    ):
        reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved")
    assert not Review.objects.exists()
    page = Client()
    page.force_login(rita)
    assert "broken: session fields differ" in page.get(f"/sessions/{session.pk}/").content.decode()


def test_a_sign_off_pins_the_session_fields_it_signed_even_against_a_rebuilt_seal(session, rita):
    """Whoever edits the task in the database can make its seal again (a plain digest): the
    sign-off's copy of the seal, and its digest in the audit log's own chain, still say the task
    changed since it was signed (a retest forged exactly that)."""
    from sessions_app.chain import HEADER_FIELDS, header_seal

    review = reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved")
    assert review.header_seal == Session.objects.get(pk=session.pk).header_seal
    entry = AuditEntry.objects.get(action="review.create")
    assert orjson.loads(entry.detail)["header_seal"] == hashlib.sha256(review.header_seal.encode()).hexdigest()
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.fields_changed == ()

    Session.objects.filter(pk=session.pk).update(task="a forged task")
    forged = Session.objects.filter(pk=session.pk).values(*HEADER_FIELDS).get()
    Session.objects.filter(pk=session.pk).update(header_seal=header_seal(forged))  # the seal made again
    assert verify_session(session=session).valid  # nothing left in the row itself to tell
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.fields_changed == ("task",) and found.coverage.unchanged  # the events are as signed
    client = _client(rita)
    assert client.get(_reviews_url(session)).json()[0]["fields_changed"] == ["task"]
    assert "task changed since</span>" in _player(client, session)
    # An id is named as itself, a link by its relation (as verify names them).
    Session.objects.filter(pk=session.pk).update(agent_id="another agent")
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.fields_changed == ("agent_id", "task")


def test_a_live_session_that_grew_and_ended_after_a_sign_off_is_not_shown_as_edited(acme, rita):
    # Its running reward and its end's status were shown in red as "reward changed since", the
    # warning an edit gets, though nothing but its writer touched it.
    session = _session(acme, events=12, live=True)
    reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="changes_requested")
    append_events(session=session, events=synthetic_events(8, start=12))
    finish_session(session=session)
    [found] = sign_offs.sign_offs_of(session=Session.objects.get(pk=session.pk))
    c = found.coverage
    assert c.grew and c.fields_changed == () and {"reward", "status", "ended_at"} <= set(c.fields_grown)
    client = _client(rita)
    row = client.get(_reviews_url(session)).json()[0]
    assert row["fields_changed"] == [] and "reward" in row["fields_grown"]
    page = _player(client, session)
    assert "changed since</span>" not in page and "moved on since</span>" in page
    # An edit is still an edit, grown or not.
    Session.objects.filter(pk=session.pk).update(task="a forged task")
    [found] = sign_offs.sign_offs_of(session=Session.objects.get(pk=session.pk))
    assert found.coverage.fields_changed == ("task",)


def test_a_redaction_after_a_sign_off_says_it_redacted_and_an_edit_still_says_it_changed(acme, rita):
    # A redaction rewrites the task and events a sign-off signed: a value removed, the chain it
    # signed still holding. It was shown in red as "task changed since", as an edit is.
    from sessions_app.stored_redaction import redact_text

    session = _session(acme, task="deploy with event 3 in mind")
    review = reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved")
    mia = member("mia", acme, Role.MAINTAINER)
    redact_text(session=Session.objects.get(pk=session.pk), seq=3, text="event 3", actor=Actor(user=mia))
    assert verify_session(session=session).valid
    [found] = sign_offs.sign_offs_of(session=session)
    c = found.coverage
    assert c.unchanged and c.fields_changed == () and c.fields_redacted == ("task",)
    [after] = c.redacted_after
    assert (after.by, after.events, after.session_fields) == ("mia", 1, ("task",)) and after.at > review.created_at
    client = _client(rita)
    [row] = client.get(_reviews_url(session)).json()
    assert row["fields_changed"] == [] and row["fields_redacted"] == ["task"] and row["unchanged"]
    assert [(r["by"], r["events"], r["session_fields"]) for r in row["redacted_after"]] == [("mia", 1, ["task"])]
    page = _player(client, session)
    assert "changed since</span>" not in page
    assert re.search(r'class="badge redacted redacted-after"[^>]*>redacted since: 1 event, task by mia, <time', page)
    # An edit made after it is still an edit, of another field or of the very field the
    # redaction changed (the review found the first version took any later task for redacted).
    Session.objects.filter(pk=session.pk).update(final_answer="forged")
    Session.objects.filter(pk=session.pk).reseal(["final_answer"])
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.fields_changed == ("final_answer",) and found.coverage.fields_redacted == ("task",)
    assert "final_answer changed since</span>" in _player(client, session)
    Session.objects.filter(pk=session.pk).update(task="something else entirely")
    Session.objects.filter(pk=session.pk).reseal(["task"])
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.fields_changed == ("task", "final_answer") and found.coverage.fields_redacted == ()
    # A sign-off made after the redaction has none after it.
    later = reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved")
    newest = next(s for s in sign_offs.sign_offs_of(session=session) if s.review.pk == later.pk)
    assert newest.coverage.redacted_after == () and newest.coverage.fields_redacted == ()


def test_a_viewer_is_told_what_commenting_and_signing_off_need_and_a_reviewer_gets_the_forms(session, rita, vic):
    # A viewer saw the threads and "Not signed off yet." with no form and no word why.
    viewer_page = _player(_client(vic), session)
    assert 'id="comment-form"' not in viewer_page and 'id="sign-off-form"' not in viewer_page
    assert "Commenting needs the reviewer role in this project: ask one of its admins." in viewer_page
    assert "Signing off needs the reviewer role in this project: ask one of its admins." in viewer_page
    step = _client(vic).get(f"/sessions/{session.pk}/", {"step": 3}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="comment-role-note"' in step  # each step's panel says it too
    reviewer_page = _player(_client(rita), session)
    assert 'id="comment-form"' in reviewer_page and 'id="sign-off-form"' in reviewer_page
    assert "needs the reviewer role" not in reviewer_page


def test_a_sign_off_whose_row_was_rewritten_differs_from_its_audit_entry(session, rita):
    # Whoever can write the database can rewrite a sign-off's verdict, or its copy of the seal
    # after editing the task and making the session's seal again: the review.create entry, in
    # the audit log's own verified chain, still says what was signed.
    from sessions_app.chain import HEADER_FIELDS, header_seal

    review = reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="changes_requested")
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.record_differs == ()
    Review.objects.filter(pk=review.pk).update(verdict="approved")
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.record_differs == ("verdict",)
    Session.objects.filter(pk=session.pk).update(task="a forged task")
    forged = header_seal(Session.objects.filter(pk=session.pk).values(*HEADER_FIELDS).get())
    Session.objects.filter(pk=session.pk).update(header_seal=forged)
    Review.objects.filter(pk=review.pk).update(header_seal=forged)
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.fields_changed == ()  # the forger's seal matches the forged task
    assert found.coverage.record_differs == ("verdict", "header_seal")
    client = _client(rita)
    assert client.get(_reviews_url(session)).json()[0]["record_differs"] == ["verdict", "header_seal"]
    assert "sign-off record rewritten: verdict, header_seal</span>" in _player(client, session)
    # Who signed and when are the entry's own actor and time: a swapped signer, or a sign-off
    # moved after a redaction (which would then read as an edit), shows too (the retest).
    from datetime import timedelta

    Review.objects.filter(pk=review.pk).update(verdict="changes_requested", reviewer_name="alice")
    [found] = sign_offs.sign_offs_of(session=session)
    assert "reviewer" in found.coverage.record_differs and "verdict" not in found.coverage.record_differs
    Review.objects.filter(pk=review.pk).update(reviewer_name="rita", created_at=review.created_at + timedelta(hours=1))
    [found] = sign_offs.sign_offs_of(session=session)
    assert "created_at" in found.coverage.record_differs and "reviewer" not in found.coverage.record_differs
    # A sign-off restored from a bundle has no entry of its own here, and is not flagged.
    Review.objects.filter(pk=review.pk).update(restored_from="ab" * 32)
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.record_differs == ()


def test_a_rejection_of_a_tampered_chain_is_stored_with_the_chain_broken(session, rita):
    _tamper(session)
    review = reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="rejected", note="edited log")
    assert (review.verdict, review.chain_valid, review.last_seq) == ("rejected", False, 9)


def test_an_unknown_verdict_or_a_session_without_events_is_refused(session, rita):
    empty = create_session(project=session.project, source_format="canonical", meta=SessionMeta())
    with pytest.raises(reviews.SignOffRefused, match="no events yet: there is nothing to sign off"):
        reviews.sign_off(session=empty, reviewer=Actor(user=rita), verdict="approved")
    with pytest.raises(reviews.SignOffRefused, match="verdict: one of approved, changes_requested, rejected"):
        reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="fine")


def test_a_sign_off_whose_covered_events_changed_since_says_so(session, rita):
    reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved")
    Event.objects.filter(session=session, seq=9).update(hash="0" * 64)
    [found] = sign_offs.sign_offs_of(session=session)
    assert not found.coverage.unchanged and not found.coverage.grew


def test_an_edited_field_a_later_verification_finds_inside_a_sign_off_flags_it(session, rita, vic):
    reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved")
    recorded = Event.objects.get(session=session, seq=2).tokens
    # A recorded field edited in the database: the stored hashes stay as they were, so until a
    # verification re-derives the events the sign-off cannot know.
    Event.objects.filter(session=session, seq=2).update(tokens=(recorded or 0) + 1000)
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.unchanged and found.coverage.broken_seq is None
    assert verify_session(session=session).first_broken_seq == 2
    [found] = sign_offs.sign_offs_of(session=session)
    assert not found.coverage.unchanged and found.coverage.broken_seq == 2
    [row] = _client(vic).get(f"/api/sessions/{session.pk}/reviews").json()
    assert (row["unchanged"], row["broken_seq"], row["chain_valid"]) == (False, 2, True)
    assert "event #3 it covered no longer verifies" in _player(_client(vic), session)
    # The badge's "verify" (htmx) brings the sign-offs out of band: the warning shows at once.
    Event.objects.filter(session=session, seq=2).update(tokens=(recorded or 0) + 2000)
    answer = _client(vic).post(reverse("sessions:verify", args=[session.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert answer.lstrip().startswith('<div id="chain-badge"')
    oob = answer[answer.index('<ol id="sign-off-list" hx-swap-oob="true">') :]
    assert "event #3 it covered no longer verifies" in oob
    # The list alone: a reviewer's form (its verdict and note being typed) is not replaced.
    for client in (_client(vic), _client(rita)):
        answer = client.post(reverse("sessions:verify", args=[session.pk]), HTTP_HX_REQUEST="true").content.decode()
        assert 'id="sign-off-list"' in answer and 'id="sign-off-form"' not in answer and 'id="sign-offs"' not in answer
    # Put back and verified again: the sign-off stands again.
    Event.objects.filter(session=session, seq=2).update(tokens=recorded)
    assert verify_session(session=session).valid
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.unchanged and found.coverage.broken_seq is None


def test_edited_session_totals_a_later_verification_finds_put_the_whole_sign_off_in_question(session, rita, vic):
    reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved")
    # Before the sign-off: the verification it ran itself (or an older one) says nothing of it.
    Session.objects.filter(pk=session.pk).update(chain_valid=False, chain_broken_seq=None)
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.broken_seq is None
    Session.objects.filter(pk=session.pk).update(cost_usd=99.0)  # no one event: the totals
    result = verify_session(session=session)
    assert not result.valid and result.first_broken_seq is None
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.broken_seq == -1
    [row] = _client(vic).get(f"/api/sessions/{session.pk}/reviews").json()
    assert (row["broken_seq"], row["unchanged"]) == (-1, False)
    assert "the session's own fields no longer verify" in _player(_client(vic), session)


def test_a_break_after_the_signed_range_leaves_the_sign_off_standing(acme, rita):
    live = _session(acme, 5, live=True)
    reviews.sign_off(session=live, reviewer=Actor(user=rita), verdict="approved")
    append_events(session=live, events=synthetic_events(3, start=5))
    _tamper(live, seq=6)  # an event appended after the sign-off: outside what it covers
    assert verify_session(session=live).first_broken_seq == 6
    [found] = sign_offs.sign_offs_of(session=live)
    assert found.coverage.unchanged and found.coverage.broken_seq is None and found.coverage.grew


def test_a_rejection_signed_on_a_broken_chain_is_not_flagged_again(session, rita):
    _tamper(session)
    reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="rejected")
    verify_session(session=session)
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.broken_seq is None and not found.review.chain_valid


def test_review_create_is_in_the_audit_log_with_its_range_and_head_but_not_its_note(session, rita):
    _post(_client(rita), session, "approved", "PRIVATE-NOTE")
    entry = AuditEntry.objects.get(action="review.create")
    review = Review.objects.get()
    assert (entry.actor, entry.target, entry.ip, entry.project_id) == ("rita", f"session:{session.pk}",
                                                                        "127.0.0.1", session.project_id)  # fmt: skip
    assert orjson.loads(entry.detail) == {
        "review": review.pk, "verdict": "approved", "first_seq": 0, "last_seq": 9,
        "chain_head": review.chain_head, "chain_valid": True,
        "header_seal": hashlib.sha256(review.header_seal.encode()).hexdigest(),
    }  # fmt: skip
    assert "PRIVATE-NOTE" not in entry.detail


# --- the API --------------------------------------------------------------------------------


def test_post_signs_off_and_answers_201_with_the_review(session, rita):
    response = _post(_client(rita), session, "changes_requested", "retry step 3")
    assert response.status_code == 201
    body = response.json()
    ReviewOut.model_validate(body)
    assert body["verdict"] == "changes_requested" and body["note"] == "retry step 3" and body["reviewer"] == "rita"
    assert (body["first_seq"], body["last_seq"], body["chain_valid"], body["current"]) == (0, 9, True, True)
    assert body["covers"] == {"from": 1, "to": 10, "of": 10} and body["chain_head"] == session.head_hash


def test_post_on_a_tampered_chain_is_409_unless_it_rejects(session, rita):
    _tamper(session)
    client = _client(rita)
    refused = _post(client, session, "approved")
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"the session's chain is broken at seq {TAMPERED} (event #{TAMPERED + 1}): it can only be rejected, not approved"
    )
    rejected = _post(client, session, "rejected", "tampered")
    assert rejected.status_code == 201 and rejected.json()["chain_valid"] is False


def test_post_with_an_unknown_verdict_is_400(session, rita):
    response = _post(_client(rita), session, "lgtm")
    assert response.status_code == 400 and response.json()["detail"].startswith("verdict:")


def test_get_lists_sign_offs_newest_first_with_coverage_after_appended_events(acme, rita, vic):
    live = _session(acme, 5, live=True)
    key = key_of(rita)
    first = _post(Client(), live, "changes_requested", authorization=f"Bearer {key}")
    assert first.status_code == 201
    append_events(session=live, events=synthetic_events(3, start=5))  # the live agent goes on
    _post(_client(rita), live, "approved")
    response = _client(vic).get(_reviews_url(live))
    assert response.status_code == 200
    newest, older = response.json()
    for row in (newest, older):
        ReviewOut.model_validate(row)
    assert (newest["verdict"], newest["current"], newest["covers"]) == ("approved", True, {"from": 1, "to": 8, "of": 8})
    assert (older["verdict"], older["current"], older["covers"]) == (
        "changes_requested", False, {"from": 1, "to": 5, "of": 8},
    )  # fmt: skip
    assert older["unchanged"] and older["chain_head"] == Event.objects.get(session=live, seq=4).hash
    # The session list: approved, and nothing after it yet; the agent goes on, and two events are unsigned.
    [row] = _client(vic).get("/api/sessions", {"project": acme.slug}).json()["sessions"]
    assert (row["reviewState"], row["reviewUnsigned"]) == ("approved", 0)
    append_events(session=live, events=synthetic_events(2, start=8))
    [row] = _client(vic).get("/api/sessions", {"project": acme.slug, "review": "approved"}).json()["sessions"]
    assert (row["reviewState"], row["reviewUnsigned"]) == ("approved", 2)
    page = _client(vic).get("/sessions/", {"project": acme.slug}).content.decode()
    assert 'its last 2 events are outside it">+2 unsigned</span>' in page


def test_a_viewer_may_read_sign_offs_but_not_sign_off(session, vic):
    client = _client(vic)
    assert client.get(_reviews_url(session)).status_code == 200
    response = _post(client, session, "approved")
    assert response.status_code == 403 and "reviewer role" in response.json()["detail"]
    assert client.post(reverse("sessions:sign_off", args=[session.pk]), {"verdict": "approved"}).status_code == 403
    assert not Review.objects.exists()


def test_a_read_only_key_of_a_reviewer_cannot_sign_off(session, rita):
    response = _post(Client(), session, "approved", authorization=f"Bearer {key_of(rita, read_only=True)}")
    assert response.status_code == 403


def test_a_non_member_gets_404_and_learns_nothing(session, other):
    outsider = _client(member("olga", other, Role.ADMIN))
    for response in (outsider.get(_reviews_url(session)), _post(outsider, session, "approved"),
                     outsider.post(reverse("sessions:sign_off", args=[session.pk]), {"verdict": "approved"})):  # fmt: skip
        assert response.status_code == 404
        assert "review me" not in response.content.decode()
    assert not Review.objects.exists()


# --- the session list's review filter -------------------------------------------------------


@pytest.fixture
def reviewed(acme, rita) -> dict[str, Session]:
    """One session per review state; the 'rejected' one was approved first (the newest counts)."""
    actor = Actor(user=rita)
    found = {state: _session(acme, 5, task=f"task {state}") for state in ("approved", "changes_requested",
                                                                          "rejected", "unreviewed")}  # fmt: skip
    reviews.sign_off(session=found["approved"], reviewer=actor, verdict="approved")
    reviews.sign_off(session=found["changes_requested"], reviewer=actor, verdict="changes_requested")
    reviews.sign_off(session=found["rejected"], reviewer=actor, verdict="approved")
    reviews.sign_off(session=found["rejected"], reviewer=actor, verdict="rejected")
    return found


@pytest.mark.parametrize("state", ["approved", "changes_requested", "rejected", "unreviewed"])
def test_api_list_filters_by_the_newest_review_state(reviewed, vic, state):
    response = _client(vic).get("/api/sessions", {"review": state})
    assert response.status_code == 200
    body = SessionListOut.model_validate(response.json())
    assert [row.id for row in body.sessions] == [reviewed[state].pk] and body.total == 1
    assert body.sessions[0].reviewState == (None if state == "unreviewed" else state)


def test_api_list_rows_carry_their_review_state_and_refuse_an_unknown_one(reviewed, vic):
    client = _client(vic)
    rows = {row["id"]: row["reviewState"] for row in client.get("/api/sessions").json()["sessions"]}
    assert rows == {s.pk: (None if state == "unreviewed" else state) for state, s in reviewed.items()}
    assert client.get("/api/sessions", {"review": "lgtm"}).status_code == 400


@pytest.mark.parametrize("state", ["approved", "changes_requested", "rejected", "unreviewed"])
def test_page_list_filters_by_review_state_and_shows_the_badge(reviewed, vic, state):
    html = _client(vic).get(reverse("sessions:list"), {"review": state}, HTTP_HX_REQUEST="true").content.decode()
    assert html.count("<tr data-session=") == 1 and f'data-session="{reviewed[state].pk}"' in html
    assert f"badge review review-{state if state != 'unreviewed' else 'none'}" in html


def test_the_review_state_keeps_the_session_list_one_query(reviewed, vic, django_assert_num_queries):
    client = _client(vic)
    client.get("/api/sessions")  # the login's session and user rows are read once before
    # Django's session and user rows, the count, the page with each row's newest verdict.
    with django_assert_num_queries(4):
        body = client.get("/api/sessions", {"review": "rejected"}).json()
    assert body["total"] == 1


def test_the_list_says_when_the_newest_sign_off_no_longer_verifies(reviewed, vic, django_assert_num_queries):
    # An approval whose events a later verification found edited: the list shows the player's
    # warning beside the verdict, and the API says so; the filter still goes by the verdict.
    approved = reviewed["approved"]
    _tamper(approved, seq=2)
    assert verify_session(session=approved).first_broken_seq == 2
    _tamper(reviewed["rejected"], seq=2)  # the rejection was signed on a chain that held: flagged too
    verify_session(session=reviewed["rejected"])
    client = _client(vic)
    rows = {row["id"]: row["reviewBroken"] for row in client.get("/api/sessions").json()["sessions"]}
    assert rows == {s.pk: state in ("approved", "rejected") for state, s in reviewed.items()}
    html = client.get(reverse("sessions:list"), {"review": "approved"}, HTTP_HX_REQUEST="true").content.decode()
    row = html[html.index(f'data-session="{approved.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "review-approved" in row and "no longer verifies" in row
    # One more query, only because shown rows have a broken chain and a sign-off.
    with django_assert_num_queries(5):
        client.get("/api/sessions", {"review": "approved"})


# --- the player's panel ---------------------------------------------------------------------


def _player(client: Client, session: Session) -> str:
    return client.get(reverse("sessions:player", args=[session.pk])).content.decode()


def test_the_sign_off_form_starts_with_no_verdict_chosen(session, rita):
    html = _player(_client(rita), session)
    select = html[html.index('<select name="verdict"') :]
    select = select[: select.index("</select>")]
    assert " required" in select.split(">")[0]
    options = re.findall(r'<option value="([^"]*)"( selected)?>', select)
    assert options[0] == ("", " selected") and [value for value, _ in options[1:]] == list(Review.Verdict.values)
    assert not any(chosen for value, chosen in options[1:])


def test_the_player_shows_sign_offs_to_everyone_and_the_form_to_reviewers(session, rita, vic):
    reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved", note="<script>alert(1)</script>")
    for user, has_form in ((rita, True), (vic, False)):
        html = _player(_client(user), session)
        assert '<section id="sign-offs"' in html and "<strong><bdi>rita</bdi></strong>" in html
        assert "badge review review-approved" in html
        assert ("sign-off-form" in html) is has_form
        assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "covers events 1–10</span>" in html  # the whole session: no "of M"


def test_the_player_says_a_sign_off_covers_part_of_a_session_that_grew(acme, rita):
    live = _session(acme, 5, live=True)
    reviews.sign_off(session=live, reviewer=Actor(user=rita), verdict="approved")
    append_events(session=live, events=synthetic_events(3, start=5))
    assert "covers events 1–5 of 8" in _player(_client(rita), live)


def test_htmx_sign_off_gets_only_the_panel_with_the_new_sign_off(session, rita):
    response = _client(rita).post(reverse("sessions:sign_off", args=[session.pk]),
                                  {"verdict": "changes_requested", "note": "step 2 <b>again</b>"},
                                  HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<section id="sign-offs"')
    assert "badge review review-changes_requested" in html and "step 2 &lt;b&gt;again&lt;/b&gt;" in html
    assert "<html" not in html and "HX-Request" in response["Vary"]
    assert Review.objects.get().verdict == "changes_requested"


def test_htmx_sign_off_on_a_tampered_chain_shows_why_it_was_refused(session, rita):
    _tamper(session)
    response = _client(rita).post(reverse("sessions:sign_off", args=[session.pk]), {"verdict": "approved"},
                                  HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    # The honest 409, with the panel saying why (base.html's htmx responseHandling swaps it in).
    assert response.status_code == 409 and f"broken at seq {TAMPERED}" in html and 'role="alert"' in html
    assert html.lstrip().startswith('<section id="sign-offs"') and "<html" not in html
    assert not Review.objects.exists()


def test_htmx_sign_off_without_a_verdict_is_a_400_panel_naming_it(session, rita):
    response = _client(rita).post(reverse("sessions:sign_off", args=[session.pk]), {"verdict": ""},
                                  HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 400 and html.lstrip().startswith('<section id="sign-offs"')
    assert "A sign-off needs a verdict" in html and not Review.objects.exists()


def test_a_sign_off_with_a_note_too_long_names_the_note_not_the_verdict(session, rita):
    from sessions_app.forms import SignOffForm

    limit = SignOffForm.base_fields["note"].max_length
    response = _client(rita).post(reverse("sessions:sign_off", args=[session.pk]),
                                  {"verdict": "approved", "note": "x" * (limit + 1)}, HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 400 and "Not signed off: Note: " in html and "needs a verdict" not in html
    assert not Review.objects.exists()


def test_plain_post_redirects_to_the_player_at_its_step_or_answers_the_refusal_in_the_player(session, rita):
    # Without JavaScript a refusal was a bare fragment (no page, no styles, the busy note on),
    # and a sign-off sent the reviewer back to event #1.
    client = _client(rita)
    url = reverse("sessions:sign_off", args=[session.pk])
    assert 'action="' + url + "?step=4&amp;" in client.get(session.get_absolute_url(), {"step": 4}).content.decode()
    refused = client.post(url + "?step=4", {"verdict": "bogus"})
    assert refused.status_code == 400 and "A sign-off needs a verdict" in refused.content.decode()
    assert (
        refused.content.decode().lstrip().startswith("<!doctype html>")
        and 'aria-valuenow="4"' in refused.content.decode()
    )
    done = client.post(url + "?step=4", {"verdict": "approved"})
    assert done.status_code == 302 and done["Location"] == session.get_absolute_url() + "?step=4"
    assert client.post(url, {"verdict": "approved"})["Location"] == session.get_absolute_url()
    _tamper(session)
    broken = client.post(url + "?step=2", {"verdict": "approved"})
    assert broken.status_code == 409 and f"broken at seq {TAMPERED}" in broken.content.decode()
    assert broken.content.decode().lstrip().startswith("<!doctype html>")
    assert Review.objects.count() == 2


def test_plain_sign_off_in_a_tour_keeps_the_stop_kinds_and_speed_and_htmx_leaves_no_empty_step(acme, session, rita):
    # Without JavaScript a sign-off sent a reviewer walking a tour back to the bare player: the
    # tour's narration, the kinds filter and the speed were gone.
    from sessions_app import tours

    maker = Actor(user=member("mo", acme, Role.MAINTAINER))
    tour = tours.create_tour(actor=maker, project=acme, title="Walk")
    tours.add_stop(actor=maker, tour=tour, session=session, seq=1, title="one")
    tours.add_stop(actor=maker, tour=tour, session=session, seq=3, title="two")
    client = _client(rita)
    page = client.get(session.get_absolute_url(), {"step": 3, "speed": "5", "types": "tool_call", "tour": tour.pk,
                                                   "stop": 2}).content.decode()  # fmt: skip
    action = re.search(r'<form id="sign-off-form" method="post" action="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert "step=3" in action and "speed=5" in action and "types=tool_call" in action
    assert f"tour={tour.pk}&stop=2" in action
    done = client.post(action, {"verdict": "approved"})
    assert done.status_code == 302 and done["Location"] == session.get_absolute_url() + "?" + action.split("?", 1)[1]
    after = client.get(done["Location"]).content.decode()
    assert 'aria-valuenow="3"' in after and "Stop 2 of 2" in after
    htmx = client.post(reverse("sessions:sign_off", args=[session.pk]), {"verdict": "approved"}, HTTP_HX_REQUEST="true")
    assert "?step=" not in htmx.content.decode() and Review.objects.count() == 2


def test_htmx_sign_off_brings_the_chain_badge_with_the_verification_it_ran(session, rita):
    # The badge kept the time of the verification before until a reload.
    response = _client(rita).post(reverse("sessions:sign_off", args=[session.pk]), {"verdict": "approved"},
                                  HTTP_HX_REQUEST="true")  # fmt: skip
    session.refresh_from_db()
    badge = response.content.decode().split('<div id="chain-badge"', 1)[1]
    assert badge.startswith(' class="chain-badge"') and 'hx-swap-oob="true"' in badge.split(">", 1)[0]
    assert f"{session.chain_checked_at:%Y-%m-%d %H:%M:%S} UTC" in badge
