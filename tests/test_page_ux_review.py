"""Server-side fixes from the new-user review of 2026-11-26 (the dashboard's wording and panels)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from sessions_app import sharing
from sessions_app.access import Actor
from sessions_app.models import Project, Role, Session

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


def test_the_errors_column_says_events_and_steps_each_singular_or_plural(logged_in, db):
    one = build_session(conversation_events(turns=1), source_session_id="one")
    Session.objects.filter(pk=one.pk).update(error_count=0, step_error_count=1)
    many = build_session(conversation_events(turns=1), source_session_id="many")
    Session.objects.filter(pk=many.pk).update(error_count=1, step_error_count=2)
    html = logged_in.get(LIST).content.decode()

    def errors_cell(session: Session) -> str:
        row = html[html.index(f'<tr data-session="{session.pk}">') :]
        row = row[: row.index("</tr>")]
        return re.sub(r"<[^>]+>", " ", re.findall(r'<td class="num" title="events flagged[^"]*">(.*?)</td>', row)[0])

    assert errors_cell(one).split() == ["0", "events", "1", "step"]
    assert errors_cell(many).split() == ["1", "event", "2", "steps"]
    player = logged_in.get(reverse("sessions:player", args=[one.pk])).content.decode()
    assert "<dt>Errors</dt><dd>0 events, 1 step</dd>" in player


def test_a_share_link_visitor_sees_no_comments_in_the_scrubber_legend(logged_in, user, db):
    session = build_session(conversation_events(turns=1), source_session_id="shared")
    assert (
        '<li class="comment-mark">comments</li>'
        in logged_in.get(reverse("sessions:player", args=[session.pk])).content.decode()
    )
    _, token = sharing.create_link(actor=Actor(user=user), session=session)
    visitor = Client()
    assert visitor.get(f"/s/{token}").status_code == 302
    html = visitor.get(reverse("sessions:player", args=[session.pk])).content.decode()
    assert 'class="legend"' in html and "comment-mark" not in html


def test_the_add_to_tour_form_names_its_step_field_in_an_error(logged_in, db):
    session = build_session(conversation_events(turns=1), source_session_id="toured")
    url = reverse("sessions:tour_stop_add", args=[session.pk])
    response = logged_in.post(url, {"step": session.event_count + 5, "new_tour": "T", "title": "past the end"},
                              HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert response.status_code == 400
    assert f"Step: session {session.pk} has no event" in html and "seq:" not in html


def test_no_divergence_is_shown_as_good_news_not_as_an_error(logged_in, db):
    a = build_session(conversation_events(turns=2), source_session_id="a")
    b = build_session(conversation_events(turns=2), source_session_id="b")
    html = logged_in.get(reverse("sessions:diff"), {"a": a.pk, "b": b.pk}).content.decode()
    assert "<strong>No divergence</strong>" in html
    assert 'class="divergence no-divergence"' in html
    css = (Path(settings.BASE_DIR) / "static" / "css" / "replay.css").read_text()
    assert re.search(r"\.divergence\.no-divergence \{[^}]*var\(--ok\)", css)
