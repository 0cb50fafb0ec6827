"""The offline bundle viewer's keys as docs/bundles.md promises them, in real headless Chromium
from disk: → / j next, ← / k previous, PageDown / PageUp ±20, Home / End, n / p next / previous
comment, e next error. Each key is pressed and the event it lands on is read off the page."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from sessions_app.models import Comment, Event, Project, Session

from ..builders_teams import recorded
from .test_bundle_viewer import _unpacked_index, offline

pytestmark = pytest.mark.browser

EVENTS = 50
# tests/conftest.py's synthetic_events: event i is a tool error when i % 5 == 3 and i % 4 == 3.
ERROR_SEQS = [3, 23, 43]
COMMENT_SEQS = [7, 30]


@pytest.fixture
def keyed(transactional_db, tmp_path) -> Path:
    """A bundle of 50 synthetic events with threads at seqs 7 and 30."""
    session = recorded(Project.get_default(), "keys-run", events=EVENTS)
    assert list(Event.objects.filter(session=session, is_error=True).order_by("seq").values_list("seq", flat=True)) == (
        ERROR_SEQS
    )
    for seq in COMMENT_SEQS:
        Comment.objects.create(session=session, seq=seq, author_name="rita", body=f"look at {seq}")
    return _unpacked_index(Session.objects.get(pk=session.pk), tmp_path)


def _at(page: Page) -> int:
    """The event shown, as people count it (seq + 1), read from the position line."""
    text = page.locator("#position").text_content()
    assert text.startswith("event ") and text.endswith(f" of {EVENTS}"), text
    return int(text.split()[1])


def test_each_documented_key_moves_to_the_event_it_promises(browser: Browser, keyed):
    with offline(browser, keyed) as page:
        page.locator("#position").filter(has_text=f"event 1 of {EVENTS}").wait_for()
        # (key, the event shown after it, counted from 1): seq + 1.
        steps = [
            ("PageDown", 21), ("PageDown", 41), ("PageDown", 50),  # +20, then held at the last
            ("PageUp", 30), ("PageUp", 10), ("PageUp", 1),  # -20, then held at the first
            ("End", 50), ("Home", 1),
            ("j", 2), ("ArrowRight", 3), ("k", 2), ("ArrowLeft", 1), ("k", 1),
            ("n", 8), ("n", 31), ("n", 31),  # comments at seqs 7 and 30, none after
            ("p", 8), ("p", 8),  # none before seq 7
            ("Home", 1), ("e", 4), ("e", 24), ("e", 44), ("e", 44),  # errors at seqs 3, 23, 43
        ]  # fmt: skip
        for number, (key, expected) in enumerate(steps, 1):
            page.keyboard.press(key)
            assert _at(page) == expected, f"key {number}, {key}: expected event {expected}"
            assert page.locator("#event-title").text_content().startswith(f"Event #{expected} ")
