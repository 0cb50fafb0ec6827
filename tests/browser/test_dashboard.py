"""The dashboard in real headless Chromium: log in, upload and watch the import finish, play,
scrub, filter, jump to errors, reload deep links, compare two sessions; hostile payloads run
nothing; every page stays on our own server and logs no console error (see conftest.Watch)."""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import OperationalError
from django_q.conf import Conf
from playwright.sync_api import Page

from sessions_app import comments
from sessions_app.access import Actor
from sessions_app.ingest.writer import append_events, finish_session
from sessions_app.models import Event, Session
from sessions_app.verification import verify_session

from ..builders_dashboard import XSS_IMG, XSS_SCRIPT, build_session, conversation_events, hostile_events, turn_length
from ..builders_replay import import_one, record_variant
from ..builders_rlm import record_failing_session, record_full_session
from .conftest import log_in, save_screenshot

pytestmark = pytest.mark.browser


def frame(page: Page) -> dict:
    return json.loads(page.locator("#frame-data").text_content())


def lab(css_rgb: str) -> tuple[float, float, float]:
    """A CSS "rgb(r, g, b)" as CIE L*a*b* (D65), where distance follows what the eye sees."""
    red, green, blue = (int(v) / 255 for v in re.findall(r"\d+", css_rgb)[:3])
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (red, green, blue)]
    x, y, z = (sum(w * c for w, c in zip(row, linear)) / white for row, white in zip(
        ((0.4124, 0.3576, 0.1805), (0.2126, 0.7152, 0.0722), (0.0193, 0.1192, 0.9505)), (0.95047, 1.0, 1.08883)
    ))  # fmt: skip
    fx, fy, fz = (v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116 for v in (x, y, z))
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def wait_until(page: Page, expression: str, arg: object = None, timeout: float = 15.0) -> None:
    """Poll a JavaScript expression until it is truthy. (Playwright's wait_for_function evaluates
    its predicate with eval inside the page, which our CSP rightly refuses; page.evaluate goes
    through the DevTools protocol instead.)"""
    deadline = time.monotonic() + timeout
    while True:
        if page.evaluate(expression, arg):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression} ({arg!r})")
        time.sleep(0.05)


def settle(page: Page) -> None:
    """Wait until htmx has no request in flight (it marks the requesting element) twice in a row."""
    quiet = 0
    deadline = time.monotonic() + 15
    while quiet < 3:
        quiet = 0 if page.evaluate("!!document.querySelector('.htmx-request')") else quiet + 1
        if time.monotonic() > deadline:
            raise AssertionError("htmx requests never settled")
        time.sleep(0.1)


# The frame is in the page when htmx swaps it, and the player applies it (buttons enabled or
# disabled, the scrubber's value) when the swap settles, a moment later: a test that acts on a
# button between the two found it still disabled from the frame before (CI failed so).
_FRAME_APPLIED = """seq => {
  const el = document.getElementById('frame-data');
  if (!el || JSON.parse(el.textContent).seq !== seq) return false;
  const track = document.getElementById('scrubber');
  return !track || track.getAttribute('aria-valuenow') === String(seq);
}"""


def wait_for_seq(page: Page, seq: int) -> None:
    wait_until(page, _FRAME_APPLIED, seq)


# htmx marks what a swap brought in (htmx-added) and its target (htmx-settling) until it settles
# the swap, a moment later: only then are the new content's hx-* forms its own (a form pressed
# before then is sent by the browser itself, a page load) and replay.js has put the focus back.
_SETTLED = "() => !document.querySelector('.htmx-swapping, .htmx-settling, .htmx-added')"


def wait_for_settle(page: Page) -> None:
    wait_until(page, _SETTLED)


