"""replay_session and find_errors: a session as AgentLens's formatted timeline (its
`agentlens_replay` tool, docs/mcp.md), and its errors with the events around them.

The timeline's header is the session row's totals (no query); its steps are one replay page
(replay.replay_page), whose contexts carry each step's running cost and error count. Where
AgentLens sums the cost of the steps it happens to show, from zero, here `cost-so-far` and
`errors` are the session's running totals at that event: a range deep in a session, or a
filtered one, says what was spent and what failed up to there, as the dashboard does.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .. import access, replay
from ..canonical import Kind
from ..formats import agentlens
from ..models import Session
from ..replay.frames import preview
from .lookup import session_named, session_title
from .text import (
    MAX_ANSWER_CHARS,
    ToolInputError,
    clip,
    clock,
    duration,
    fit,
    iso,
    number,
    session_cost,
    usd,
    value_text,
)

# The most steps one call returns: a longer range is cut, with the call that continues it.
MAX_STEPS = 100
MAX_ERRORS = 50
MAX_AROUND = 5

# AgentLens's icons, by its type names and our kinds alike (an error event gets ⚠️ whatever it is).
ICONS = {
    Kind.SESSION_START: "🟢", "session_started": "🟢", Kind.SESSION_END: "🔴", "session_ended": "🔴",
    Kind.LLM_CALL: "🤖", Kind.LLM_RESPONSE: "💬", Kind.TOOL_CALL: "🔧", Kind.TOOL_RESPONSE: "📦",
    Kind.TOOL_ERROR: "⚠️", Kind.ERROR: "⚠️", "decision": "🧭", "observation": "👁️", Kind.CUSTOM: "📝",
}  # fmt: skip
OTHER_ICON = "📌"
ERROR_ICON = "⚠️"


def type_name(session: Session, event: dict[str, Any]) -> str:
    """An event's type as the session's source says it for AgentLens sessions (`session_started`,
    `cost_tracked`), else Replay's canonical kind (docs/formats.md)."""
    if session.source_format == agentlens.NAME and event.get("eventType"):
        return event["eventType"]
    return event["kind"]


def event_counts(session: Session) -> dict[str, int]:
    """The session's events counted by type (AgentLens's names for AgentLens sessions), most first."""
    names = replay.agentlens_type_names(session) or {}
    counts: Counter[str] = Counter()
    for kind, count in (session.kind_counts or {}).items():
        counts[names.get(kind, kind)] += int(count)
    return dict(counts.most_common())


def summary_line(event: dict[str, Any]) -> str:
    """One line saying what an event was: its tool or model, then what it said or did."""
    payload = event.get("payload")
    if isinstance(payload, dict):
        # What the importer keeps of the source's own record (ids, hashes) says nothing here.
        payload = {key: value for key, value in payload.items() if not key.startswith("_")}
    kind = event["kind"]
    if kind == Kind.SESSION_START:
        agent = event.get("agentId") or ""
        return f"Session initialized for agent {agent}" if agent else "Session started"
    if kind == Kind.SESSION_END and isinstance(payload, dict):
        said = [value_text(payload[key], 120) for key in ("reason", "status", "summary") if payload.get(key)]
        if said:
            return clip("Session ended: " + " — ".join(said))
    text = preview({**event, "payload": payload})
    tool = event.get("tool") or ""
    if tool and text:
        return clip(f"{tool}: {text}")
    return clip(tool or text or "(no details recorded)")


def error_text(event: dict[str, Any]) -> str:
    payload = event.get("payload")
    if isinstance(payload, dict):
        for key in ("error", "message", "stderr", "reason"):
            if payload.get(key) not in (None, "", {}, []):
                return value_text(payload[key], 300)
    return clip(preview(event), 300)


def step_duration(event: dict[str, Any]) -> float | None:
    """How long a step took: a call's time until its answer, else the event's own duration."""
    pair_ms = event.get("pairDurationMs")
    pair_seq = event.get("pairSeq")
    if pair_ms is not None and pair_seq is not None and pair_seq > event["seq"]:
        return pair_ms
    return event.get("durationMs")


