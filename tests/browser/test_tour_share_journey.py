"""A share link to a tour in real headless Chromium (issue 19, "Done when"): a maintainer makes it
in the Share links panel of the tour's page (the address shown once); a second, signed-out
browser opens it and lands on stop 1 of 3 in the player in tour mode, plays to stop 2 at recorded
pace ("play to next stop" pauses there), goes on to stop 3 in the tour's other session and steps
there, without the team's navigation, comments or forms, another session of the project, the
lists or the API; the maintainer revokes the link and the visitor's next reload is a 404; an
expired link is a 404 too. axe finds nothing serious on the visitor's player in tour mode.

The tour is built through the workflows (test_tour_journey.py builds one by clicking). Every page
stays on our own server: the maintainer's through conftest.Watch, the visitor's through
test_share_journey's `_visitor`, whose console may show only the 404s of the revoked link."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from sessions_app import comments, sharing, tours
from sessions_app.access import Actor
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import Project, Role, Session, ShareLink, Tour

from ..builders_teams import member
from ..conftest import synthetic_events
from .a11y import assert_accessible
from .test_dashboard import frame, wait_for_seq, wait_for_settle, wait_until
from .test_share_journey import NOT_FOUND_LOG, _visitor
from .test_team_journey import sign_in

pytestmark = pytest.mark.browser

STOP_2 = "() => document.querySelector('#tour-narration .tour-stop-count')?.textContent === 'Stop 2 of 3'"


@pytest.fixture
def shared_tour(transactional_db) -> tuple[Tour, Session, Session, Session]:
    """A three-stop tour across two short sessions (events 250 ms apart: playback at recorded
    pace takes moments): stops 1 and 2 in the first, stop 3 in the second; and a third session
    of the project that is in no stop."""
    project = Project.objects.create(name="Acme Secret Project", slug="acme")
    mia = member("mia", project, Role.MAINTAINER)
    runs = []
    for name in ("first-run", "second-run", "unrelated-run"):
        session = create_session(project=project, source_format="canonical", meta=SessionMeta(source_session_id=name))
        append_events(session=session, events=synthetic_events(12))
        finish_session(session=session)
        runs.append(session)
    first, second, unrelated = runs
    comments.create_comment(actor=Actor(user=mia), session=first, seq=2, body="TEAM-ONLY remark")
    tour = tours.create_tour(actor=Actor(user=mia), project=project, title="How it fixed the bug")
    tours.set_stops(actor=Actor(user=mia), tour=tour, stops=[
        tours.StopSpec(session=first.pk, seq=2, title="It reads the file", narration="Watch **what** it reads."),
        tours.StopSpec(session=first.pk, seq=5, title="The error", narration="Here it *fails*."),
        tours.StopSpec(session=second.pk, seq=4, title="Another run", narration="The same tool, `fixed`."),
    ])  # fmt: skip
    return tour, first, second, unrelated


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def test_a_signed_out_visitor_plays_a_shared_tour_from_stop_1_to_3_until_it_is_revoked_or_expires(
    watched, browser, live_server, shared_tour
):
    tour, first, second, unrelated = shared_tour
    page, _ = watched

    # 1. The maintainer makes a link in the Share links panel of the tour's page (default expiry).
    sign_in(page, "mia", f"/tours/{tour.pk}/")
    page.locator("#share-link-form").wait_for()
    wait_for_settle(page)  # the panel loads itself: its form is htmx's once the swap settled
    page.click("#share-link-form button[type=submit]")
    address = page.locator("#share-created-url").input_value()
    assert address.startswith(f"{live_server.url}/s/")
    link = ShareLink.objects.get()
    assert (link.tour_id, link.session_id) == (tour.pk, None)
    assert link.token_hash == ShareLink.hash_token(urlsplit(address).path.removeprefix("/s/"))
    assert timedelta(days=6, hours=23) < link.expires_at - timezone.now() <= timedelta(days=sharing.DEFAULT_DAYS)
    assert "by mia" in page.locator(f"#share-link-{link.pk}").text_content()
    page.reload()  # shown once: the panel lists the link, never its address again
    page.locator(f"#share-link-{link.pk}").wait_for()
    assert page.locator("#share-created-url").count() == 0
    assert urlsplit(address).path not in page.content()

    # 2. A second browser, signed out, opens the link: stop 1 of 3, in the player in tour mode.
    errors: list[str] = []
    context, visitor = _visitor(browser, live_server, errors)
    frames: list[str] = []  # the player's frame requests, in order
    visitor.on("request", lambda r: frames.append(r.url) if urlsplit(r.url).path.startswith("/sessions/") else None)
    try:
        visitor.goto(address)
        visitor.wait_for_url(f"**/sessions/{first.pk}/?step=2&tour={tour.pk}&stop=1")
        wait_for_seq(visitor, 2)
        narration = visitor.locator("#tour-narration")
        assert narration.locator(".tour-stop-count").text_content() == "Stop 1 of 3"
        assert narration.locator(".tour-stop-title").text_content() == "It reads the file"
        assert narration.locator(".narration strong").text_content() == "what"
        # The tour's title links to its page, which the link's visitor reads too (read-only).
        assert narration.locator(".tour-name a").get_attribute("href") == f"/tours/{tour.pk}/"
        assert "shared with you" in visitor.locator(".shared-note").text_content()
        # Nothing of the team's: no navigation, no comments, no form that writes, no panels. The
        # one form that posts is the chain badge's verify (a visitor may check what it is shown).
        for hidden in ("header.topbar nav", "header.topbar a", "#discussion", "#comment-threads", "#comment-form",
                       "#checkpoint-form", "#sign-off-form", "#share-links", "#tour-panel", "#tour-stop-form",
                       "nav.exports", "form.logout", "form[method=post]:not(#chain-badge form)",
                       "input[name=csrfmiddlewaretoken]:not(#chain-badge input)"):  # fmt: skip
            assert visitor.locator(hidden).count() == 0, hidden
        assert visitor.locator("#chain-badge form").get_attribute("action") == f"/sessions/{first.pk}/verify/"
        assert "TEAM-ONLY" not in visitor.content() and "Acme Secret Project" not in visitor.content()
        assert_accessible(visitor, "player in tour mode through a share link, signed out")

        # "Play to next stop" at recorded pace (0.25 s between events): it plays seqs 3, 4 and 5
        # and pauses at stop 2, whose frame brings its narration and puts stop=2 in the URL.
        visitor.select_option("#pace", "recorded")  # the choice is a frame request of its own
        wait_until(visitor, "() => /[?&]pace=recorded(&|$)/.test(location.search)")
        frames.clear()
        visitor.click("#tour-play-next")
        wait_until(visitor, STOP_2)
        wait_until(visitor, "() => document.getElementById('play').getAttribute('aria-pressed') === 'false'")
        assert frame(visitor)["seq"] == 5
        assert visitor.locator("#play-status").text_content() == "Paused at stop 2."
        assert "Event #6 of 12" in visitor.locator("#step-status").text_content()
        assert narration.locator(".tour-stop-title").text_content() == "The error"
        assert narration.locator(".narration em").text_content() == "fails"
        assert narration.locator("a[data-seq]").count() == 0  # at the stop: no "back to the stop"
        wait_until(visitor, "() => /[?&]stop=2(&|$)/.test(location.search)")
        assert _query(visitor.url)["step"] == ["5"] and _query(visitor.url)["tour"] == [str(tour.pk)]
        played = [_query(url)["step"][0] for url in frames if f"/sessions/{first.pk}/" in url and "step" in _query(url)]
        assert played == ["3", "4", "5"], frames

        # Stop 3 is in the other session: "play to next stop" opens it there, at the pace chosen.
        visitor.click("#tour-play-next")
        visitor.wait_for_url(f"**/sessions/{second.pk}/?step=4&tour={tour.pk}&stop=3&pace=recorded")
        wait_for_seq(visitor, 4)
        assert visitor.locator("#pace").input_value() == "recorded"
        assert narration.locator(".tour-stop-count").text_content() == "Stop 3 of 3"
        assert narration.locator(".tour-stop-title").text_content() == "Another run"
        assert narration.locator(".narration code").text_content() == "fixed"
        assert "The last stop." in narration.text_content()
        assert visitor.locator("#tour-play-next").count() == 0 and visitor.locator("#tour-next").count() == 0
        assert "second-run" in visitor.locator("h1").text_content()
        # The visitor steps there; the tour stays on (stop 3, with "back to the stop").
        for seq in (5, 6):
            visitor.click("#step-forward")
            wait_for_seq(visitor, seq)
        wait_until(visitor, "() => /[?&]step=6(&|$)/.test(location.search)")
        assert _query(visitor.url)["stop"] == ["3"]
        assert narration.locator(".tour-stop-count").text_content() == "Stop 3 of 3"
        assert narration.locator('a[data-seq="4"]').text_content() == "Back to the stop"
        assert narration.locator(".tour-away").is_visible()  # stepping by hand, not playing: shown
        # Only the tour and its sessions: the lists send it to sign in, another session of the
        # project is a 404, the tour's page opens (read-only), the API is a 401.
        listing = context.request.get("/sessions/", max_redirects=0)
        assert listing.status == 302 and listing.headers["location"].startswith("/accounts/login/")
        assert context.request.get(f"/sessions/{unrelated.pk}/").status == 404
        assert context.request.get(f"/sessions/{unrelated.pk}/?tour={tour.pk}&stop=1").status == 404
        tour_page = context.request.get(f"/tours/{tour.pk}/", max_redirects=0)
        assert tour_page.status == 200 and "tour-edit-form" not in tour_page.text()
        assert context.request.get("/api/sessions").status == 401
        assert context.request.get(f"/api/tours/{tour.pk}").status == 401
        assert errors == []

        # 3. The maintainer sees the use and revokes the link in the panel: the visitor's next
        # reload is a 404, and the link opens nothing any more.
        page.reload()
        assert "1 use" in page.locator(f"#share-link-{link.pk}").text_content()
        page.locator(f"#share-link-{link.pk}").wait_for()
        wait_for_settle(page)
        page.once("dialog", lambda dialog: dialog.accept())
        page.click(f"#share-link-{link.pk} button[type=submit]")
        page.locator(f"#share-link-{link.pk} .badge").wait_for()
        assert "revoked by mia" in page.locator(f"#share-link-{link.pk}").text_content()
        assert visitor.reload().status == 404
        assert "second-run" not in visitor.content() and "Another run" not in visitor.content()
        assert visitor.goto(address).status == 404
        assert context.request.get(f"/tours/{tour.pk}/play/?stop=1", max_redirects=0).status == 404
        assert context.request.get(f"/sessions/{first.pk}/?step=2&tour={tour.pk}&stop=1").status == 404
    finally:
        context.close()
    assert errors and all(NOT_FOUND_LOG in error for error in errors), errors

    # 4. A second link: it opens stop 1, and once its time is past it opens nothing.
    _, token = sharing.create_link(actor=Actor(user=link.created_by), tour=tour)
    errors = []
    context, visitor = _visitor(browser, live_server, errors)
    try:
        visitor.goto(f"/s/{token}")
        visitor.wait_for_url(f"**/sessions/{first.pk}/?step=2&tour={tour.pk}&stop=1")
        ShareLink.objects.filter(token_hash=ShareLink.hash_token(token)).update(
            expires_at=timezone.now() - timedelta(minutes=1)
        )
        assert visitor.reload().status == 404
        assert visitor.goto(f"/s/{token}").status == 404
        shown = visitor.content()
        assert "Not found" in shown and "How it fixed the bug" not in shown
        assert token not in shown  # the refusal page never prints the address, which holds the token
    finally:
        context.close()
    assert all(NOT_FOUND_LOG in error for error in errors), errors
