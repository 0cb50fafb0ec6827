"""The bundle's index.html in real headless Chromium, opened from disk (file://) with every
network request blocked: it steps through the session, shows a comment at its step, runs none
of the session's hostile text, and asks for nothing outside the file."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from playwright.sync_api import Browser, Page

from sessions_app.bundles import stream_bundle
from sessions_app.ingest.importing import import_local_file
from sessions_app.models import Comment, Project, Review, Session

from .a11y import assert_accessible

pytestmark = pytest.mark.browser

SOURCE = Path(settings.BASE_DIR) / "demo" / "rlm_success.jsonl"
HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'


@pytest.fixture
def index_html(transactional_db, tmp_path) -> tuple[Path, Session]:
    copy = tmp_path / SOURCE.name
    copy.write_bytes(SOURCE.read_bytes())
    (outcome,) = import_local_file(path=copy, project=Project.get_default())
    # One event without a known price: the header says "1 event", not "1 events".
    Session.objects.filter(pk=outcome.session.pk).update(unpriced_events=1, priced_events=5)
    session = Session.objects.get(pk=outcome.session.pk)
    thread = Comment.objects.create(session=session, seq=3, author_name="rita", body="Look at this step " + HOSTILE)
    Comment.objects.create(session=session, seq=3, parent=thread, author_name="mia", body="Agreed.")
    return _unpacked_index(session, tmp_path), session


def _unpacked_index(session: Session, tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle.zip"
    with bundle.open("wb") as out:
        for chunk in stream_bundle(session=session, exported_by="rita"):
            out.write(chunk)
    # Made while Playwright's event loop runs, this connection is not the one pytest-django
    # closes at the end (on PostgreSQL the test database could then not be dropped).
    connections.close_all()
    folder = tmp_path / "unpacked"
    with zipfile.ZipFile(bundle) as archive:
        archive.extract("index.html", folder)
    return folder / "index.html"


@contextmanager
def offline(browser: Browser, path: Path, *, width: int = 1280, height: int = 900) -> Iterator[Page]:
    """A page on a bundle's index.html opened from disk, every request but the file's own refused;
    a script error on it fails the test."""
    errors: list[str] = []
    context = browser.new_context(viewport={"width": width, "height": height})
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort())
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(path.as_uri())
        yield page
    finally:
        context.close()
    assert errors == [], errors


def test_the_offline_player_steps_to_a_comment_from_disk_with_the_network_blocked(browser: Browser, index_html):
    path, session = index_html
    url = path.as_uri()
    requests: list[str] = []
    blocked: list[str] = []
    errors: list[str] = []
    dialogs: list[str] = []
    context = browser.new_context(viewport={"width": 1280, "height": 900})

    def route(route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        page.goto(url)
        page.locator("#position").filter(has_text=f"event 1 of {session.event_count}").wait_for()
        assert page.locator("#event-title").text_content().startswith("Event #1 ")
        assert "+ unpriced (1 event with no known price)" in page.locator("#facts").text_content()
        # Named as the dashboard names it, its task beside.
        assert session.source_session_id and page.locator("#title").text_content() == session.source_session_id
        assert page.title() == f"{session.source_session_id} · Replay bundle"
        assert page.locator("#facts").text_content().startswith(f"task {session.task[:300]} · project ")
        assert page.locator("#step-comments").text_content() == "No comments on this event."
        assert page.locator("#comments-title").text_content() == "Comments at #1"  # as the player says it
        assert_accessible(page, "offline bundle viewer")
        # Step forward with the keyboard to seq 3, where the thread is.
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        assert page.locator("#event-title").text_content().startswith("Event #4 ")
        assert page.locator("#comments-title").text_content() == "Comments at #4"
        # The current row's comment mark keeps its contrast on the current row's background.
        assert_accessible(page, "offline bundle viewer at an event with comments")
        thread = page.locator("#step-comments .thread")
        assert thread.count() == 1
        assert "Look at this step " + HOSTILE in thread.text_content()  # shown as text
        assert "Agreed." in thread.text_content()
        assert page.locator("#context").text_content().count("so far") == 4  # cost, tokens, errors, steps
        # The buttons and the scrubber move too; the step list shows only rows around the view.
        page.click("#next")
        assert page.locator("#event-title").text_content().startswith("Event #5 ")
        page.click("#first")
        page.click("#next-comment")
        assert page.locator("#event-title").text_content().startswith("Event #4 ")
        assert page.locator("#steps .row.current .seq").text_content() == "#4"
        assert page.locator("#marks .mark").count() == 1
        page.click("#last")
        assert page.locator("#event-title").text_content().startswith(f"Event #{session.event_count} ")
        # A #seq=N set after the page loaded (address bar, a link) moves the viewer there too.
        page.evaluate("location.hash = '#seq=2'")
        page.locator("#position").filter(has_text=f"event 3 of {session.event_count}").wait_for()
        assert page.locator("#event-title").text_content().startswith("Event #3 ")
        assert page.evaluate("window.__pwned") is None
    finally:
        context.close()
    assert dialogs == [] and errors == [], (dialogs, errors)
    assert blocked == [], f"the page asked for {blocked}"
    assert requests == [url], requests


RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE, left unclosed in a comment and a sign-off's note
ISO_WITH_FRACTION = re.compile(r"\d{2}:\d{2}:\d{2}\.\d")


@pytest.fixture
def talked_over(transactional_db, tmp_path) -> Path:
    """A bundle whose comments have one reply and two, one body and one note holding an unclosed
    right-to-left override, a sign-off and one restored from another bundle."""
    copy = tmp_path / SOURCE.name
    copy.write_bytes(SOURCE.read_bytes())
    (outcome,) = import_local_file(path=copy, project=Project.get_default())
    session = Session.objects.get(pk=outcome.session.pk)
    one = Comment.objects.create(session=session, seq=1, author_name="rita", body="abc " + RLO + "def")
    Comment.objects.create(session=session, seq=1, parent=one, author_name="mia", body="Agreed.",
                           restored_from="3f9a01bc" * 8)  # fmt: skip
    two = Comment.objects.create(session=session, seq=2, author_name="mia", body="Two answers here.",
                                 redacted_by=RLO + "ada", redacted_at=datetime(2026, 11, 2, 9, 30, tzinfo=UTC))  # fmt: skip
    for name in ("rita", "otto"):
        Comment.objects.create(session=session, seq=2, parent=two, author_name=name, body="Yes.")
    Review.objects.create(session=session, reviewer_name="rita", verdict=Review.Verdict.APPROVED, note=RLO + "fine",
                          chain_head=session.head_hash or "0" * 64, chain_valid=True, first_seq=0,
                          last_seq=session.event_count - 1)  # fmt: skip
    Review.objects.create(session=session, reviewer_name="vera", verdict=Review.Verdict.APPROVED, chain_valid=True,
                          chain_head="0" * 64, first_seq=0, last_seq=1, restored_from="3f9a01bc" * 8,
                          note="key [REDACTED:apikey]", redacted_by="ada",
                          redacted_at=datetime(2026, 11, 2, 9, 30, tzinfo=UTC))  # fmt: skip
    return _unpacked_index(session, tmp_path)


# Where a line's characters land: in a line read left to right, its "(" lies left of its "l".
_LEFT_OF = """([item, text]) => {
  const walker = document.createTreeWalker(item, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(text);
    if (at < 0) continue;
    const left = (i) => { const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1); return r.getBoundingClientRect().left; };
    return [left(at), left(at + text.length - 1)];
  }
  return null;
}"""


def test_replies_are_counted_in_words_times_read_to_the_minute_and_user_text_is_isolated(browser: Browser, talked_over):
    with offline(browser, talked_over, width=1400) as page:
        page.locator("#position").filter(has_text="event 1 of").wait_for()
        items = page.locator("#all-comments li")
        assert items.count() == 2
        assert "(+1 reply)" in items.nth(0).text_content() and "(+2 replies)" in items.nth(1).text_content()
        # The override is written out as its code point, as the server's pages show what people
        # wrote, inside the comment's own <bdi>: what follows it still reads left to right.
        assert items.nth(0).locator("bdi").nth(1).text_content() == "abc \\u202edef"
        before, after = page.evaluate(_LEFT_OF, [items.nth(0).element_handle(), "(+1 repl"])
        assert before < after, "the text after the comment was reversed"
        # The payload scrolls by keyboard too (axe: scrollable-region-focusable).
        assert page.locator("#payload").get_attribute("tabindex") == "0"
        review, restored = page.locator("#reviews li").all()
        assert review.locator("bdi").last.text_content() == "\\u202efine" and "restored" not in review.text_content()
        assert "redaction" not in review.text_content()
        # A note a redaction changed says who changed it, and when (to the minute, in UTC).
        assert "note changed by a redaction by ada 2026-11-02 09:30 UTC" in restored.text_content()
        # A sign-off its server restored from another bundle says so, with that bundle's signer.
        assert (
            restored.locator(".restored").text_content()
            == "restored from a bundle signed by 3f9a 01bc " + "3f9a 01bc " * 6 + "3f9a 01bc"
        )
        before, after = page.evaluate(_LEFT_OF, [review.element_handle(), "covers events"])
        assert before < after, "the sign-off's line was reversed"
        # Times to the minute in UTC, the stored value kept in <time datetime> (and its title).
        page.keyboard.press("ArrowRight")
        for where in ("#facts", "#all-comments", "#reviews", "#step-comments"):
            text = page.locator(where).text_content()
            assert not ISO_WITH_FRACTION.search(text), (where, text)
        assert re.search(r"exported \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC by rita", page.locator("#facts").text_content())
        stamp = page.locator("#facts time")
        assert stamp.get_attribute("datetime") == stamp.get_attribute("title")
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?\+00:00", stamp.get_attribute("datetime"))
        # A comment the exporting server had restored from another bundle says so.
        marked = page.locator("#step-comments .comment").filter(has=page.locator(".restored"))
        assert marked.count() == 1 and "Agreed." in marked.text_content()
        assert "restored from a bundle signed by 3f9a 01bc" in marked.locator(".restored").text_content()
        assert "redaction" not in page.locator("#step-comments").text_content()
        meta = page.locator("#step-comments .comment .meta").first
        assert re.fullmatch(r"rita · \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", meta.text_content())
        assert re.search(r" · \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC · covers events", review.text_content())
        # So does a comment, its redactor's name isolated like any user's text.
        page.keyboard.press("ArrowRight")
        changed = page.locator("#step-comments .comment").filter(has=page.locator(".redacted"))
        assert changed.count() == 1 and "Two answers here." in changed.text_content()
        assert changed.locator(".meta bdi").nth(1).text_content() == "\\u202eada"
        assert "changed by a redaction by \\u202eada 2026-11-02 09:30 UTC" in changed.locator(".meta").text_content()


def test_values_removed_after_the_fact_are_said_in_the_header_the_step_list_and_at_their_event(
    browser: Browser, transactional_db, tmp_path
):
    # The placeholders are not what the agent recorded: a reader of the offline copy is told
    # what was removed, by whom and when, as the dashboard's Redactions panel tells a member.
    from sessions_app.models import Event
    from sessions_app.stored_redaction import redact_text

    copy = tmp_path / SOURCE.name
    copy.write_bytes(SOURCE.read_bytes())
    (outcome,) = import_local_file(path=copy, project=Project.get_default())
    session = Session.objects.get(pk=outcome.session.pk)
    holding = [seq for seq, payload in Event.objects.filter(session=session).values_list("seq", "payload")
               if "revenue" in payload]  # fmt: skip
    redact_text(session=session, seq=holding[0], text="revenue", actor="mia")
    session = Session.objects.get(pk=session.pk)
    redacted = sorted(
        Event.objects.filter(session=session, redacted__isnull=False).values_list("seq", flat=True)
    )  # independent of the viewer: what the database holds as redacted
    assert redacted and redacted[0] == holding[0]
    path = _unpacked_index(session, tmp_path)
    with offline(browser, path) as page:
        page.locator("#position").filter(has_text="event 1 of").wait_for()
        note = page.locator("#redaction-note")
        assert note.is_visible()
        said = note.text_content()
        assert re.match(
            rf"\d+ values? (was|were) removed after the fact from {len(redacted)} events? \(manual\), the last by mia \d{{4}}-\d{{2}}-\d{{2}} \d{{2}}:\d{{2}} UTC",
            said,
        ), said
        # The step list marks the event, and its context names the field, label, who and when.
        page.evaluate(f"location.hash = '#seq={redacted[0]}'")
        page.locator("#event-title").filter(has_text=f"Event #{redacted[0] + 1} ").wait_for()
        assert page.locator("#steps .row.current .was-redacted").text_content() == "✂ redacted"
        removed = page.locator("#context dd.redacted").first.text_content()
        assert re.fullmatch(r"payload \[manual\] by mia \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", removed), removed
        assert "[REDACTED:manual]" in page.locator("#payload").text_content()
        assert_accessible(page, "offline bundle viewer at a redacted event")
        # An event nothing was removed from says nothing of it.
        untouched = next(seq for seq in range(session.event_count) if seq not in redacted)
        page.evaluate(f"location.hash = '#seq={untouched}'")
        page.locator("#event-title").filter(has_text=f"Event #{untouched + 1} ").wait_for()
        assert page.locator("#context dd.redacted").count() == 0
        assert page.locator("#steps .row.current .was-redacted").text_content() == ""
