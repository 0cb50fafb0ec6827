"""The diff page: two sessions side by side, aligned step by step from the first divergence
(replay/compare.py, rlm-code's semantics), a page of rows at a time, and the player's "compare
with…" picker that leads to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .. import access
from ..forms import CompareForm, ComparePickerForm
from ..replay.compare import diff_sessions
from ..replay.frames import step_seqs
from ..replay.listing import compare_candidates
from .pages import login_required, render_page

DIFF_PAGE = 50


@dataclass
class DiffStep:
    """One side of a row: what the diff shows of a step, and the seq of the event closing it
    (the link into that session's player)."""

    action_type: str
    action_code: str
    success: bool
    reward: float
    tokens_used: int
    output: str
    error: str
    seq: int | None


@dataclass
class DiffChanges:
    """Which fields of a row's two steps differ (all of them when a side has no step)."""

    action_type: bool
    action_code: bool
    success: bool
    reward: bool
    output: bool
    error: bool


@dataclass
class DiffRow:
    index: int
    a: DiffStep | None
    b: DiffStep | None
    same: bool
    divergence: bool  # the first divergence
    differs: DiffChanges


@dataclass
class DiffPage:
    """The diff page: the comparison's deltas (B - A) and one page of aligned steps."""

    first_divergence_step: int | None
    divergence_reason: str
    a_steps: int
    b_steps: int
    step_delta: int
    a_reward: float
    b_reward: float
    reward_delta: float
    a_tokens: int
    b_tokens: int
    token_delta: int
    a_efficiency: float
    b_efficiency: float
    efficiency_delta: float
    total: int  # aligned steps in all
    has_more: bool
    rows: list[DiffRow]


def diff_page(diff: dict[str, Any], *, seqs_a: dict[int, int], seqs_b: dict[int, int]) -> DiffPage:
    """The diff page from diff_sessions' result and step_seqs of both sessions."""
    rows = [
        DiffRow(
            index=pair["index"],
            a=_diff_step(pair["a"], seqs_a.get(pair["index"])),
            b=_diff_step(pair["b"], seqs_b.get(pair["index"])),
            same=pair["same"],
            divergence=pair["divergence"],
            differs=DiffChanges(
                action_type=pair["differs"]["actionType"], action_code=pair["differs"]["actionCode"],
                success=pair["differs"]["success"], reward=pair["differs"]["reward"],
                output=pair["differs"]["output"], error=pair["differs"]["error"],
            ),
        )
        for pair in diff["pairs"]
    ]  # fmt: skip
    return DiffPage(
        first_divergence_step=diff["first_divergence_step"], divergence_reason=diff["divergence_reason"],
        a_steps=diff["a_steps"], b_steps=diff["b_steps"], step_delta=diff["step_delta"],
        a_reward=diff["a_reward"], b_reward=diff["b_reward"], reward_delta=diff["reward_delta"],
        a_tokens=diff["a_tokens"], b_tokens=diff["b_tokens"], token_delta=diff["token_delta"],
        a_efficiency=diff["a_efficiency"], b_efficiency=diff["b_efficiency"],
        efficiency_delta=diff["efficiency_delta"],
        total=diff["pagination"]["total"], has_more=diff["pagination"]["hasMore"], rows=rows,
    )  # fmt: skip


def _diff_step(step: dict[str, Any] | None, seq: int | None) -> DiffStep | None:
    if step is None:
        return None
    return DiffStep(
        action_type=step["actionType"], action_code=step["actionCode"], success=step["success"],
        reward=step["reward"], tokens_used=step["tokensUsed"], output=step["output"], error=step["error"],
        seq=seq,
    )  # fmt: skip


@login_required
@require_GET
def compare(request: HttpRequest) -> HttpResponse:
    form = CompareForm(request.GET)
    if not form.is_valid():
        return render(request, "sessions_app/diff.html", {"form": form}, status=400)
    a, b = access.session_for(request, form.cleaned_data["a"]), access.session_for(request, form.cleaned_data["b"])
    offset = form.cleaned_data["offset"] or 0
    stop = offset + DIFF_PAGE
    diff = diff_page(
        diff_sessions(a=a, b=b, offset=offset, limit=DIFF_PAGE),
        seqs_a=step_seqs(session=a, start=offset, stop=stop),
        seqs_b=step_seqs(session=b, start=offset, stop=stop),
    )
    context = {
        "form": form, "a": a, "b": b, "diff": diff, "offset": offset, "page": DIFF_PAGE,
        # A session none of whose events had a price has no cost to subtract (its 0 is a sum
        # of nothing): no delta then, rather than one that says the other side's whole cost.
        "cost_delta": b.cost_usd - a.cost_usd if a.cost_known and b.cost_known else None,
    }  # fmt: skip
    return render_page(request, "sessions_app/diff.html", "diff-rows", context)


@login_required
@require_GET
def compare_with(request: HttpRequest, session_id: int) -> HttpResponse:
    """The player's "compare with…": the project's other sessions matching the typed text, each
    a link to the diff with this session as A (a page of its own without JavaScript)."""
    session = access.session_for(request, session_id)
    q = ComparePickerForm(request.GET).values()["q"]
    candidates = compare_candidates(sessions=access.sessions_visible_to(request), session=session, q=q)
    context = {"session": session, "candidates": candidates, "q": q}
    return render_page(request, "sessions_app/compare_with.html", "compare-candidates", context)
