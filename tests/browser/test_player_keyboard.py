"""The player by keyboard in real headless Chromium (issue 19's rough edges): a focused control
keeps its keys (Space ticks a checkbox or presses the button, never starts playback behind it),
pausing says so, the scrubber moves by arrows, checkpoints save the shown step and ask before
replacing a name, rename and delete from the panel, Tab reaches every control with a visible
focus ring, and a filter that hides the shown event says so and shows it again on request."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from sessions_app.models import Checkpoint, Session

from ..builders_dashboard import build_session, conversation_events
from .conftest import log_in
from .test_dashboard import frame, settle, wait_for_seq, wait_for_settle, wait_until

pytestmark = pytest.mark.browser

# What a keyboard user can reach in the player, and must: every enabled control in these.
PLAYER_REGIONS = "#controls, #scrubber, #filters, #search-form, #checkpoint-form, #checkpoints, #step-list"
REACHABLE = """regions => {
  const selector = 'a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), select, textarea, summary, [tabindex="0"]';
  const found = [];
  for (const region of document.querySelectorAll(regions)) {
    const inside = region.matches(selector) ? [region] : [];
    for (const el of inside.concat([...region.querySelectorAll(selector)])) {
      const closed = el.closest('details:not([open])');
      if (closed && el !== closed.querySelector('summary')) continue;
      if (el.getClientRects().length === 0) continue;  // not rendered (a kind a live session has not seen)
      found.push(el);
    }
  }
  found.forEach((el, i) => el.setAttribute('data-reach', String(i)));
  return found.length;
}"""
FOCUSED = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const style = getComputedStyle(el);
  // Under the sticky controls bar: its top edge above the bar's bottom while the bar is stuck.
  const bar = document.getElementById('controls');
  const box = bar ? bar.getBoundingClientRect() : null, mine = el.getBoundingClientRect();
  const stuck = box && box.top <= 1;
  const under = Boolean(stuck && !bar.contains(el) && mine.top < box.bottom - 1 && mine.bottom > box.top);
  return {reach: el.getAttribute('data-reach'), id: el.id, tag: el.tagName, text: (el.textContent || '').trim().slice(0, 40),
          visible: el.matches(':focus-visible'), outline: style.outlineStyle, width: parseFloat(style.outlineWidth) || 0,
          under_bar: under};
}"""


def play_status(page: Page) -> str:
    return page.locator("#play-status").inner_text()


@pytest.fixture
def talk(transactional_db) -> Session:
    return build_session(conversation_events(turns=3), source_session_id="talk", task="answer three questions")


