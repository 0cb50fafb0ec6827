"""Three small fixes from a review: the nesting limit is orjson's real one everywhere, checkpoint
form errors name what the page names, (AgentLens retries: tests/test_agentlens_ingest.py)."""

from __future__ import annotations

import re

import orjson
import pytest
from django.test import Client

from sessions_app.formats import MAX_DEPTH
from sessions_app.ingest import live
from sessions_app.ingest.writer import set_checkpoint
from sessions_app.models import Checkpoint, Project, Session

from .builders_dashboard import build_session, conversation_events, logged_in, user  # noqa: F401
from .builders_teams import maintainer_key
from .test_bad_input_readers import imported, native_file


def nested(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


def deep_value(levels: int):
    value: object = 1
    for _ in range(levels):
        value = {"a": value}
    return value


# --- the nesting limit -------------------------------------------------------------------------


def test_the_limit_is_what_orjson_writes():
    # The deepest value orjson.dumps writes; one more level is refused.
    orjson.dumps(deep_value(MAX_DEPTH))
    orjson.dumps([deep_value(MAX_DEPTH - 1)])
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(deep_value(MAX_DEPTH + 1))
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps([deep_value(MAX_DEPTH)])
    assert live.MAX_NESTING == MAX_DEPTH


def native_line(levels: int) -> bytes:
    """A native record nested `levels` deep in all (the record itself the first)."""
    return b'{"event_type": "error", "step": 1, "data": ' + nested(levels - 1) + b"}"


def test_a_file_record_at_the_limit_imports_and_one_level_deeper_is_a_problem_on_its_line(db, tmp_path):
    at = imported(native_file(tmp_path, native_line(MAX_DEPTH)))
    assert at.error is None and at.problems == [], (at.error, at.problems)
    assert at.events == 3

    deeper = tmp_path / "deeper"
    deeper.mkdir()
    outcome = imported(native_file(deeper, native_line(MAX_DEPTH + 1)))
    assert outcome.events == 2
    assert [(p["line"], p["field"], p["message"]) for p in outcome.problems] == [
        (2, "line", f"cannot be stored: nested deeper than {MAX_DEPTH} levels")
    ]


def post_live(levels: int):
    """One canonical record nested `levels` deep in all, to the live ingest API."""
    client = Client(HTTP_AUTHORIZATION=f"Bearer {maintainer_key()}")
    created = client.post("/api/sessions", {"project": Project.get_default().slug}, content_type="application/json")
    assert created.status_code == 201, created.content
    record = b'{"kind":"custom","payload":' + nested(levels - 1) + b',"timestamp":"2026-02-08T10:30:00Z"}'
    body = b'{"format":"canonical","events":[' + record + b"]}"
    response = client.post(created.json()["events_url"], body, content_type="application/json")
    return response, Session.objects.get(pk=created.json()["id"])


def test_a_live_record_at_the_limit_is_stored_and_one_level_deeper_is_a_400(db):
    response, session = post_live(MAX_DEPTH)
    assert response.status_code < 300, response.content
    session.refresh_from_db()
    assert session.event_count == 1

    response, session = post_live(MAX_DEPTH + 1)
    assert response.status_code == 400, response.content
    error = response.json()["errors"][0]
    assert error["index"] == 0 and error["field"] == "payload"
    assert error["message"] == f"cannot be stored: nested deeper than {MAX_DEPTH} levels"
    session.refresh_from_db()
    assert session.event_count == 0


def test_a_record_at_the_limit_is_answered_by_every_read_that_carries_it(db):
    """An answer puts a stored value a few levels further in than it was stored (a context's
    events, a search's hits): orjson would not write it in one go, and these were 500s."""
    response, session = post_live(MAX_DEPTH)
    assert response.status_code < 300, response.content
    client = Client(HTTP_AUTHORIZATION=f"Bearer {maintainer_key('reader')}")
    base = f"/api/sessions/{session.pk}"
    for url in (
        f"{base}/context?seq=0",
        f"{base}/search?q=1",
        f"{base}/replay",
    ):
        answer = client.get(url)
        assert answer.status_code == 200, (url, answer.content[:200])
        assert nested(MAX_DEPTH - 1) in answer.content, url  # the value itself, whole
        orjson.loads(answer.content)  # and valid JSON around it


# --- checkpoint form errors in the player ------------------------------------------------------

# What the panel must never show: a posted field's name where a label belongs, the API's "seq",
# Django's defaults.
INTERNAL = re.compile(r"(?:^|[:;] )(?:seq|step|name)\b|\bseq\b|This field|Ensure this value")


@pytest.fixture
def talk(db) -> Session:
    return build_session(conversation_events(turns=3), source_session_id="talk")


def shown_error(response) -> str:
    html = response.content.decode()
    start = html.index('<p class="error" role="alert">') + len('<p class="error" role="alert">')
    return html[start : html.index("</p>", start)]


@pytest.mark.parametrize("htmx", [True, False])
@pytest.mark.parametrize(
    "body,message",
    [
        ({"name": "", "step": 2}, "Not saved: Name: give the checkpoint a name."),
        ({"name": "   ", "step": 2}, "Not saved: Name: give the checkpoint a name."),
        ({"name": "x" * 201, "step": 2}, "Not saved: Name: at most 200 characters (it has 201)."),
        ({"name": "x", "step": 36}, "Not saved: Event: this session has no event #37 (its events are #1 to #36)."),
        ({"name": "x", "step": 10**30}, "Not saved: Event: not an event of this session."),
        ({"name": "x", "step": "three"}, "Not saved: Event: not an event of this session."),
        ({"name": "x"}, "Not saved: Event: no event is shown."),
        ({"step": 2}, "Not saved: Name: give the checkpoint a name."),
    ],
)
def test_a_refused_checkpoint_names_fields_as_the_page_does(logged_in, talk, htmx, body, message):  # noqa: F811
    url = f"/sessions/{talk.pk}/checkpoints/"
    response = logged_in.post(url, body, **({"HTTP_HX_REQUEST": "true"} if htmx else {}))
    assert response.status_code == 400
    shown = shown_error(response)
    assert shown == message
    assert not INTERNAL.search(shown), shown
    assert not Checkpoint.objects.exists()


def test_a_session_without_events_says_so(logged_in, db):  # noqa: F811
    empty = build_session([], source_session_id="empty")
    response = logged_in.post(f"/sessions/{empty.pk}/checkpoints/", {"name": "x", "step": 0}, HTTP_HX_REQUEST="true")
    assert response.status_code == 400
    assert shown_error(response) == "Not saved: Event: this session has no events yet."


@pytest.mark.parametrize("htmx", [True, False])
@pytest.mark.parametrize(
    "name,message",
    [
        ("", "Not renamed: New name: give the checkpoint a name."),
        ("\x00 ", "Not renamed: New name: Null characters are not allowed."),
        ("y" * 250, "Not renamed: New name: at most 200 characters (it has 250)."),
    ],
)
def test_a_refused_rename_names_fields_as_the_page_does(logged_in, talk, htmx, name, message):  # noqa: F811
    kept = set_checkpoint(session=talk, name="first", seq=5)
    url = f"/sessions/{talk.pk}/checkpoints/{kept.pk}/rename/"
    response = logged_in.post(url, {"name": name}, **({"HTTP_HX_REQUEST": "true"} if htmx else {}))
    assert response.status_code == 400
    shown = shown_error(response)
    assert shown == message
    assert not INTERNAL.search(shown), shown
    assert Checkpoint.objects.get(pk=kept.pk).name == "first"
