"""Markdown kept as HTML when written (sessions_app/markdown.py): pages and the API read the HTML
a comment, a tour's description and its stops' narrations were given when written, never render
it again per view; a text changed by any other path, or a renderer changed since, is rendered
again when read, so what is shown is never stale; a deletion or a redaction leaves no trace of
the old words in the kept HTML."""

from __future__ import annotations

from django.test import Client

from sessions_app import comments, markdown, sharing, tours
from sessions_app.access import Actor
from sessions_app.models import Comment, Role, Tour, TourStop
from sessions_app.stored_redaction import redact_text

from .builders_teams import acme, member, mia, other, vic  # noqa: F401  (fixtures)
from .test_comments import ours, rita  # noqa: F401  (fixtures)
from .test_page_tours import tour  # noqa: F401  (fixtures)
from .test_tours import first, recorded, second, signed_in  # noqa: F401  (fixtures)

# What made pages take seconds: markdown-it-py, pure Python, takes ~15 µs a character of this.
SLOW = "[" * 2_000


def refuse_rendering(monkeypatch) -> None:
    """Rendering refused from here on: a page or answer that renders fails the test."""

    def refused(text: str):
        raise AssertionError(f"rendered while read: {text[:40]!r}")

    monkeypatch.setattr(markdown, "render_markdown", refused)


def test_pages_and_the_api_show_comments_as_kept_when_written_and_render_nothing(ours, rita, monkeypatch):
    comment = Comment.objects.create(session=ours, seq=2, author_name="rita", body="**bold** " + SLOW)
    assert comment.body_html.startswith("<p><strong>bold</strong> [[[")  # made by save()
    refuse_rendering(monkeypatch)
    Comment.objects.filter(pk=comment.pk).update(body_html="<p>kept</p>")  # marked: the page must show this
    page = rita.get(f"/sessions/{ours.pk}/?step=2").content.decode()
    assert "<p>kept</p>" in page and "[[[[" not in page
    listed = rita.get(f"/api/sessions/{ours.pk}/comments").json()
    assert [thread["body_html"] for thread in listed] == ["<p>kept</p>"]
    assert "kept" in rita.get(f"/sessions/{ours.pk}/").content.decode()  # the Discussion list's preview


def test_a_comment_written_through_the_workflows_keeps_its_html_and_a_deletion_its_none(ours, acme):
    actor = Actor(user=member("rob", acme, Role.REVIEWER))
    made = comments.create_comment(actor=actor, session=ours, seq=3, body="first *words*")
    stored = Comment.objects.get(pk=made.pk)
    assert stored.body_html == "<p>first <em>words</em></p>\n" and stored.body_html_of == markdown.digest(stored.body)
    comments.edit_comment(actor=actor, comment=made, body="second **words**")
    stored = Comment.objects.get(pk=made.pk)
    assert stored.body_html == "<p>second <strong>words</strong></p>\n"
    comments.delete_comment(actor=actor, comment=made, role=Role.REVIEWER)
    stored = Comment.objects.get(pk=made.pk)
    assert (stored.body, stored.body_html) == ("", "")


def test_a_text_changed_elsewhere_or_a_new_renderer_is_rendered_again_when_read_and_kept(ours, rita, monkeypatch):
    comment = Comment.objects.create(session=ours, seq=4, author_name="rita", body="old words")
    Comment.objects.filter(pk=comment.pk).update(body="new *words*")  # a path that kept no HTML
    answer = rita.get(f"/api/sessions/{ours.pk}/comments").json()
    assert answer[0]["body_html"] == "<p>new <em>words</em></p>\n"
    stored = Comment.objects.get(pk=comment.pk)
    assert "old words" not in stored.body_html and stored.body_html_of == markdown.digest("new *words*")
    monkeypatch.setattr(markdown, "RENDERER", "another renderer")  # a rule changed: made again
    monkeypatch.setattr(markdown, "render_markdown", lambda text: markdown.mark_safe(f"<p>v2 {text}</p>"))
    assert rita.get(f"/api/sessions/{ours.pk}/comments").json()[0]["body_html"] == "<p>v2 new *words*</p>"
    assert Comment.objects.get(pk=comment.pk).body_html == "<p>v2 new *words*</p>"


