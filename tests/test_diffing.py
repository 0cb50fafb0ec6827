"""Session comparison: rlm-code's compare_sessions semantics, aligned step pairs, streaming."""

from __future__ import annotations

import pytest
from rlm_code.rlm.session_replay import compare_sessions, load_session

from sessions_app.replay import ReplayParameterError
from sessions_app.replay import compare as diffing

from .builders_replay import import_one, record_variant

pytestmark = pytest.mark.django_db

TOKEN_FIELDS = {"a_tokens", "b_tokens", "token_delta", "a_efficiency", "b_efficiency", "efficiency_delta"}


def pair_of(tmp_path, a_kwargs: dict, b_kwargs: dict):
    pa, pb = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    record_variant(pa, run_id="run_a", **a_kwargs)
    record_variant(pb, run_id="run_b", **b_kwargs)
    reference = compare_sessions(load_session(pa).snapshot, load_session(pb).snapshot).to_dict()
    return import_one(pa), import_one(pb), reference


@pytest.mark.parametrize(
    "b_kwargs,index,reason",
    [
        ({"steps": 10, "change_at": 5, "change": "code"}, 5, "Different code"),
        ({"steps": 10, "change_at": 3, "change": "type"}, 3, "Action type: run_python vs final"),
        ({"steps": 10, "change_at": 7, "change": "success"}, 7, "Success: True vs False"),
        ({"steps": 10}, None, ""),
        ({"steps": 14}, None, ""),  # a strict prefix is no divergence
        ({"steps": 6, "change_at": 0, "change": "code", "tokens": 40}, 0, "Different code"),
    ],
)
def test_comparison_matches_rlm_codes_compare_sessions(tmp_path, b_kwargs, index, reason):
    a, b, reference = pair_of(tmp_path, {"steps": 10}, b_kwargs)
    ours = diffing.diff_sessions(a=a, b=b, limit=5)
    assert ours["first_divergence_step"] == reference["first_divergence_step"] == index
    assert ours["divergence_reason"] == reference["divergence_reason"] == reason
    for name, value in reference.items():
        if name not in TOKEN_FIELDS:
            assert ours[name] == pytest.approx(value), name
    # rlm-code counts each step's tokens twice (step_result + step_end); we count them once,
    # so our token figures are half of its and the efficiencies twice as high.
    assert ours["a_tokens"] * 2 == reference["a_tokens"]
    assert ours["token_delta"] * 2 == reference["token_delta"]
    assert ours["a_efficiency"] == pytest.approx(reference["a_efficiency"] * 2)
    assert ours["efficiency_delta"] == pytest.approx(ours["b_efficiency"] - ours["a_efficiency"])


def test_aligned_pairs_flag_what_differs_and_leave_missing_steps_empty(tmp_path):
    a, b, _ = pair_of(tmp_path, {"steps": 4}, {"steps": 6, "change_at": 2, "change": "success"})
    result = diffing.diff_sessions(a=a, b=b)
    pairs = result["pairs"]
    assert [p["index"] for p in pairs] == list(range(6))
    assert [p["same"] for p in pairs] == [True, True, False, False, False, False]
    assert pairs[2]["divergence"] is True and sum(p["divergence"] for p in pairs) == 1
    assert pairs[2]["differs"]["success"] and not pairs[2]["differs"]["actionCode"]
    assert pairs[2]["a"]["success"] is True and pairs[2]["b"]["success"] is False
    assert pairs[4]["a"] is None and pairs[4]["b"]["actionCode"] == "x = 4"
    assert result["pagination"] == {"offset": 0, "limit": None, "total": 6, "hasMore": False}


def test_pairs_are_paged(tmp_path):
    a, b, _ = pair_of(tmp_path, {"steps": 12}, {"steps": 12})
    page = diffing.diff_sessions(a=a, b=b, offset=10, limit=5)
    assert [p["index"] for p in page["pairs"]] == [10, 11]
    assert page["pagination"]["hasMore"] is False
    with pytest.raises(ReplayParameterError):
        diffing.diff_sessions(a=a, b=b, limit=0)


def test_divergence_checks_action_type_before_code_before_success():
    base = {"action_type": "run", "action_code": "x", "success": True}
    assert (
        diffing.divergence_reason(base, {**base, "action_type": "final", "action_code": "y"})
        == "Action type: run vs final"
    )
    assert diffing.divergence_reason(base, {**base, "action_code": "y", "success": False}) == "Different code"
    assert diffing.divergence_reason(base, {**base, "success": False}) == "Success: True vs False"
    assert diffing.divergence_reason(base, {**base, "output": "other"}) is None
    assert diffing.first_divergence([(base, base), (base, {**base, "success": False})]) == (1, "Success: True vs False")
    assert diffing.efficiency(2.0, 0) == 0.0 and diffing.efficiency(2.0, 4000) == 0.5


def test_both_step_lists_are_read_in_parallel_pages(make_session, django_assert_num_queries):
    a = make_session(events=25_000)  # 5,000 steps each
    b = make_session(events=25_000)
    # Identical step lists: the walk reads both to the end, CHUNK steps of each per query,
    # plus one page of each for the pairs.
    chunks = -(-5000 // diffing.CHUNK)
    with django_assert_num_queries(2 * chunks + 2):
        result = diffing.diff_sessions(a=a, b=b, limit=50)
    assert result["first_divergence_step"] is None and len(result["pairs"]) == 50
