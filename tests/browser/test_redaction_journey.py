"""Redacting a value in real headless Chromium (issue 22, item 3): a maintainer selects a secret
in the player's context panel, presses Redact… by the selection (static/js/redact.js), names a
label and redacts; the panel says what changed, the player's frame comes back with the
placeholder, and verify still holds and counts the redaction. A viewer gets no Redact…. Every
page stays on our own server with no console error (conftest.Watch)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from sessions_app.canonical import CanonicalEvent, Kind, SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import Event, Project, Role, Session

from ..builders_teams import member
from ..conftest import T0
from .test_team_journey import sign_in

pytestmark = pytest.mark.browser

SECRET = "sk-live-4f9a1c2e7b88TOPSECRET"


@pytest.fixture
def leaked(transactional_db) -> Session:
    project = Project.get_default()
    member("mia", project, Role.MAINTAINER)
    member("vic", project, Role.VIEWER)
    session = create_session(project=project, source_format="canonical", meta=SessionMeta(source_session_id="leak"))
    append_events(session=session, events=[
        CanonicalEvent(kind=Kind.USER_MESSAGE if i % 2 == 0 else Kind.AGENT_MESSAGE, source_type="message", raw=None,
                       payload={"text": f"use the key {SECRET} now" if i in (5, 11) else f"message {i}"},
                       timestamp=T0 + timedelta(seconds=i), line=i + 1)
        for i in range(20)
    ])  # fmt: skip
    finish_session(session=session)
    return Session.objects.get(pk=session.pk)


def select_in_context_panel(page: Page, text: str) -> None:
    """Select `text` where the context panel shows it, as a mouse would."""
    page.evaluate(
        """(text) => {
            const panel = document.getElementById("context-panel");
            const walker = document.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                const at = node.textContent.indexOf(text);
                if (at < 0) continue;
                const range = document.createRange();
                range.setStart(node, at);
                range.setEnd(node, at + text.length);
                const selection = window.getSelection();
                selection.removeAllRanges();
                selection.addRange(range);
                return;
            }
            throw new Error("not shown in the context panel: " + text);
        }""",
        text,
    )


def test_a_maintainer_redacts_a_selected_value_and_the_chain_still_verifies(watched, leaked):
    page, _ = watched
    path = f"/sessions/{leaked.pk}/?step=5"
    sign_in(page, "mia", path)
    panel = page.locator("#context-panel")
    expect(panel).to_contain_text(SECRET)
    select_in_context_panel(page, SECRET)
    button = page.locator(".redact-selection")
    expect(button).to_be_visible()
    button.click()
    expect(page.locator("#redact-details")).to_have_attribute("open", "")
    expect(page.locator("#redact-text")).to_have_value(SECRET)
    expect(page.locator("#redact-label")).to_be_focused()
    page.fill("#redact-label", "apikey")
    page.click("#redact-form button[type=submit]")
    expect(page.locator("#redaction-list")).to_contain_text("Removed 2 values from 2 events")
    # The player asked for its frame again: the context panel shows the placeholder now.
    expect(panel).to_contain_text("[REDACTED:apikey]")
    expect(panel).not_to_contain_text(SECRET)
    expect(page.locator("#redaction-list table.redactions")).to_contain_text("apikey")
    assert "?step=5" in page.url
    page.click("#chain-badge button")
    expect(page.locator("#chain-badge")).to_contain_text("verified at")
    expect(page.locator("#chain-badge")).to_contain_text("2 redactions")
    assert not Event.objects.filter(session=leaked, payload__contains=SECRET).exists()
    # Escape hides the button.
    select_in_context_panel(page, "[REDACTED:apikey]")
    expect(button).to_be_visible()
    page.keyboard.press("Escape")
    expect(button).to_be_hidden()


def test_a_viewer_sees_the_redactions_but_gets_no_redact_button(watched, leaked):
    page, _ = watched
    sign_in(page, "vic", f"/sessions/{leaked.pk}/?step=5")
    select_in_context_panel(page, SECRET)
    page.wait_for_timeout(300)
    assert page.locator(".redact-selection").count() == 0
    assert page.locator("#redact-form").count() == 0
    page.locator("#redactions-panel").scroll_into_view_if_needed()
    expect(page.locator("#redaction-list")).to_contain_text("Nothing has been redacted")
