"""A guided tour in real headless Chromium: a maintainer builds a three-stop tour across two
sessions from the player ("add this step to a tour…" at steps they stepped to, never the step the
page was loaded at), reorders it on the tour's page, then plays it from the Learn page: "play to
next stop" plays to stop 2 and pauses there with its narration, and the next-stop link opens stop 3
in the other session. axe finds nothing serious on the Learn page, the tour page or the player in
tour mode. Every page stays on our own server with no console error (conftest.Watch)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page

from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import Project, Role, Session, Tour

from ..builders_teams import member
from ..conftest import synthetic_events
from .a11y import assert_accessible
from .test_dashboard import frame, wait_for_seq, wait_for_settle, wait_until
from .test_team_journey import sign_in

pytestmark = pytest.mark.browser


@pytest.fixture
def two_runs(transactional_db) -> tuple[Session, Session]:
    """Two short sessions of one project, events 250 ms apart (playback takes moments)."""
    project = Project.objects.create(name="Acme", slug="acme")
    member("mia", project, Role.MAINTAINER)
    runs = []
    for name in ("first-run", "second-run"):
        session = create_session(project=project, source_format="canonical", meta=SessionMeta(source_session_id=name))
        append_events(session=session, events=synthetic_events(12))
        finish_session(session=session)
        runs.append(session)
    return runs[0], runs[1]


def step_forward(page: Page, times: int) -> None:
    for _ in range(times):
        seq = frame(page)["seq"]
        page.click("#step-forward")
        wait_for_seq(page, seq + 1)


def add_shown_step(page: Page, *, title: str, narration: str, new_tour: str = "") -> str:
    """Fill "add this step to a tour…" and send it; the panel's confirmation."""
    if page.locator("#tour-add").get_attribute("open") is None:
        page.click("#tour-add > summary")
    if new_tour:
        page.select_option("#tour-pick", "")
        page.fill("#tour-new-title", new_tour)
    page.fill("#tour-stop-title", title)
    page.fill("#tour-stop-narration", narration)
    page.click("#tour-stop-form button[type=submit]")
    confirmation = page.locator("#tour-panel .ok")
    confirmation.wait_for()
    return " ".join(confirmation.text_content().split())