def test_a_keyboard_user_drives_the_player_without_surprises(watched, analyst, talk):
    page, watch = watched
    log_in(page, f"/sessions/{talk.pk}/?step=0")
    page.wait_for_selector("#step-list")

    # The first Tab offers a way past the top bar and the downloads to the timeline.
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to the player"
    page.keyboard.press("Enter")
    wait_until(page, "document.activeElement.id === 'scrubber'")

    # Space on a focused checkbox ticks the checkbox (the filter applies) and plays nothing.
    box = page.locator('#filters input[value="llm_response"]')
    box.focus()
    page.keyboard.press(" ")
    wait_until(page, "new URLSearchParams(location.search).getAll('types').length > 0")
    assert not box.is_checked() and page.locator("#play").get_attribute("aria-pressed") == "false"
    assert page.evaluate("document.activeElement.value") == "llm_response"  # the focus stayed
    page.keyboard.press(" ")
    wait_until(page, "new URLSearchParams(location.search).getAll('types').length === 0")
    settle(page)
    assert box.is_checked() and page.locator("#play").get_attribute("aria-pressed") == "false"
    assert frame(page)["seq"] == 0 and play_status(page) == ""

    # Space on the focused Play button presses it once: playing, and again: paused, saying so.
    page.locator("#play").focus()
    page.keyboard.press(" ")
    page.wait_for_selector('#play[aria-pressed="true"]')
    page.wait_for_timeout(300)
    assert page.locator("#play").get_attribute("aria-pressed") == "true"  # not toggled twice
    assert "Playing" in play_status(page)
    page.keyboard.press(" ")
    page.wait_for_selector('#play[aria-pressed="false"]')
    settle(page)
    assert "Playing" not in play_status(page) and play_status(page) == "Paused."
    assert page.evaluate("document.activeElement.id") == "play"

    # The scrubber is a slider: arrows, Home and End move the player while it has the focus.
    page.keyboard.press("Escape")  # hands the keyboard back to the player
    assert page.evaluate("document.activeElement === document.body")
    page.locator("#scrubber").focus()
    page.keyboard.press("Home")
    wait_for_seq(page, 0)
    page.keyboard.press("ArrowRight")
    wait_for_seq(page, 1)
    page.keyboard.press("ArrowRight")
    wait_for_seq(page, 2)
    page.keyboard.press("PageDown")
    wait_for_seq(page, 12)
    page.keyboard.press("ArrowLeft")
    wait_for_seq(page, 11)
    # The slider's value text follows the frame once htmx has settled it (player.js, afterSettle),
    # a moment after the frame's data arrived: waited for, as a screen reader would hear it.
    wait_until(
        page, "text => document.getElementById('scrubber').getAttribute('aria-valuetext') === text",
        f"event 12 of {talk.event_count}",
    )  # fmt: skip
    assert page.locator("#step-status").inner_text().startswith(f"Event #12 of {talk.event_count}")

    # A checkpoint saves the shown step (seq 11), not the one the page was loaded at (0).
    page.fill("#checkpoint-name", "look here")
    page.keyboard.press("Enter")
    link = page.locator("#checkpoints a[data-seq]", has_text="look here")
    link.wait_for()
    assert link.get_attribute("data-seq") == "11"
    assert Checkpoint.objects.get(session=talk, name="look here").seq == 11
    assert page.locator("#checkpoints li", has_text="look here").locator(".muted").first.inner_text().startswith("#12")

    # The same name at another step asks first; nothing moves until the user says so.
    page.locator("#scrubber").focus()
    page.keyboard.press("ArrowRight")
    wait_for_seq(page, 12)
    page.fill("#checkpoint-name", "look here")
    page.click("#checkpoint-form button[type=submit]")
    question = page.locator("#checkpoint-replace")
    question.wait_for()
    assert "A checkpoint named “look here” exists at #12: replace it?" in question.inner_text()
    assert Checkpoint.objects.get(session=talk, name="look here").seq == 11
    # htmx focuses the autofocus button when it settles the swap, a moment after the question is
    # in the page: waited for, as the keyboard user meets it.
    wait_until(page, "document.activeElement.textContent.trim().startsWith('Replace it')")
    # The question comes with its honest status (409), which Chromium logs as a failed load:
    # that entry, and nothing else, is expected.
    assert watch.errors == ["Failed to load resource: the server responded with a status of 409 (Conflict)"]
    watch.errors.clear()
    page.keyboard.press("Enter")
    page.wait_for_selector("#checkpoint-replace", state="detached")
    wait_until(page, "document.querySelector('#checkpoints a[data-seq]').getAttribute('data-seq') === '12'")
    assert Checkpoint.objects.get(session=talk, name="look here").seq == 12

    # Rename, then delete, from the panel (its forms are htmx's once the swap settled).
    wait_for_settle(page)
    row = page.locator("#checkpoints li", has_text="look here")
    row.locator("summary").click()
    row.locator('input[name="name"]').fill("the retry")
    row.locator("button", has_text="Rename").click()
    page.locator("#checkpoints a[data-seq]", has_text="the retry").wait_for()
    assert list(Checkpoint.objects.filter(session=talk).values_list("name", flat=True)) == ["the retry"]
    wait_for_settle(page)
    row = page.locator("#checkpoints li", has_text="the retry")
    row.locator("summary").click()
    row.locator("button", has_text="Delete").click()
    page.locator("#checkpoints li", has_text="No checkpoints yet.").wait_for()
    assert not Checkpoint.objects.filter(session=talk).exists()
    assert page.locator("#scrubber-overview path.checkpoint-mark").count() == 0

    # A button that turns disabled under the focus (the last event reached) hands it to its
    # counterpart, never to the page (walkthrough: the next Tab jumped into the step list).
    page.locator("#scrubber").focus()
    page.keyboard.press("End")
    page.keyboard.press("ArrowLeft")
    wait_for_seq(page, talk.event_count - 2)
    page.locator("#step-forward").focus()
    assert page.evaluate("document.activeElement.id") == "step-forward"
    page.keyboard.press("Enter")
    wait_for_seq(page, talk.event_count - 1)
    wait_until(page, "document.activeElement.id === 'step-back'")
    assert page.locator("#step-forward").is_disabled()

    # An event clicked with the mouse does not keep the focus: the arrows go on from it
    # (walkthrough: they did nothing after a click on a row or a search result).
    row = page.locator("#step-list a[data-seq]").first
    clicked = int(row.get_attribute("data-seq"))
    row.click()
    wait_for_seq(page, clicked)
    settle(page)
    wait_until(page, "document.activeElement === document.body")
    page.keyboard.press("ArrowRight")
    wait_for_seq(page, clicked + 1)
    # A search sent with Enter is one history entry, however many of its events asked for it.
    before = page.evaluate("history.length")
    page.fill("#search-q", "answer")
    page.keyboard.press("Enter")
    page.locator("#search-results a[data-seq]").first.wait_for()
    settle(page)
    page.locator("#search-form button[type=submit]").click()  # the same search again
    settle(page)
    assert page.evaluate("history.length") == before + 1
    page.locator("#search-results a[data-seq]").first.click()
    settle(page)
    wait_until(page, "document.activeElement === document.body")
    shown = frame(page)["seq"]
    page.keyboard.press("ArrowRight")
    wait_for_seq(page, shown + 1)
    watch.assert_clean()


