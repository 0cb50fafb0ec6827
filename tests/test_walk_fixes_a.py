"""What a new user's walk through the pages found (2026-11-27), each fixed: a failed import's page
says why and which formats would do, without claiming every line was read; the sessions page of a
user in no project says so (as the projects page does) and tells "no sessions yet" from "none
match"; counts agree with their nouns; a form button's address opened in the browser is a page,
not an empty 405; a wrong-format upload's message names its line once."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from sessions_app import jobs, sharing
from sessions_app.access import Actor
from sessions_app.formats import registry
from sessions_app.ingest.bundles import FORMAT_NAME as BUNDLE_FORMAT
from sessions_app.ingest.importing import import_file
from sessions_app.models import ImportJob, Project, Role
from sessions_app.views.sessions import LIST_FILTERS

from .builders_dashboard import logged_in, user  # noqa: F401
from .builders_rlm import record_failing_session
from .builders_teams import member, recorded

pytestmark = pytest.mark.django_db

SESSIONS = reverse("sessions:list")
NO_PROJECT = "You are not a member of any project yet. Create one, or ask a project's admin to add you."


def _text(html: str) -> str:
    """The page's words, tags dropped and white space folded, as a reader sees them."""
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", html)))


def _upload(client: Client, monkeypatch, name: str, body: bytes, **fields) -> ImportJob:
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    client.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile(name, body)], **fields})
    job = ImportJob.objects.get(original_name=name)
    jobs.run_import(job_id=job.pk)
    job.refresh_from_db()
    return job


# 1. A failed import's page ----------------------------------------------------------------------


def test_an_unrecognised_files_failed_job_lists_the_registrys_formats_and_claims_nothing_read(logged_in, monkeypatch):
    job = _upload(logged_in, monkeypatch, "notes.txt", b"just some notes\nnothing like a session\n")
    assert job.status == ImportJob.Status.FAILED and job.problem_count == 0
    html = logged_in.get(reverse("sessions:import_job", args=[job.pk])).content.decode()
    text = _text(html)
    assert "not a recognised session format" in text
    assert "every line was read" not in text
    assert 'id="job-sessions-title"' not in html  # no empty "Sessions" heading
    hint = _text(re.search(r'<p id="known-formats".*?</p>', html, re.S).group(0))
    # Every name the importer would have taken, from the registry itself, and where they are described.
    for name in [*registry(), BUNDLE_FORMAT]:
        assert f" {name}," in hint or f" {name}." in hint, name
    assert "docs/formats.md" in hint
    # A file the error says more of (UTF-16, a .gz that is none) gets the same hint.
    utf16 = _upload(logged_in, monkeypatch, "run.jsonl", '{"kind": "user_message"}\n'.encode("utf-16"))
    assert utf16.error.endswith("it is UTF-16 text: save it as UTF-8 (PowerShell: Out-File -Encoding utf8)")
    html = logged_in.get(reverse("sessions:import_job", args=[utf16.pk])).content.decode()
    assert '<p id="known-formats"' in html


def test_a_job_that_failed_for_another_reason_gets_no_format_hint_and_a_done_one_keeps_its_sessions(
    logged_in, monkeypatch, tmp_path
):
    wrong = _upload(logged_in, monkeypatch, "broken.jsonl", b"{not json\n{also not\n", format="rlm_native")
    assert wrong.status == ImportJob.Status.FAILED and wrong.problem_count == 2
    html = logged_in.get(reverse("sessions:import_job", args=[wrong.pk])).content.decode()
    assert 'id="known-formats"' not in html and 'id="job-sessions-title"' not in html
    assert "every line was read" not in html and "malformed JSON" in html
    path = tmp_path / "run.jsonl"
    record_failing_session(path)
    done = _upload(logged_in, monkeypatch, "run.jsonl", path.read_bytes())
    assert done.status == ImportJob.Status.DONE
    html = logged_in.get(reverse("sessions:import_job", args=[done.pk])).content.decode()
    assert 'id="job-sessions-title"' in html and 'id="known-formats"' not in html
    assert "No problems: every line was read as it was." in html


