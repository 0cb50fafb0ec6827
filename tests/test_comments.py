"""Comments on a session's moments: threads and replies, edits that keep their history, only
one's own edit or delete (an admin deletes anyone's), resolving, permalinks that open the player
at their step, Markdown rendered inert, an audit entry per action, roles, and the player's
panel, marks and Discussion list."""

from __future__ import annotations

import json
import re
import time
from html.parser import HTMLParser

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions_app import comments, markdown
from sessions_app.access import Actor
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import AuditEntry, Comment, CommentRevision, Project, Role, Session

from .builders_teams import acme, key_of, member, other, signed_in  # noqa: F401  (fixtures)
from .conftest import synthetic_events


@pytest.fixture
def ours(acme) -> Session:
    session = create_session(project=acme, source_format="canonical", meta=SessionMeta(task="reviewed"))
    append_events(session=session, events=synthetic_events(20))
    finish_session(session=session)
    session.refresh_from_db()
    return session


@pytest.fixture
def rita(acme) -> Client:
    return signed_in("rita", acme, Role.REVIEWER)


@pytest.fixture
def rob(acme) -> Client:
    return signed_in("rob", acme, Role.REVIEWER)


@pytest.fixture
def ada(acme) -> Client:
    return signed_in("ada", acme, Role.ADMIN)


@pytest.fixture
def vic(acme) -> Client:
    return signed_in("vic", acme, Role.VIEWER)


def api_url(session: Session, *rest: object) -> str:
    return "/".join([f"/api/sessions/{session.pk}/comments", *map(str, rest)])


def post(client: Client, url: str, body: dict | None = None):
    return client.post(url, orjson.dumps(body or {}), content_type="application/json")


def patch(client: Client, url: str, body: dict):
    return client.patch(url, orjson.dumps(body), content_type="application/json")


def comment_on(client: Client, session: Session, **body) -> dict:
    response = post(client, api_url(session), body)
    assert response.status_code == 201, response.content
    return response.json()


# --- threads and replies ------------------------------------------------------------------------


def test_threads_list_in_seq_order_with_their_replies_oldest_first(ours, rita, rob, vic):
    late = comment_on(rita, ours, seq=9, body="later step")
    first = comment_on(rita, ours, seq=3, body="**why** this call?")
    reply = comment_on(rob, ours, parent=first["id"], body="it retried")
    second_reply = comment_on(rita, ours, parent=first["id"], body="thanks")
    threads = vic.get(api_url(ours)).json()
    assert [t["id"] for t in threads] == [first["id"], late["id"]]
    thread = threads[0]
    assert thread["seq"] == 3 and thread["author"] == "rita" and thread["body"] == "**why** this call?"
    assert thread["body_html"] == "<p><strong>why</strong> this call?</p>\n"
    assert thread["permalink"] == f"/sessions/{ours.pk}/?step=3#c-{first['id']}"
    assert [r["id"] for r in thread["replies"]] == [reply["id"], second_reply["id"]]
    assert thread["replies"][0] | {"created_at": None} == {
        "id": reply["id"], "seq": 3, "parent": first["id"], "author": "rob", "body": "it retried",
        "body_html": "<p>it retried</p>\n", "created_at": None, "edited_at": None, "deleted": False,
        "permalink": f"/sessions/{ours.pk}/?step=3#c-{reply['id']}", "restored_from": "", "redacted_at": None,
        "redacted_by": "",
    }  # fmt: skip
    assert thread["resolved"] is False and thread["replies"][0]["created_at"]


def test_a_reply_takes_its_threads_seq_and_a_reply_to_a_reply_joins_the_thread(ours, rita, rob):
    first = comment_on(rita, ours, seq=5, body="look here")
    reply = comment_on(rob, ours, parent=first["id"], body="yes")
    nested = comment_on(rita, ours, parent=reply["id"], body="and here")
    assert reply["seq"] == nested["seq"] == 5
    assert nested["parent"] == first["id"]
    response = post(rita, api_url(ours), {"parent": first["id"], "seq": 6, "body": "elsewhere"})
    assert response.status_code == 400 and "seq 5" in response.json()["detail"]


@pytest.mark.parametrize("seq", [20, 10_000])
def test_a_comment_on_an_event_the_session_does_not_have_is_refused(ours, rita, seq):
    response = post(rita, api_url(ours), {"seq": seq, "body": "nowhere"})
    assert response.status_code == 400
    assert response.json()["detail"] == f"seq: session {ours.pk} has no event at seq {seq} (its seqs are 0 to 19)"
    assert post(rita, api_url(ours), {"seq": -1, "body": "x"}).status_code == 400
    assert not Comment.objects.exists()