def header(session: Session, note: str = "") -> list[str]:
    """The timeline's header: the session row's own totals (no query)."""
    # Each on its own line and cut as everywhere else: a sender's id holding line breaks would
    # otherwise add lines of its own ("Status: ...") that a model reads as the header's.
    lines = [f"📼 Session Replay: {clip(session.source_session_id, 120) or session.pk}", ""]
    if note:
        lines += [note, ""]
    lines.append(f"Replay ID: {session.pk} (project {session.project.slug}, format {clip(session.source_format, 120)})")
    lines.append(f"Agent: {clip(session.agent_id, 120) or '-'}")
    if session.task:
        lines.append(f"Task: {clip(session.task, 200)}")
    lines.append(f"Status: {session.status}")
    lines.append(f"Started: {iso(session.started_at)}")
    if session.ended_at:
        lines.append(f"Ended: {iso(session.ended_at)}")
    lines.append(f"Duration: {duration(session.duration_seconds * 1000.0)}")
    cost = f"Total Cost: {session_cost(session)}"
    if session.unpriced_events:
        some = "1 event" if session.unpriced_events == 1 else f"{number(session.unpriced_events)} events"
        cost += f" ({some} used tokens at no known price: not counted)"
    lines.append(cost)
    counts = event_counts(session)
    lines.append("Events: " + (", ".join(f"{clip(name, 60)}: {count}" for name, count in counts.items()) or "none"))
    lines.append(f"Errors: {number(session.error_count)} error events, {number(session.step_error_count)} failed steps")
    if session.step_count:
        lines.append(f"Agent steps: {number(session.step_count)} (step_state and compare_sessions use them)")
    return lines


def step_block(session: Session, step: dict[str, Any]) -> str:
    """One numbered step in AgentLens's layout; numbered by its event's place in the whole
    session (1-based), so a number means the same event to every tool and to the dashboard."""
    event = step["event"]
    context = step.get("context") or {}
    name = type_name(session, event)
    icon = ERROR_ICON if event["isError"] else ICONS.get(name, ICONS.get(event["kind"], OTHER_ICON))
    first = f"{event['seq'] + 1}. [{clock(event['timestamp'])}] {icon} {name}"
    took = step_duration(event)
    if took is not None:
        first += f" ({duration(took)})"
    lines = [first, f"   {summary_line(event)}"]
    if event["isError"]:
        lines.append(f"   ⚠️ Error: {error_text(event)}")
    if event["costUsd"]:
        lines.append(f"   💰 {usd(event['costUsd'])}")
    elif event["costUnpriced"]:
        lines.append(f"   💰 unknown: {number(event['tokens'] or 0)} tokens at no known price")
    for warning in context.get("warnings") or []:
        lines.append(f"   ⚠ {clip(warning['message'], 200)}")
    lines.append(f"   [cost-so-far: {usd(context.get('cumulativeCostUsd'))} | errors: {context.get('errorCount', 0)}]")
    return "\n".join(lines)