def query(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def history_length(page: Page) -> int:
    return page.evaluate("history.length")


def test_login_upload_two_files_and_watch_the_imports_finish(watched, analyst, tmp_path, monkeypatch):
    page, watch = watched
    # The import runs in the upload request itself (django-q's sync mode), as a worker would.
    monkeypatch.setattr(Conf, "SYNC", True)
    good, failing = tmp_path / "full.jsonl", tmp_path / "failing.jsonl"
    record_full_session(good, run_id="run_upload")
    record_failing_session(failing)
    failing.write_bytes(failing.read_bytes() + b"{not json\n")

    log_in(page)
    assert page.locator("#session-table tbody tr").first.inner_text().startswith("No sessions")
    page.set_input_files("#upload-form input[type=file]", [str(good), str(failing)])
    page.click("#upload-form button[type=submit]")  # picking files sends nothing by itself
    page.wait_for_selector('.job[data-status="done"] >> text=full.jsonl')
    page.wait_for_selector('.job[data-status="done"] >> text=failing.jsonl')
    problems = page.locator(".job", has_text="failing.jsonl").locator("details.problems")
    problems.locator("summary").click()
    bad_line = failing.read_bytes().count(b"\n")
    assert problems.locator("td", has_text=re.compile(rf"^{bad_line}$")).count() == 1
    # The finished imports refresh the table (no reload): both sessions are listed.
    wait_until(page, "document.querySelectorAll('#session-table tr[data-session]').length === 2")
    page.locator("#session-table a", has_text="run_upload").click()
    page.wait_for_selector("#step-list")
    session = Session.objects.get(run_id="run_upload")
    assert page.url.endswith(f"/sessions/{session.pk}/")
    assert frame(page)["count"] == session.event_count
    watch.assert_clean()


@pytest.fixture
def talk(transactional_db) -> Session:
    return build_session(conversation_events(turns=3), source_session_id="talk", task="answer three questions")


def test_play_advances_at_the_chosen_speed_and_stops_at_the_next_user_message(watched, analyst, talk):
    page, watch = watched
    log_in(page, f"/sessions/{talk.pk}/?step=0&speed=10")
    started = time.monotonic()
    page.click("#play")
    page.wait_for_selector('#play[aria-pressed="false"]', timeout=20_000)
    elapsed = time.monotonic() - started
    turn = turn_length()
    assert frame(page)["seq"] == turn  # stopped on the second user message
    assert "turn boundary" in page.locator("#play-status").inner_text()
    assert elapsed >= 0.9 * turn / 10  # 10 steps a second, never faster
    assert query(page)["step"] == [str(turn)]

    # At 1x the same player moves about one step a second.
    page.select_option("#speed", "1")
    wait_until(page, "new URLSearchParams(location.search).get('speed') === '1'")
    page.keyboard.press(" ")
    page.wait_for_timeout(2500)
    page.keyboard.press(" ")
    settle(page)  # a frame asked for just before the pause still lands
    advanced = frame(page)["seq"] - turn
    assert 1 <= advanced <= 3
    page.wait_for_timeout(1200)
    assert frame(page)["seq"] - turn == advanced  # paused means paused
    watch.assert_clean()

    # A frame that fails while playing stops playback and says so (not a Pause button that
    # waits forever); the page's alert says what failed. (The console reports the 500s.)
    shown = frame(page)["seq"]
    page.route(f"**/sessions/{talk.pk}/?**", lambda route: route.fulfill(status=500, body="boom"))
    page.select_option("#speed", "10")  # (the change's own frame fails too: stopped, not playing)
    page.keyboard.press(" ")
    page.wait_for_selector('#play[aria-pressed="false"]', timeout=10_000)
    wait_until(page, "document.getElementById('play-status').textContent.startsWith('Stopped: the next event')")
    assert page.locator("#request-error").is_visible() and frame(page)["seq"] == shown
    page.unroute(f"**/sessions/{talk.pk}/?**")
    # The console's report of those 500s is expected here; nothing else may be there.
    expected = [e for e in watch.errors if "500" in e]
    assert expected and len(expected) == len(watch.errors), watch.errors
    watch.errors.clear()

    # A frame refused while playing (the session gone meanwhile: a 404 whose reason is swapped in)
    # stops playback too.
    page.route(f"**/sessions/{talk.pk}/?**", lambda route: route.fulfill(
        status=404, content_type="text/html", body='<p id="refusal" class="error" role="alert">gone</p>'))  # fmt: skip
    page.keyboard.press(" ")
    page.wait_for_selector('#play[aria-pressed="false"]', timeout=10_000)
    wait_until(page, "document.getElementById('play-status').textContent.startsWith('Stopped: the next event')")
    # Nothing is left to step through: the controls are off and say so (they had stayed on and
    # every later press went nowhere, without a word).
    assert "can no longer be shown (HTTP 404" in page.inner_text("#play-status")
    assert page.locator("#play").is_disabled() and page.locator("#speed").is_disabled()
    page.unroute(f"**/sessions/{talk.pk}/?**")
    watch.errors[:] = [e for e in watch.errors if "404" not in e]  # the console reports the refused frame


def test_recorded_pace_follows_the_real_gaps(watched, analyst, talk):
    page, watch = watched
    # Events are one second apart: at 5x in recorded time each step takes 200 ms.
    log_in(page, f"/sessions/{talk.pk}/?step=0&speed=5&pace=recorded")
    started = time.monotonic()
    page.click("#play")
    page.wait_for_selector('#play[aria-pressed="false"]', timeout=20_000)
    elapsed = time.monotonic() - started
    assert frame(page)["seq"] == turn_length()
    assert elapsed >= 0.9 * turn_length() * 0.2
    assert "behind" not in page.inner_text("#play-status")
    # Each event slower to load (400 ms) than its recorded gap at 5x (200 ms): the player says it
    # is behind the recording (it had claimed "in recorded time" while running at half of it).
    said = []
    page.expose_function("noteStatus", lambda text: said.append(text))
    page.evaluate("new MutationObserver(() => noteStatus(document.getElementById('play-status').textContent))"
                  ".observe(document.getElementById('play-status'), {childList: true, characterData: true, subtree: true})")  # fmt: skip

    def slowly(route):
        time.sleep(0.4)
        route.continue_()

    page.route(f"**/sessions/{talk.pk}/?**", slowly)
    page.click("#start")
    settle(page)
    page.click("#play")
    page.wait_for_selector('#play[aria-pressed="false"]', timeout=20_000)
    page.unroute(f"**/sessions/{talk.pk}/?**")
    assert any("Playing in recorded time at 5× (behind: each event takes longer" in text for text in said), said
    # A faster speed picked within a gap whose frame came at once is not "behind": the frame's own
    # load time counts, not the time since it was asked for (a review's find). At 2x, whose gaps
    # (500 ms) a frame meets even on a busy machine, where 5x's (200 ms) it may not.
    said.clear()
    page.click("#start")
    settle(page)
    page.select_option("#speed", "1")
    page.click("#play")
    time.sleep(0.7)  # inside the first recorded gap (1 s at 1x)
    page.select_option("#speed", "2")
    time.sleep(0.8)
    page.click("#play")
    assert any("Playing in recorded time at 2×" in text for text in said), said
    assert not any("behind" in text for text in said), said
    watch.assert_clean()


def test_scrub_filter_jump_to_error_and_reload_the_deep_link(watched, analyst, talk):
    page, watch = watched
    log_in(page, f"/sessions/{talk.pk}/")
    kinds = dict(Event.objects.filter(session=talk).values_list("seq", "kind"))
    before = history_length(page)

    # Click on the scrubber: a jump that replaces history.
    track = page.locator("#scrubber-track").bounding_box()
    page.mouse.click(track["x"] + track["width"] * 0.5, track["y"] + track["height"] / 2)
    wait_until(page, "JSON.parse(document.getElementById('frame-data').textContent).seq > 0")
    seq = frame(page)["seq"]
    assert abs(seq - talk.event_count / 2) <= 2
    assert query(page)["step"] == [str(seq)] and history_length(page) == before

    # Drag it: the step follows the pointer.
    page.mouse.move(track["x"] + track["width"] * 0.1, track["y"] + 10)
    page.mouse.down()
    page.mouse.move(track["x"] + track["width"] * 0.9, track["y"] + 10, steps=12)
    page.mouse.up()
    wait_until(page, "seq => JSON.parse(document.getElementById('frame-data').textContent).seq > seq", seq)
    settle(page)
    dragged = frame(page)["seq"]
    assert abs(dragged - talk.event_count * 0.9) <= 2

    # Home, then keyboard steps.
    page.keyboard.press("Home")
    wait_for_seq(page, 0)
    page.keyboard.press("ArrowRight")
    wait_for_seq(page, 1)
    page.keyboard.press("ArrowRight")
    wait_for_seq(page, 2)
    page.keyboard.press("ArrowLeft")
    wait_for_seq(page, 1)
    totals = page.locator("#context-panel .context-totals").inner_text()

    # Filter out the LLM events: pushes history, hides them, keeps the context numbers.
    page.uncheck('#filters input[value="llm_call"]')
    wait_until(page, "new URLSearchParams(location.search).getAll('types').length > 0")
    wait_until(page, "!document.querySelector('#step-list .kind-llm_call')")
    assert history_length(page) == before + 1
    assert "llm_call" not in query(page)["types"]
    assert page.locator("#context-panel .context-totals").inner_text() == totals
    assert page.locator("#step-list .kind-llm_response").count() > 0

    # e: next error (the failing tool call of the second turn), E: back.
    page.keyboard.press("e")
    first_error = turn_length() + 10
    wait_for_seq(page, first_error)
    assert kinds[first_error] == "tool_error"
    page.keyboard.press("e")
    wait_for_seq(page, first_error + 1)  # the failed step
    page.keyboard.press("e")  # there is no later one: said, and the player stays
    wait_until(page, "document.getElementById('play-status').textContent === 'No later error.'")
    assert frame(page)["seq"] == first_error + 1
    page.keyboard.press("E")
    wait_for_seq(page, first_error)

    # Reload the deep link: same step, same filter.
    page.reload()
    page.wait_for_selector("#step-list")
    assert frame(page)["seq"] == first_error
    assert not page.locator('#filters input[value="llm_call"]').is_checked()
    assert page.locator("#step-list .kind-llm_call").count() == 0
    assert (
        page.locator('#step-list [aria-current="step"]').inner_text().startswith(f"#{first_error + 1}")
    )  # shown 1-based

    # Back undoes the filter (a history restore asks the server for the whole page).
    page.go_back()
    wait_until(page, "new URLSearchParams(location.search).getAll('types').length === 0")
    page.wait_for_selector("#step-list .kind-llm_call")

    # "/" focuses the search box; a search lists matches that jump the player.
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "search-q"
    page.keyboard.type("answer 2.3")
    page.keyboard.press("Enter")
    match = page.locator("#search-results a[data-seq]").first
    match.wait_for()
    target = int(match.get_attribute("data-seq"))
    match.click()
    wait_for_seq(page, target)
    watch.assert_clean()


def test_checkpoint_and_chart_click_jump_the_player(watched, analyst, talk):
    page, watch = watched
    log_in(page, f"/sessions/{talk.pk}/?step=7")
    page.fill("#checkpoint-name", "before the failure")
    page.click("#checkpoint-form button[type=submit]")
    link = page.locator("#checkpoints a", has_text="before the failure")
    link.wait_for()
    assert link.get_attribute("data-seq") == "7"
    assert page.locator("#scrubber-overview path.checkpoint-mark").count() == 1
    page.keyboard.press("End")
    wait_for_seq(page, talk.event_count - 1)
    link.click()
    wait_for_seq(page, 7)

    page.locator("#charts").scroll_into_view_if_needed()
    wait_until(page, "document.querySelectorAll('#charts .chart[data-ready=true]').length === 4", timeout=30)
    point = page.locator("#chart-reward .scatterlayer .trace").first.locator("path.point").nth(1)
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    box = point.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    second_step = Event.objects.get(session=talk, step_pos=1).seq
    wait_for_seq(page, second_step)
    watch.assert_clean()


def _while_streaming(write):
    """A write of the test's while the live server streams. With SQLite in memory the stream's
    polls run on the test's own connection (conftest.OneRequestAtATime), outside the server's
    lock, and SQLite refuses a write that meets one of them mid-statement ("database table is
    locked"; a fresh-clone run hit it once). The write is undone by its transaction and tried
    again: what it writes is the same."""
    for attempt in range(100):
        try:
            return write()
        except OperationalError as exc:
            if "locked" not in str(exc) or attempt == 99:
                raise
            time.sleep(0.02)


def test_live_session_follows_new_events_over_the_tail(watched, analyst, transactional_db):
    page, watch = watched
    first_turn = conversation_events(turns=2)
    session = build_session(first_turn[: turn_length()], finish=False, source_session_id="live-run")
    log_in(page, f"/sessions/{session.pk}/")
    assert page.locator("#player").get_attribute("data-live") == "true"
    assert frame(page)["seq"] == turn_length() - 1
    deadline = time.monotonic() + 10
    while not any("/tail/?after=" in url for url in watch.requests):
        assert time.monotonic() < deadline, "the player never opened the tail stream"
        page.wait_for_timeout(50)
    _while_streaming(lambda: append_events(session=session, events=first_turn[turn_length() :]))
    newest = 2 * turn_length() - 1
    wait_for_seq(page, newest)
    assert page.locator("#live-count").inner_text() == str(newest + 1)
    assert page.locator('#step-list [aria-current="step"]').inner_text().startswith(f"#{newest + 1}")
    _while_streaming(lambda: finish_session(session=session))
    # The tail's end frame turns the header's Live badges into the status the session ended in.
    wait_until(page, "document.getElementById('session-status').textContent === 'Completed'")
    assert "status-completed" in page.locator("#session-status").get_attribute("class")
    assert page.locator("#live-badge").count() == 0
    # The chain badge asks again until the verification that follows the end has run (a worker's,
    # run here by the test): it said "not verified yet" until a reload (walkthrough).
    wait_until(page, "document.getElementById('chain-badge').hasAttribute('hx-trigger')")
    assert "not verified yet" in page.locator("#chain-badge").inner_text()
    _while_streaming(lambda: verify_session(session=Session.objects.get(pk=session.pk)))
    wait_until(page, "document.getElementById('chain-badge').textContent.includes('verified at')", timeout=20)
    assert not page.locator("#chain-badge").get_attribute("hx-trigger")  # and stops asking
    page.goto("/sessions/")  # leaving closes the stream
    watch.assert_clean()


def test_live_player_follows_on_after_the_tail_reaches_its_time_limit(watched, analyst, settings, transactional_db):
    page, watch = watched
    settings.TAIL_MAX_SECONDS = 1  # the stream ends after a second, the session goes on
    first_turn = conversation_events(turns=2)
    session = build_session(first_turn[: turn_length()], finish=False, source_session_id="long-live-run")
    log_in(page, f"/sessions/{session.pk}/")
    deadline = time.monotonic() + 10
    while sum("/tail/?after=" in url for url in watch.requests) < 2:
        assert time.monotonic() < deadline, "the player did not open the tail again after its time limit"
        page.wait_for_timeout(50)
    assert "ended" not in page.locator("#play-status").inner_text()
    # Written while the tail reads (SQLite's table lock: see _while_streaming).
    _while_streaming(lambda: append_events(session=session, events=first_turn[turn_length() :]))
    wait_for_seq(page, 2 * turn_length() - 1)
    assert page.locator("#live-badge").count() == 1
    _while_streaming(lambda: finish_session(session=session))
    page.goto("/sessions/")  # leaving closes the stream
    watch.assert_clean()


def test_hostile_payloads_show_as_text_and_run_nothing(watched, analyst, transactional_db):
    page, watch = watched
    session = build_session(hostile_events(), source_session_id="hostile", task=XSS_SCRIPT)
    log_in(page, f"/sessions/{session.pk}/?step=0")
    for seq in range(session.event_count):
        if seq:
            page.keyboard.press("ArrowRight")
            wait_for_seq(page, seq)
        text = page.locator("body").inner_text()
        assert "window.__pwned" in text
        assert page.evaluate("window.__pwned") is None
        assert (
            page.locator(
                "#step-list img, #context-panel img, #step-list script:not([type]), #context-panel script:not([type])"
            ).count()
            == 0
        )
    panel = page.locator("#context-panel").inner_text()
    assert XSS_SCRIPT in panel and XSS_IMG in panel
    page.goto("/sessions/")
    assert XSS_SCRIPT in page.locator("#session-table").inner_text()
    assert page.evaluate("window.__pwned") is None
    watch.assert_clean()


def test_diff_view_shows_the_divergence_and_scrubs_both_sides(watched, analyst, tmp_path, transactional_db):
    page, watch = watched
    record_variant(tmp_path / "a.jsonl", run_id="base", steps=8)
    record_variant(tmp_path / "b.jsonl", run_id="changed", steps=9, change_at=3)
    a, b = import_one(tmp_path / "a.jsonl"), import_one(tmp_path / "b.jsonl")

    log_in(page, "/sessions/")
    page.check(f'input[name="a"][value="{a.pk}"]')
    page.check(f'input[name="b"][value="{b.pk}"]')
    page.click(".compare-button")
    page.wait_for_selector("#divergence")
    assert "First divergence at step 4: Different code" in page.locator("#divergence").inner_text()
    row = page.locator("tr.divergence-row")
    assert row.get_attribute("id") == "diff-step-3"
    assert "Different code" in row.inner_text()
    deltas = page.locator("table.deltas").inner_text()
    assert re.search(r"Steps\s+8\s+9\s+1", deltas)

    # The page's scripts (htmx among them, deferred) have run: an input before then is heard by
    # no one, and on a loaded CI machine the selector above can be seen while the page parses.
    page.wait_for_load_state("load")
    page.locator("#diff-offset").fill("5")
    wait_until(page, "document.querySelector('#diff-rows tbody tr').id === 'diff-step-5'")
    assert query(page)["offset"] == ["5"]

    # Each side links into its own player at that step.
    link = page.locator("#diff-step-5 td.side-b a.open-player")
    link.click()
    page.wait_for_selector("#step-list")
    assert frame(page)["seq"] == Event.objects.get(session=b, step_pos=5).seq
    watch.assert_clean()


def test_screenshots_of_the_player_and_the_diff_view(watched, analyst, tmp_path, transactional_db):
    """Run with REPLAY_SCREENSHOTS=1 to refresh docs/screenshots/ (README images)."""
    page, watch = watched
    record_full_session(tmp_path / "full.jsonl", run_id="run_screenshot", steps=8, large_output_at=None)
    session = import_one(tmp_path / "full.jsonl")
    record_variant(tmp_path / "a.jsonl", run_id="baseline", steps=10)
    record_variant(tmp_path / "b.jsonl", run_id="candidate", steps=12, change_at=4)
    a, b = import_one(tmp_path / "a.jsonl"), import_one(tmp_path / "b.jsonl")
    seq = Event.objects.get(session=session, step_pos=3).seq
    # As a team sees it: verified by the worker, a finding left on the step.
    verify_session(session=session)
    comments.create_comment(actor=Actor(user=analyst), session=session, seq=seq,
                            body="The cumulative reward **drops** here: the retry counted twice?")  # fmt: skip

    log_in(page, f"/sessions/{session.pk}/?step={seq}")
    assert page.locator("#chain-badge").inner_text().startswith("verified at")
    page.locator("#comment-threads strong", has_text="drops").wait_for()
    page.locator("#charts").scroll_into_view_if_needed()
    wait_until(page, "document.querySelectorAll('#charts .chart[data-ready=true]').length === 4", timeout=30)
    page.evaluate("window.scrollTo(0, 0)")
    player = save_screenshot(page, "player.png", tmp_path)
    page.goto(f"/compare/?a={a.pk}&b={b.pk}")
    page.wait_for_selector("tr.divergence-row")
    diff = save_screenshot(page, "diff.png", tmp_path)
    assert player.stat().st_size > 20_000 and diff.stat().st_size > 20_000
    watch.assert_clean()


def test_a_swap_elsewhere_before_a_panel_settles_leaves_the_focus_in_the_panel(watched, analyst, talk):
    # replay.js kept one record of where the focus was: another swap in between (the chain
    # badge asking again) cleared it, and the keyboard user was left on the page's top.
    page, watch = watched
    log_in(page, f"/sessions/{talk.pk}/?step=7")
    settle(page)
    page.evaluate("htmx.config.defaultSettleDelay = 800")  # the gap a slow machine may leave
    page.fill("#comment-body", "focus, please")
    page.focus("#comment-form button[type=submit]")
    page.keyboard.press("Enter")
    page.locator("#comment-threads article.thread").wait_for()
    page.evaluate("""() => htmx.ajax('GET', document.getElementById('chain-badge').getAttribute('data-badge-url'),
                                     {target: '#chain-badge', swap: 'outerHTML'})""")
    wait_for_settle(page)
    assert page.evaluate("document.activeElement.closest('#comment-threads') !== null")
    watch.assert_clean()


def test_comment_at_a_step_marks_the_scrubber_and_its_permalink_reopens_it(watched, analyst, talk):
    page, watch = watched
    log_in(page, f"/sessions/{talk.pk}/?step=7")
    page.fill("#comment-body", "**why** did this fail?")
    page.click("#comment-form button[type=submit]")
    thread = page.locator("#comment-threads article.thread")
    thread.wait_for()
    assert thread.locator(".comment-body strong").inner_text() == "why"
    assert page.locator("#comment-marks path.comment-mark").count() == 1
    # The legend's swatches tell the marks apart: the comment's is the mark's own colour, and no
    # two swatches are close (CIE76 distance; about 2.3 is the least an eye tells apart side by
    # side, small squares on a scrubber need far more).
    swatches = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.legend li')]
        .map(li => [li.className, getComputedStyle(li, '::before').backgroundColor]))""")
    mark = page.evaluate("getComputedStyle(document.querySelector('path.comment-mark')).fill")
    assert swatches["comment-mark"] == mark and len(swatches) >= 5, swatches
    colours = {name: lab(rgb) for name, rgb in swatches.items() if rgb != "rgba(0, 0, 0, 0)"}
    closest = min(((math.dist(colours[a], colours[b]), a, b) for a, b in itertools.combinations(colours, 2)))
    assert closest[0] >= 25, closest
    permalink = page.locator("#discussion a", has_text="event #8")  # seq 7, as people count
    assert permalink.count() == 1
    # The click left the keyboard on the form's control, as a key press would (replay.js):
    # Escape hands it back to the player. Stepping away leaves the thread behind; the permalink
    # brings the player back to it.
    wait_until(page, "document.activeElement && document.activeElement.closest('#comment-threads') !== null")
    page.keyboard.press("Escape")
    page.keyboard.press("End")
    wait_for_seq(page, talk.event_count - 1)
    assert page.locator("#comment-threads article.thread").count() == 0
    permalink.click()
    page.wait_for_load_state()
    wait_for_seq(page, 7)
    anchor = thread.get_attribute("id")
    wait_until(page, "id => document.activeElement && document.activeElement.id === id", anchor)
    page.click("[data-copy-link]")
    wait_until(page, "document.querySelector('.copy-status').textContent !== ''")
    watch.assert_clean()


def test_api_docs_render_the_operations_from_our_own_files(watched, analyst, transactional_db):
    page, watch = watched
    log_in(page)  # signed in, so "Try it out" would send the login cookie (and the CSRF token)
    page.goto("/api/docs")
    # Swagger UI (vendored, started by a static script under the CSP) lists every operation.
    page.wait_for_selector(".opblock-summary-path", timeout=20_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any(path.replace("\u200b", "") == "/api/sessions/{session_id}/replay" for path in paths)
    assert page.locator(".opblock").count() >= 40
    watch.assert_clean()
