"""step_state: what the agent had at one moment: its variables and memory notes, the context
(running totals, recent LLM calls and tool results, pending approvals, warnings) and the
agent step in progress, from replay.context_at (a handful of indexed reads at any position)."""

from __future__ import annotations

from typing import Any

from .. import access, replay
from ..models import Session
from ..replay.frames import display_text
from .lookup import session_named, session_title
from .text import ToolInputError, cap, clip, clip_more, clock, duration, fit, json_block, number, usd
from .timeline import summary_line, type_name

SHOWN_VARIABLES = 100
SHOWN_NOTES = 50
SHOWN_HISTORY = 10
# Shares of the answer's budget (text.MAX_ANSWER_CHARS) for the parts that can be long, so a huge
# variable list cannot crowd out the step, the history and the payload; each value is cut too.
VARIABLES_CHARS = 7_000
NOTES_CHARS = 4_000
VALUE_CHARS = 300
PAYLOAD_CHARS = 2_000


def _seq_of(session: Session, event: int | None, step_index: int | None) -> int:
    if (event is None) == (step_index is None):
        raise ToolInputError(
            "name the moment by exactly one of: event (its number as replay_session shows it, from 1) "
            "or stepIndex (the agent step's place in the session's step list, from 0)"
        )
    if step_index is not None:
        seq = replay.step_seq(session=session, index=step_index)
        if seq is None:
            raise ToolInputError(
                f"stepIndex {step_index}: the session has {number(session.step_count)} agent steps"
                + (f" (0 to {session.step_count - 1})" if session.step_count else "")
            )
        return seq
    if not 1 <= event <= session.event_count:
        raise ToolInputError(f"event {event}: the session has {number(session.event_count)} events (1 to its count)")
    return event - 1


def _entry(session: Session, event: dict[str, Any]) -> str:
    line = f"  #{event['seq'] + 1} {type_name(session, event)}: {clip(summary_line(event), 200)}"
    response = event.get("response")
    if response:
        line += f"\n      → #{response['seq'] + 1} {type_name(session, response)}: {clip(summary_line(response), 200)}"
    return line


def _history(session: Session, title: str, entries: list[dict[str, Any]]) -> list[str]:
    if not entries:
        return [f"{title}: none"]
    shown = entries[-SHOWN_HISTORY:]
    more = f" (the last {len(shown)} of {len(entries)})" if len(entries) > len(shown) else ""
    return [f"{title}{more}:", *(_entry(session, e) for e in shown)]


def step_state(*, actor: access.Actor, session_id: str, event: int | None = None, step_index: int | None = None) -> str:
    """The state and context just after one event (or the event closing one agent step)."""
    found = session_named(actor, session_id)
    session = found.session
    seq = _seq_of(session, event, step_index)
    context = replay.context_at(session=session, seq=seq)
    if context is None:  # a live session shrank? It cannot; a race with a delete can.
        raise ToolInputError(f"event {seq + 1}: not found in session {session.pk}")
    this = context["event"]
    lines = [f"State of session {session_title(session)} just after event #{seq + 1}"]
    if found.note:
        lines.append(found.note)
    lines.append(f"Event #{seq + 1} [{clock(this['timestamp'])}] {type_name(session, this)}: {summary_line(this)}")
    paired = context.get("pairedEvent")
    if paired:
        took = context.get("pairDurationMs")
        lines.append(
            f"Paired with event #{paired['seq'] + 1} ({paired['eventType'] or paired['kind']})"
            + (f", {duration(took)} apart" if took is not None else "")
        )
    lines.append(
        f"So far: cost {usd(context['cumulativeCostUsd'])}, tokens {number(context['tokens'])}, "
        f"errors {number(context['errorCount'])}, elapsed {duration(context['elapsedMs'])}, "
        f"reward {context['reward']}"
    )
    counts = context.get("eventCounts") or {}
    lines.append("Events so far: " + (", ".join(f"{k}: {v}" for k, v in counts.items()) or "none"))
    for warning in context.get("warnings") or []:
        lines.append(f"Warning: {clip(warning['message'], 200)}")
    whole = f"GET /api/sessions/{session.pk}/context?seq={seq}"
    lines += [
        "",
        *_variables(context.get("variables") or {}, whole),
        "",
        *_notes(context.get("memoryNotes") or [], whole),
    ]
    lines += ["", *_step(context, whole)]
    lines += ["", *_history(session, "LLM history", context.get("llmHistory") or [])]
    lines += _history(session, "Tool results", context.get("toolResults") or [])
    lines += _history(session, "Pending approvals", context.get("pendingApprovals") or [])
    lines += ["", "This event's payload:", json_block(this.get("payload"), PAYLOAD_CHARS, whole)]
    return cap("\n".join(lines), f"The whole state, every value in full: {whole}")


def _value(value: Any, whole: str) -> str:
    return clip_more(display_text(value), VALUE_CHARS, whole)


def _variables(variables: dict[str, Any], whole: str) -> list[str]:
    if not variables:
        return ["Variables: none"]
    names = list(variables)[:SHOWN_VARIABLES]
    rows = [f"  {clip(str(name), 100)} = {_value(variables[name], whole)}" for name in names]
    names = names[: fit([], rows, budget=VARIABLES_CHARS)]
    more = f" (the first {len(names)} of {len(variables)}; all of them: {whole})" if len(variables) > len(names) else ""
    return [f"Variables{more}:", *rows[: len(names)]]


def _notes(notes: list[Any], whole: str) -> list[str]:
    if not notes:
        return ["Memory notes: none"]
    rows = [f"  - {_value(note, whole)}" for note in notes[-SHOWN_NOTES:]]
    # The latest notes matter most: kept from the end.
    kept = fit([], rows[::-1], budget=NOTES_CHARS)
    rows = rows[len(rows) - kept :]
    more = f" (the last {len(rows)} of {len(notes)}; all of them: {whole})" if len(notes) > len(rows) else ""
    return [f"Memory notes{more}:", *rows]


def _step(context: dict[str, Any], whole: str) -> list[str]:
    step = context.get("step")
    if not step:
        return ["Agent step: none (the session records no rlm-code steps)"]
    index = context.get("stepIndex")
    closed = context.get("stepSeq") is not None and context["stepSeq"] <= context["eventIndex"]
    lines = [f"Agent step index {index} (recorded as step {step.get('step')}){'' if closed else ', in progress'}:"]
    for name in ("action_type", "action_code", "action_rationale", "success", "output", "error", "reward",
                 "cumulative_reward", "duration_ms", "tokens_used"):  # fmt: skip
        value = step.get(name)
        if value not in (None, ""):
            lines.append(f"  {name}: {clip_more(display_text(value), 500, whole)}")
    return lines
