"""A share link to one session in real headless Chromium: a maintainer makes it in the player's
Share links panel (the address shown once), a second, signed-out browser opens it, sees only that
session in the player and steps through it, without the top navigation, the lists, the
comments or the API; the maintainer revokes it and the visitor's next reload is a 404; an expired
link is a 404 too. axe finds nothing serious on the visitor's player or on the maintainer's
player with the panel open. Every page stays on our own server (conftest.Watch)."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, BrowserContext, Page

from sessions_app import comments, sharing
from sessions_app.access import Actor
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import Project, Role, Session, ShareLink

from ..builders_teams import member
from ..conftest import synthetic_events
from .a11y import assert_accessible
from .test_dashboard import frame, wait_for_seq, wait_for_settle
from .test_team_journey import sign_in

pytestmark = pytest.mark.browser

# What a navigation to an answer of 404 logs in Chromium's console: expected after a revocation.
NOT_FOUND_LOG = "Failed to load resource: the server responded with a status of 404"


@pytest.fixture
def runs(transactional_db) -> tuple[Session, Session]:
    project = Project.objects.create(name="Acme Secret Project", slug="acme")
    mia = member("mia", project, Role.MAINTAINER)
    found = []
    for name in ("shared-run", "other-run"):
        session = create_session(project=project, source_format="canonical", meta=SessionMeta(source_session_id=name))
        append_events(session=session, events=synthetic_events(12))
        finish_session(session=session)
        found.append(session)
    comments.create_comment(actor=Actor(user=mia), session=found[0], seq=0, body="TEAM-ONLY remark")
    return found[0], found[1]


def _visitor(browser: Browser, live_server, errors: list[str]) -> tuple[BrowserContext, Page]:
    """A fresh browser context: no cookie, nobody signed in; its console errors into `errors`,
    any request to another host refused."""
    host = urlsplit(live_server.url).netloc
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    context.route("**/*", lambda route: route.continue_() if urlsplit(route.request.url).netloc == host
                  else (errors.append(f"outside: {route.request.url}"), route.abort()))  # fmt: skip
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    return context, page


def test_a_signed_out_visitor_plays_one_shared_session_until_it_is_revoked_or_expires(
    watched, browser, live_server, runs
):
    shared, other = runs
    page, _ = watched
    player = f"/sessions/{shared.pk}/"

    # The maintainer makes a link in the player's Share links panel: its address is shown once.
    sign_in(page, "mia", player)
    page.locator("#share-link-form").wait_for()
    wait_for_settle(page)  # the panel loads itself: its form is htmx's once the swap settled
    page.fill("#share-link-form [name=expires_in_days]", "3")
    page.fill("#share-link-form [name=note]", "for the new hire")
    page.click("#share-link-form button[type=submit]")
    address = page.locator("#share-created-url").input_value()
    assert urlsplit(address).path.startswith("/s/") and address.startswith(live_server.url)
    link = ShareLink.objects.get()
    assert link.token_hash == ShareLink.hash_token(urlsplit(address).path.removeprefix("/s/"))
    assert "for the new hire" in page.locator(f"#share-link-{link.pk}").text_content()
    assert_accessible(page, "player with the Share links panel")

    # A second browser, signed out, opens the link and lands in the player of that session.
    errors: list[str] = []
    context, visitor = _visitor(browser, live_server, errors)
    try:
        visitor.goto(address)
        visitor.wait_for_url(f"**{player}")
        assert "shared-run" in visitor.locator("h1").text_content()
        assert "shared with you" in visitor.locator(".shared-note").text_content()
        # Nothing of the team's: no navigation, no comments, no forms, no panel, no export.
        for hidden in ("header.topbar nav", "header.topbar a", "#discussion", "#comment-threads", "#checkpoint-form",
                       "#sign-off-form", "#share-links", "nav.exports", "form.logout"):  # fmt: skip
            assert visitor.locator(hidden).count() == 0, hidden
        assert "TEAM-ONLY" not in visitor.content() and "Acme Secret Project" not in visitor.content()
        # It steps through the session (the frames come through the same grant).
        for seq in (1, 2, 3):
            visitor.click("#step-forward")
            wait_for_seq(visitor, seq)
        assert frame(visitor)["seq"] == 3 and "step=3" in visitor.url
        assert_accessible(visitor, "player seen through a share link")
        # The lists send it to the sign-in page; another session is a 404; the API a 401.
        listing = context.request.get("/sessions/", max_redirects=0)
        assert listing.status == 302 and listing.headers["location"].startswith("/accounts/login/")
        assert context.request.get(f"/sessions/{other.pk}/").status == 404
        assert context.request.get("/api/sessions").status == 401
        assert context.request.get(f"/api/sessions/{shared.pk}").status == 401
        assert errors == []

        # The maintainer sees the use, then revokes the link: the visitor's next reload is a 404.
        page.reload()
        assert "1 use" in page.locator(f"#share-link-{link.pk}").text_content()
        page.locator(f"#share-link-{link.pk}").wait_for()
        wait_for_settle(page)
        page.once("dialog", lambda dialog: dialog.accept())
        page.click(f"#share-link-{link.pk} button[type=submit]")
        page.locator(f"#share-link-{link.pk} .badge").wait_for()
        assert "revoked by mia" in page.locator(f"#share-link-{link.pk}").text_content()
        assert visitor.reload().status == 404
        assert "shared-run" not in visitor.content()
        assert context.request.get(address, max_redirects=0).status == 404
    finally:
        context.close()
    assert all(NOT_FOUND_LOG in error for error in errors), errors

    # An expired link: it opened, and once its time is past it opens nothing.
    _, token = sharing.create_link(actor=Actor(user=link.created_by), session=shared, expires_in_days=1)
    errors = []
    context, visitor = _visitor(browser, live_server, errors)
    try:
        visitor.goto(f"/s/{token}")
        visitor.wait_for_url(f"**{player}")
        ShareLink.objects.filter(token_hash=ShareLink.hash_token(token)).update(
            expires_at=timezone.now() - timedelta(minutes=1)
        )
        assert visitor.reload().status == 404
        assert visitor.goto(f"/s/{token}").status == 404
    finally:
        context.close()
    assert all(NOT_FOUND_LOG in error for error in errors), errors
