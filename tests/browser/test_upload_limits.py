"""The upload panel's limits in real Chromium (issue 20 item 4): a file past REPLAY_MAX_UPLOAD_MB
is refused with its name before any byte is sent, and one past the project's storage quota is
sent, refused by the server before anything is stored, and named in the panel; the next upload
that fits goes through."""

from __future__ import annotations

import pytest

from sessions_app.models import ImportJob, Project

from .conftest import log_in

pytestmark = pytest.mark.browser


def test_the_upload_panel_names_a_file_past_the_limit_or_the_quota_and_takes_the_next(watched, analyst, settings,
                                                                                     tmp_path):  # fmt: skip
    page, watch = watched
    settings.MAX_UPLOAD_MB = 1
    Project.objects.filter(slug="default").update(max_stored_bytes=200 * 1024)
    big, over_quota, fits = tmp_path / "huge run.jsonl", tmp_path / "quota.jsonl", tmp_path / "small.jsonl"
    big.write_bytes(b'{"kind": "user_message", "payload": {}}\n' * 40_000)  # 1.6 MB
    over_quota.write_bytes(b'{"kind": "user_message", "payload": {}}\n' * 8_000)  # 320 KB
    fits.write_bytes(b'{"kind": "session_start", "payload": {"task": "t"}}\n{"kind": "user_message", "payload": {}}\n')
    log_in(page)

    sent = len(watch.requests)
    page.set_input_files("#upload-form input[type=file]", str(big))
    page.click("#upload-form button[type=submit]")
    errors = page.locator("#upload-errors")
    errors.locator("text=huge run.jsonl").wait_for()
    assert "exceeds the limit of 1.0 MB (REPLAY_MAX_UPLOAD_MB)" in errors.text_content()
    assert not [url for url in watch.requests[sent:] if "/sessions/upload/" in url]  # nothing was sent
    assert page.locator("#request-error").is_hidden()

    page.set_input_files("#upload-form input[type=file]", str(over_quota))
    page.click("#upload-form button[type=submit]")
    errors.locator("text=quota.jsonl: The upload").wait_for()
    assert "project default's storage quota" in errors.text_content()
    assert not ImportJob.objects.exists()

    page.evaluate("window.notReloaded = true")
    page.locator("#upload-errors [data-dismiss]").click()  # the server's (a link, for no JavaScript)
    assert errors.is_hidden() and page.evaluate("window.notReloaded === true")  # hidden, not followed
    page.set_input_files("#upload-form input[type=file]", str(fits))
    page.click("#upload-form button[type=submit]")
    page.locator(".job >> text=small.jsonl").wait_for()
    assert ImportJob.objects.filter(original_name="small.jsonl").exists()
