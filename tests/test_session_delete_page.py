"""Deleting a session from its player: maintainers and admins only, asked first (the question
names the session and its events; a first post, or a second click on the button that asked,
deletes nothing), then the project's session list says what went. The same workflow as
`DELETE /api/sessions/{id}` (sessions_app/deletion.py): one `session.delete` entry of the same
shape, the upload's original marked for the clean-up."""

from __future__ import annotations

import orjson
import pytest
from django.test import Client
from django.urls import reverse

from sessions_app import deletion, sharing
from sessions_app.access import Actor, NotVisible
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import AuditEntry, Event, ImportJob, Project, Role, Session

from .builders_teams import acme, key_of, member, mia, other, recorded, signed_in, vic  # noqa: F401  (fixtures)
from .conftest import synthetic_events

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def run(acme) -> Session:
    return recorded(acme)


def delete_url(session: Session) -> str:
    return reverse("sessions:delete", args=[session.pk])


def section(html: str, element_id: str) -> str:
    start = html.rindex("<", 0, html.index(f'id="{element_id}"'))
    tag = html[start + 1 : html.index(" ", start)]
    return html[start : html.index(f"</{tag}>", start)]


def still_there(session: Session, events: int) -> bool:
    return (
        Session.objects.filter(pk=session.pk).exists() and Event.objects.filter(session_id=session.pk).count() == events
    )


def deletions() -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action="session.delete"))


# --- the button and the question -----------------------------------------------------------


def test_the_button_is_there_for_maintainers_and_admins_only(acme, run, mia, vic):
    shown = mia.get(run.get_absolute_url()).content.decode()
    assert 'id="session-delete-ask"' in shown and f'action="{delete_url(run)}#session-delete"' in shown
    admin = signed_in("ada", acme, Role.ADMIN).get(run.get_absolute_url()).content.decode()
    assert 'id="session-delete-ask"' in admin
    for client in (vic, signed_in("rey", acme, Role.REVIEWER)):
        page = client.get(run.get_absolute_url()).content.decode()
        assert page.count("session-delete") == 0 and delete_url(run) not in page