def test_tab_reaches_every_control_with_a_visible_focus_ring(watched, analyst, talk):
    page, watch = watched
    log_in(page, f"/sessions/{talk.pk}/?step=14")
    page.wait_for_selector("#step-list")
    expected = page.evaluate(REACHABLE, PLAYER_REGIONS)
    assert expected > 40  # buttons, selects, the scrubber, every kind, search, checkpoints, the events
    reached: dict[str, dict] = {}
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for _ in range(600):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        if focused and focused["reach"] is not None:
            reached[focused["reach"]] = focused
        if len(reached) == expected:
            break
    missing = page.evaluate(
        "n => [...document.querySelectorAll('[data-reach]')].filter(el => !n.includes(el.getAttribute('data-reach')))"
        ".map(el => el.id || el.tagName + ' ' + (el.textContent || '').trim().slice(0, 30))",
        list(reached),
    )
    assert missing == [], f"not reachable by Tab: {missing}"
    for item in reached.values():
        assert item["visible"] and item["outline"] != "none" and item["width"] >= 2, item
        assert not item["under_bar"], f"focused under the sticky controls: {item}"
    for control in ("scrubber", "play", "speed", "pace", "search-q", "checkpoint-name"):
        assert any(item["id"] == control for item in reached.values()), control
    # Tabbing moved nothing.
    assert frame(page)["seq"] == 14
    # On a phone the controls wrap to three lines: back through the events, none of them takes
    # the focus hidden under them (WCAG 2.4.11; the walkthrough counted fifteen that did).
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#step-list a, #step-list [tabindex='0']").last.focus()
    hidden = []
    for _ in range(30):
        page.keyboard.press("Shift+Tab")
        focused = page.evaluate(FOCUSED)
        if focused and focused["under_bar"]:
            hidden.append(focused)
    assert hidden == [], hidden
    watch.assert_clean()


