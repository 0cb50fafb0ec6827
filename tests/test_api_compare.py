"""GET /api/compare?a&b: rlm-code's SessionComparison fields plus aligned step pairs."""

from __future__ import annotations

import pytest

from sessions_app.replay import compare as diffing

from .builders_replay import api, get_json, import_one, record_variant  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def test_compare_two_sessions(api, tmp_path):
    record_variant(tmp_path / "a.jsonl", run_id="run_a", steps=8)
    record_variant(tmp_path / "b.jsonl", run_id="run_b", steps=9, change_at=4, change="code")
    a, b = import_one(tmp_path / "a.jsonl"), import_one(tmp_path / "b.jsonl")
    body = get_json(api, f"/api/compare?a={a.pk}&b={b.pk}&limit=3&offset=3")
    assert body["session_a_id"] == "run_a" and body["session_b_id"] == "run_b"
    assert body["first_divergence_step"] == 4 and body["divergence_reason"] == "Different code"
    assert body["step_delta"] == 1 and body["a"]["id"] == a.pk
    assert [p["index"] for p in body["pairs"]] == [3, 4, 5]
    assert [p["same"] for p in body["pairs"]] == [True, False, False]
    assert body["pagination"] == {"offset": 3, "limit": 3, "total": 9, "hasMore": True}
    expected = diffing.diff_sessions(a=a, b=b, offset=3, limit=3)
    assert body["pairs"] == expected["pairs"]


def test_compare_errors(api, make_session):
    a = make_session(events=10)
    assert get_json(api, f"/api/compare?a={a.pk}&b=987654", 404)["detail"] == "session 987654 not found"
    assert "b: Field required" in get_json(api, f"/api/compare?a={a.pk}", 400)["detail"]
    assert "limit" in get_json(api, f"/api/compare?a={a.pk}&b={a.pk}&limit=0", 400)["detail"]