def _event_types(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [part.strip() for part in value.split(",") if part.strip()]
    return names or None


def _limit(from_step: int, to_step: int | None) -> int:
    """How many steps to read from `from_step`: up to `to_step` (inclusive), at most MAX_STEPS."""
    if to_step is None:
        return MAX_STEPS
    if to_step < from_step:
        raise ToolInputError(f"toStep ({to_step}) must not be before fromStep ({from_step})")
    return min(to_step - from_step + 1, MAX_STEPS)


def replay_session(
    *,
    actor: access.Actor,
    session_id: str,
    from_step: int | None = None,
    to_step: int | None = None,
    event_types: str | None = None,
    summary_only: bool = False,
) -> str:
    """The session as AgentLens's formatted timeline: the header, then steps fromStep..toStep
    (0-based positions among the shown steps, toStep inclusive), at most MAX_STEPS a call."""
    found = session_named(actor, session_id)
    session = found.session
    lines = header(session, found.note)
    kinds = _event_types(event_types)
    if summary_only:
        return "\n".join(lines)
    first = from_step or 0
    page = replay.replay_page(session=session, offset=first, limit=_limit(first, to_step), event_types=kinds)
    total = page["totalSteps"]
    if kinds is not None:
        lines.append(
            f"Filter: {', '.join(kinds)} ({number(total)} of {number(session.event_count)} events); "
            "cost-so-far and errors still count every event"
        )
    if not page["steps"]:
        where = f"{number(total)} steps match the filter" if kinds else f"the session has {number(total)} steps"
        lines += ["", f"(No steps to display: {where}; fromStep counts from 0)"]
        return "\n".join(lines)
    blocks = [step_block(session, step) for step in page["steps"]]
    # Steps while they fit the answer's budget, whole: a cut one is continued by fromStep.
    shown = fit(lines, blocks, separator="\n\n")
    last = first + shown - 1
    lines += ["", "\n\n".join(blocks[:shown]), ""]
    lines.append(f"Showing steps {first}–{last} (fromStep/toStep, 0-based) of {number(total)}.")
    asked_last = total - 1 if to_step is None else min(to_step, total - 1)
    filtered = f', eventTypes="{clip(event_types, 300)}"' if kinds else ""
    if shown < len(blocks):
        lines.append(
            f"Cut at {MAX_ANSWER_CHARS:,} characters, the most one answer holds (long steps). Next: "
            f'replay_session with sessionId="{session.pk}", fromStep={last + 1}, '
            f"toStep={min(asked_last, last + MAX_STEPS)}{filtered}"
        )
    elif last < asked_last:
        following = min(asked_last, last + MAX_STEPS)
        lines.append(
            f"Cut at {MAX_STEPS} steps, the most one call returns. Next: replay_session with "
            f'sessionId="{session.pk}", fromStep={last + 1}, toStep={following}{filtered}'
        )
    elif last < total - 1:
        lines.append(f"More steps follow: fromStep={last + 1} continues.")
    return "\n".join(lines)


# Errors


def _neighbour(session: Session, event: dict[str, Any]) -> str:
    mark = f" {ERROR_ICON}" if event["isError"] else ""
    return f"     #{event['seq'] + 1} [{clock(event['timestamp'])}] {type_name(session, event)}{mark}: {clip(summary_line(event), 140)}"


def find_errors(
    *, actor: access.Actor, session_id: str, after_event: int | None = None, limit: int = 10, around: int = 2
) -> str:
    """The session's error events and failed steps in order, each with `around` events before
    and after it; `after_event` (an event number) continues a list that was cut."""
    if not 1 <= limit <= MAX_ERRORS:
        raise ToolInputError(f"limit must be between 1 and {MAX_ERRORS}, got {limit}")
    if not 0 <= around <= MAX_AROUND:
        raise ToolInputError(f"around must be between 0 and {MAX_AROUND}, got {around}")
    found = session_named(actor, session_id)
    session = found.session
    hits = replay.search(session=session, errors=True, from_seq=after_event or 0, limit=limit)
    lines = [f"Errors in session {session_title(session)}"]
    if found.note:
        lines.append(found.note)
    lines.append(
        f"The session has {number(session.error_count)} error events and "
        f"{number(session.step_error_count)} failed steps (a step whose error is not empty)."
    )
    if not hits["results"]:
        lines.append("No errors" + (f" after event #{after_event}." if after_event else "."))
        return "\n".join(lines)
    results = hits["results"]
    blocks = [_error_block(session, event, around) for event in results]
    # Errors while they fit the answer's budget, whole; the next call starts after the last shown.
    shown = fit(lines, blocks, separator="\n\n")
    for block in blocks[:shown]:
        lines += ["", block]
    if shown < len(blocks):
        lines += [
            "",
            f"Cut at {MAX_ANSWER_CHARS:,} characters, the most one answer holds. More errors follow: "
            f'find_errors with sessionId="{session.pk}", afterEvent={results[shown - 1]["seq"] + 1}'
            + (" (around=0 fits more errors a call)" if around else ""),
        ]
    elif hits["nextFromSeq"] is not None:
        lines += [
            "",
            f'More errors follow: find_errors with sessionId="{session.pk}", afterEvent={hits["nextFromSeq"]}',
        ]
    return "\n".join(lines)


def _error_block(session: Session, event: dict[str, Any], around: int) -> str:
    seq = event["seq"]
    where = f"#{seq + 1} [{clock(event['timestamp'])}] {type_name(session, event)}"
    if event["stepIndex"] is not None:
        where += f", agent step index {event['stepIndex']}"
    lines = [f"{ERROR_ICON} Error at event {where}", f"   {summary_line(event)}"]
    if event["isError"]:
        lines.append(f"   Error: {error_text(event)}")
    if event["stepPos"] is not None:
        step = replay.step_state_at(session=session, index=event["stepPos"]) or {}
        if step.get("error"):
            lines.append(f"   Step {step.get('step')} failed: {value_text(step['error'], 300)}")
            if step.get("action_code"):
                lines.append(f"   Its code: {value_text(step['action_code'], 300)}")
    if around:
        window = replay.events_around(session=session, seq=seq, before=around, after=around)["events"]
        before = [e for e in window if e["seq"] < seq]
        after = [e for e in window if e["seq"] > seq]
        if before:
            lines += ["   Before:", *(_neighbour(session, e) for e in before)]
        if after:
            lines += ["   After:", *(_neighbour(session, e) for e in after)]
    return "\n".join(lines)