def test_a_reply_to_a_comment_of_another_session_is_refused(ours, acme, rita):
    elsewhere = create_session(project=acme, source_format="canonical", meta=SessionMeta())
    append_events(session=elsewhere, events=synthetic_events(3))
    theirs = comment_on(rita, elsewhere, seq=1, body="there")
    response = post(rita, api_url(ours), {"parent": theirs["id"], "body": "here"})
    assert response.status_code == 400 and "has no comment" in response.json()["detail"]


def test_an_empty_or_too_long_body_is_a_clear_400(ours, rita):
    assert post(rita, api_url(ours), {"seq": 1, "body": "  "}).json()["detail"] == "body: a comment needs some text"
    response = post(rita, api_url(ours), {"seq": 1, "body": "x" * (comments.MAX_BODY + 1)})
    assert response.status_code == 400
    assert response.json()["detail"] == "body: a comment holds at most 10,000 characters (this one has 10,001)"
    assert post(rita, api_url(ours), {"seq": 1, "body": "x" * comments.MAX_BODY}).status_code == 201


# --- edits, deletes, resolving ------------------------------------------------------------------


def test_editing_keeps_every_earlier_body_as_a_revision(ours, rita):
    made = comment_on(rita, ours, seq=2, body="first")
    edited = patch(rita, api_url(ours, made["id"]), {"body": "second"}).json()
    assert edited["body"] == "second" and edited["edited_at"]
    patch(rita, api_url(ours, made["id"]), {"body": "third"})
    revisions = list(CommentRevision.objects.filter(comment_id=made["id"]).values_list("body", flat=True))
    assert revisions == ["first", "second"]
    assert Comment.objects.get(pk=made["id"]).body == "third"
    # Each body with its own time: written when made or last edited, replaced at the next edit.
    comment = Comment.objects.get(pk=made["id"])
    first, second = CommentRevision.objects.filter(comment=comment).order_by("pk")
    assert first.written_at == comment.created_at and second.written_at == first.replaced_at
    assert second.replaced_at == comment.edited_at and first.replaced_at < second.replaced_at


def test_only_the_author_may_edit(ours, rita, rob, ada):
    made = comment_on(rita, ours, seq=2, body="mine")
    for someone in (rob, ada):
        response = patch(someone, api_url(ours, made["id"]), {"body": "theirs"})
        assert response.status_code == 403 and "author" in response.json()["detail"]
    assert Comment.objects.get(pk=made["id"]).body == "mine"


def test_only_the_author_or_an_admin_may_delete_and_the_thread_keeps_its_shape(ours, rita, rob, ada):
    first = comment_on(rita, ours, seq=4, body="start")
    reply = comment_on(rob, ours, parent=first["id"], body="answer")
    patch(rita, api_url(ours, first["id"]), {"body": "start, edited"})
    assert rob.delete(api_url(ours, first["id"])).status_code == 403
    assert rita.delete(api_url(ours, first["id"])).status_code == 204
    assert ada.delete(api_url(ours, reply["id"])).status_code == 204
    [thread] = rita.get(api_url(ours)).json()
    assert thread["id"] == first["id"] and thread["deleted"] and thread["body"] == thread["body_html"] == ""
    assert [r["id"] for r in thread["replies"]] == [reply["id"]] and thread["replies"][0]["deleted"]
    # The text is gone with its history; editing what is deleted is refused.
    assert not CommentRevision.objects.filter(comment_id=first["id"]).exists()
    assert patch(rita, api_url(ours, first["id"]), {"body": "back"}).status_code == 400


def test_a_thread_whose_every_comment_was_deleted_offers_no_reply_or_resolve(ours, rita, rob):
    alone = comment_on(rita, ours, seq=6, body="a lone thought")
    answered = comment_on(rita, ours, seq=6, body="asked")
    comment_on(rob, ours, parent=answered["id"], body="answered")
    assert rita.delete(api_url(ours, alone["id"])).status_code == 204
    assert rita.delete(api_url(ours, answered["id"])).status_code == 204
    # A reply to nothing is refused, naming the field; a thread with a live reply stays open.
    refused = post(rob, api_url(ours), {"parent": alone["id"], "body": "to whom?"})
    assert refused.status_code == 400 and refused.json()["detail"].startswith("parent: every comment of thread")
    comment_on(rob, ours, parent=answered["id"], body="still open")
    html = rita.get(f"/sessions/{ours.pk}/", {"step": 6}).content.decode()
    threads = context_panel(html)
    lone = threads[threads.index(f'id="c-{alone["id"]}"') :]
    lone = lone[: lone.index("</article>")]
    assert "(deleted)" in lone and "thread-actions" not in lone and "reply" not in lone
    live = threads[threads.index(f'id="c-{answered["id"]}"') :]
    live = live[: live.index("</article>")]
    assert "thread-actions" in live and "resolve" in live
    # A reply typed before the last comment went: refused, its text handed to the new-thread form.
    late = rob.post(f"/sessions/{ours.pk}/comments/", {"parent": alone["id"], "seq": 6, "body": "typed meanwhile"},
                    headers={"HX-Request": "true"})  # fmt: skip
    assert late.status_code == 400 and "every comment of thread" in late.content.decode()
    new_form = late.content.decode()[late.content.decode().index('id="comment-form"') :]
    assert 'id="comment-body"' in new_form and ">typed meanwhile</textarea>" in new_form


