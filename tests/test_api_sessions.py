"""GET /api/sessions (filters, keyset pages), GET and DELETE /api/sessions/{id}."""

from __future__ import annotations

import pytest

from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import finish_session, set_checkpoint
from sessions_app.models import Event, Project, Role, Session, Snapshot
from sessions_app.verification import verify_session

from .builders_replay import api, get_json  # noqa: F401  (fixture)
from .builders_teams import member


@pytest.fixture
def sessions(make_session):
    other = Project.objects.create(name="Other", slug="other")
    a = make_session(events=20, task="Summarise the quarterly report", model="gpt-4o")
    finish_session(session=a)
    verify_session(session=a)
    b = make_session(events=10, task="Parse CSV", model="claude-3-5-sonnet", source_format="rlm_native")
    c = make_session(events=5, task="Other project task", model="gpt-4o")
    Session.objects.filter(pk=c.pk).update(project=other)
    member("owner-of-tests", other, role=Role.VIEWER)  # the `api` key's user sees both projects
    return a, b, c


def ids(body) -> list[int]:
    return [s["id"] for s in body["sessions"]]


def test_list_is_newest_first_with_totals(api, sessions):
    a, b, c = sessions
    body = get_json(api, "/api/sessions")
    assert ids(body) == [c.pk, b.pk, a.pk] and body["total"] == 3 and body["next"] is None
    row = next(s for s in body["sessions"] if s["id"] == a.pk)
    assert row["project"] == "default" and row["status"] == "completed"
    assert row["eventCount"] == 20 and row["stepCount"] == 4 and row["chainValid"] is True


@pytest.mark.parametrize(
    "query,expected",
    [
        ("project=other", ["c"]),
        ("project=default", ["b", "a"]),
        ("format=rlm_native", ["b"]),
        ("status=completed", ["a"]),
        ("status=live", ["c", "b"]),
        ("model=claude", ["b"]),
        ("q=quarterly", ["a"]),
        ("q=task&project=other", ["c"]),
    ],
)
def test_list_filters(api, sessions, query, expected):
    by_name = dict(zip("abc", (s.pk for s in sessions)))
    body = get_json(api, f"/api/sessions?{query}")
    assert ids(body) == [by_name[name] for name in expected]
    assert body["total"] == len(expected)


def test_the_api_and_the_page_list_the_same_sessions_for_a_model_any_session_used(
    api, sessions, client, django_user_model
):
    a, _, _ = sessions
    Session.objects.filter(pk=a.pk).update(models_used=["gpt-4o", "o3-mini"])
    assert ids(get_json(api, "/api/sessions?model=o3")) == [a.pk]
    client.force_login(member("viewer", role=Role.VIEWER))
    html = client.get("/sessions/", {"model": "o3"}, HTTP_HX_REQUEST="true").content.decode()
    assert f'<tr data-session="{a.pk}">' in html and html.count("<tr data-session=") == 1


def test_a_recording_that_stops_mid_action_is_listed_and_filtered_as_interrupted(api, make_session):
    done = make_session(events=3)
    finish_session(session=done, meta=SessionMeta(completed=True))
    stopped = make_session(events=3)
    finish_session(session=stopped, meta=SessionMeta(completed=False, interrupted=True))
    failed = make_session(events=3)
    finish_session(session=failed, meta=SessionMeta(completed=False, failed=True, interrupted=True))
    assert ids(get_json(api, "/api/sessions?status=interrupted")) == [stopped.pk]
    assert ids(get_json(api, "/api/sessions?status=failed")) == [failed.pk]  # failed wins
    assert get_json(api, f"/api/sessions/{stopped.pk}")["session"]["status"] == "interrupted"


def test_list_pages_with_a_keyset_cursor(api, sessions):
    first = get_json(api, "/api/sessions?limit=2")
    assert len(first["sessions"]) == 2 and first["next"] == first["sessions"][-1]["id"]
    second = get_json(api, f"/api/sessions?limit=2&before={first['next']}")
    assert ids(second) == [sessions[0].pk] and second["next"] is None


def test_list_rejects_bad_parameters(api, sessions):
    assert "limit" in get_json(api, "/api/sessions?limit=0", 400)["detail"]
    assert "status" in get_json(api, "/api/sessions?status=sleeping", 400)["detail"]


def test_detail_has_summary_and_checkpoints(api, make_session):
    session = make_session(events=30, source_session_id="run-7", task="t")
    set_checkpoint(session=session, name="before", seq=12, created_by="me")
    body = get_json(api, f"/api/sessions/{session.pk}")
    assert body["session"]["sourceSessionId"] == "run-7"
    assert body["summary"]["total_steps"] == 6 and body["summary"]["session_id"] == "run-7"
    assert body["checkpoints"] == [
        {
            "name": "before",
            "seq": 12,
            "stepPos": 1,
            "note": "",
            "createdBy": "me",
            "createdAt": body["checkpoints"][0]["createdAt"],
        }
    ]


def test_unknown_session_is_404(api, db):
    assert get_json(api, "/api/sessions/999999", 404) == {"detail": "session 999999 not found"}


def test_delete_removes_the_session_and_everything_under_it(api, make_session):
    session = make_session(events=600)
    set_checkpoint(session=session, name="x", seq=3)
    assert Snapshot.objects.filter(session_id=session.pk).exists()
    response = api.delete(f"/api/sessions/{session.pk}")
    assert response.status_code == 204
    assert not Session.objects.filter(pk=session.pk).exists()
    assert not Event.objects.filter(session_id=session.pk).exists()
    assert not Snapshot.objects.filter(session_id=session.pk).exists()
    assert api.delete(f"/api/sessions/{session.pk}").status_code == 404