def test_tours_keep_their_html_and_a_share_link_visitor_reads_it_without_rendering(tour, vic, mia, monkeypatch):
    refuse_rendering(monkeypatch)
    stops = list(TourStop.objects.filter(tour=tour).order_by("position"))
    assert [stop.narration_html for stop in stops] == [
        "<p>First <strong>look</strong>.</p>\n", "<p>Compare them.</p>\n", "<p>Here it <em>works</em>.</p>\n",
    ]  # fmt: skip
    assert Tour.objects.get(pk=tour.pk).description_html == "<p>Read <em>this</em></p>\n"
    TourStop.objects.filter(pk=stops[1].pk).update(narration_html="<p>kept narration</p>")
    Tour.objects.filter(pk=tour.pk).update(description_html="<p>kept description</p>")
    page = vic.get(f"/tours/{tour.pk}/").content.decode()
    assert "kept narration" in page and "kept description" in page
    _link, token = sharing.create_link(actor=Actor(user=member("mia", tour.project, Role.MAINTAINER)), tour=tour)
    visitor = Client()
    assert visitor.get(f"/s/{token}").status_code == 302
    played = visitor.get(f"/sessions/{stops[1].session_id}/?step=5&tour={tour.pk}&stop=2").content.decode()
    assert "kept narration" in played
    api = vic.get(f"/api/tours/{tour.pk}").json()
    assert api["description_html"] == "<p>kept description</p>"
    assert [stop["narration_html"] for stop in api["stops"]][1] == "<p>kept narration</p>"


def test_every_way_a_tour_is_written_keeps_its_html(tour, first, acme):
    actor = Actor(user=member("mia", acme, Role.MAINTAINER))
    tours.change_tour(actor=actor, tour=tour, description="now *this*")
    assert Tour.objects.get(pk=tour.pk).description_html == "<p>now <em>this</em></p>\n"
    added = tours.add_stop(actor=actor, tour=tour, session=first, seq=1, title="added", narration="an `added` stop")
    assert TourStop.objects.get(pk=added.pk).narration_html == "<p>an <code>added</code> stop</p>\n"
    tours.change_stop(actor=actor, tour=tour, stop_id=added.pk, title="changed", narration="a **changed** stop")
    assert TourStop.objects.get(pk=added.pk).narration_html == "<p>a <strong>changed</strong> stop</p>\n"
    for stop in TourStop.objects.filter(tour=tour):
        assert stop.narration_html_of == markdown.digest(stop.narration), stop.title


def test_a_redaction_leaves_no_trace_of_the_words_in_kept_html(ours, tour, acme):
    secret = "note 9"  # what event 9's memory holds (synthetic_events)
    comment = Comment.objects.create(session=ours, seq=9, author_name="rita", body=f"is **{secret}** real?")
    actor = Actor(user=member("mia", acme, Role.MAINTAINER))
    stop = tours.add_stop(actor=actor, tour=tour, session=ours, seq=9, title="here", narration=f"the key {secret}")
    tours.change_tour(actor=actor, tour=tour, description=f"about {secret}")
    assert secret in Comment.objects.get(pk=comment.pk).body_html
    redact_text(session=ours, seq=9, text=secret, label="apikey", actor="mia")
    held = [
        Comment.objects.get(pk=comment.pk).body_html, TourStop.objects.get(pk=stop.pk).narration_html,
        Tour.objects.get(pk=tour.pk).description_html,
    ]  # fmt: skip
    assert all(secret not in html and "[REDACTED:apikey]" in html for html in held), held
