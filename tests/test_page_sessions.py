"""The sessions page: list, filters, keyset pages, upload form and live import progress."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import unquote

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from sessions_app import jobs
from sessions_app.models import Event, ImportJob, Project, Session
from sessions_app.verification import verify_session

from .builders_dashboard import build_session, conversation_events, logged_in, user  # noqa: F401
from .builders_rlm import record_failing_session

LIST = reverse("sessions:list")


def _ids(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-session="(\d+)">', html)]


@pytest.fixture
def two_sessions(db) -> tuple[Session, Session]:
    ok = build_session(conversation_events(turns=1), source_session_id="run-ok", task="sort the list",
                       model="gpt-4o")  # fmt: skip
    bad = build_session(conversation_events(turns=2), source_session_id="run-bad", task="fetch the page",
                        model="claude-3")  # fmt: skip
    verify_session(session=ok)
    Session.objects.filter(pk=bad.pk).update(chain_valid=False, chain_broken_seq=7, chain_checked_at=datetime.now(UTC),
                                             status=Session.Status.FAILED)  # fmt: skip
    return Session.objects.get(pk=ok.pk), Session.objects.get(pk=bad.pk)


def test_full_page_lists_sessions_with_their_totals_and_chain_status(logged_in, two_sessions):
    ok, bad = two_sessions
    response = logged_in.get(LIST)
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" in html and 'id="upload-form"' in html and 'id="session-filters"' in html
    ids = re.findall(r'\sid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})  # the filters' and upload's own
    # The list comes first in the page, as a reader and the keyboard meet it.
    assert html.index('class="session-browser"') < html.index('class="upload-panel"')
    assert set(_ids(html)) == {ok.pk, bad.pk}
    row = html[html.index(f'<tr data-session="{bad.pk}">') :]
    row = row[: row.index("</tr>")]
    assert f">{bad.step_count}<" in row and f">{bad.event_count}<" in row and f">{bad.tokens}<" in row
    assert f"${bad.cost_usd:.4f}" in row
    # Compact in the list: the seq and the time are in its title.
    assert f'href="{bad.get_absolute_url()}?step=7"' in row and ">broken at #8</a>" in row
    assert "first at event #8: open it" in row
    ok_row = html[html.index(f'<tr data-session="{ok.pk}">') :]
    assert re.search(r'title="verified at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: [^"]*">verified</span>', ok_row)
    assert response["Vary"] and "HX-Request" in response["Vary"]


def test_htmx_request_gets_only_the_session_table(logged_in, two_sessions):
    response = logged_in.get(LIST, {"q": "sort"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="session-table"')
    assert "<html" not in html and 'id="upload-form"' not in html
    assert _ids(html) == [two_sessions[0].pk]
    assert "HX-Request" in response["Vary"]


def test_history_restore_request_gets_the_full_page(logged_in, two_sessions):
    response = logged_in.get(LIST, {"q": "sort"}, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    html = response.content.decode()
    assert "<html" in html and 'id="upload-form"' in html
    assert _ids(html) == [two_sessions[0].pk]


def test_anonymous_visitor_is_sent_to_login_and_sees_no_session(client, two_sessions):
    response = client.get(LIST)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")
    assert b"run-ok" not in response.content
    imports = client.get(reverse("sessions:imports"))
    assert imports.status_code == 302
    upload = client.post(reverse("sessions:upload"), {"files": SimpleUploadedFile("a.jsonl", b"{}\n")})
    assert upload.status_code == 302 and ImportJob.objects.count() == 0


def test_anonymous_htmx_request_is_told_to_load_the_login_page(client, two_sessions):
    response = client.get(LIST, HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="http://testserver/sessions/?q=x")
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith(reverse("login") + "?next=")
    assert b"run-ok" not in response.content


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"q": "fetch"}, ["bad"]),
        ({"model": "claude"}, ["bad"]),
        ({"status": "failed"}, ["bad"]),
        ({"status": "completed"}, ["ok"]),
        ({"errors": "yes"}, ["bad"]),
        ({"errors": "no"}, ["ok"]),
        ({"format": "canonical"}, ["bad", "ok"]),
        ({"format": "flux0"}, []),
        ({"project": "default"}, ["bad", "ok"]),
        ({"start": "2026-02-08", "end": "2026-02-08"}, ["bad", "ok"]),
        ({"start": "2026-02-09"}, []),
        ({"end": "2026-02-07"}, []),
        # The last day a date holds includes every session (it was a 400 about integers).
        ({"start": "0001-01-01", "end": "9999-12-31"}, ["bad", "ok"]),
    ],
)
def test_filters_narrow_the_list(logged_in, two_sessions, params, expected):
    ok, bad = two_sessions
    by_name = {"ok": ok.pk, "bad": bad.pk}
    response = logged_in.get(LIST, params, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert sorted(_ids(response.content.decode())) == sorted(by_name[name] for name in expected)


def test_sort_orders_rows(logged_in, two_sessions):
    ok, bad = two_sessions
    html = logged_in.get(LIST, {"sort": "-events"}, HTTP_HX_REQUEST="true").content.decode()
    assert _ids(html) == [bad.pk, ok.pk]
    html = logged_in.get(LIST, {"sort": "created"}, HTTP_HX_REQUEST="true").content.decode()
    assert _ids(html) == [ok.pk, bad.pk]


def test_bad_query_values_fall_back_instead_of_failing(logged_in, two_sessions):
    response = logged_in.get(LIST, {"sort": "drop table", "start": "yesterday", "errors": "maybe",
                                    "project": "nope", "after": "garbage"})  # fmt: skip
    assert response.status_code == 200
    assert set(_ids(response.content.decode())) == {s.pk for s in two_sessions}


@pytest.mark.parametrize("sort", ["-tokens", "-created", "created"])
def test_keyset_pages_cover_every_session_once_in_both_directions(logged_in, project, sort):
    base = datetime(2026, 1, 1, tzinfo=UTC)
    made = [
        Session.objects.create(
            project=project,
            source_format="canonical",
            source_session_id=f"s{i}",
            created_at=base + timedelta(minutes=i // 3),
            tokens=i % 4,
        )  # fmt: skip
        for i in range(123)
    ]
    seen: list[int] = []
    params: dict[str, str] = {"sort": sort}
    pages = []
    while True:
        html = logged_in.get(LIST, params, HTTP_HX_REQUEST="true").content.decode()
        ids = _ids(html)
        pages.append(ids)
        seen += ids
        found = re.search(r'rel="next" href="[^"]*after=([^"&]+)', html)
        if not found:
            break
        params = {"sort": sort, "after": unquote(found.group(1))}
    assert [len(p) for p in pages] == [50, 50, 23]
    assert sorted(seen) == sorted(s.pk for s in made)
    key = {s.pk: (s.tokens if sort == "-tokens" else s.created_at, s.pk) for s in made}
    assert [key[pk] for pk in seen] == sorted((key[pk] for pk in seen), reverse=sort.startswith("-"))
    # Back from the last page: "Previous" gives exactly the second page.
    found = re.search(r'rel="prev" href="[^"]*before=([^"&]+)', html)
    assert found
    before = unquote(found.group(1))
    previous = _ids(logged_in.get(LIST, {"sort": sort, "before": before}, HTTP_HX_REQUEST="true").content.decode())
    assert previous == pages[1]


def test_upload_creates_jobs_that_poll_until_done_then_show_problems_by_line(
    logged_in, tmp_path, django_capture_on_commit_callbacks, monkeypatch
):
    path = tmp_path / "failing.jsonl"
    record_failing_session(path)
    good = path.read_bytes()
    broken = good + b'{"event_type": "step_start", "timestamp": "not a time", "step": 99, "data": {}}\n{not json\n'
    queued: list[int] = []
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: queued.append(kwargs["job_id"]) or "task")
    with django_capture_on_commit_callbacks(execute=True):
        response = logged_in.post(
            reverse("sessions:upload"),
            {"files": [SimpleUploadedFile("one.jsonl", good), SimpleUploadedFile("two.jsonl", broken)], "format": ""},
            HTTP_HX_REQUEST="true",
        )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="imports"')
    assert len(queued) == 2 and ImportJob.objects.filter(created_by="analyst").count() == 2
    # Still queued: the panel re-fetches itself every second.
    assert 'hx-trigger="every 1s"' in html and "one.jsonl" in html and "two.jsonl" in html
    assert "HX-Trigger" not in response

    for job_id in queued:
        jobs.run_import(job_id=job_id)
    poll = logged_in.get(reverse("sessions:imports"), HTTP_HX_REQUEST="true")
    html = poll.content.decode()
    assert 'hx-trigger="every 1s"' not in html  # done: the loop stops
    assert "sessions-changed" in json.loads(poll["HX-Trigger"])
    session = Session.objects.get(import_job__original_name="two.jsonl")
    assert reverse("sessions:player", args=[session.pk]) in html
    job = ImportJob.objects.get(original_name="two.jsonl")
    assert job.problem_count >= 1
    broken_lines = {problem["line"] for problem in job.problems}
    for line in broken_lines:
        assert f"<td>{line}</td>" in html
    assert good.count(b"\n") + 2 in broken_lines


def test_upload_of_an_empty_file_is_refused_with_its_name(logged_in, monkeypatch):
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    response = logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("empty.jsonl", b"")]},
                              HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 200
    assert "empty.jsonl" in html and "error" in html
    assert ImportJob.objects.count() == 0


def test_upload_with_no_file_says_so(logged_in, monkeypatch):
    # No file part (a cut-off body, an empty file name): a 200 that said nothing, and no job.
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    response = logged_in.post(reverse("sessions:upload"), {"project": "default"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "Session files: This field is required." in html, html
    assert ImportJob.objects.count() == 0


def test_upload_with_an_unknown_format_is_refused(logged_in, monkeypatch):
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    response = logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("a.jsonl", b"{}\n")], "format": "nope"},
                              HTTP_HX_REQUEST="true")  # fmt: skip
    assert "Format" in response.content.decode() and ImportJob.objects.count() == 0


def test_oversize_upload_is_refused_before_its_body_is_read(logged_in, monkeypatch, settings):
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    settings.MAX_UPLOAD_MB = 1
    big = SimpleUploadedFile("big.jsonl", b"{}\n" * (700 * 1024))  # 2.1 MB
    response = logged_in.post(reverse("sessions:upload"), {"files": [big]}, HTTP_HX_REQUEST="true")
    # Answered by a middleware before the CSRF check reads the form (replay_site/middleware.py);
    # the page itself refuses such a file before sending it (data-max-bytes, replay.js).
    assert response.status_code == 413
    assert "exceeds the limit of 1 MB" in response.content.decode()
    assert ImportJob.objects.count() == 0
    assert f'data-max-bytes="{1024 * 1024}"' in logged_in.get(reverse("sessions:list")).content.decode()


def test_compare_form_posts_two_picked_sessions_to_the_diff_view(logged_in, two_sessions):
    html = logged_in.get(LIST).content.decode()
    assert f'action="{reverse("sessions:diff")}"' in html
    for session in two_sessions:
        assert f'name="a" value="{session.pk}" form="compare-form"' in html
        assert f'name="b" value="{session.pk}" form="compare-form"' in html


def test_session_list_query_count_does_not_grow_with_rows(logged_in, project, django_assert_max_num_queries):
    for i in range(30):
        build_session(conversation_events(turns=1), source_session_id=f"r{i}")
    with django_assert_max_num_queries(8):
        response = logged_in.get(LIST, HTTP_HX_REQUEST="true")
    assert len(_ids(response.content.decode())) == 30
    assert Event.objects.count() > 0 and Project.objects.count() == 1


# --- order by start time, source file and uploader, one row per session of an import --------


def test_the_list_is_newest_run_first_not_newest_import(logged_in, project):
    base = datetime(2026, 1, 1, tzinfo=UTC)
    ran_late = Session.objects.create(project=project, source_format="canonical", source_session_id="ran-late",
                                      started_at=base + timedelta(days=9), created_at=base)  # fmt: skip
    ran_early = Session.objects.create(project=project, source_format="canonical", source_session_id="ran-early",
                                       started_at=base, created_at=base + timedelta(days=30))  # fmt: skip
    html = logged_in.get(LIST, HTTP_HX_REQUEST="true").content.decode()
    assert _ids(html) == [ran_late.pk, ran_early.pk]
    html = logged_in.get(LIST, {"sort": "started"}, HTTP_HX_REQUEST="true").content.decode()
    assert _ids(html) == [ran_early.pk, ran_late.pk]
    html = logged_in.get(LIST, {"sort": "-created"}, HTTP_HX_REQUEST="true").content.decode()
    assert _ids(html) == [ran_early.pk, ran_late.pk]  # the import order is still one choice away


@pytest.mark.parametrize("sort", ["-started", "started"])
def test_keyset_pages_by_start_time_cover_sessions_without_one_too(logged_in, project, sort):
    base = datetime(2026, 1, 1, tzinfo=UTC)
    made = [
        Session.objects.create(
            project=project,
            source_format="canonical",
            source_session_id=f"s{i}",
            # Every fifth has no start of its own (sorted by when it was stored); starts repeat.
            started_at=None if i % 5 == 0 else base + timedelta(hours=i // 4),
            created_at=base + timedelta(hours=(i * 7) % 40),
        )  # fmt: skip
        for i in range(111)
    ]
    key = {s.pk: (s.started_at or s.created_at, s.pk) for s in made}
    expected = sorted(key, key=key.__getitem__, reverse=sort.startswith("-"))
    seen: list[int] = []
    params: dict[str, str] = {"sort": sort}
    pages = []
    while True:
        html = logged_in.get(LIST, params, HTTP_HX_REQUEST="true").content.decode()
        pages.append(_ids(html))
        seen += pages[-1]
        found = re.search(r'rel="next" href="[^"]*after=([^"&]+)', html)
        if not found:
            break
        params = {"sort": sort, "after": unquote(found.group(1))}
    assert seen == expected and [len(p) for p in pages] == [50, 50, 11]
    before = unquote(re.search(r'rel="prev" href="[^"]*before=([^"&]+)', html).group(1))
    previous = _ids(logged_in.get(LIST, {"sort": sort, "before": before}, HTTP_HX_REQUEST="true").content.decode())
    assert previous == pages[1]


def test_each_row_names_its_source_file_and_uploader(logged_in, tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    path = tmp_path / "run.jsonl"
    record_failing_session(path)
    logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("my run <1>.jsonl", path.read_bytes())]})
    jobs.run_import(job_id=ImportJob.objects.get().pk)
    live = build_session(conversation_events(turns=1), source_session_id="live-one")
    html = logged_in.get(LIST, HTTP_HX_REQUEST="true").content.decode()
    imported = Session.objects.exclude(pk=live.pk).get()
    row = html[html.index(f'<tr data-session="{imported.pk}">') :]
    row = row[: row.index("</tr>")]
    assert "<bdi>my run &lt;1&gt;.jsonl</bdi> · uploaded by <bdi>analyst</bdi>" in row
    row = html[html.index(f'<tr data-session="{live.pk}">') :]
    assert "sent live through the API" in row[: row.index("</tr>")]


def test_a_row_whose_import_skipped_lines_says_how_many_and_links_them(logged_in, tmp_path, monkeypatch):
    # The player names an import's problems; the list flags them too, so a session built from a
    # damaged file is not taken for a whole one at a glance (page and API alike).
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    path = tmp_path / "run.jsonl"
    record_failing_session(path)
    lines = path.read_bytes().splitlines(keepends=True)
    damaged = b"".join([*lines[:2], b"{not json\n", b"[1, 2]\n", *lines[2:]])
    logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("damaged.jsonl", damaged)]})
    jobs.run_import(job_id=ImportJob.objects.get().pk)
    broken = Session.objects.get()
    whole = build_session(conversation_events(turns=1), source_session_id="live-one")
    assert ImportJob.objects.get(original_name="damaged.jsonl").problem_count == 2

    html = logged_in.get(LIST, HTTP_HX_REQUEST="true").content.decode()
    rows = {pk: html[html.index(f'<tr data-session="{pk}">') :].split("</tr>", 1)[0] for pk in (whole.pk, broken.pk)}
    link = reverse("sessions:import_job", args=[broken.import_job_id]) + "#problems"
    assert f'<a class="import-problems-flag" href="{link}">2 import problems</a>' in rows[broken.pk]
    assert "import problem" not in rows[whole.pk]
    api = {row["id"]: row["importProblems"] for row in logged_in.get("/api/sessions").json()["sessions"]}
    assert api == {whole.pk: 0, broken.pk: 2}


def test_a_file_holding_one_session_twice_lists_it_once(logged_in, tmp_path, monkeypatch):
    # A recorder's log with the same run appended twice: one import, one session.
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    path = tmp_path / "run.jsonl"
    record_failing_session(path)
    twice = path.read_bytes() * 2
    logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("twice.jsonl", twice)]})
    job = ImportJob.objects.get()
    jobs.run_import(job_id=job.pk)
    html = logged_in.get(LIST, HTTP_HX_REQUEST="true").content.decode()
    (session,) = Session.objects.all()
    assert _ids(html) == [session.pk]
    job.refresh_from_db()
    assert [(o["session"], o["duplicate"]) for o in job.result] == [(session.pk, False), (session.pk, True)]
    # Uploaded again: still the one session, the new job saying it was already stored.
    logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("again.jsonl", path.read_bytes())]})
    jobs.run_import(job_id=ImportJob.objects.get(original_name="again.jsonl").pk)
    assert _ids(logged_in.get(LIST, HTTP_HX_REQUEST="true").content.decode()) == [session.pk]


def test_upload_errors_stay_while_the_job_list_polls_until_the_next_upload(logged_in, tmp_path, monkeypatch):
    """The job list re-fetches itself every second while a job runs; the upload's errors once
    lived inside it and vanished with the first poll. They sit outside it now, sent out of band
    by an upload only: polls leave them, the next upload replaces them (with none if it had none)."""
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")  # the job stays queued
    path = tmp_path / "good.jsonl"
    record_failing_session(path)
    files = [SimpleUploadedFile("good.jsonl", path.read_bytes()), SimpleUploadedFile("empty.jsonl", b"")]
    html = logged_in.post(reverse("sessions:upload"), {"files": files}, HTTP_HX_REQUEST="true").content.decode()
    imports = html[: html.index("</section>")]
    errors = html[html.index('<div id="upload-errors"') :]
    assert 'hx-trigger="every 1s"' in imports and "empty.jsonl" not in imports
    assert errors.startswith('<div id="upload-errors" class="upload-errors" role="alert" hx-swap-oob="true">')
    assert "empty.jsonl" in errors and 'data-dismiss="upload-errors"' in errors
    poll = logged_in.get(reverse("sessions:imports"), HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-trigger="every 1s"' in poll and "upload-errors" not in poll and "empty.jsonl" not in poll
    again = logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("again.jsonl", path.read_bytes())]},
                           HTTP_HX_REQUEST="true").content.decode()  # fmt: skip
    assert '<div id="upload-errors" class="upload-errors" role="alert" hidden hx-swap-oob="true">' in again
    assert "empty.jsonl" not in again
    page = logged_in.get(LIST).content.decode()
    assert '<div id="upload-errors" class="upload-errors" role="alert" hidden>' in page


def test_without_javascript_upload_errors_show_once_and_dismiss_is_a_link_to_the_list(logged_in):
    sent = logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("empty.jsonl", b"")]})
    assert sent.status_code == 302
    page = logged_in.get(sent.url).content.decode()
    errors = page[page.index('<div id="upload-errors"') :]
    errors = errors[: errors.index("</div>")]
    assert "empty.jsonl" in errors
    assert f'<a href="{LIST}" class="link-button" data-dismiss="upload-errors">dismiss</a>' in errors
    assert "empty.jsonl" not in logged_in.get(LIST).content.decode()  # shown once: dismissed by following it


def test_what_the_agent_wrote_is_isolated_in_the_list(logged_in, db):
    """Right-to-left text or a stray direction mark in a session id, task or model must not
    reorder the row around it: each sits in its own <bdi> / dir=auto box."""
    build_session(conversation_events(turns=1), source_session_id="\u202erun", task="\u05e9\u05dc\u05d5\u05dd task",
                  model="\u05de model")  # fmt: skip
    row = logged_in.get(LIST).content.decode()
    assert "<bdi>\\u202erun</bdi></a>" in row  # an override in an id is written out (its own test below)
    assert '<div class="muted task" dir="auto">\u05e9\u05dc\u05d5\u05dd task</div>' in row
    assert '<td class="model"><bdi>\u05de model</bdi></td>' in row


def test_an_upload_sent_without_javascript_shows_its_errors_once_on_the_sessions_page(logged_in, monkeypatch):
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    response = logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("empty.jsonl", b"")]})
    assert response.status_code == 302 and response["Location"] == reverse("sessions:list")
    page = logged_in.get(response["Location"]).content.decode()
    errors = page.split('id="upload-errors"', 1)[1].split("</div>", 1)[0]
    assert "empty.jsonl" in errors and " hidden" not in errors.split(">", 1)[0]
    again = logged_in.get(reverse("sessions:list")).content.decode()
    assert "empty.jsonl" not in again.split('id="upload-errors"', 1)[1].split("</div>", 1)[0]
    assert ImportJob.objects.count() == 0


def test_only_an_uploads_own_messages_show_as_its_errors_and_others_stay_queued(rf):
    # Another part of the site's message (Django's admin, say) is not an upload error: it stays
    # queued for the page it was meant for.
    from django.contrib import messages
    from django.contrib.messages.storage.fallback import FallbackStorage
    from django.contrib.sessions.backends.signed_cookies import SessionStore

    from sessions_app.views.sessions import _UPLOAD_TAG, _list_messages

    request = rf.get("/sessions/")
    request.session = SessionStore()
    request._messages = FallbackStorage(request)
    messages.info(request, "Saved the project settings.")
    messages.error(request, "empty.jsonl: the file is empty", extra_tags=_UPLOAD_TAG)

    assert _list_messages(request) == (["empty.jsonl: the file is empty"], [])
    assert [m.message for m in request._messages._queued_messages] == ["Saved the project settings."]


def test_a_session_id_that_turns_or_hides_its_text_is_shown_with_those_characters_written_out(logged_in):
    # "<bdi>" isolates a name, but an override inside it still reversed it: this read as
    # "ses_approved_relised" in the list, the player's heading and its title (a hostile sweep).
    turned = build_session(conversation_events(turns=1), source_session_id="ses_approved\u202edesiler_\u200b")
    written = "ses_approved\\u202edesiler_\\u200b"
    listing = logged_in.get(LIST).content.decode()
    player = logged_in.get(turned.get_absolute_url()).content.decode()
    for html in (listing, player):
        assert "\u202e" not in html and "\u200b" not in html and written in html
    assert f"<title>{written} (canonical) · Replay</title>" in player
    assert Session.objects.get(pk=turned.pk).source_session_id.endswith("\u202edesiler_\u200b")  # stored as recorded


def test_an_uploaded_file_name_that_turns_its_text_is_shown_written_out(logged_in, monkeypatch, tmp_path):
    # An upload's name loses such characters when it is kept (uploads.display_name); one stored
    # with them (by an earlier version, or the command line's folder name) is written out on the
    # imports pages, as a session's id is.
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    path = tmp_path / "run.jsonl"
    record_failing_session(path)
    logged_in.post(
        reverse("sessions:upload"), {"files": [SimpleUploadedFile("report\u202elsonj.jsonl", path.read_bytes())]}
    )
    job = ImportJob.objects.get()
    assert job.original_name == "reportlsonj.jsonl"
    ImportJob.objects.filter(pk=job.pk).update(original_name="report\u202elsonj.jsonl")
    pages = [logged_in.get(reverse("sessions:imports")).content.decode(),
             logged_in.get(reverse("sessions:import_job", args=[job.pk])).content.decode()]  # fmt: skip
    for html in pages:
        assert "\u202e" not in html and "report\\u202elsonj.jsonl" in html
