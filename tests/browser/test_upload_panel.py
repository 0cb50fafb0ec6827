"""The sessions page's upload panel and layout in real Chromium (new-user review, 2026-11-26):
picking or dropping files sends nothing, the project and format come before the files, and
Upload sends them with the choices made; the page fits a 1280 px window."""

from __future__ import annotations

import pytest

from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import create_session
from sessions_app.models import ImportJob, Project, Session

from ..builders_teams import member
from .conftest import log_in

pytestmark = pytest.mark.browser

ONE_EVENT = b'{"kind": "session_start", "payload": {"task": "t"}}\n{"kind": "user_message", "payload": {}}\n'


def test_files_picked_or_dropped_wait_for_upload_and_go_to_the_project_chosen_after(watched, analyst, tmp_path):
    page, watch = watched
    zeta = Project.objects.create(name="Zeta", slug="zeta")
    member("analyst", zeta)  # a maintainer of two projects: Default (first in the select) and Zeta
    run = tmp_path / "run.jsonl"
    run.write_bytes(ONE_EVENT)
    log_in(page)

    # The choices come first on the page, the files after them, then the button.
    order = page.evaluate("""() => ['#upload_project', '#upload_format', '#upload-form input[type=file]',
        '#upload-form button[type=submit]'].map((s) => document.querySelector(s))
        .every((el, i, all) => i === 0 || (all[i - 1].compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING))""")
    assert order

    sent = len(watch.requests)
    page.set_input_files("#upload-form input[type=file]", str(run))
    page.wait_for_timeout(600)
    assert not [url for url in watch.requests[sent:] if "/sessions/upload/" in url], "picking a file sent it"

    # A drop only fills the picker too.
    page.evaluate("""() => {
        const data = new DataTransfer();
        data.items.add(new File(['{}\\n'], 'dropped.jsonl'));
        const zone = document.getElementById('dropzone');
        zone.dispatchEvent(new DragEvent('drop', {dataTransfer: data, bubbles: true, cancelable: true}));
    }""")
    page.wait_for_timeout(600)
    assert page.evaluate("document.querySelector('#upload-form input[type=file]').files[0].name") == "dropped.jsonl"
    assert not [url for url in watch.requests[sent:] if "/sessions/upload/" in url], "dropping a file sent it"
    assert not ImportJob.objects.exists()

    page.set_input_files("#upload-form input[type=file]", str(run))
    page.select_option("#upload_project", "zeta")
    page.click("#upload-form button[type=submit]")
    page.locator(".job >> text=run.jsonl").wait_for()
    assert [job.project.slug for job in ImportJob.objects.select_related("project")] == ["zeta"]
    # The files are cleared for the next upload; the project chosen stays.
    assert page.evaluate("document.querySelector('#upload-form input[type=file]').files.length") == 0
    assert page.input_value("#upload_project") == "zeta"


def test_the_sessions_page_fits_a_1280_px_window_and_the_wide_table_scrolls_in_its_box(watched, analyst):
    page, _ = watched
    create_session(project=Project.get_default(), source_format="canonical", status=Session.Status.COMPLETED,
                   meta=SessionMeta(source_session_id="a-session-id-long-enough-to-widen-its-column-" * 2,
                                    model="a-model-name-that-is-rather-long-too"))  # fmt: skip
    for width in (1280, 1440):
        page.set_viewport_size({"width": width, "height": 800})
        log_in(page) if width == 1280 else page.reload()
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        # The table is wider than its column and scrolls inside .table-scroll; the drop zone's
        # text and picker stay inside the sidebar.
        fits = page.evaluate("""() => {
            const zone = document.getElementById('dropzone').getBoundingClientRect();
            const panel = document.querySelector('.upload-panel').getBoundingClientRect();
            return [...document.querySelectorAll('#dropzone, #dropzone *')].every((el) => {
                const box = el.getBoundingClientRect();
                return box.left >= panel.left && box.right <= panel.right && box.right <= zone.right + 0.5;
            });
        }""")
        assert fits
        top_bar = page.evaluate("document.querySelector('header').getBoundingClientRect().right")
        assert top_bar <= width