def test_a_share_links_visitor_sees_no_button_and_may_not_post(acme, run):
    link_maker = Actor(user=member("mia", acme, Role.MAINTAINER))
    _, token = sharing.create_link(actor=link_maker, session=run)
    visitor = Client()
    assert visitor.get(f"/s/{token}").status_code == 302
    page = visitor.get(run.get_absolute_url())
    assert page.status_code == 200 and "session-delete" not in page.content.decode()
    response = visitor.post(delete_url(run), {"confirm": "yes"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert still_there(run, 12)


def test_the_button_only_asks_naming_the_session_and_its_events(run, mia):
    response = mia.post(delete_url(run), {"step": "4"}, headers={"HX-Request": "true"})
    assert response.status_code == 200 and response["Vary"] and "HX-Request" in response["Vary"]
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="session-delete"') and "<html" not in html
    question = " ".join(section(html, "session-delete-confirm").split())
    assert "Delete session “<bdi>run-7</bdi>”" in question and "<strong>12 events</strong>" in question
    assert 'name="confirm" value="yes"' in question and "csrfmiddlewaretoken" in question
    assert "Delete the session and its 12 events" in question
    assert f'href="{run.get_absolute_url()}?step=4">Keep it</a>' in question  # back to the step shown
    assert still_there(run, 12) and deletions() == []


def test_the_question_names_the_tours_it_shortens_and_the_log_keeps_their_lost_stops(acme, run, mia):
    # A tour silently lost its stops on the session, its "updated" time unchanged, no entry.
    from sessions_app import tours
    from sessions_app.models import Tour

    actor = Actor(user=member("mia", acme, Role.MAINTAINER))
    other_run = recorded(acme, "run-8")
    walk = tours.create_tour(actor=actor, project=acme, title="Onboarding " + HOSTILE)
    tours.set_stops(actor=actor, tour=walk, stops=[
        tours.StopSpec(session=run.pk, seq=1, title="a"), tours.StopSpec(session=other_run.pk, seq=1, title="b"),
        tours.StopSpec(session=run.pk, seq=3, title="c"),
    ])  # fmt: skip
    untouched = tours.create_tour(actor=actor, project=acme, title="Elsewhere")
    tours.set_stops(actor=actor, tour=untouched, stops=[tours.StopSpec(session=other_run.pk, seq=0, title="d")])
    before = Tour.objects.get(pk=walk.pk).updated_at
    html = mia.post(delete_url(run), headers={"HX-Request": "true"}).content.decode()
    said = " ".join(section(html, "session-delete-tours").split())
    assert said == (f'<p id="session-delete-tours">It leaves <a href="/tours/{walk.pk}/"><bdi>Onboarding '
                    "&lt;script&gt;alert(1)&lt;/script&gt;</bdi></a> 2 stops shorter.")  # fmt: skip
    assert mia.post(delete_url(run), {"confirm": "yes"}).status_code == 302
    [entry] = deletions()
    assert orjson.loads(entry.detail)["tour_stops"] == {str(walk.pk): 2}
    change = AuditEntry.objects.filter(action="tour.change", target=f"tour:{walk.pk}").latest("seq")
    assert orjson.loads(change.detail) == {"stops_removed": 2, "with_session": run.pk}
    assert AuditEntry.objects.filter(action="tour.change", target=f"tour:{untouched.pk}").count() == 1  # its stops set
    assert Tour.objects.get(pk=walk.pk).updated_at > before and walk.stops.count() == 1
    # A session no tour stops on is asked about without a word of tours.
    question = mia.post(delete_url(other_run), headers={"HX-Request": "true"}).content.decode()
    assert "It leaves" in question  # still in Onboarding and Elsewhere
    lone = recorded(acme, "run-9")
    assert (
        'id="session-delete-tours"' not in mia.post(delete_url(lone), headers={"HX-Request": "true"}).content.decode()
    )


def test_a_second_click_on_the_button_that_asked_still_deletes_nothing(run, mia):
    for _ in range(2):
        assert mia.post(delete_url(run), headers={"HX-Request": "true"}).status_code == 200
        assert mia.post(delete_url(run), {"confirm": "on"}).status_code == 200  # only the question's answer counts
    assert still_there(run, 12) and deletions() == []


def test_without_script_the_player_comes_back_with_the_question(run, mia):
    response = mia.post(delete_url(run))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="player"' in html and 'id="step-list"' in html  # the whole player
    assert 'id="session-delete-confirm"' in html and 'id="session-delete-ask"' not in html
    assert still_there(run, 12)


def test_a_live_sessions_question_says_new_events_go_too(run, mia):
    Session.objects.filter(pk=run.pk).update(status=Session.Status.LIVE)
    html = mia.post(delete_url(run), headers={"HX-Request": "true"}).content.decode()
    assert "It is live: events that arrive before you confirm go too." in " ".join(html.split())


def test_user_written_text_is_escaped_in_the_question_and_the_note(acme, mia):
    hostile = recorded(acme, name=f"id{HOSTILE}", task=f"task {HOSTILE}", events=3)
    for headers in ({"HX-Request": "true"}, {}):
        html = mia.post(delete_url(hostile), headers=headers).content.decode()
        question = section(html, "session-delete-confirm")
        assert "<script>" not in question
        assert "id&lt;script&gt;alert(1)&lt;/script&gt;" in question
        assert "task &lt;script&gt;alert(1)&lt;/script&gt;" in question
    mia.post(delete_url(hostile), {"confirm": "yes"})
    listing = mia.get(reverse("sessions:list")).content.decode()
    assert "Deleted session “id&lt;script&gt;alert(1)&lt;/script&gt;” and its 3 events." in listing
    assert "<script>alert(1)" not in listing


# --- deleting ----------------------------------------------------------------------------------


def test_a_maintainer_deletes_and_the_projects_list_says_what_went(acme, run, mia):
    other_run = recorded(acme, name="kept", events=5)
    response = mia.post(delete_url(run), {"confirm": "yes"}, REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 302 and response["Location"] == "/sessions/?project=acme"
    assert not Session.objects.filter(pk=run.pk).exists()
    assert not Event.objects.filter(session_id=run.pk).exists()
    assert still_there(other_run, 5)
    [entry] = deletions()
    assert (entry.actor, entry.target, entry.ip, entry.project_id) == (
        "mia",
        f"session:{run.pk}",
        "203.0.113.9",
        acme.pk,
    )
    assert orjson.loads(entry.detail) == {"events": 12, "source_session_id": "run-7"}
    listing = mia.get(response["Location"]).content.decode()
    note = listing.index('<p class="notice" role="status" dir="auto">Deleted session “run-7” and its 12 events.</p>')
    assert note > listing.index('id="sessions-title"')  # under the heading
    assert "Deleted session" not in mia.get(response["Location"]).content.decode()  # said once


def test_an_htmx_confirmation_redirects_the_browser_to_the_list(run, mia):
    response = mia.post(delete_url(run), {"confirm": "yes"}, headers={"HX-Request": "true"})
    assert response.status_code == 200 and response["HX-Redirect"] == "/sessions/?project=acme"
    assert not Session.objects.filter(pk=run.pk).exists()


def test_the_page_and_the_api_write_one_entry_of_one_shape(acme, mia):
    by_page, by_api = recorded(acme, name="by-page", events=4), recorded(acme, name="by-api", events=6)
    key = key_of(member("mia", acme, Role.MAINTAINER))
    assert Client().delete(f"/api/sessions/{by_api.pk}", headers={"authorization": f"Bearer {key}"}).status_code == 204
    assert mia.post(delete_url(by_page), {"confirm": "yes"}).status_code == 302
    entries = {e.target: orjson.loads(e.detail) for e in deletions()}
    assert entries == {f"session:{by_api.pk}": {"events": 6, "source_session_id": "by-api"},
                       f"session:{by_page.pk}": {"events": 4, "source_session_id": "by-page"}}  # fmt: skip


def test_a_live_session_can_be_deleted(run, mia):
    Session.objects.filter(pk=run.pk).update(status=Session.Status.LIVE)
    assert mia.post(delete_url(run), {"confirm": "yes"}).status_code == 302
    assert not Session.objects.filter(pk=run.pk).exists() and len(deletions()) == 1


def test_the_uploads_original_is_left_to_the_clean_up(acme, run, mia):
    job = ImportJob.objects.create(project=acme, original_name="run.jsonl", stored_path="", status="done")
    Session.objects.filter(pk=run.pk).update(import_job=job)
    assert mia.post(delete_url(run), {"confirm": "yes"}).status_code == 302
    job.refresh_from_db()
    assert job.orphaned_at is not None  # its original goes after the grace period


def test_an_admin_deletes_too(acme, run):
    assert signed_in("ada", acme, Role.ADMIN).post(delete_url(run), {"confirm": "yes"}).status_code == 302
    assert not Session.objects.filter(pk=run.pk).exists()


# --- who may not -------------------------------------------------------------------------------


def test_a_viewer_or_reviewer_gets_403_and_nothing_goes(acme, run, vic):
    for client in (vic, signed_in("rey", acme, Role.REVIEWER)):
        assert client.post(delete_url(run), {"confirm": "yes"}).status_code == 403
        assert client.post(delete_url(run), headers={"HX-Request": "true"}).status_code == 403  # not even asked
    assert still_there(run, 12) and deletions() == []


def test_a_non_member_gets_404_and_nothing_goes(other, run):
    for client in (signed_in("olga", other, Role.ADMIN), signed_in("otto", other, Role.MAINTAINER)):
        assert client.post(delete_url(run), {"confirm": "yes"}).status_code == 404
    assert still_there(run, 12) and deletions() == []


def test_an_unknown_session_is_404(mia, db):
    assert mia.post(reverse("sessions:delete", args=[999999]), {"confirm": "yes"}).status_code == 404


def test_get_is_405(run, mia):
    response = mia.get(delete_url(run))
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert still_there(run, 12)


def test_signed_out_goes_to_sign_in_and_nothing_goes(run):
    response = Client().post(delete_url(run), {"confirm": "yes"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert still_there(run, 12)


def test_a_post_without_the_csrf_token_is_refused(acme, run):
    client = Client(enforce_csrf_checks=True)
    client.force_login(member("mia", acme, Role.MAINTAINER))
    assert client.post(delete_url(run), {"confirm": "yes"}).status_code == 403
    assert still_there(run, 12)


# --- the workflow ------------------------------------------------------------------------------


def test_a_session_deleted_meanwhile_is_404_and_recorded_once(acme, run):
    actor = Actor(user=member("mia", acme, Role.MAINTAINER))
    stale = Session.objects.get(pk=run.pk)  # looked up before someone else deleted it
    assert deletion.delete_session(actor=actor, session=run) == 12
    with pytest.raises(NotVisible):
        deletion.delete_session(actor=actor, session=stale)
    assert len(deletions()) == 1


def test_nothing_is_deleted_when_its_audit_entry_cannot_be_written(acme, run, mia, monkeypatch):
    def refuse(**kwargs):
        raise RuntimeError("audit log unavailable")

    monkeypatch.setattr(deletion.audit, "record", refuse)
    with pytest.raises(RuntimeError):
        mia.post(delete_url(run), {"confirm": "yes"})
    assert still_there(run, 12)


def test_the_question_says_when_the_upload_also_gave_other_sessions(acme, mia, django_capture_on_commit_callbacks):
    from pathlib import Path

    from sessions_app.jobs import run_import

    both = Path(__file__).resolve().parent / "fixtures" / "agentlens" / "two_sessions.ndjson"
    owner = member("up", acme, Role.MAINTAINER)
    api = Client(headers={"authorization": f"Bearer {key_of(owner, project=acme)}"})
    with both.open("rb") as handle, django_capture_on_commit_callbacks(execute=False):
        job = api.post("/api/imports", {"file": handle, "project": acme.slug}).json()["job"]
    run_import(job_id=job)
    first, second = Session.objects.filter(import_job_id=job).order_by("pk")
    html = mia.post(delete_url(first), headers={"HX-Request": "true"}).content.decode()
    question = " ".join(section(html, "session-delete-confirm").split())
    assert "which 1 other session came from too: from now on that file is given to no one" in question
    # Once one of them went, the file is given to no one already: nothing to say.
    deletion.delete_session(actor=Actor(user=owner), session=second)
    html = mia.post(delete_url(first), headers={"HX-Request": "true"}).content.decode()
    assert "other session" not in section(html, "session-delete-confirm")