def test_a_queued_job_does_not_yet_claim_every_line_was_read(logged_in):
    job = ImportJob.objects.create(project=Project.get_default(), original_name="later.jsonl", stored_path="")
    html = logged_in.get(reverse("sessions:import_job", args=[job.pk])).content.decode()
    assert "every line was read" not in html and "Still importing." in html


# 2. The sessions page's empty states -------------------------------------------------------------


def test_a_user_in_no_project_is_told_so_on_the_sessions_page_as_on_the_projects_page(client):
    loner = get_user_model().objects.create_user(username="loner", password="correct horse battery staple")
    client.force_login(loner)
    projects = _text(client.get(reverse("sessions:projects")).content.decode())
    assert NO_PROJECT in projects  # the projects page's words, which the sessions page repeats
    page = client.get(SESSIONS).content.decode()
    text = _text(page)
    assert text.count(NO_PROJECT) == 2  # the upload panel's note and the empty table
    assert "No sessions match" not in text and "ask an admin of your project" not in text
    assert f'href="{reverse("sessions:projects")}"' in page
    # The table alone (htmx) says the same.
    partial = client.get(SESSIONS, headers={"HX-Request": "true"}).content.decode()
    assert NO_PROJECT in _text(partial)


def test_a_member_of_a_project_without_sessions_sees_no_sessions_yet_not_none_match(logged_in):
    text = _text(logged_in.get(SESSIONS).content.decode())
    assert "No sessions yet: import a file above." in text
    assert "No sessions match" not in text and NO_PROJECT not in text
    viewer = Client()
    viewer.force_login(member("vic", role=Role.VIEWER))
    text = _text(viewer.get(SESSIONS).content.decode())
    assert "No sessions yet." in text and "ask an admin of your project for the maintainer role" in text


# One value of each filter that matches no session; a filter added to the page must be added here.
NOTHING_MATCHES = {
    "q": "no-such-task", "project": "other", "format": "agentlens", "status": "failed", "model": "no-such-model",
    "start": "2099-01-01", "end": "2000-01-01", "errors": "no", "review": "approved",
}  # fmt: skip


def test_a_page_past_the_last_session_says_so_and_links_the_first_page(logged_in):
    recorded(Project.get_default(), "run-1", events=4)
    text = logged_in.get(SESSIONS, {"after": "2000-01-01T00:00:00+00:00~1"}).content.decode()
    assert "No sessions here any more" in _text(text) and "No sessions yet" not in _text(text)
    assert '<a href="?">the first page</a>' in text  # the same filters, from the start


def test_each_filter_that_matches_nothing_says_no_sessions_match(logged_in, user):
    assert set(NOTHING_MATCHES) == set(LIST_FILTERS)
    member(user.get_username(), Project.objects.create(slug="other", name="Other"), Role.VIEWER)
    recorded(Project.get_default(), "run-1", events=4)
    assert "run-1" in logged_in.get(SESSIONS).content.decode()
    for name, value in NOTHING_MATCHES.items():
        text = _text(logged_in.get(SESSIONS, {name: value}).content.decode())
        assert "0 sessions" in text and "No sessions match these filters." in text, name
        assert "No sessions yet" not in text, name


# 3. Counts agree with their nouns ----------------------------------------------------------------


def test_a_one_step_import_says_1_step_on_the_job_page_and_the_upload_panel(logged_in, monkeypatch):
    # Two events, the second closing the one step (its step_state).
    lines = (
        b'{"kind": "llm_call", "step": 1, "payload": {"text": "hi"}, "timestamp": "2026-01-01T00:00:00Z"}\n'
        b'{"kind": "step_end", "step": 1, "payload": {}, "step_state": {"success": true},'
        b' "timestamp": "2026-01-01T00:00:01Z"}\n'
    )
    job = _upload(logged_in, monkeypatch, "one.jsonl", lines, format="canonical")
    (outcome,) = [o for o in job.result if o.get("session")]
    assert outcome["events"] == 2 and outcome["steps"] == 1, outcome
    for url in (reverse("sessions:import_job", args=[job.pk]), SESSIONS):
        text = _text(logged_in.get(url).content.decode())
        assert "2 events, 1 step" in text, url
        assert "1 steps" not in text, url


