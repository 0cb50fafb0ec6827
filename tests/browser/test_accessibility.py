"""Accessibility and small screens in real headless Chromium: axe-core (vendored, see a11y.py)
finds no serious or critical violation on the dashboard's pages, including WCAG AA contrast;
at a phone's 390 px the list, the player and the diff fit without sideways scrolling (tables
scroll inside their own box); an htmx refusal (4xx) swaps its partial in, and a failed request
(5xx, network) says so in the page's alert region instead of failing silently."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import Page

from sessions_app import comments, sharing, tours
from sessions_app.access import Actor
from sessions_app.ingest.importing import import_local_file
from sessions_app.ingest.writer import set_checkpoint
from sessions_app.models import Event, Project, Role, Session
from sessions_app.reviews import sign_off
from sessions_app.verification import verify_session

from ..builders_dashboard import build_session, conversation_events
from ..builders_replay import import_one, record_variant
from ..builders_teams import member
from .a11y import accessibility_problems, assert_accessible
from .conftest import PASSWORD, Watch
from .test_dashboard import wait_for_seq, wait_for_settle

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
# Console lines that the failures provoked on purpose leave (the browser's and htmx's own).
PROVOKED = (
    "status of 400",
    "status of 500",
    "Response Status Error Code 500",
    "htmx:sendError",
    "htmx:afterRequest",
    "ERR_FAILED",
)


def wait_until(page: Page, expression: str, arg: object = None, timeout: float = 15.0) -> None:
    """Poll a JavaScript expression (page.evaluate: our CSP refuses wait_for_function's eval)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression, arg):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression} ({arg!r})")
        time.sleep(0.05)


def sign_in(page: Page, username: str, next_path: str) -> None:
    page.context.clear_cookies()
    page.goto(next_path)
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("form button[type=submit]")
    page.wait_for_url(f"**{next_path}")


def too_wide(page: Page, width: int) -> list[str]:
    """The outermost elements reaching past the viewport's right edge (for the failure message)."""
    return page.evaluate(
        """width => {
            const out = [];
            for (const el of document.body.querySelectorAll('*')) {
                const right = el.getBoundingClientRect().right;
                if (right > width + 0.5 && !(el.parentElement && out.some(o => o.el === el.parentElement))) {
                    out.push({el, text: `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${[...el.classList].join('.')} right=${Math.round(right)}`});
                }
            }
            return out.slice(0, 30).map(o => o.text);
        }""",
        width,
    )


def expect_console_errors(watch: Watch, *fragments: str) -> None:
    """Take the console errors a test provoked on purpose out of the watch, each one expected."""
    for fragment in fragments:
        found = [e for e in watch.errors if fragment in e]
        assert found, f"expected a console error with {fragment!r}, got {watch.errors}"
        watch.errors = [e for e in watch.errors if fragment not in e]


@pytest.fixture
def reviewed(transactional_db, tmp_path: Path) -> dict:
    """A session with an error, checkpoints, a comment thread with a reply and a sign-off; two
    sessions to compare; ada (maintainer) and rita (reviewer) of the default project."""
    ada, rita = member("ada", role=Role.MAINTAINER), member("rita", role=Role.REVIEWER)
    member("adm", role=Role.ADMIN)  # the pages and forms only an admin sees
    talk = build_session(conversation_events(turns=3), source_session_id="talk", task="answer three questions")
    set_checkpoint(session=talk, name="before the failure", seq=12, created_by="ada")
    set_checkpoint(session=talk, name="the end", seq=talk.event_count - 1, created_by="ada")
    thread = comments.create_comment(actor=Actor(user=rita), session=talk, seq=18, body="why did **search** fail?")
    comments.create_comment(actor=Actor(user=ada), session=talk, parent=thread.pk, body="a bad query, see `q`")
    sign_off(session=talk, reviewer=Actor(user=rita), verdict="changes_requested", note="retry the search")
    # What people write may be one unbroken word, or hold a right-to-left override: it wraps and
    # stays in its own box (the phone test's width check).
    set_checkpoint(session=talk, name="z" * 200, seq=20, created_by="ada")
    comments.create_comment(actor=Actor(user=rita), session=talk, seq=20, body="x" * 3000 + " \u202e reversed")
    record_variant(tmp_path / "a.jsonl", run_id="baseline", steps=6)
    record_variant(tmp_path / "b.jsonl", run_id="candidate", steps=7, change_at=3)
    a, b = import_one(tmp_path / "a.jsonl"), import_one(tmp_path / "b.jsonl")
    # Given on the command line, as `make run`'s demo is: the imports page lists them, each row
    # with its links (file, session) packed in a table cell.
    for name in ("a", "b"):
        record_variant(tmp_path / f"kept-{name}.jsonl", run_id=f"kept-{name}", steps=3)
        import_local_file(path=tmp_path / f"kept-{name}.jsonl", project=Project.get_default(), created_by="ada")
    tour = tours.create_tour(actor=Actor(user=ada), project=Project.get_default(), title="How the search failed",
                             description="Three stops across *two* sessions.")  # fmt: skip
    stops = [tours.StopSpec(session=talk.pk, seq=1, title="The question", narration="It starts **here**."),
             tours.StopSpec(session=talk.pk, seq=18, title="The failure", narration="`search` fails."),
             tours.StopSpec(session=a.pk, seq=3, title="Elsewhere", narration="Another run.")]  # fmt: skip
    tours.set_stops(actor=Actor(user=ada), tour=tour, stops=stops)
    _, token = sharing.create_link(actor=Actor(user=ada), session=talk, note="for the newcomer")
    # Names and notes people give may be one unbroken word too (at most as long as each field
    # allows): a project's name in every project picker, a tour's title and description, a
    # stop's title, a share link's note.
    long_project = Project.objects.create(name="P" * 200, slug="long-name")
    member("ada", long_project, Role.ADMIN)
    long_tour = tours.create_tour(actor=Actor(user=ada), project=Project.get_default(), title="T" * 200,
                                  description="D" * 400)  # fmt: skip
    tours.set_stops(actor=Actor(user=ada), tour=long_tour,
                    stops=[tours.StopSpec(session=talk.pk, seq=18, title="S" * 200, narration="N" * 400)])  # fmt: skip
    sharing.create_link(actor=Actor(user=ada), session=talk, note="L" * 200)
    # A sign-off whose events were edited after it, as a verification then finds: its warning.
    signed_events = conversation_events(turns=1)
    # A recorded value that is one long word, as an agent's JSON often is: the search page shows it.
    signed_events[2].payload = {"completion": "ToolError:" + "-".join(["connection_reset_by_peer"] * 20)}
    signed = build_session(signed_events, source_session_id="signed")
    sign_off(session=signed, reviewer=Actor(user=rita), verdict="approved")
    Event.objects.filter(session=signed, seq=5).update(payload='{"edited": true}')
    verify_session(session=signed)
    return {"talk": talk, "thread": thread, "a": a, "b": b, "project": Project.get_default(), "tour": tour,
            "share": f"/s/{token}", "signed": signed, "long_tour": long_tour, "long_project": long_project}  # fmt: skip


def test_no_serious_or_critical_axe_violation_on_any_page(watched, reviewed):
    page, watch = watched
    talk: Session = reviewed["talk"]
    slug = reviewed["project"].slug
    problems = []  # every page is checked before failing, so one run lists everything
    sign_in(page, "ada", "/sessions/")
    problems.append(accessibility_problems(page, "session list"))

    page.goto(f"/sessions/{talk.pk}/?step=18")
    page.locator("#comment-threads article.thread").wait_for()
    page.locator("#charts").scroll_into_view_if_needed()
    wait_until(page, "document.querySelectorAll('#charts .chart[data-ready=true]').length === 4", timeout=30)
    # Back at the top: scrolled down to the charts, whichever control then sat under the sticky
    # player controls counted as obscured (axe's target-size), as any would scrolled beneath
    # them; a control the keyboard focuses is scrolled clear of them (scroll-padding-top).
    page.evaluate("window.scrollTo(0, 0)")
    problems.append(accessibility_problems(page, "player (errors, checkpoints, comments, sign-offs, charts)"))

    # The broken sign-off's warning wraps inside the sidebar instead of running under the steps.
    page.goto(f"/sessions/{reviewed['signed'].pk}/")
    warning = page.locator(".sign-off .badge.chain-broken")
    assert "event #6 it covered no longer verifies" in warning.inner_text()
    box, panel = warning.bounding_box(), page.locator("#sign-offs").bounding_box()
    assert box["x"] + box["width"] <= panel["x"] + panel["width"] + 0.5, (box, panel)

    page.goto(f"/compare/?a={reviewed['a'].pk}&b={reviewed['b'].pk}")
    page.wait_for_selector("tr.divergence-row")
    problems.append(accessibility_problems(page, "diff page"))

    tour = reviewed["tour"]
    for path, ready, name in [
        ("/projects/", "#project-table", "projects page"), (f"/projects/{slug}/", "#members", "project page"),
        (f"/projects/{slug}/audit/", "#audit-entries tr[data-seq]", "audit page"),
        ("/account/keys/", "#keys", "API keys page"), ("/about/", "#signing-key", "about page"),
        (f"/projects/{slug}/learn/", "#tour-list li", "Learn page"), (f"/tours/{tour.pk}/", "#tour-stops li", "tour page"),
        ("/imports/", "#import-table", "imports page"),
    ]:  # fmt: skip
        page.goto(path)
        page.wait_for_selector(ready)
        problems.append(accessibility_problems(page, name))
    # An rlm-code recording: its step_end rows are one line high, the smallest targets.
    page.goto(f"/sessions/{reviewed['a'].pk}/?step=2")
    page.wait_for_selector("#step-list .event")
    problems.append(accessibility_problems(page, "player of an rlm-code recording"))
    page.goto(f"/tours/{tour.pk}/play/?stop=2")  # the player in tour mode, at stop 2
    page.wait_for_selector("#tour-narration")
    problems.append(accessibility_problems(page, "player in tour mode"))

    sign_in(page, "adm", f"/projects/{slug}/")  # its members' and settings' forms
    problems.append(accessibility_problems(page, "project page, as its admin"))
    page.goto(f"/projects/{slug}/redaction/")
    page.wait_for_selector("#redaction-form")
    problems.append(accessibility_problems(page, "redaction rules page"))

    page.context.clear_cookies()
    page.goto("/accounts/login/")
    problems.append(accessibility_problems(page, "sign-in page"))
    page.goto(reviewed["share"])
    page.wait_for_selector("#step-list")
    problems.append(accessibility_problems(page, "player through a share link, signed out"))
    found = [p for p in problems if p]
    assert not found, "\n\n".join(found)
    watch.assert_clean()


def test_pages_fit_a_phone_and_stay_accessible_there(browser, live_server, reviewed):
    context = browser.new_context(viewport=PHONE, base_url=live_server.url, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        sign_in(page, "ada", "/sessions/")
        pages = [
            ("/sessions/", "#session-table", "session list"),
            (f"/sessions/{reviewed['talk'].pk}/?step=18", "#step-list", "player"),
            (f"/compare/?a={reviewed['a'].pk}&b={reviewed['b'].pk}", "tr.divergence-row", "diff page"),
            (f"/tours/{reviewed['tour'].pk}/play/?stop=2", "#tour-narration", "player in tour mode"),
            (f"/projects/{reviewed['project'].slug}/learn/", "#tour-list li", "Learn page"),
            (f"/tours/{reviewed['tour'].pk}/", "#tour-stops li", "tour page"),
            ("/search/?q=ToolError", "#search-hits li", "search page"),
            ("/about/", "#public-key", "about page"),
            # Tables of their own: a visually hidden header once widened the keys page (606 px),
            # and a box that scrolls must take the keyboard's focus (axe's scrollable-region-focusable).
            ("/account/keys/", "#keys", "API keys page"),
            (f"/projects/{reviewed['project'].slug}/audit/", "#audit-entries tr[data-seq]", "audit page"),
            (f"/projects/{reviewed['project'].slug}/", "#members", "project page"),
            ("/imports/", "#import-table", "imports page"),
            (f"/tours/{reviewed['long_tour'].pk}/", "#tour-stops li", "tour page of long words"),
            (f"/tours/{reviewed['long_tour'].pk}/play/?stop=1", "#tour-narration", "tour of long words, played"),
            (f"/projects/{reviewed['long_project'].slug}/", "#members", "project page of a long name"),
        ]
        for path, ready, name in pages:
            page.goto(path)
            page.wait_for_selector(ready)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"the {name} is {width}px wide at 390 px: {too_wide(page, PHONE['width'])}"
            assert_accessible(page, f"{name} at 390 px")
        sign_in(page, "adm", f"/projects/{reviewed['project'].slug}/redaction/")
        page.wait_for_selector("#redaction-form")
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        assert_accessible(page, "redaction rules page at 390 px")
        sign_in(page, "ada", "/sessions/")
        # Stepping keeps the page where the reader put it: the current row is scrolled into view
        # inside the step list only (each step used to scroll the page to the row, and the
        # step's context out of sight; a walkthrough at 390 px).
        page.goto(f"/sessions/{reviewed['talk'].pk}/?step=5")
        page.wait_for_selector("#step-list [aria-current=step]")
        page.evaluate("window.scrollTo(0, 0)")
        for expected in (6, 7, 8):
            page.locator("#step-forward").tap()
            wait_for_seq(page, expected)
        assert page.evaluate("window.scrollY") == 0
        inside = page.evaluate(
            "(() => { const l = document.getElementById('step-list').getBoundingClientRect();"
            " const r = document.querySelector('#step-list [aria-current=step]').getBoundingClientRect();"
            " return r.top >= l.top - 1 && r.bottom <= l.bottom + 1 })()"
        )
        assert inside, "the current row is not in view inside the step list"
        # A tour's newcomer first sees the stop's narration, not the page scrolled past it.
        page.goto(f"/tours/{reviewed['tour'].pk}/play/?stop=1")
        page.wait_for_selector("#tour-narration")
        page.wait_for_timeout(300)
        narration = page.evaluate("document.getElementById('tour-narration').getBoundingClientRect().top")
        assert page.evaluate("window.scrollY") == 0 and 0 <= narration < PHONE["height"], narration
        # The list's table scrolls inside its own box, which is no wider than the screen.
        page.goto("/sessions/")
        box = page.evaluate(
            "(() => { const t = document.querySelector('#session-table .table-scroll');"
            " return t && {client: t.clientWidth, scroll: t.scrollWidth, overflow: getComputedStyle(t).overflowX} })()"
        )
        assert box and box["client"] <= PHONE["width"] and box["overflow"] == "auto", box
        # A date field takes the site's 3 px focus ring round the whole field.
        page.locator("input[type=date]").first.focus()
        ring = page.evaluate("getComputedStyle(document.activeElement).outlineWidth")
        assert ring == "3px", ring
    finally:
        context.close()


def test_the_list_and_a_player_of_long_names_fit_a_desktop(browser, live_server, reviewed):
    """At 1280 px the list's columns all show (the import panel goes after the list, a link at
    its top leads there), and a sender's long unbroken model and tool names wrap in the player
    instead of widening the page (a security sweep's session: 3354 px wide)."""
    events = conversation_events(turns=1)
    for event in events:
        event.tool = "T" * 200
    long = build_session(events, source_session_id="long-names", model="m" * 190)
    desktop = {"width": 1280, "height": 800}
    context = browser.new_context(viewport=desktop, base_url=live_server.url)
    page = context.new_page()
    try:
        sign_in(page, "ada", "/sessions/")
        page.wait_for_selector("#session-table")
        box = page.evaluate(
            "(() => { const t = document.querySelector('#session-table .table-scroll');"
            " return {client: t.clientWidth, scroll: t.scrollWidth} })()"
        )
        assert box["scroll"] <= box["client"], (
            box,
            page.evaluate(
                "[...document.querySelectorAll('table.sessions thead th')].map(t => t.textContent.trim() + ':' + Math.round(t.getBoundingClientRect().width)).join(' ')"
            ),
        )
        order = page.evaluate(
            "[document.querySelector('.session-browser'), document.querySelector('.upload-panel')]"
            ".map(e => e.getBoundingClientRect().top)"
        )
        assert order[0] < order[1], order
        page.get_by_role("link", name="Import sessions").click()
        assert page.url.endswith("#upload-title")
        page.goto(f"/sessions/{long.pk}/?step=2")
        page.wait_for_selector("#step-list [aria-current=step]")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= desktop["width"], f"the player is {width}px wide: {too_wide(page, desktop['width'])}"
        panel = page.evaluate(
            "(() => { const p = document.querySelector('.context-panel'); return [p.scrollWidth, p.clientWidth] })()"
        )
        assert panel[0] <= panel[1], panel
    finally:
        context.close()


def test_a_refusal_swaps_in_and_a_failed_request_shows_the_page_alert(watched, reviewed):
    page, watch = watched
    talk: Session = reviewed["talk"]
    sign_in(page, "rita", f"/sessions/{talk.pk}/?step=18")
    alert = page.locator("#request-error")
    assert alert.get_attribute("role") == "alert" and alert.is_hidden()

    # A blank comment passes the browser's `required` and is refused by the server (400): htmx
    # swaps the threads with the reason in, the typed threads stay.
    page.fill("#comment-body", "   ")
    page.click("#comment-form button[type=submit]")
    error = page.locator("#comment-threads p.error[role=alert]")
    error.wait_for()
    assert error.inner_text() == "Comment: This field is required."
    assert page.locator("#comment-threads article.thread").count() == 1

    # A sign-off without a verdict (the select emptied under the browser's nose) is a 400 too.
    page.evaluate("document.querySelector('#sign-off-form select').innerHTML = '<option value=\"\" selected></option>'")
    page.evaluate("document.querySelector('#sign-off-form select').required = false")
    page.click("#sign-off-form button[type=submit]")
    refusal = page.locator("#sign-offs p.error[role=alert]")
    refusal.wait_for()
    assert "needs a verdict" in refusal.inner_text()
    assert alert.is_hidden()

    # A comment refused outright (the role lowered meanwhile: 403) leaves the panel, its form and
    # what was typed as they were, and says why in the alert; the role back, the same press works.
    # The refusal had been swapped over the panel: its id gone, every later press went nowhere.
    from sessions_app.models import Membership

    rita = Membership.objects.filter(project=talk.project, user__username="rita")
    role = rita.get().role
    rita.update(role=Role.VIEWER)
    wait_for_settle(page)
    page.fill("#comment-body", "typed before the role changed")
    page.click("#comment-form button[type=submit]")
    wait_until(page, "!document.getElementById('request-error').hidden")
    assert "Not allowed (HTTP 403)" in alert.inner_text() and "reviewer role" in alert.inner_text()
    assert page.locator("#comment-threads article.thread").count() == 1
    assert page.input_value("#comment-body") == "typed before the role changed"
    assert "project. Nothing on this page changed" in alert.inner_text()
    rita.update(role=role)
    # A page older than the browser's CSRF token (signed in again in another tab): the site's
    # refusal, said in the alert, the panel kept. Django's own page had replaced the panel whole.
    token = page.get_attribute('meta[name="csrf-token"]', "content")
    stale = """(token) => {
        document.querySelector('meta[name="csrf-token"]').content = token;
        document.querySelectorAll('input[name=csrfmiddlewaretoken]').forEach((i) => { i.value = token; });
    }"""
    page.evaluate(stale, "x" * 64)
    page.click("#comment-form button[type=submit]")
    wait_until(page, "document.getElementById('request-error').textContent.includes('out of date')")
    assert "Not sent (HTTP 403)" in alert.inner_text()
    assert page.locator("#comment-threads article.thread").count() == 1
    assert page.input_value("#comment-body") == "typed before the role changed"
    page.evaluate(stale, token)
    page.click("#comment-form button[type=submit]")
    page.locator("#comment-threads article.thread").nth(1).wait_for()
    assert alert.is_hidden()
    wait_for_settle(page)

    # The server failing (500) is not swapped over the page: the alert region says so.
    page.route("**/comments/", lambda route: route.fulfill(status=500, body="<h1>Server Error</h1>"))
    wait_for_settle(page)  # the refusal swapped a new comment form in: htmx's only once settled
    page.fill("#comment-body", "this will fail")
    page.click("#comment-form button[type=submit]")
    wait_until(page, "!document.getElementById('request-error').hidden")
    assert "500" in alert.inner_text() and "Server Error" not in page.locator("#comment-threads").inner_text()
    assert page.input_value("#comment-body") == "this will fail"  # kept for another try

    # A request that never reaches the server says that instead; the next success clears it.
    page.unroute("**/comments/")
    page.route("**/comments/", lambda route: route.abort())
    page.click("#comment-form button[type=submit]")
    wait_until(page, "document.getElementById('request-error').textContent.includes('reach')")
    page.unroute("**/comments/")
    page.click("#comment-form button[type=submit]")
    page.locator("#comment-threads article.thread").nth(2).wait_for()
    assert alert.is_hidden()
    # What the browser and htmx logged about the provoked failures, and nothing else.
    expect_console_errors(watch, "status of 400", "status of 403", "Response Status Error Code 500", "htmx:sendError")
    watch.errors = [e for e in watch.errors if not any(known in e for known in PROVOKED)]
    watch.assert_clean()