def test_a_maintainer_builds_a_tour_from_the_player_reorders_it_and_plays_it(watched, two_runs):
    page, _ = watched
    first, second = two_runs

    # Stop 1: the first run's seq 2 (event #3 as the player counts), reached by stepping from seq 0.
    sign_in(page, "mia", f"/sessions/{first.pk}/")
    step_forward(page, 2)
    said = add_shown_step(page, title="It reads the file", narration="Watch **what** it reads.",
                          new_tour="How it fixed the bug")  # fmt: skip
    assert said.startswith("Added event #3 as stop 1 of How it fixed the bug")
    tour = Tour.objects.get()

    # Stop 2 (for now): the second run's seq 4.
    page.goto(f"/sessions/{second.pk}/")
    step_forward(page, 4)
    assert page.locator("#tour-pick option:checked").text_content() == "How it fixed the bug"
    said = add_shown_step(page, title="Another run", narration="The same tool, another *answer*.")
    assert said.startswith("Added event #5 as stop 2 of")

    # Stop 3 (for now): the first run's seq 6, jumped to from the step list.
    page.goto(f"/sessions/{first.pk}/")
    page.click('#step-list a[data-seq="6"]')
    wait_for_seq(page, 6)
    said = add_shown_step(page, title="The fix", narration="Here it **works**.")
    assert said.startswith("Added event #7 as stop 3 of")
    assert list(tour.stops.order_by("position").values_list("session_id", "seq")) == [
        (first.pk, 2), (second.pk, 4), (first.pk, 6),
    ]  # fmt: skip

    # The tour's page: move "The fix" up, so stops 1 and 2 are in the first run.
    page.click("#tour-panel .ok a >> text=How it fixed the bug")  # the confirmation's link to the tour page
    page.wait_for_url(f"**/tours/{tour.pk}/")
    # By keyboard: the focus stays on the moved stop's own button, and the change is said.
    page.focus('button[aria-label="Move stop 3 up"]')
    page.keyboard.press("Enter")
    wait_until(page, "() => document.querySelector('#stop-2 .stop-title').textContent === 'The fix'")
    titles = page.locator("#tour-stops .stop-title").all_text_contents()
    assert titles == ["It reads the file", "The fix", "Another run"]
    moved = page.locator("#stop-2").get_attribute("data-stop")
    assert page.evaluate("document.activeElement.id") == f"move-up-{moved}"
    assert page.locator("#tour-stops [role=status]").text_content() == "The stop is now stop 2."
    # Up once more: at the top it has no Up, so the keyboard goes to the stop itself, not the page.
    wait_for_settle(page)  # the focused button came with the swap: htmx's only once settled
    page.keyboard.press("Enter")
    wait_until(page, "() => document.querySelector('#stop-1 .stop-title').textContent === 'The fix'")
    wait_until(page, f"() => document.activeElement.getAttribute('data-stop') === '{moved}'")
    page.focus('button[aria-label="Move stop 1 down"]')
    page.keyboard.press("Enter")
    wait_until(page, "() => document.querySelector('#stop-2 .stop-title').textContent === 'The fix'")
    titles = page.locator("#tour-stops .stop-title").all_text_contents()
    assert titles == ["It reads the file", "The fix", "Another run"]
    # Editing a stop by keyboard: its form closes, the change is said, the stop keeps the focus.
    wait_for_settle(page)
    page.locator("#stop-2 .stop-edit summary").click()
    page.fill(f"#stop-title-{moved}", "The fix, explained")
    page.focus(f"#save-stop-{moved}")
    page.keyboard.press("Enter")
    wait_until(page, "() => document.querySelector('#stop-2 .stop-title').textContent === 'The fix, explained'")
    wait_until(page, f"() => document.activeElement.getAttribute('data-stop') === '{moved}'")
    assert page.locator("#tour-stops [role=status]").text_content() == "The stop was saved."
    assert_accessible(page, "tour page")

    # The Learn page lists it; play it from stop 1.
    page.goto("/projects/acme/learn/")
    card = page.locator(f'.tour-card[data-tour="{tour.pk}"]')
    assert "3 stops across 2 sessions" in " ".join(card.text_content().split())
    assert_accessible(page, "Learn page")
    card.locator("a.play-tour").click()
    page.wait_for_url(f"**/sessions/{first.pk}/?step=2&tour={tour.pk}&stop=1")
    wait_for_seq(page, 2)
    panel = page.locator("#tour-narration")
    assert panel.locator(".tour-stop-count").text_content() == "Stop 1 of 3"
    # The narration comes late in the page: the first Tab offers the way there.
    page.evaluate("document.activeElement && document.activeElement.blur()")
    top = "document.querySelector('main').getBoundingClientRect().top"
    before = page.evaluate(top)
    page.keyboard.press("Tab")
    skip = page.evaluate("[document.activeElement.className, document.activeElement.textContent]")
    assert skip == ["skip-link", "Skip to the tour's narration"], skip
    # Shown over the page, not in its flow: a focused link that pushed the page down gave the
    # room back on the next mousedown, and the click landed on whatever moved under the pointer.
    assert page.evaluate(top) == before
    page.keyboard.press("Enter")
    wait_until(page, "() => document.activeElement.id === 'tour-narration'")
    page.keyboard.press("Tab")  # on from the narration: its first link
    assert page.evaluate("document.activeElement.closest('#tour-narration') !== null")
    assert panel.locator(".narration strong").text_content() == "what"
    assert_accessible(page, "player in tour mode")

    # "Play to next stop" at 1×: while it plays, the button is the pause (its label and
    # aria-pressed say so), and pressing it again pauses short of the stop.
    page.focus("#tour-play-next")  # by keyboard: the button is a control like any other
    page.keyboard.press("Enter")
    wait_until(page, "() => document.getElementById('tour-play-next').getAttribute('aria-pressed') === 'true'")
    assert page.locator("#tour-play-next").text_content() == "❚❚ Pause"
    wait_for_seq(page, 3)
    page.keyboard.press("Enter")
    wait_until(page, "() => document.getElementById('play').getAttribute('aria-pressed') === 'false'")
    assert page.locator("#play-status").text_content() == "Paused."
    assert page.locator("#tour-play-next").text_content() == "▶ Play to next stop"
    assert page.evaluate("document.getElementById('tour-play-next').getAttribute('aria-pressed')") == "false"
    page.wait_for_timeout(1300)  # paused: no frame moves it on
    paused_at = frame(page)["seq"]
    assert paused_at < 6 and re.search(r"[?&]stop=1(&|$)", page.url)

    # Again at the fastest pace: it plays on and pauses at stop 2 (seq 6).
    page.select_option("#speed", "10")
    # Each frame on the way brings stop 1's panel anew: its "Back to the stop" stays hidden while
    # playing (a MutationObserver notes, at every change, whether it was shown).
    page.evaluate("""() => { window.awayShown = []; new MutationObserver(() => {
        const away = document.querySelector('#tour-narration .tour-away');
        if (away && document.getElementById('play').getAttribute('aria-pressed') === 'true')
            window.awayShown.push(away.checkVisibility());
    }).observe(document.body, {childList: true, subtree: true}); }""")
    page.focus("#tour-play-next")
    page.keyboard.press("Enter")
    wait_until(page, "() => document.querySelector('#tour-narration .tour-stop-count').textContent === 'Stop 2 of 3'")
    wait_until(page, "() => document.getElementById('play').getAttribute('aria-pressed') === 'false'")
    assert frame(page)["seq"] == 6
    assert page.locator("#play-status").text_content() == "Paused at stop 2."
    away_shown = page.evaluate("window.awayShown")
    assert away_shown and not any(away_shown), away_shown
    assert panel.locator(".tour-stop-title").text_content() == "The fix, explained"
    assert panel.locator(".narration strong").text_content() == "works"
    # The panel came anew with every frame; the keyboard is still on its button (of stop 2 now:
    # htmx focuses the new element of the focused one's id).
    assert page.evaluate("document.activeElement.id") == "tour-play-next"
    assert page.locator("#tour-play-next").text_content() == "▶ Play to next stop"
    assert re.search(rf"[?&]tour={tour.pk}(&|$)", page.url) and re.search(r"[?&]stop=2(&|$)", page.url)
    # On a phone: the narration, then the events it plays, then the sidebar (not between them).
    page.set_viewport_size({"width": 390, "height": 844})
    tops = page.evaluate("""() => ['#tour-narration', '#step-list', '#context-panel', 'aside.sidebar']
        .map((where) => document.querySelector(where).getBoundingClientRect().top)""")
    assert tops == sorted(tops), tops
    page.set_viewport_size({"width": 1440, "height": 1000})
    assert re.search(r"[?&]step=6(&|$)", page.url)
    page.wait_for_timeout(600)  # paused: it stays at the stop
    assert frame(page)["seq"] == 6

    # Leaving a stop by playing is a step in the browser's history, as its link is: Back
    # returns to stop 1 where play was pressed, not to the Learn page; Forward to stop 2.
    page.go_back()
    page.wait_for_url(re.compile(rf"/sessions/{first.pk}/\?step={paused_at}&.*stop=1"))
    wait_until(page, "() => document.querySelector('#tour-narration .tour-stop-count').textContent === 'Stop 1 of 3'")
    page.go_forward()
    page.wait_for_url(re.compile(rf"/sessions/{first.pk}/\?step=6&.*stop=2"))
    wait_until(page, "() => document.querySelector('#tour-narration .tour-stop-count').textContent === 'Stop 2 of 3'")

    # Stop 3 is in the other run: the next-stop link opens it there, at the pace chosen here.
    page.click("#tour-next")
    page.wait_for_url(f"**/sessions/{second.pk}/?step=4&tour={tour.pk}&stop=3&speed=10")
    wait_for_seq(page, 4)
    assert page.locator("#speed").input_value() == "10"
    assert page.locator("#tour-narration .tour-stop-count").text_content() == "Stop 3 of 3"
    assert "The last stop." in page.locator("#tour-narration").text_content()
    assert page.locator("#tour-play-next").count() == 0
    page.click("#tour-prev")
    page.wait_for_url(f"**/sessions/{first.pk}/?step=6&tour={tour.pk}&stop=2&speed=10")