def test_resolving_a_thread_and_opening_it_again(ours, rita, rob):
    first = comment_on(rita, ours, seq=7, body="is this right?")
    reply = comment_on(rob, ours, parent=first["id"], body="fixed")
    resolved = post(rob, api_url(ours, reply["id"], "resolve")).json()  # a reply resolves its thread
    assert resolved["id"] == first["id"] and resolved["resolved"] and resolved["resolved_by"] == "rob"
    assert [r["id"] for r in resolved["replies"]] == [reply["id"]]
    reopened = post(rita, api_url(ours, first["id"], "resolve"), {"resolved": False}).json()
    assert not reopened["resolved"] and reopened["resolved_at"] is None and reopened["resolved_by"] == ""


def test_a_comment_of_another_session_is_not_found_here(ours, acme, rita):
    elsewhere = create_session(project=acme, source_format="canonical", meta=SessionMeta())
    append_events(session=elsewhere, events=synthetic_events(3))
    theirs = comment_on(rita, elsewhere, seq=1, body="there")
    assert patch(rita, api_url(ours, theirs["id"]), {"body": "x"}).status_code == 404
    assert rita.delete(api_url(ours, theirs["id"])).status_code == 404
    assert post(rita, api_url(ours, theirs["id"], "resolve")).status_code == 404
    assert post(rita, api_url(ours, 999_999, "resolve")).status_code == 404


# --- roles ----------------------------------------------------------------------------------------


def test_a_viewer_reads_comments_but_may_not_write_any(ours, rita, vic):
    made = comment_on(rita, ours, seq=1, body="hello")
    assert vic.get(api_url(ours)).status_code == 200
    assert post(vic, api_url(ours), {"seq": 1, "body": "me too"}).status_code == 403
    assert patch(vic, api_url(ours, made["id"]), {"body": "x"}).status_code == 403
    assert vic.delete(api_url(ours, made["id"])).status_code == 403
    assert post(vic, api_url(ours, made["id"], "resolve")).status_code == 403
    assert Comment.objects.count() == 1


def test_a_read_only_key_of_a_reviewer_cannot_comment(ours, acme):
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('kim', acme, Role.REVIEWER), read_only=True)}")
    assert post(api, api_url(ours), {"seq": 1, "body": "x"}).status_code == 403
    writer = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('kim', acme, Role.REVIEWER))}")
    assert post(writer, api_url(ours), {"seq": 1, "body": "x"}).status_code == 201


def test_a_non_member_gets_404_for_comments_and_sees_none(ours, other, rita):
    made = comment_on(rita, ours, seq=1, body="ACME-ONLY")
    outsider = signed_in("otto", other, Role.ADMIN)
    for response in (
        outsider.get(api_url(ours)),
        post(outsider, api_url(ours), {"seq": 1, "body": "x"}),
        patch(outsider, api_url(ours, made["id"]), {"body": "x"}),
        outsider.delete(api_url(ours, made["id"])),
        outsider.post(reverse("sessions:comment_create", args=[ours.pk]), {"seq": 1, "body": "x"}),
    ):
        assert response.status_code == 404 and b"ACME-ONLY" not in response.content


# --- the audit log --------------------------------------------------------------------------------


def test_each_action_is_an_audit_entry_holding_ids_and_seqs_never_the_body(ours, rita, ada):
    made = comment_on(rita, ours, seq=6, body="SECRET-FINDING")
    patch(rita, api_url(ours, made["id"]), {"body": "SECRET-FINDING-2"})
    post(rita, api_url(ours, made["id"], "resolve"))
    reply = comment_on(rita, ours, parent=made["id"], body="SECRET-REPLY")
    ada.delete(api_url(ours, reply["id"]))
    entries = list(AuditEntry.objects.filter(action__startswith="comment.").order_by("seq"))
    assert [(e.action, e.actor, e.target) for e in entries] == [
        ("comment.create", "rita", f"session:{ours.pk}"), ("comment.edit", "rita", f"session:{ours.pk}"),
        ("comment.resolve", "rita", f"session:{ours.pk}"), ("comment.create", "rita", f"session:{ours.pk}"),
        ("comment.delete", "ada", f"session:{ours.pk}"),
    ]  # fmt: skip
    details = [json.loads(e.detail) for e in entries]
    assert details[0] == {"comment": made["id"], "seq": 6}
    assert details[2] == {"comment": made["id"], "seq": 6, "resolved": True}
    assert details[3] == {"comment": reply["id"], "seq": 6, "parent": made["id"]}
    assert details[4] == {"comment": reply["id"], "seq": 6, "author": "rita"}
    assert all("SECRET" not in e.detail for e in entries)
    assert all(e.project_id == ours.project_id for e in entries)