def test_a_filter_that_hides_the_shown_event_offers_to_show_it(watched, analyst, talk):
    page, watch = watched
    log_in(page, f"/sessions/{talk.pk}/?step=0")  # seq 0: the first user message
    page.wait_for_selector("#step-list")
    page.uncheck('#filters input[value="user_message"]')
    notice = page.locator("#step-list .filter-notice")
    notice.wait_for()
    assert notice.inner_text() == "Event #1 (user_message) is hidden by the filter — show it"
    assert page.locator('#step-list [aria-current="step"]').count() == 0
    notice.locator("a", has_text="show it").click()
    page.wait_for_selector("#step-list .filter-notice", state="detached")
    assert page.locator('#filters input[value="user_message"]').is_checked()
    assert page.locator('#step-list [aria-current="step"]').inner_text().startswith("#1")
    wait_until(page, "new URLSearchParams(location.search).getAll('types').length === 0")
    assert frame(page)["seq"] == 0
    watch.assert_clean()


def test_quick_arrow_presses_each_move_one_step(watched, analyst, talk):
    page, _ = watched
    log_in(page, f"/sessions/{talk.pk}/?step=0")
    page.wait_for_selector("#step-list")
    seqs = [0]
    for _ in range(4):  # the visible events after 0, read by stepping one at a time
        page.keyboard.press("ArrowRight")
        wait_until(page, "s => JSON.parse(document.getElementById('frame-data').textContent).seq !== s", seqs[-1])
        seqs.append(frame(page)["seq"])
    page.keyboard.press("Home")
    wait_for_seq(page, 0)
    settle(page)
    # Three presses in one go, all before the first answer: three steps, not one.
    page.evaluate("""() => { for (let i = 0; i < 3; i++) {
        document.body.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true, cancelable: true})); } }""")
    wait_for_seq(page, seqs[3])
    settle(page)
    page.wait_for_timeout(300)
    assert frame(page)["seq"] == seqs[3]
    # And back: two quick presses, two steps.
    page.evaluate("""() => { for (let i = 0; i < 2; i++) {
        document.body.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowLeft', bubbles: true, cancelable: true})); } }""")
    wait_for_seq(page, seqs[1])
    settle(page)
    page.wait_for_timeout(300)
    assert frame(page)["seq"] == seqs[1]


ACTIVE = "(want) => { const el = document.activeElement; return el !== document.body && (el.textContent || '').trim() === want }"


def test_a_control_a_swap_replaces_keeps_the_focus(watched, analyst, talk):
    """The walkthrough's keyboard user lost the focus to the page after a verify or a page of
    the audit log: each answers with its panel whole, the pressed control with it."""
    from sessions_app import audit

    page, _ = watched
    log_in(page, f"/sessions/{talk.pk}/?step=0")
    badge = page.locator("#chain-badge")
    badge.get_by_role("button", name="verify").focus()
    page.keyboard.press("Enter")
    badge.locator(".chain-ok").wait_for()
    wait_until(page, ACTIVE, "verify")
    # A thread's resolve answers with the threads whole, where it is now "reopen": the focus goes
    # to that one control of the same form, and back again (a walkthrough found it on the panel).
    from sessions_app import comments
    from sessions_app.access import Actor

    comments.create_comment(actor=Actor(user=analyst), session=talk, seq=0, body="first look")
    page.reload()
    page.locator("#comment-threads article.thread").wait_for()
    page.locator("#comment-threads").get_by_role("button", name="resolve").focus()
    page.keyboard.press("Enter")
    page.locator("#comment-threads article.thread.resolved").wait_for()
    wait_until(page, ACTIVE, "reopen")
    page.keyboard.press("Enter")
    page.locator("#comment-threads article.thread:not(.resolved)").wait_for()
    wait_until(page, ACTIVE, "resolve")
    for n in range(120):  # three pages: the second has an Older link too
        audit.record(action="session.export", actor="bob", project=talk.project, target=f"session:{n}")
    page.goto(f"/projects/{talk.project.slug}/audit/")
    page.get_by_role("link", name="Older").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**before=*")
    wait_until(page, ACTIVE, "Older")
    page.keyboard.press("Shift+Tab")  # from there, on by keyboard: Newer is just before it
    assert page.evaluate(ACTIVE, "Newer")
