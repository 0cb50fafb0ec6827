"""The lists in real headless Chromium: every import reachable from the upload panel through the
imports page's keyset pages down to one job's problems; two sessions on different pages of the
sessions list compared; the player's "Compare with…" found by typing and opening the diff, and
its import problems shown. Every page stays on our own server with no console error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Page, expect

from sessions_app.models import ImportJob, Project, Session

from ..builders_dashboard import build_session, conversation_events
from ..builders_teams import member
from .test_team_journey import sign_in

pytestmark = pytest.mark.browser


@pytest.fixture
def lists(transactional_db) -> dict:
    member("lena")
    project = Project.get_default()
    base = datetime(2026, 1, 1, tzinfo=UTC)
    ImportJob.objects.bulk_create(
        ImportJob(project=project, original_name=f"old-{n:03}.jsonl", stored_path="", created_by="lena",
                  status=ImportJob.Status.DONE, created_at=base + timedelta(minutes=n))
        for n in range(110)
    )  # fmt: skip
    problems = [{"line": n + 2, "field": "timestamp", "message": f"not a time on line {n + 2}"} for n in range(5)]
    job = ImportJob.objects.create(project=project, original_name="with-problems.jsonl", stored_path="",
                                   created_by="lena", status=ImportJob.Status.DONE, problems=problems,
                                   problem_count=5, created_at=base - timedelta(days=1))  # fmt: skip
    a = build_session(conversation_events(turns=2), source_session_id="run-a", task="first try")
    events = conversation_events(turns=3)
    step_ends = [e for e in events if e.step_state is not None]
    step_ends[1].step_state = {**step_ends[1].step_state, "action_code": "x = 'other'"}  # B diverges at step 1
    b = build_session(events, source_session_id="run-b", task="second try")
    Session.objects.filter(pk=a.pk).update(import_job=job, started_at=base - timedelta(days=400))
    for n in range(55):  # between b (newest) and a (oldest): a lands on the second page
        build_session([], finish=False, source_session_id=f"filler-{n}")
    Session.objects.filter(source_session_id__startswith="filler-").update(started_at=base - timedelta(days=30))
    return {"a": a, "b": b, "job": job}


def test_every_import_is_reachable_from_the_upload_panel_down_to_its_problems(watched, lists):
    page, _ = watched
    sign_in(page, "lena", "/sessions/")
    expect(page.locator("#imports [data-job]")).to_have_count(10)
    page.click("#imports .all-imports a")
    page.wait_for_url("**/imports/")
    rows = page.locator("#import-table tbody tr[data-job]")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text("old-109.jsonl")
    page.click('#import-table a[rel="next"]')
    expect(rows.first).to_contain_text("old-059.jsonl")
    assert "after=" in page.url  # the page is in the URL
    page.click('#import-table a[rel="next"]')
    expect(rows).to_have_count(11)
    expect(rows.last).to_contain_text("with-problems.jsonl")
    page.click('#import-table a[rel="prev"]')
    expect(rows.first).to_contain_text("old-059.jsonl")
    page.go_back()
    expect(rows.last).to_contain_text("with-problems.jsonl")
    page.click("#import-table a:has-text('with-problems.jsonl')")
    page.wait_for_url(f"**/imports/{lists['job'].pk}/")
    expect(page.locator("#job-problems tbody tr")).to_have_count(5)
    expect(page.locator("#job-problems")).to_contain_text("not a time on line 6")


def _radio(page: Page, letter: str, session: Session):
    return page.locator(f'input[type=radio][name="{letter}"][value="{session.pk}"]')


def test_two_sessions_on_different_list_pages_compare(watched, lists):
    page, _ = watched
    a, b = lists["a"], lists["b"]
    sign_in(page, "lena", "/sessions/")
    # An auditor's columns (Chain, Review) are in view at 1280 px without scrolling sideways;
    # they came last and were cut off up to 1600 px (walkthrough).
    page.set_viewport_size({"width": 1280, "height": 900})
    edges = page.evaluate(
        "(() => { const box = document.querySelector('#session-table .table-scroll').getBoundingClientRect();"
        " const heads = [...document.querySelectorAll('#session-table thead th')];"
        " const right = name => heads.find(h => h.textContent.trim() === name).getBoundingClientRect().right;"
        " return {box: box.right, chain: right('Chain'), review: right('Review')} })()"
    )
    assert edges["chain"] <= edges["box"] and edges["review"] <= edges["box"], edges
    _radio(page, "b", b).check()
    page.click('#session-table a[rel="next"]')
    expect(_radio(page, "a", a)).to_be_visible()
    # B, picked on the first page, is still picked here.
    expect(page.locator("#compare-picks")).to_contain_text("B = run-b")
    expect(_radio(page, "b", b)).to_be_checked()
    _radio(page, "a", a).check()
    # Both picks are in the address as they are made: a reload keeps them (it had kept neither).
    assert page.evaluate("new URL(location.href).searchParams.get('a')") == str(a.pk)
    page.reload()
    expect(_radio(page, "a", a)).to_be_checked()
    expect(page.locator("#compare-picks")).to_contain_text("B = run-b")
    page.click("#session-table .compare-button")
    page.wait_for_url("**/compare/?*")
    assert f"a={a.pk}" in page.url and f"b={b.pk}" in page.url
    expect(page.locator(".diff-heads")).to_contain_text("run-a")
    expect(page.locator(".diff-heads")).to_contain_text("run-b")


def test_the_player_compares_with_a_session_found_by_typing_and_shows_its_import_problems(watched, lists):
    page, _ = watched
    a, b = lists["a"], lists["b"]
    sign_in(page, "lena", f"/sessions/{a.pk}/")
    problems = page.locator("#import-problems")
    expect(problems.locator("summary")).to_have_text("Import problems (5)")
    problems.locator("summary").click()
    expect(problems.locator("li")).to_have_count(3)
    page.locator("#compare-with summary").click()
    candidates = page.locator("#compare-candidates li a")
    expect(candidates.first).to_be_visible()
    page.locator("#compare-q").press_sequentially("run-b")
    expect(candidates).to_have_count(1)
    expect(candidates.first).to_have_text("run-b")
    candidates.first.click()
    page.wait_for_url(f"**/compare/?a={a.pk}&b={b.pk}")
    expect(page.locator(".diff-heads")).to_contain_text("run-b")


def test_without_javascript_the_list_and_the_players_kinds_still_filter(browser, live_server, lists):
    # The filters send themselves through htmx as they change; without JavaScript a button does.
    context = browser.new_context(java_script_enabled=False, base_url=live_server.url)
    page = context.new_page()
    try:
        sign_in(page, "lena", "/sessions/")
        page.fill("#id_q", "second try")
        page.click("#session-filters button[type=submit]")
        page.wait_for_url("**/sessions/?*q=second+try*")
        expect(page.locator("#session-table tbody tr")).to_have_count(1)
        expect(page.locator("#session-table tbody tr")).to_contain_text("run-b")
        b = lists["b"]
        page.goto(f"/sessions/{b.pk}/?step=5")
        page.uncheck("#kind-llm_call")
        page.click("#filters button[type=submit]")
        page.wait_for_url(f"**/sessions/{b.pk}/?*")
        assert "step=5" in page.url and "types=" in page.url and "llm_call" not in page.url.split("types=", 1)[1]
        expect(page.locator("#kind-llm_call")).not_to_be_checked()
    finally:
        context.close()