# 4. A form button's address opened as a page -----------------------------------------------------


def test_a_post_only_address_opened_in_the_browser_is_a_405_page_with_a_way_back(logged_in):
    session = recorded(Project.get_default(), "run-1", events=4)
    for name in ("verify", "delete"):
        response = logged_in.get(reverse(f"sessions:{name}", args=[session.pk]))
        assert response.status_code == 405 and response["Allow"] == "POST", name
        html = response.content.decode()
        assert "<html" in html and "this address is for a form's button" in _text(html), name
        assert f'href="{session.get_absolute_url()}"' in html and f'href="{SESSIONS}"' in html
        assert response.headers.get("Content-Security-Policy"), "the page is under the site's CSP"
    # Nothing was done: the session is still there.
    assert logged_in.get(session.get_absolute_url()).status_code == 200
    # A project's or a tour's form address goes back to that page (a refused form left the
    # browser there, and only the sessions list was offered).
    project = Project.get_default()
    html = logged_in.get(reverse("sessions:project_member", args=[project.slug])).content.decode()
    assert f'href="{project.get_absolute_url()}">Back to the project</a>' in html
    html = logged_in.get(reverse("sessions:tour_delete", args=[12345])).content.decode()
    assert f'href="{reverse("sessions:tour", args=[12345])}">Back to the tour</a>' in html


def test_only_a_browser_opening_a_pages_address_gets_the_405_page(logged_in):
    signed_out = Client()
    # A post to a page that only shows, and the machine endpoints, keep their own answers.
    session = recorded(Project.get_default(), "run-1", events=4)
    for response in (
        logged_in.post(session.get_absolute_url()),
        logged_in.post("/healthz"),
        signed_out.get("/v1/traces"),
    ):
        assert response.status_code == 405 and b"form's button" not in response.content
    # A signed-out browser (a share link's visitor) is not sent to a sessions page to sign in.
    owner = get_user_model().objects.get(username=member("owner", Project.get_default(), Role.MAINTAINER).username)
    _, token = sharing.create_link(actor=Actor(user=owner), session=session)
    assert signed_out.get(f"/s/{token}").status_code in (200, 302)
    page = signed_out.get(reverse("sessions:verify", args=[session.pk])).content.decode()
    assert "form's button" in page and f'href="{SESSIONS}"' not in page


def test_the_apis_405_keeps_its_own_answer(logged_in):
    response = logged_in.delete("/api/projects")
    assert response.status_code == 405 and set(response["Allow"].split(", ")) == {"GET", "POST"}
    # The API's own JSON refusal (docs/api.md: every error is JSON), not the pages' 405 page.
    assert response.json()["detail"].startswith("DELETE is not allowed here; use ")


# 5. A wrong-format upload's message --------------------------------------------------------------


def test_a_wrong_format_files_message_names_its_first_line_once(project, tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_bytes(b"{not json\n")
    (outcome,) = import_file(path=path, project=project, format="rlm_native")
    assert "first: line 1: malformed JSON" in outcome.error, outcome.error
    assert "line 1, line" not in outcome.error


def test_a_first_problem_about_a_field_still_names_the_field(project, tmp_path, monkeypatch):
    from sessions_app.canonical import Problems
    from sessions_app.ingest import importing

    problems = Problems()
    problems.add(3, "payload.tokens", "not a number")
    message = importing._nothing_importable("run.jsonl", "rlm_native", problems)
    assert (
        message
        == "run.jsonl: nothing importable as rlm_native (1 problem(s); first: line 3, field payload.tokens: not a number)"
    )
