"""Server-side fixes from the new-user review of 2026-11-26 (the dashboard's wording and panels)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from sessions_app.models import Project, Role

from .builders_dashboard import build_session, conversation_events, logged_in, user  # noqa: F401
from .builders_teams import member

LIST = reverse("sessions:list")


@pytest.mark.parametrize("role", [Role.VIEWER, Role.REVIEWER])
def test_the_upload_panel_is_a_note_for_a_user_who_may_upload_nowhere(client, db, role):
    client.force_login(member("reader", Project.get_default(), role))
    html = client.get(LIST).content.decode()
    assert 'id="upload-form"' not in html
    assert 'id="upload-note"' in html and "maintainers and admins can import sessions" in html


def test_the_upload_panel_shows_for_a_maintainer_of_one_project_among_viewers(client, db):
    other = Project.objects.create(name="Other", slug="other")
    member("reader", Project.get_default(), Role.VIEWER)
    client.force_login(member("reader", other, Role.MAINTAINER))
    html = client.get(LIST).content.decode()
    assert 'id="upload-form"' in html and 'id="upload-note"' not in html
    upload_form = html[html.index('id="upload-form"') : html.index("</form>", html.index('id="upload-form"'))]
    assert '<option value="other"' in upload_form and '<option value="default"' not in upload_form


def test_posting_a_comment_sends_back_the_header_discussion_count_out_of_band(logged_in, db):
    session = build_session(conversation_events(turns=2), source_session_id="talk")
    player = logged_in.get(reverse("sessions:player", args=[session.pk])).content.decode()
    assert re.search(r'<a id="discussion-link"[^>]*>Discussion \(0\)</a>', player)
    url = reverse("sessions:comment_create", args=[session.pk])
    for count in (1, 2):
        html = logged_in.post(url, {"seq": count, "body": f"look {count}"}, HTTP_HX_REQUEST="true").content.decode()
        link = re.search(r'<a id="discussion-link"[^>]*>[^<]*</a>', html)
        assert link and 'hx-swap-oob="true"' in link.group(0) and f"Discussion ({count})" in link.group(0)
