"""compare_sessions: two sessions' first divergence and deltas (replay/compare.py, rlm-code's
comparison, docs/api.md, "GET /api/compare"), the steps around the divergence, and the totals every
session has (cost, events, errors), for sessions that record no agent steps."""

from __future__ import annotations

from typing import Any

from .. import access
from ..models import Session
from ..replay.compare import diff_sessions
from .lookup import session_named, session_title
from .text import cap, number, session_cost, usd, value_text

AROUND = 2  # aligned steps shown before and after the divergence


def _delta(a: float, b: float, money: bool = False) -> str:
    shown = (usd(a), usd(b), usd(b - a)) if money else (number(a), number(b), number(b - a))
    sign = "+" if b - a > 0 else ""
    return f"A {shown[0]}, B {shown[1]} (B − A: {sign}{shown[2]})"


def _cost_delta(a: Session, b: Session) -> str:
    """`_delta` of the costs, unless a side has no event with a price (as the dashboard's
    session_cost says): its $0 is a sum of nothing, and B − A would be the other side's whole
    cost."""
    unknown = [name for name, s in (("A", a), ("B", b)) if not s.cost_known]
    if not unknown:
        text = _delta(a.cost_usd, b.cost_usd, money=True)
        if a.unpriced_events or b.unpriced_events:
            text += " (priced events only: some used tokens with no known price)"
        return text
    sides = [f"{name} {session_cost(s)}" for name, s in (("A", a), ("B", b))]
    return ", ".join(sides) + f" (no difference: no price is known for {' or '.join(unknown)}'s events)"


def _side(step: dict[str, Any] | None) -> str:
    if step is None:
        return "(no step)"
    mark = "✓" if step["success"] else "✗"
    text = f"{step['actionType'] or '-'} {mark} `{value_text(step['actionCode'], 120)}`"
    if step["error"]:
        text += f" error: {value_text(step['error'], 120)}"
    return text


def compare_sessions(*, actor: access.Actor, session_a: str, session_b: str) -> str:
    """Where two sessions first take different steps and how far apart they end (B − A)."""
    a = session_named(actor, session_a)
    b = session_named(actor, session_b)
    first = diff_sessions(a=a.session, b=b.session, offset=0, limit=AROUND * 2 + 1)
    index = first["first_divergence_step"]
    pairs = first["pairs"]
    if index is not None and index > AROUND:
        pairs = diff_sessions(a=a.session, b=b.session, offset=index - AROUND, limit=AROUND * 2 + 1)["pairs"]
    lines = [f"A: {session_title(a.session)}", f"B: {session_title(b.session)}"]
    lines += [note for note in (a.note, b.note) if note]
    if index is None:
        if first["a_steps"] == first["b_steps"]:
            verdict = "none: both take the same steps (action type, code and success)"
        else:
            verdict = "none: the shorter session's steps are the longer one's first steps"
        if not first["a_steps"] and not first["b_steps"]:
            verdict = "none to find: neither session records agent steps; compare their totals below"
    else:
        verdict = f"agent step index {index}: {first['divergence_reason']}"
    lines += ["", f"First divergence: {verdict}"]
    lines.append(f"Completed: A {'yes' if first['a_completed'] else 'no'}, B {'yes' if first['b_completed'] else 'no'}")
    lines.append("Agent steps: " + _delta(first["a_steps"], first["b_steps"]))
    lines.append("Reward: " + _delta(first["a_reward"], first["b_reward"]))
    lines.append("Tokens: " + _delta(first["a_tokens"], first["b_tokens"]))
    lines.append(
        f"Efficiency (reward per 1000 tokens): A {first['a_efficiency']:.4f}, B {first['b_efficiency']:.4f} "
        f"(B − A: {first['efficiency_delta']:+.4f})"
    )
    lines.append("Cost: " + _cost_delta(a.session, b.session))
    lines.append("Events: " + _delta(a.session.event_count, b.session.event_count))
    lines.append("Error events: " + _delta(a.session.error_count, b.session.error_count))
    lines.append("Failed steps: " + _delta(a.session.step_error_count, b.session.step_error_count))
    if pairs:
        title = "Steps around the divergence" if index is not None else "First steps"
        lines += ["", f"{title} (agent step index: A | B):"]
        for pair in pairs:
            mark = " ← diverges" if pair["divergence"] else ("" if pair["same"] else " (differs)")
            lines.append(f"  [{pair['index']}] A: {_side(pair['a'])} | B: {_side(pair['b'])}{mark}")
        lines.append("See either step with step_state (sessionId, stepIndex).")
    return cap("\n".join(lines), "Each step in full: step_state with sessionId and stepIndex.")
