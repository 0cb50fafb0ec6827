"""GET|POST .../checkpoints, GET|DELETE .../checkpoints/{name}: a checkpoint gives the full
state at its position."""

from __future__ import annotations

import orjson
import pytest

from sessions_app import replay
from sessions_app.models import Checkpoint

from .builders_replay import api, api_key, get_json, recorded_session  # noqa: F401  (fixture)


def post(client, url: str, body: dict):
    return client.post(url, data=orjson.dumps(body), content_type="application/json")


@pytest.fixture
def session(make_session):
    return make_session(events=500)


def test_create_a_checkpoint_at_a_step_and_get_its_full_state(api, session):
    response = post(
        api, f"/api/sessions/{session.pk}/checkpoints", {"name": "before retry", "step": 40, "note": "look here"}
    )
    assert response.status_code == 201
    body = orjson.loads(response.content)
    seq = replay.step_seq(session=session, index=40)
    assert body["checkpoint"]["seq"] == seq and body["checkpoint"]["stepPos"] == 40
    assert body["checkpoint"]["note"] == "look here" and body["checkpoint"]["createdBy"] == "owner-of-tests"
    assert body["stepState"] == replay.step_state_at(session=session, index=40)
    assert body["context"]["eventIndex"] == seq
    assert body["context"]["variables"] == replay.state_at(session=session, seq=seq)["variables"]
    again = get_json(api, f"/api/sessions/{session.pk}/checkpoints/before%20retry")
    assert again == body


def test_create_at_an_event_list_and_move(api, session):
    assert post(api, f"/api/sessions/{session.pk}/checkpoints", {"name": "b", "seq": 300}).status_code == 201
    assert post(api, f"/api/sessions/{session.pk}/checkpoints", {"name": "a", "seq": 12}).status_code == 201
    listed = get_json(api, f"/api/sessions/{session.pk}/checkpoints")
    assert [(c["name"], c["seq"], c["stepPos"]) for c in listed] == [("a", 12, 1), ("b", 300, 59)]
    # The same name again is refused, saying where it is; `replace: true` moves it.
    taken = post(api, f"/api/sessions/{session.pk}/checkpoints", {"name": "b", "seq": 7})
    assert taken.status_code == 409
    assert orjson.loads(taken.content)["detail"] == (
        "name: a checkpoint named 'b' exists at seq 300; send \"replace\": true to move it"
    )
    assert Checkpoint.objects.get(session=session, name="b").seq == 300
    moved = post(api, f"/api/sessions/{session.pk}/checkpoints", {"name": "b", "seq": 7, "replace": True})
    assert moved.status_code == 201 and orjson.loads(moved.content)["checkpoint"]["seq"] == 7
    assert Checkpoint.objects.get(session=session, name="b").seq == 7


def test_delete_a_checkpoint(api, session):
    post(api, f"/api/sessions/{session.pk}/checkpoints", {"name": "gone", "seq": 3})
    assert api.delete(f"/api/sessions/{session.pk}/checkpoints/gone").status_code == 204
    assert not Checkpoint.objects.filter(session=session).exists()
    assert api.delete(f"/api/sessions/{session.pk}/checkpoints/gone").status_code == 404
    assert "no checkpoint named 'gone'" in get_json(api, f"/api/sessions/{session.pk}/checkpoints/gone", 404)["detail"]


@pytest.mark.parametrize(
    "body,message",
    [
        ({"name": "x"}, "give exactly one of seq or step"),
        ({"name": "x", "seq": 1, "step": 1}, "give exactly one of seq or step"),
        ({"name": "x", "seq": 500}, "has no event at seq 500 (its seqs are 0 to 499)"),
        ({"name": "x", "step": 100}, "has no step at index 100 (its step indexes are 0 to 99)"),
        ({"name": "", "seq": 1}, "name: String should have at least 1 character"),
        ({"name": "   ", "seq": 1}, "name: give the checkpoint a name"),
        ({"name": "x", "seq": -4}, "seq: Input should be greater than or equal to 0"),
    ],
)
def test_bad_checkpoints_are_400(api, session, body, message):
    response = post(api, f"/api/sessions/{session.pk}/checkpoints", body)
    assert response.status_code == 400
    assert message in orjson.loads(response.content)["detail"]


def test_checkpoints_recorded_by_rlm_code_are_listed(api, tmp_path, db):
    session, _, _ = recorded_session(tmp_path, steps=4, checkpoint_at=2)
    listed = get_json(api, f"/api/sessions/{session.pk}/checkpoints")
    assert [c["name"] for c in listed] == ["before_refactor"]
    state = get_json(api, f"/api/sessions/{session.pk}/checkpoints/before_refactor")
    assert state["stepState"]["step"] == 2


def test_a_name_with_a_slash_is_addressable_and_one_that_hides_characters_is_refused(api, session):
    assert post(api, f"/api/sessions/{session.pk}/checkpoints", {"name": "a/b", "seq": 3}).status_code == 201
    assert get_json(api, f"/api/sessions/{session.pk}/checkpoints/a/b")["checkpoint"]["name"] == "a/b"
    assert get_json(api, f"/api/sessions/{session.pk}/checkpoints/a%2Fb")["checkpoint"]["seq"] == 3
    assert api.delete(f"/api/sessions/{session.pk}/checkpoints/a/b").status_code == 204
    for name, shown in (("before\u200b", "U+200B"), ("\u202eretry", "U+202E")):
        refused = post(api, f"/api/sessions/{session.pk}/checkpoints", {"name": name, "seq": 3})
        assert refused.status_code == 400
        assert orjson.loads(refused.content)["detail"].startswith(
            f"name: no invisible or direction-changing characters ({shown})"
        )
    for name in ("..", "a/..", "./b"):
        refused = post(api, f"/api/sessions/{session.pk}/checkpoints", {"name": name, "seq": 3})
        assert refused.status_code == 400 and "'.' and '..' cannot be part" in orjson.loads(refused.content)["detail"]
    assert not Checkpoint.objects.filter(session=session).exists()