def test_an_edit_that_changes_nothing_and_a_second_resolve_record_nothing(ours, rita):
    made = comment_on(rita, ours, seq=6, body="same")
    patch(rita, api_url(ours, made["id"]), {"body": "same"})
    post(rita, api_url(ours, made["id"], "resolve"))
    post(rita, api_url(ours, made["id"], "resolve"))
    actions = list(
        AuditEntry.objects.filter(action__startswith="comment.").order_by("seq").values_list("action", flat=True)
    )
    assert actions == ["comment.create", "comment.resolve"]


# --- Markdown, sanitised --------------------------------------------------------------------------


class Elements(HTMLParser):
    """Every element of a fragment with its attributes."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.found.append((tag, dict(attrs)))


HOSTILE = [
    "<script>alert(1)</script>",
    "[x](javascript:alert(1))",
    "[y](JAVASCRIPT:alert(1)) [z](  javascript&#58;alert(1))",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)" onclick="alert(2)">raw</a>',
    '<a href="https://example.com">raw but harmless</a>',
    "![pic](https://example.com/tracker.png)",
    "[d](data:text/html;base64,PHNjcmlwdD4=) [v](vbscript:msgbox(1))",
]


@pytest.mark.parametrize("body", HOSTILE)
def test_hostile_markdown_renders_inert(body):
    html = str(markdown.render_markdown(body))
    elements = Elements(html).found
    assert all(tag in markdown.ALLOWED_TAGS for tag, _ in elements), html
    assert not any(tag in ("script", "img", "iframe", "style") for tag, _ in elements)
    for tag, attrs in elements:
        assert not any(name.startswith("on") for name in attrs), html
        href = (attrs.get("href") or "").strip().lower()
        assert not href.startswith(("javascript:", "data:", "vbscript:")), html
        if tag == "a":
            assert attrs.get("rel") == "noopener nofollow"


def test_hostile_comments_reach_the_api_and_the_page_inert(ours, rita):
    made = comment_on(rita, ours, seq=3, body="\n\n".join(HOSTILE))
    [thread] = rita.get(api_url(ours)).json()
    assert thread["body"] == "\n\n".join(HOSTILE)  # the source is kept as written
    page = rita.get(thread["permalink"].split("#")[0]).content.decode()
    body = page[page.index(f'id="c-{made["id"]}"') :]
    body = body[: body.index("</article>")]
    elements = Elements(body).found
    assert not any(tag in ("script", "img") for tag, _ in elements)
    assert not any(name.startswith("on") for _, attrs in elements for name in attrs)
    assert not any((attrs.get("href") or "").lower().startswith("javascript") for _, attrs in elements)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body  # shown as the text it is


def test_links_get_rel_noopener_nofollow_and_keep_safe_targets():
    html = str(
        markdown.render_markdown("[a](https://example.com/x) [m](mailto:ops@example.com) [p](/sessions/1/?step=2#c-3)")
    )
    links = [attrs for tag, attrs in Elements(html).found if tag == "a"]
    assert [a["href"] for a in links] == ["https://example.com/x", "mailto:ops@example.com", "/sessions/1/?step=2#c-3"]
    assert all(a["rel"] == "noopener nofollow" for a in links)


# --- the player: permalinks, panel, marks, Discussion -----------------------------------------


def frame_seq(html: str) -> int:
    found = re.search(r'<script id="frame-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))["seq"]


def context_panel(html: str) -> str:
    start = html.index('<section id="context-panel"')
    return html[start : html.index("Counts by kind", start)]


def test_a_permalink_opens_the_player_at_its_step_with_the_thread_in_the_context_panel(ours, rita, vic):
    first = comment_on(rita, ours, seq=11, body="the moment")
    reply = comment_on(rita, ours, parent=first["id"], body="the answer")
    comment_on(rita, ours, seq=2, body="another moment")
    path, anchor = reply["permalink"].split("#")
    assert path == f"/sessions/{ours.pk}/?step=11" and anchor == f"c-{reply['id']}"
    response = vic.get(path)
    html = response.content.decode()
    assert response.status_code == 200 and frame_seq(html) == 11
    panel = context_panel(html)
    assert f'id="c-{first["id"]}"' in panel and f'id="c-{reply["id"]}"' in panel
    assert "the answer" in panel and "another moment" not in panel


def test_the_htmx_frame_brings_the_threads_of_its_step_in_the_context_panel(ours, rita):
    made = comment_on(rita, ours, seq=8, body="in the frame")
    html = rita.get(f"/sessions/{ours.pk}/", {"step": 8}, HTTP_HX_REQUEST="true").content.decode()
    assert html.lstrip().startswith('<section id="step-list"')
    assert 'id="comment-threads"' in context_panel(html) and f'id="c-{made["id"]}"' in html
    assert 'id="discussion"' not in html  # the page's list stays; only a write updates it
    other = rita.get(f"/sessions/{ours.pk}/", {"step": 9}, HTTP_HX_REQUEST="true").content.decode()
    assert f'id="c-{made["id"]}"' not in other and "Comments at #10" in other  # seq 9, shown 1-based


def test_the_full_page_lists_every_thread_in_the_discussion_and_marks_the_scrubber(ours, rita, vic):
    a = comment_on(rita, ours, seq=4, body="first finding")
    b = comment_on(rita, ours, seq=15, body="second finding")
    post(rita, api_url(ours, b["id"], "resolve"))
    html = vic.get(f"/sessions/{ours.pk}/").content.decode()
    discussion = html[html.index('<section id="discussion"') :]
    assert f'href="{a["permalink"]}"' in discussion and f'href="{b["permalink"]}"' in discussion
    # Events are numbered 1-based on the page (seq 4 is event #5).
    assert "event #5" in discussion and "event #16" in discussion and "resolved" in discussion
    marks = html[html.index('<div id="comment-marks"') : html.index('id="scrubber-cursor"')]
    assert marks.count('class="comment-mark"') == 1 and marks.count('class="comment-mark resolved"') == 1
    assert 'data-seq="4"' in marks and 'data-seq="15"' in marks
    assert 'href="#discussion"' in html


def test_the_discussion_leaves_out_and_does_not_count_a_thread_whose_every_comment_was_deleted(ours, rita, rob, vic):
    gone = comment_on(rita, ours, seq=3, body="withdrawn")
    gone_reply = comment_on(rob, ours, parent=gone["id"], body="agreed, withdrawn")
    answered = comment_on(rita, ours, seq=8, body="asked")
    comment_on(rob, ours, parent=answered["id"], body="answered")
    gone_answer = comment_on(rob, ours, parent=answered["id"], body="second thought")
    kept = comment_on(rita, ours, seq=12, body="kept")
    assert rob.delete(api_url(ours, gone_reply["id"])).status_code == 204
    assert rob.delete(api_url(ours, gone_answer["id"])).status_code == 204
    assert rita.delete(api_url(ours, gone["id"])).status_code == 204
    assert rita.delete(api_url(ours, answered["id"])).status_code == 204
    html = vic.get(f"/sessions/{ours.pk}/").content.decode()
    discussion = html[html.index('<section id="discussion"') :]
    discussion = discussion[: discussion.index("</section>")]
    # The thread with a live reply stays, "(deleted)" with its one live reply; the other is gone.
    assert "(2 threads)" in discussion and "Discussion (2)" in html
    assert f'href="{answered["permalink"]}"' in discussion and f'href="{kept["permalink"]}"' in discussion
    assert f'href="{gone["permalink"]}"' not in discussion
    assert "(deleted)" in discussion and "· 1 reply" in discussion
    marks = html[html.index('<div id="comment-marks"') : html.index('id="scrubber-cursor"')]
    assert 'aria-label="2 comment threads"' in marks and 'data-seq="3"' not in marks
    # The API still lists it, as the record of what was said and removed.
    assert gone["id"] in [thread["id"] for thread in vic.get(api_url(ours)).json()]


def test_the_discussion_list_previews_a_comment_as_the_text_it_shows_not_its_markdown(ours, rita, vic):
    body = "**Wrong tool** at `grep -r`: see [the log](https://example.com/log) &amp; <b>this</b>\n\n> quoted"
    comment_on(rita, ours, seq=3, body=body)
    long = comment_on(rita, ours, seq=4, body="# Heading\n\n" + "word " * 400)
    html = vic.get(f"/sessions/{ours.pk}/").content.decode()
    discussion = html[html.index('<section id="discussion"') :]
    discussion = discussion[: discussion.index("</section>")]
    snippets = re.findall(r'<bdi class="snippet">(.*?)</bdi>', discussion, re.S)
    # Markdown reads "&amp;" as the character &, as the comment itself shows it; the page escapes it.
    assert snippets[0] == "Wrong tool at grep -r: see the log &amp; &lt;b&gt;this&lt;/b&gt; quoted"
    assert snippets[1].startswith("Heading word word") and len(snippets[1]) <= 160
    assert long["body"].startswith("# Heading")  # the API keeps the source as written
    assert "<b>this</b>" not in discussion and "**" not in discussion


def test_a_history_restore_gets_the_full_page_with_discussion_and_threads(ours, rita):
    made = comment_on(rita, ours, seq=5, body="restored")
    response = rita.get(f"/sessions/{ours.pk}/", {"step": 5}, HTTP_HX_REQUEST="true",
                        HTTP_HX_HISTORY_RESTORE_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    assert "<html" in html and 'id="discussion"' in html and 'id="comment-marks"' in html
    assert f'id="c-{made["id"]}"' in context_panel(html)
    assert "hx-swap-oob" not in html[html.index('<section id="discussion"') :].split(">")[0]


def test_the_frame_reads_the_threads_of_its_step_in_one_query_however_many_there_are(ours, rita):
    def frame_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            rita.get(f"/sessions/{ours.pk}/", {"step": 10}, HTTP_HX_REQUEST="true")
        return len([q for q in queries.captured_queries if "comment" in q["sql"].lower()]), len(queries)

    before = frame_queries()
    for n in range(6):
        thread = comment_on(rita, ours, seq=10, body=f"thread {n}")
        comment_on(rita, ours, parent=thread["id"], body=f"reply {n}")
        comment_on(rita, ours, seq=n, body=f"elsewhere {n}")
    assert frame_queries() == before and before[0] == 1


def test_every_step_has_a_copy_link_to_its_moment(ours, vic):
    html = vic.get(f"/sessions/{ours.pk}/", {"step": 6}).content.decode()
    assert f'data-copy-link="http://testserver/sessions/{ours.pk}/?step=6"' in html
    assert f'value="http://testserver/sessions/{ours.pk}/?step=6" readonly hidden' in html  # the fallback field


def test_a_viewer_sees_threads_but_no_forms_and_cannot_post_from_the_page(ours, rita, vic):
    made = comment_on(rita, ours, seq=3, body="read me")
    html = vic.get(f"/sessions/{ours.pk}/", {"step": 3}).content.decode()
    assert "read me" in html and 'id="comment-form"' not in html and "comment_resolve" not in html
    assert reverse("sessions:comment_create", args=[ours.pk]) not in html
    for name, args in (("comment_create", [ours.pk]), ("comment_edit", [ours.pk, made["id"]]),
                       ("comment_delete", [ours.pk, made["id"]]), ("comment_resolve", [ours.pk, made["id"]])):  # fmt: skip
        assert vic.post(reverse(f"sessions:{name}", args=args), {"body": "x", "seq": 3}).status_code == 403


def test_a_reviewer_sees_edit_and_delete_on_their_own_comment_only(ours, rita, rob):
    mine = comment_on(rita, ours, seq=3, body="mine")
    theirs = comment_on(rob, ours, seq=3, body="theirs")
    html = rita.get(f"/sessions/{ours.pk}/", {"step": 3}).content.decode()
    assert reverse("sessions:comment_edit", args=[ours.pk, mine["id"]]) in html
    assert reverse("sessions:comment_edit", args=[ours.pk, theirs["id"]]) not in html
    assert reverse("sessions:comment_delete", args=[ours.pk, theirs["id"]]) not in html
    assert 'id="comment-form"' in html and reverse("sessions:comment_resolve", args=[ours.pk, theirs["id"]]) in html


def test_commenting_from_the_panel_answers_with_the_threads_and_updates_the_list_and_marks(ours, rita):
    response = rita.post(reverse("sessions:comment_create", args=[ours.pk]), {"seq": 12, "body": "from the panel"},
                         HTTP_HX_REQUEST="true")  # fmt: skip
    html = response.content.decode()
    made = Comment.objects.get()
    assert response.status_code == 200 and html.lstrip().startswith('<section id="comment-threads"')
    assert f'id="c-{made.pk}"' in html and "from the panel" in html
    assert '<div id="comment-marks" class="comment-marks" hx-swap-oob="true">' in html
    assert '<section id="discussion" class="discussion" aria-labelledby="discussion-title" hx-swap-oob="true">' in html
    assert "HX-Request" in response["Vary"]


def test_replying_editing_resolving_and_deleting_from_the_panel(ours, rita, ada):
    create = reverse("sessions:comment_create", args=[ours.pk])
    rita.post(create, {"seq": 12, "body": "start"}, HTTP_HX_REQUEST="true")
    first = Comment.objects.get()
    rita.post(create, {"seq": 12, "parent": first.pk, "body": "reply"}, HTTP_HX_REQUEST="true")
    reply = Comment.objects.exclude(pk=first.pk).get()
    assert reply.parent_id == first.pk and reply.seq == 12
    rita.post(
        reverse("sessions:comment_edit", args=[ours.pk, first.pk]), {"body": "start, better"}, HTTP_HX_REQUEST="true"
    )
    rita.post(
        reverse("sessions:comment_resolve", args=[ours.pk, first.pk]), {"resolved": "true"}, HTTP_HX_REQUEST="true"
    )
    first.refresh_from_db()
    assert first.body == "start, better" and first.resolved_at is not None
    html = rita.post(reverse("sessions:comment_resolve", args=[ours.pk, first.pk]), {"resolved": "false"},
                     HTTP_HX_REQUEST="true").content.decode()  # fmt: skip
    assert ">resolve</button>" in html
    ada.post(reverse("sessions:comment_delete", args=[ours.pk, reply.pk]), HTTP_HX_REQUEST="true")
    reply.refresh_from_db()
    assert reply.deleted_at is not None and reply.body == ""


def test_a_refused_comment_from_the_panel_says_why_with_400(ours, rita):
    response = rita.post(reverse("sessions:comment_create", args=[ours.pk]),
                         {"seq": 12, "body": "x" * (comments.MAX_BODY + 1)}, HTTP_HX_REQUEST="true")  # fmt: skip
    assert response.status_code == 400
    assert "at most 10,000 characters" in response.content.decode()
    assert not Comment.objects.exists()


def test_a_plain_form_post_goes_back_to_the_comments_moment(ours, rita):
    response = rita.post(reverse("sessions:comment_create", args=[ours.pk]), {"seq": 12, "body": "no js"})
    made = Comment.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/sessions/{ours.pk}/?step=12#c-{made.pk}"


def test_a_plain_form_post_refused_comes_back_to_the_player_with_its_error_and_text(ours, rita):
    # Without JavaScript: back to the player at the comment's moment, which says why once and
    # gives the text typed back in the form it was typed in (not a bare text page).
    create = reverse("sessions:comment_create", args=[ours.pk])
    too_long = "keep me " * 1300  # over the 10,000 characters a comment holds
    response = rita.post(create, {"seq": 12, "body": too_long})
    assert response.status_code == 302 and response["Location"] == f"/sessions/{ours.pk}/?step=12#comment-threads"
    page = rita.get(response["Location"]).content.decode()
    # The workflow's refusal names the field as the form does ("Comment", not the API's "body"),
    # and says that what comes back is cut.
    assert "Comment: a comment holds at most 10,000 characters" in page and "body:" not in page
    assert "The text given back is its first 10,000 characters." in page
    assert (
        f'<textarea name="body" id="comment-body" rows="3" maxlength="10000" required>{too_long[:10_000]}</textarea>'
        in page
    )
    again = rita.get(response["Location"]).content.decode()
    assert "at most 10,000 characters" not in again and "keep me" not in again  # said once
    assert not Comment.objects.exists()

    author = get_user_model().objects.get(username="rita")
    first = comments.create_comment(actor=Actor(user=author), session=ours, seq=12, body="first")
    response = rita.post(create, {"seq": 12, "parent": first.pk, "body": "   "})
    page = rita.get(response["Location"]).content.decode()
    assert "Comment: This field is required." in page  # the form's label, not the field's name
    assert '<details class="comment-reply" open>' in page  # the reply form it came from, open
    response = rita.post(reverse("sessions:comment_edit", args=[ours.pk, first.pk]), {"body": "x" * 10_001})
    page = rita.get(response["Location"]).content.decode()
    assert '<details class="comment-edit" open>' in page and "x" * 10_000 + "</textarea>" in page
    first.refresh_from_db()
    assert first.body == "first"


def test_a_refused_comment_nobody_came_back_for_is_not_shown_later(ours, rita, monkeypatch):
    create = reverse("sessions:comment_create", args=[ours.pk])
    rita.post(create, {"seq": 3, "body": "x" * 10_001})
    later = time.time() + 3600
    monkeypatch.setattr(time, "time", lambda: later)
    page = rita.get(reverse("sessions:player", args=[ours.pk])).content.decode()
    assert "at most 10,000 characters" not in page and "x" * 100 not in page


def test_a_viewer_is_not_told_to_comment(ours, acme, client):
    viewer = member("vic", acme, Role.VIEWER)
    client.force_login(viewer)
    page = client.get(reverse("sessions:player", args=[ours.pk])).content.decode()
    assert "No comments yet." in page and "comment on an event from its context panel" not in page


def test_workflows_refuse_someone_elses_edit_without_a_request(ours, acme):
    from django.core.exceptions import PermissionDenied

    author, other_user = member("ann", acme, Role.REVIEWER), member("ben", acme, Role.REVIEWER)
    made = comments.create_comment(actor=Actor(user=author), session=ours, seq=1, body="x")
    with pytest.raises(PermissionDenied):
        comments.edit_comment(actor=Actor(user=other_user), comment=made, body="y")
    with pytest.raises(PermissionDenied):
        comments.delete_comment(actor=Actor(user=other_user), comment=made, role=Role.MAINTAINER)
    comments.delete_comment(actor=Actor(user=other_user), comment=made, role=Role.ADMIN)


@pytest.mark.parametrize(
    "body, shown",
    [
        ("![pic](https://example.com/x.png)", '<p><a href="https://example.com/x.png" rel="noopener nofollow">pic</a></p>'),
        ("![](https://example.com/x.png)", '<p><a href="https://example.com/x.png" rel="noopener nofollow">https://example.com/x.png</a></p>'),
        ('see ![a <b> "q"](/x.png) end', '<p>see <a href="/x.png" rel="noopener nofollow">a &lt;b&gt; "q"</a> end</p>'),
        ("![x](data:image/png;base64,AAAA)", '<p><a rel="noopener nofollow">x</a></p>'),
        # A badge: the image's words inside the one link, to its target.
        ("[![build](https://ci/x.svg)](https://ci/run/1)", '<p><a href="https://ci/run/1" rel="noopener nofollow">build</a></p>'),
    ],
)  # fmt: skip
def test_an_image_shows_as_a_link_to_it_and_nothing_is_loaded(body, shown):
    # Not an <img> (a page loads nothing from outside the server), and no stray "!" before it.
    assert str(markdown.render_markdown(body)).strip() == shown


# --- races: a request holds the comment it loaded while another changes it ---------------------


def test_an_edit_sent_with_a_comment_loaded_before_its_delete_or_redaction_writes_nothing_back(ours, acme):
    # A security sweep's race on PostgreSQL: the edit's stale row wrote the deleted text back
    # (as a revision and as the body), and a redacted value into a revision.
    author = Actor(user=member("rita", acme, Role.REVIEWER))
    admin = Actor(user=member("ada", acme, Role.ADMIN))
    comment = comments.create_comment(actor=author, session=ours, seq=2, body="SECRET-ORIGINAL")
    stale = Comment.objects.get(pk=comment.pk)
    comments.delete_comment(actor=admin, comment=Comment.objects.get(pk=comment.pk), role=Role.ADMIN)
    with pytest.raises(comments.CommentError, match="a deleted comment cannot be edited"):
        comments.edit_comment(actor=author, comment=stale, body="text after delete")
    stored = Comment.objects.get(pk=comment.pk)
    assert (stored.body, stored.deleted_at is not None) == ("", True)
    assert not CommentRevision.objects.filter(comment=comment).exists()
    # Deleted again by a request that loaded it before: one deletion, one audit entry.
    comments.delete_comment(actor=admin, comment=stale, role=Role.ADMIN)
    assert AuditEntry.objects.filter(action="comment.delete").count() == 1

    other = comments.create_comment(actor=author, session=ours, seq=3, body="look: sk-LEAKED-0123456789")
    stale = Comment.objects.get(pk=other.pk)
    Comment.objects.filter(pk=other.pk).update(body="look: [REDACTED:manual]")  # a redaction since
    comments.edit_comment(actor=author, comment=stale, body="look again")
    (revision,) = CommentRevision.objects.filter(comment=other)
    assert revision.body == "look: [REDACTED:manual]"
    # Resolved twice from two loads: once in the log.
    first, second = Comment.objects.get(pk=other.pk), Comment.objects.get(pk=other.pk)
    comments.resolve_thread(actor=author, comment=first)
    comments.resolve_thread(actor=author, comment=second)
    assert AuditEntry.objects.filter(action="comment.resolve").count() == 1


def test_a_comment_is_stored_with_its_audit_entry_or_not_at_all(ours, acme, monkeypatch):
    # A locked database at the audit write answered 503 "try again" with the comment stored
    # unaudited, and the retry stored it twice.
    from django.db import OperationalError

    from sessions_app import audit

    def locked(**kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(audit, "record", locked)
    author = Actor(user=member("rita", acme, Role.REVIEWER))
    with pytest.raises(OperationalError):
        comments.create_comment(actor=author, session=ours, seq=2, body="once")
    assert not Comment.objects.exists()


def test_direction_overrides_in_what_people_write_are_shown_as_code_points(ours, rita):
    # A right-to-left override turns what follows it around: "need work \u202eevorppa" reads
    # "need work approve" in a sign-off's note or a comment. Written out as its code point where
    # it is shown (as names are, lookalikes.shown_plainly); line breaks and plain right-to-left
    # text stay as written.
    from sessions_app.reviews import sign_off

    turned = "Steps 6-12 need work \u202eevorppa\u202c"
    made = rita.post(f"/api/sessions/{ours.pk}/comments", {"seq": 3, "body": f"**why?** {turned}\n\nשלום"},
                     content_type="application/json")  # fmt: skip
    assert made.status_code == 201, made.content
    rita_user = get_user_model().objects.get(username="rita")
    sign_off(session=ours, reviewer=Actor(user=rita_user), verdict="changes_requested", note=f"{turned}\nsecond line")
    page = rita.get(f"/sessions/{ours.pk}/?step=3").content.decode()
    # (The edit form's text area holds the text as written: saved again, it stays as it was.)
    assert "need work \u202eevorppa\u202c\n\nשלום</textarea>" in page
    page = re.sub(r"<textarea[^>]*>.*?</textarea>", "", page, flags=re.S)
    assert "\u202e" not in page and "\u202c" not in page
    assert "need work \\u202eevorppa\\u202c<br>second line" in page
    assert "<strong>why?</strong> Steps 6-12 need work \\u202eevorppa\\u202c" in page and "שלום" in page
    assert "\u202e" in Comment.objects.get(session=ours).body  # stored as written
