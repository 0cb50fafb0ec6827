"""Two sessions -> first divergence, deltas, and an aligned list of step pairs.

The comparison itself is pure functions over step dicts (rlm-code's `compare_sessions`
semantics, docs/api.md, "GET /api/compare"); `diff_sessions` feeds them both step lists read in parallel
pages of `step_state` text, so two 20,000-step sessions never sit in memory whole and the walk
stops at the first divergence.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ..models import Event, Session
from .rows import ReplayParameterError
from .summary import get_summary, session_info

CHUNK = 2000  # steps read from each session per query
MAX_PAIRS = 5000
PREVIEW = 200  # characters of code / output / error in a step summary


# --------------------------------------------------------------------------------------------
# Pure functions


def divergence_reason(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Why two steps at the same index diverge, in rlm-code's order of checks; None if not."""
    a_type, b_type = a.get("action_type", ""), b.get("action_type", "")
    if a_type != b_type:
        return f"Action type: {a_type} vs {b_type}"
    if a.get("action_code", "") != b.get("action_code", ""):
        return "Different code"
    a_success, b_success = a.get("success", False), b.get("success", False)
    if a_success != b_success:
        return f"Success: {a_success} vs {b_success}"
    return None


def first_divergence(pairs: Iterable[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[int | None, str]:
    """The first index where paired steps diverge and why; (None, "") when one list is a
    prefix of the other (as rlm-code: extra steps alone are no divergence)."""
    for index, (a, b) in enumerate(pairs):
        reason = divergence_reason(a, b)
        if reason is not None:
            return index, reason
    return None, ""


def efficiency(reward: float, tokens: int) -> float:
    """Reward per 1000 tokens, 0 without tokens (rlm-code's definition)."""
    return (reward * 1000) / tokens if tokens > 0 else 0.0


def comparison(a: dict[str, Any], b: dict[str, Any], divergence: tuple[int | None, str]) -> dict[str, Any]:
    """rlm-code's SessionComparison fields from two summaries (get_summary shape)."""
    a_eff = efficiency(a["total_reward"], a["total_tokens"])
    b_eff = efficiency(b["total_reward"], b["total_tokens"])
    return {
        "session_a_id": a["session_id"],
        "session_b_id": b["session_id"],
        "a_completed": a["completed"],
        "b_completed": b["completed"],
        "a_steps": a["total_steps"],
        "b_steps": b["total_steps"],
        "a_reward": a["total_reward"],
        "b_reward": b["total_reward"],
        "a_tokens": a["total_tokens"],
        "b_tokens": b["total_tokens"],
        "step_delta": b["total_steps"] - a["total_steps"],
        "reward_delta": b["total_reward"] - a["total_reward"],
        "token_delta": b["total_tokens"] - a["total_tokens"],
        "a_efficiency": a_eff,
        "b_efficiency": b_eff,
        "efficiency_delta": b_eff - a_eff,
        "first_divergence_step": divergence[0],
        "divergence_reason": divergence[1],
    }


def _preview(value: Any) -> str:
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    return text if len(text) <= PREVIEW else text[:PREVIEW] + "…"


def step_summary(step: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the side-by-side view shows of one step."""
    if step is None:
        return None
    return {
        "step": step.get("step"),
        "actionType": step.get("action_type", ""),
        "actionCode": _preview(step.get("action_code", "")),
        "success": step.get("success", False),
        "reward": step.get("reward", 0.0),
        "cumulativeReward": step.get("cumulative_reward", 0.0),
        "tokensUsed": step.get("tokens_used", 0),
        "output": _preview(step.get("output", "")),
        "error": _preview(step.get("error", "")),
    }


def align(
    index: int, a: dict[str, Any] | None, b: dict[str, Any] | None, divergence_index: int | None
) -> dict[str, Any]:
    """One row of the side-by-side view: both steps at `index` and what differs."""
    both = a is not None and b is not None
    differs = {
        "actionType": not both or a.get("action_type") != b.get("action_type"),
        "actionCode": not both or a.get("action_code") != b.get("action_code"),
        "success": not both or a.get("success") != b.get("success"),
        "output": not both or a.get("output") != b.get("output"),
        "error": not both or a.get("error") != b.get("error"),
        "reward": not both or a.get("reward") != b.get("reward"),
    }
    return {
        "index": index,
        "a": step_summary(a),
        "b": step_summary(b),
        "same": both and divergence_reason(a, b) is None,
        "differs": differs,
        "divergence": index == divergence_index,
    }


# --------------------------------------------------------------------------------------------
# Reading both step lists


def _steps(session: Session, start: int, stop: int) -> list[dict[str, Any]]:
    texts = (
        Event.objects.filter(session=session, step_pos__gte=start, step_pos__lt=stop)
        .order_by("step_pos")
        .values_list("step_state", flat=True)
    )
    return [orjson.loads(text) if text else {} for text in texts]


def fingerprints(steps: list[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    """What the divergence rule looks at in each step: (action type, code, success)."""
    return [(s.get("action_type", ""), s.get("action_code", ""), s.get("success", False)) for s in steps]


def _divergence(a: Session, b: Session) -> tuple[int | None, str]:
    """First divergence of the two step lists, read a page of each at a time.

    Each page is settled by comparing the two lists of fingerprints (one C-level comparison);
    only a page that differs is walked pair by pair with the rule itself.
    """
    common = min(a.step_count, b.step_count)
    for start in range(0, common, CHUNK):
        stop = min(common, start + CHUNK)
        a_steps, b_steps = _steps(a, start, stop), _steps(b, start, stop)
        if fingerprints(a_steps) == fingerprints(b_steps):
            continue
        index, reason = first_divergence(zip(a_steps, b_steps))
        if index is not None:
            return start + index, reason
    return None, ""


def diff_sessions(*, a: Session, b: Session, offset: int = 0, limit: int | None = None) -> dict[str, Any]:
    """rlm-code's SessionComparison of `a` and `b` (deltas are b - a) plus the aligned step
    pairs offset..offset+limit-1 (all of them when limit is None) for a side-by-side view."""
    total = max(a.step_count, b.step_count)
    if offset < 0:
        raise ReplayParameterError(f"offset must be 0 or more, got {offset}")
    if limit is not None and not 1 <= limit <= MAX_PAIRS:
        raise ReplayParameterError(f"limit must be between 1 and {MAX_PAIRS}, got {limit}")
    divergence = _divergence(a, b)
    result = comparison(get_summary(session=a), get_summary(session=b), divergence)

    stop = total if limit is None else min(total, offset + limit)
    pairs = []
    for start in range(offset, stop, CHUNK):
        end = min(stop, start + CHUNK)
        a_steps = _steps(a, start, min(end, a.step_count)) if start < a.step_count else []
        b_steps = _steps(b, start, min(end, b.step_count)) if start < b.step_count else []
        for i in range(end - start):
            pairs.append(
                align(
                    start + i,
                    a_steps[i] if i < len(a_steps) else None,
                    b_steps[i] if i < len(b_steps) else None,
                    divergence[0],
                )
            )
    result["a"] = session_info(a)
    result["b"] = session_info(b)
    result["pairs"] = pairs
    result["pagination"] = {
        "offset": offset,
        "limit": limit,
        "total": total,
        "hasMore": stop < total,
    }
    return result
