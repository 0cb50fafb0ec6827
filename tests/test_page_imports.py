"""The imports pages: every import job the caller may see (keyset pages, filters), one job with
all its kept problems a page at a time, reachable from the upload panel; the player shows the
problems of the import that stored its session."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions_app import jobs
from sessions_app.ingest.importing import import_local_file
from sessions_app.models import ImportJob, Project, Role, Session

from .builders_dashboard import logged_in, user  # noqa: F401
from .builders_rlm import record_failing_session
from .builders_teams import member

IMPORTS = reverse("sessions:import_jobs")


def _jobs(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-job="(\d+)">', html)]


def _job(project: Project, name: str, **fields) -> ImportJob:
    return ImportJob.objects.create(project=project, original_name=name, stored_path="", **fields)


@pytest.fixture
def uploaded(logged_in, tmp_path, monkeypatch) -> ImportJob:
    """A file uploaded through the sessions page whose import found three bad lines."""
    monkeypatch.setattr(jobs, "async_task", lambda *args, **kwargs: "task")
    path = tmp_path / "run.jsonl"
    record_failing_session(path)
    broken = path.read_bytes() + b"{not json\n" + b'"a string"\n' + b"[1]\n"
    logged_in.post(reverse("sessions:upload"), {"files": [SimpleUploadedFile("broken run.jsonl", broken)]})
    job = ImportJob.objects.get()
    jobs.run_import(job_id=job.pk)
    job.refresh_from_db()
    assert job.problem_count == 3 and job.status == ImportJob.Status.DONE
    return job


def test_the_upload_panel_links_to_the_imports_page_and_each_jobs_problems(logged_in, uploaded):
    html = logged_in.get(reverse("sessions:list")).content.decode()
    assert f'<a href="{IMPORTS}">all imports</a>' in html
    assert f'href="{reverse("sessions:import_job", args=[uploaded.pk])}#problems"' in html


def test_the_imports_page_lists_every_job_with_its_file_uploader_counts_and_sessions(logged_in, uploaded):
    session = Session.objects.get(import_job=uploaded)
    response = logged_in.get(IMPORTS)
    html = response.content.decode()
    assert response.status_code == 200 and "<html" in html and "HX-Request" in response["Vary"]
    row = html[html.index(f'<tr data-job="{uploaded.pk}">') :]
    row = row[: row.index("</tr>")]
    assert "<bdi>broken run.jsonl</bdi>" in row and "<bdi>analyst</bdi>" in row and "Done" in row
    assert f">{uploaded.events_done}<" in row and '#problems">3</a>' in row
    assert f'href="{reverse("sessions:player", args=[session.pk])}"' in row
    partial = logged_in.get(IMPORTS, HTTP_HX_REQUEST="true").content.decode()
    assert partial.lstrip().startswith('<section id="import-table"') and "<html" not in partial
    restore = logged_in.get(IMPORTS, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert "<html" in restore.content.decode()


def test_the_upload_panel_shows_ten_jobs_but_the_imports_page_pages_through_all_of_them(logged_in, project):
    base = datetime(2026, 1, 1, tzinfo=UTC)
    made = [_job(project, f"file-{i}.jsonl", created_by="analyst", created_at=base + timedelta(minutes=i // 2))
            for i in range(123)]  # fmt: skip
    panel = logged_in.get(reverse("sessions:imports"), HTTP_HX_REQUEST="true").content.decode()
    assert len(re.findall(r'data-job="\d+"', panel)) == 10
    newest_first = [j.pk for j in sorted(made, key=lambda j: (j.created_at, j.pk), reverse=True)]
    pages, params = [], {}
    while True:
        html = logged_in.get(IMPORTS, params, HTTP_HX_REQUEST="true").content.decode()
        pages.append(_jobs(html))
        found = re.search(r'rel="next" href="[^"]*after=([^"&]+)', html)
        if not found:
            break
        params = {"after": unquote(found.group(1))}
    assert [len(p) for p in pages] == [50, 50, 23]
    assert sum(pages, []) == newest_first
    before = unquote(re.search(r'rel="prev" href="[^"]*before=([^"&]+)', html).group(1))
    assert _jobs(logged_in.get(IMPORTS, {"before": before}, HTTP_HX_REQUEST="true").content.decode()) == pages[1]


def test_the_imports_page_filters_by_project_and_status_and_shows_only_the_callers_projects(logged_in, project):
    other = Project.objects.create(name="Other team", slug="other")
    mine = Project.objects.create(name="Second", slug="second")
    member("analyst", mine, Role.VIEWER)
    done = _job(project, "done.jsonl", status=ImportJob.Status.DONE)
    failed = _job(project, "failed.jsonl", status=ImportJob.Status.FAILED)
    second = _job(mine, "second.jsonl", status=ImportJob.Status.DONE)
    _job(other, "not-mine.jsonl", status=ImportJob.Status.DONE)
    html = logged_in.get(IMPORTS).content.decode()
    assert sorted(_jobs(html)) == sorted([done.pk, failed.pk, second.pk]) and "not-mine.jsonl" not in html
    assert _jobs(logged_in.get(IMPORTS, {"status": "failed"}).content.decode()) == [failed.pk]
    # A job that failed as a whole has no problems by line: its count says it failed, not "0".
    failed_row = html[html.index(f'data-job="{failed.pk}"') :].split("</tr>")[0]
    done_row = html[html.index(f'data-job="{done.pk}"') :].split("</tr>")[0]
    assert ">failed</a></td>" in failed_row and '<td class="num">0</td>' in done_row
    assert _jobs(logged_in.get(IMPORTS, {"project": "second"}).content.decode()) == [second.pk]
    # Another team's slug is no choice of the form: the filter falls back to all of mine.
    assert sorted(_jobs(logged_in.get(IMPORTS, {"project": "other"}).content.decode())) == sorted(
        [done.pk, failed.pk, second.pk]
    )
    assert logged_in.get(IMPORTS, {"after": "garbage", "status": "nope"}).status_code == 200


def test_a_jobs_page_lists_all_its_problems_by_line_a_page_at_a_time(logged_in, project):
    problems = [{"line": n + 2, "field": "line", "message": f"problem <{n}>"} for n in range(250)]
    job = _job(project, "many.jsonl", status=ImportJob.Status.DONE, problems=problems, problem_count=1300,
               created_by="analyst")  # fmt: skip
    url = reverse("sessions:import_job", args=[job.pk])
    response = logged_in.get(url)
    html = response.content.decode()
    assert response.status_code == 200 and "<bdi>many.jsonl</bdi>" in html and "HX-Request" in response["Vary"]
    assert "the first 250 of 1300 were kept" in html and "Page 1 of 3" in html
    rows = re.findall(r'<tr><td class="num">(\d+)</td><td class="num">(\d+)</td>', html)
    assert rows[0] == ("1", "2") and len(rows) == 100
    assert "problem &lt;0&gt;" in html and "problem <0>" not in html
    last = logged_in.get(url, {"page": 3}, HTTP_HX_REQUEST="true").content.decode()
    assert last.lstrip().startswith('<section id="job-problems"')
    rows = re.findall(r'<tr><td class="num">(\d+)</td><td class="num">(\d+)</td>', last)
    assert rows[0] == ("201", "202") and rows[-1] == ("250", "251")
    assert logged_in.get(url, {"page": "x"}).status_code == 200


def test_a_jobs_problems_are_listed_in_the_files_line_order(logged_in, project):
    # flux0's reader finds the unreadable lines (3, 10, 13) before its converter finds what the
    # readable ones mean (4, 5, ...): the job keeps them, and says the first, in line order.
    path = Path(__file__).parent / "fixtures" / "flux0" / "bad_input.jsonl"
    outcome = import_local_file(path=path, project=project)[0]
    job = ImportJob.objects.get(pk=outcome.session.import_job_id)
    lines = [p["line"] for p in job.problems]
    assert len(lines) > 3 and lines == sorted(lines), lines
    html = logged_in.get(reverse("sessions:import_job", args=[job.pk])).content.decode()
    shown = re.findall(r'<tr><td class="num">\d+</td><td class="num">(\d+)</td>', html)
    assert [int(n) for n in shown] == lines


def test_another_projects_job_is_404(logged_in):
    other = Project.objects.create(name="Other team", slug="other")
    job = _job(other, "theirs.jsonl")
    response = logged_in.get(reverse("sessions:import_job", args=[job.pk]))
    assert response.status_code == 404 and b"theirs.jsonl" not in response.content


def test_the_player_shows_the_problems_of_its_import_in_one_small_query(logged_in, uploaded):
    session = Session.objects.get(import_job=uploaded)
    url = reverse("sessions:player", args=[session.pk])
    with CaptureQueriesContext(connection) as with_job:
        html = logged_in.get(url).content.decode()
    assert "Import problems (3)" in html
    box = html[html.index('<details id="import-problems"') :]
    box = box[: box.index("</details>")]
    for problem in uploaded.problems:
        assert f"line {problem['line']}" in box
    assert f'href="{reverse("sessions:import_job", args=[uploaded.pk])}#problems"' in box
    # One query, reading the count and the first three problems, never the job's whole list.
    (query,) = [q["sql"] for q in with_job.captured_queries if '"problem_count" > 0' in q["sql"]]
    assert re.search(r'\."problems"(,\s*"|\s+FROM)', query) is None, query  # no whole column
    # Without an import job (a live session), the player asks nothing about one.
    Session.objects.filter(pk=session.pk).update(import_job=None)
    with CaptureQueriesContext(connection) as without:
        html = logged_in.get(url).content.decode()
    assert "import-problems" not in html
    assert not [q for q in without.captured_queries if '"problem_count"' in q["sql"]]
    # (It asks instead whether the events hold their records, there being no kept file to give.)
    assert len(without) == len(with_job)


def test_the_player_says_nothing_of_an_import_without_problems(logged_in, uploaded):
    session = Session.objects.get(import_job=uploaded)
    ImportJob.objects.filter(pk=uploaded.pk).update(problem_count=0, problems=[])
    assert "import-problems" not in logged_in.get(reverse("sessions:player", args=[session.pk])).content.decode()
