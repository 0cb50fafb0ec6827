"""The context panel's rough edges in real headless Chromium (issue 19): a tool named with HTML
stays text in plotly's hover label (no <img> is ever made, nothing runs), an unpriced session
says *unpriced* and times read +1m 23.4s, in the player and in a bundle's offline player."""

from __future__ import annotations

import zipfile
from datetime import timedelta

import pytest
from django.db import connections
from playwright.sync_api import Browser

from sessions_app.bundles import stream_bundle
from sessions_app.canonical import Kind

from ..builders_dashboard import _event, build_session
from ..conftest import T0
from .conftest import analyst, log_in, watched  # noqa: F401

pytestmark = pytest.mark.browser

TOOL = '<img src=x onerror="window.__pwned=1">'


@pytest.fixture
def hostile_unpriced(transactional_db, analyst):
    events = [
        _event(0, Kind.SESSION_START),
        _event(1, Kind.TOOL_CALL, pair_id="t", tool=TOOL, timestamp=T0 + timedelta(seconds=60)),
        _event(2, Kind.TOOL_RESPONSE, pair_id="t", tool=TOOL, timestamp=T0 + timedelta(seconds=83.4)),
        _event(
            3,
            Kind.LLM_RESPONSE,
            tool="mystery-model",
            tokens=1200,
            cost_unpriced=True,
            timestamp=T0 + timedelta(seconds=90),
        ),  # fmt: skip
    ]
    session = build_session(events, source_session_id="hostile-unpriced")
    # Made while Playwright's loop runs: close it so the test database can be dropped.
    connections.close_all()
    return session


def test_the_player_shows_unpriced_relative_times_and_escaped_chart_hovers(watched, hostile_unpriced):
    page, _ = watched
    session = hostile_unpriced
    log_in(page, f"/sessions/{session.pk}/?step=2")
    panel = page.locator("#context-panel")
    assert "unpriced" in panel.locator(".context-totals").text_content()
    stamp = panel.locator(".current-event time")
    assert stamp.text_content() == "+1m 23.4s" and stamp.get_attribute("title") == "2026-02-08T10:31:23.400000Z"
    assert page.locator('#step-list [aria-current="step"] time').text_content() == "+1m 23.4s"
    assert TOOL in panel.locator(".current-event h3").text_content()  # the tool's name, as text
    assert "$0.0000" not in page.content()

    page.locator("#charts").scroll_into_view_if_needed()
    chart = page.locator('#chart-latency[data-ready="true"]')
    chart.wait_for()
    point = chart.locator(".scatterlayer .point").first
    point.hover(force=True)
    label = page.locator(".hoverlayer .hovertext")
    label.first.wait_for()
    assert TOOL in label.first.text_content()  # drawn as the characters the agent wrote
    assert page.locator("#charts img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_the_offline_player_of_an_unpriced_session_says_unpriced(browser: Browser, hostile_unpriced, tmp_path):
    bundle = tmp_path / "bundle.zip"
    with bundle.open("wb") as out:
        for chunk in stream_bundle(session=hostile_unpriced, exported_by="analyst"):
            out.write(chunk)
    connections.close_all()
    with zipfile.ZipFile(bundle) as archive:
        archive.extract("index.html", tmp_path)
    context = browser.new_context()
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort())
    page = context.new_page()
    try:
        page.goto((tmp_path / "index.html").as_uri() + "#seq=2")
        page.locator("#event-title").filter(has_text="Event #3 ").wait_for()
        facts = page.locator("#facts").text_content()
        assert "unpriced" in facts and "$" not in facts
        context_text = page.locator("#context").text_content()
        assert "cost so farunpriced" in context_text
        assert "+1m 23.4s · 2026-02-08T10:31:23.400Z" in context_text
    finally:
        context.close()
