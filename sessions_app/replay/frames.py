"""What the player shows at one event: the step list's window, the context, where the controls
lead (previous/next visible event, next turn boundary, errors), and the structure around the
event (the daycare run_python block it is in, child agents and their own cost).

Every read is bounded: the window is one range read (replay.events_around), the context a few
indexed reads (replay.context_at), navigation one indexed lookup each, and the structure reads
only the events of one block. Nothing here depends on the session's length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from django.utils.html import format_html

from .. import replay
from ..canonical import Kind
from ..formats.flux0 import content_text
from ..models import Event, Session
from ..models.planning import planned_for_values
from .display import duration_ms, kind_icon, offset, usd
from .navigation import window_dict, window_rows
from .rows import as_utc, decoded_payload

BEFORE = 8  # events shown before the current one
AFTER = 16  # and after it
COLLAPSE_KINDS = frozenset({Kind.CHUNK, Kind.STATUS})
COLLAPSE_MIN = 3  # a run of this many streamed chunks in a row shows as one foldable row
PREVIEW_CHARS = 160
BLOCK_EVENTS = 200  # inner tool calls of one run_python block shown at most
CHILDREN = 50
# The context panel lists at most this many variables and memory notes, each clipped; every one
# of them is in the snapshot export. A session that sets 20,000 variables would otherwise make
# every frame a megabyte of HTML.
SHOWN_VARIABLES = 150
SHOWN_HISTORY = 20
SHOWN_NOTES = 100
SHOWN_VALUE_CHARS = 1000

# Payload keys that say what an event is about, in the order they are tried for a preview.
_PREVIEW_KEYS = (
    "text", "completion", "content", "message", "answer", "final_answer", "result", "output",
    "error", "response_preview", "prompt_preview", "code", "task", "toolResult", "arguments",
    "toolArgs", "action", "status", "notes", "name", "data",
)  # fmt: skip


# What the player's templates read: built here from the read side's API shapes (whose camelCase
# keys stay the API's), so a template never reads an API dict.


class Shown:
    """A base of the classes below. The template engine tries `obj[name]` before `obj.name`:
    answering it spares the TypeError that each field lookup would otherwise raise and catch,
    a third of the step list's render (bench/player_bench.py)."""

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


@dataclass(frozen=True)
class ClippedValue:
    """A variable's or memory note's value as the panel shows it: its text (a value that is not
    text: its indented JSON), already cut at SHOWN_VALUE_CHARS. Built with the frame so that the
    value itself, as large as an agent made it, is not held while the page renders (a rendered
    template's context is a reference cycle: it stays until a garbage collection)."""

    text: str
    is_json: bool

    @classmethod
    def of(cls, value: Any, *, text_as_is: bool = False) -> ClippedValue:
        """A variable's value (always JSON: its type shows, "2" is not 2), or with `text_as_is`
        a note's (text as it is, anything else JSON)."""
        if text_as_is and isinstance(value, str):
            return cls(clip_block(value), is_json=False)
        return cls(clip_block(json_display_text(value)), is_json=True)


def json_display_text(value: Any) -> str:
    """A decoded value as indented JSON (a key or value JSON has no form for: as text)."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode()


@dataclass
class RowGroup(Shown):
    """A run of streamed chunks folded into one row of the step list."""

    kind: str
    count: int
    first: int
    last: int
    open: bool  # the current event is inside it


@dataclass
class StepRow(Shown):
    """One event of the step list."""

    seq: int
    kind: str
    tool: str | None
    step_pos: int | None
    depth_class: int
    timestamp: str | None  # ISO 8601 UTC, shown on hover
    offset_ms: float | None  # since the session's start, shown as `+1m 23.4s`
    preview: str
    pair_seq: int | None  # the other side of its pair
    pair_ms: float | None  # and the time between the two
    cost_usd: float | None
    cost_unpriced: bool  # used tokens with no known price
    is_error: bool
    current: bool
    opens: RowGroup | None = None  # this row opens a group of chunks
    closes: bool = False  # and this one closes it
    # As the row shows them, formatted once here: through template filters the step list's
    # formatting cost a player frame ~1.5 ms (bench/player_bench.py).
    number: int = field(init=False)  # seq as people count (#1 is seq 0)
    icon: str = field(init=False)
    when: str = field(init=False)  # `+1m 23.4s` since the start, else the timestamp
    step_number: int | None = field(init=False)
    pair_label: str = field(init=False)  # `850 ms ↔ #12`
    cost_label: str = field(init=False)  # "" when the event has no cost

    def __post_init__(self) -> None:
        self.number = self.seq + 1
        self.icon = kind_icon(self.kind)
        self.when = offset(self.offset_ms) if self.offset_ms is not None else (self.timestamp or "")
        self.step_number = None if self.step_pos is None else self.step_pos + 1
        if self.pair_seq is None:
            self.pair_label = ""
        elif self.pair_ms is None:
            self.pair_label = format_html("↔ #{}", self.pair_seq + 1)
        else:  # a negative time comes back as marked-up HTML, kept as such by format_html
            self.pair_label = format_html("{} ↔ #{}", duration_ms(self.pair_ms), self.pair_seq + 1)
        shown = self.cost_usd is not None or self.cost_unpriced
        self.cost_label = usd(self.cost_usd) if shown else ""


@dataclass
class PanelEvent(Shown):
    """The event the context panel shows."""

    seq: int
    kind: str
    event_type: str
    timestamp: str | None
    offset_ms: float | None  # since the session's start
    depth: int | None
    agent_id: str | None
    tool: str | None
    cost_usd: float | None
    cost_unpriced: bool
    tokens: int | None
    is_error: bool
    payload: Any


@dataclass
class PairedEvent(Shown):
    """The other side of the event's pair, and the time between the two."""

    seq: int
    kind: str
    duration_ms: float | None


@dataclass
class HistoryEntry(Shown):
    seq: int
    kind: str
    tool: str | None
    is_error: bool
    preview: str  # one line (the full event is a click away)


@dataclass
class History(Shown):
    """One of the context's histories: how many entries it holds, and the last SHOWN_HISTORY."""

    count: int
    shown: list[HistoryEntry]


@dataclass
class PanelStep(Shown):
    """The step the event belongs to (rlm-code's StepState fields), and where it closes."""

    index: int  # its position in the session's steps
    seq: int | None  # the event that closes it
    done: bool  # closed at or before the current event: its outcome is shown
    step: int  # the step number as recorded
    action_type: str
    action_rationale: str
    action_code: str
    success: bool
    output: str
    error: str
    reward: float
    cumulative_reward: float
    tokens_used: int
    duration_ms: float


@dataclass
class PanelWarning(Shown):
    type: str
    message: str


@dataclass
class PanelContext(Shown):
    """The context panel at one event: running totals, the event, its pair and step, histories."""

    event_index: int
    total_events: int
    cumulative_cost_usd: float | None  # None: the session has no priced event (unpriced, not $0)
    tokens: int
    reward: float
    elapsed_ms: float
    error_count: int
    step_index: int | None
    warnings: list[PanelWarning]
    event: PanelEvent
    paired_event: PairedEvent | None
    step: PanelStep | None
    event_counts: dict[str, int]
    memory_note_count: int
    variable_count: int
    llm_history: History
    tool_results: History
    pending_approvals: History


@dataclass
class Frame(Shown):
    session: Session
    seq: int
    events: list[StepRow]  # the step list, chunk runs folded into groups
    context: PanelContext | None
    nav: dict[str, Any]
    kinds: list[str]
    block: dict[str, Any] | None = None
    children: list[dict[str, Any]] = field(default_factory=list)
    conversation: list[dict[str, Any]] = field(default_factory=list)
    typing: str = ""  # the agent's reply so far, rebuilt from this turn's streamed chunks
    variables: list[tuple[str, ClippedValue]] = field(default_factory=list)  # (name, value)
    variables_hidden: int = 0
    memory: list[ClippedValue] = field(default_factory=list)  # the notes, empty ones left out
    memory_hidden: int = 0
    hidden_kind: str | None = None  # the shown event's kind, when the step list's filter hides it


@dataclass
class SearchHit(Shown):
    seq: int
    kind: str
    snippet: str


@dataclass
class SearchPanel(Shown):
    """The player's search results, and the seq a further search would continue from."""

    hits: list[SearchHit]
    next_from_seq: int | None


def _epoch_ms(iso: str | None) -> float | None:
    moment = as_utc(iso)
    return None if moment is None else moment.timestamp() * 1000.0


def start_ms(session: Session) -> float | None:
    """The session's start (what the list shows as Started), in epoch ms: where event times count from."""
    return None if session.started_at is None else session.started_at.timestamp() * 1000.0


def _offset_ms(iso: str | None, start: float | None) -> float | None:
    """Milliseconds from the session's start to an event's time (below zero when a clock went back)."""
    if start is None or iso is None:
        return None
    moment = _epoch_ms(iso)
    return None if moment is None else moment - start


def message_text(payload: Any) -> str:
    """The text of a user or agent message: `text` (daycare, flux0's rebuilt messages) or the
    content parts of a flux0 emitted message."""
    if not isinstance(payload, dict):
        return display_text(payload)
    if isinstance(payload.get("text"), str):
        return payload["text"]
    data = payload.get("data")
    if isinstance(data, dict) and isinstance(data.get("parts"), list):
        # A part's content may be recorded as a list of pieces: shown joined, as flux0 joins it.
        return "".join(
            content_text(part["content"]) for part in data["parts"]
            if isinstance(part, dict) and _is_text(part.get("content"))
        )  # fmt: skip
    return ""


def _is_text(content: Any) -> bool:
    return isinstance(content, str) or (isinstance(content, list) and all(isinstance(p, str) for p in content))


def preview(event: dict[str, Any]) -> str:
    """A one-line description of an event from its payload (display text, escaped later)."""
    payload = event.get("payload")
    if not isinstance(payload, dict):
        return _clip(display_text(payload))
    if event.get("kind") == Kind.LLM_CALL and isinstance(payload.get("messages"), list) and payload["messages"]:
        last = payload["messages"][-1]
        if isinstance(last, dict):
            return _clip(display_text(last.get("content")))
    if event.get("kind") in (Kind.USER_MESSAGE, Kind.AGENT_MESSAGE):
        text = message_text(payload)
        if text:
            return _clip(text)
    for key in _PREVIEW_KEYS:
        value = payload.get(key)
        if value not in (None, "", [], {}):
            return _clip(display_text(value))
    return _clip(display_text(payload)) if payload else ""


def display_text(value: Any) -> str:
    """Any payload value as display text: strings as they are, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()


def _clip(text: str, limit: int = PREVIEW_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip_block(text: str, limit: int = SHOWN_VALUE_CHARS) -> str:
    """A block of text cut at `limit` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def step_rows(events: list[dict[str, Any]], seq: int, *, start: float | None = None) -> list[StepRow]:
    """Step-list rows from the window's events: each with its preview, its time since `start`
    (the session's, epoch ms) and its pair. A run of COLLAPSE_MIN or more streamed chunks folds
    into one row: its first row `opens` the group (kind, count, seq range, open when the current
    event is inside) and its last `closes` it."""
    rows = [
        StepRow(
            seq=event["seq"], kind=event["kind"], tool=event["tool"], step_pos=event["stepPos"],
            depth_class=min(event["depth"] or 0, 6), timestamp=event["timestamp"],
            offset_ms=_offset_ms(event["timestamp"], start), preview=preview(event),
            pair_seq=event["pairSeq"], pair_ms=event["pairDurationMs"], cost_usd=event["costUsd"],
            cost_unpriced=event["costUnpriced"], is_error=event["isError"], current=event["seq"] == seq,
        )
        for event in events
    ]  # fmt: skip
    start = 0
    while start < len(rows):
        kind = rows[start].kind
        stop = start + 1
        if kind in COLLAPSE_KINDS:
            while stop < len(rows) and rows[stop].kind == kind:
                stop += 1
            if stop - start >= COLLAPSE_MIN:
                first, last = rows[start].seq, rows[stop - 1].seq
                rows[start].opens = RowGroup(kind=kind, count=stop - start, first=first, last=last,
                                             open=first <= seq <= last)  # fmt: skip
                rows[stop - 1].closes = True
        start = stop
    return rows


def panel_context(context: dict[str, Any], *, priced: bool = True, start: float | None = None) -> PanelContext:
    """The context panel from replay.context_at's result; `priced`: whether any event of the
    session has a price (else its running cost is unpriced, not $0); `start`: the session's
    start in epoch ms."""
    event, paired, seq = context["event"], context["pairedEvent"], context["eventIndex"]
    return PanelContext(
        event_index=seq,
        total_events=context["totalEvents"],
        cumulative_cost_usd=context["cumulativeCostUsd"] if priced else None,
        tokens=context["tokens"],
        reward=context["reward"],
        elapsed_ms=context["elapsedMs"],
        error_count=context["errorCount"],
        step_index=context["stepIndex"],
        warnings=[PanelWarning(type=w["type"], message=w["message"]) for w in context["warnings"]],
        event=PanelEvent(
            seq=event["seq"], kind=event["kind"], event_type=event["eventType"], timestamp=event["timestamp"],
            offset_ms=_offset_ms(event["timestamp"], start), depth=event["depth"], agent_id=event["agentId"], tool=event["tool"], cost_usd=event["costUsd"],
            cost_unpriced=event["costUnpriced"], tokens=event["tokens"], is_error=event["isError"],
            payload=event["payload"],
        ),
        paired_event=None if paired is None else PairedEvent(
            seq=paired["seq"], kind=paired["kind"], duration_ms=context["pairDurationMs"]
        ),
        step=_panel_step(context["step"], index=context["stepIndex"], step_seq=context["stepSeq"], seq=seq),
        event_counts=context["eventCounts"],
        memory_note_count=sum(not _is_blank(note) for note in context["memoryNotes"]),
        variable_count=len(context["variables"]),
        llm_history=_history(context, "llmHistory"),
        tool_results=_history(context, "toolResults"),
        pending_approvals=_history(context, "pendingApprovals"),
    )  # fmt: skip


def _panel_step(step: dict[str, Any] | None, *, index: int, step_seq: int | None, seq: int) -> PanelStep | None:
    if step is None:
        return None
    return PanelStep(
        index=index, seq=step_seq, done=step_seq is not None and seq >= step_seq, step=step["step"],
        action_type=step["action_type"], action_rationale=step["action_rationale"],
        action_code=step["action_code"], success=step["success"], output=step["output"], error=step["error"],
        reward=step["reward"], cumulative_reward=step["cumulative_reward"], tokens_used=step["tokens_used"],
        duration_ms=step["duration_ms"],
    )  # fmt: skip


def _history(context: dict[str, Any], name: str) -> History:
    """The last SHOWN_HISTORY entries of one of the context's histories, one line each, and how
    many it holds (`historyCounts`, when context_at read only the shown ones)."""
    entries = context[name]
    count = context["historyCounts"][name] if "historyCounts" in context else len(entries)
    shown = []
    for entry in entries[-SHOWN_HISTORY:]:
        line = preview(entry)
        if entry.get("response") is not None:
            # An AgentLens call's entry, completed in place by its answer.
            line = _clip(f"{line} → {preview(entry['response'])}")
        shown.append(HistoryEntry(seq=entry["seq"], kind=entry["kind"], tool=entry["tool"],
                                  is_error=entry["isError"], preview=line))  # fmt: skip
    return History(count=count, shown=shown)


def search_panel(found: dict[str, Any]) -> SearchPanel:
    """The search results panel from replay.search's result."""
    hits = [SearchHit(seq=r["seq"], kind=r["kind"], snippet=r.get("snippet", "")) for r in found["results"]]
    return SearchPanel(hits=hits, next_from_seq=found["nextFromSeq"])


def _kind_totals(session: Session) -> dict[str, int]:
    return session.kind_counts


def frame_at(*, session: Session, seq: int | None, kinds: list[str]) -> Frame:
    """The player at event `seq` (the last event when None), with only `kinds` in the step list
    (all kinds when empty); the context always counts every event."""
    last_event = max(session.event_count - 1, 0)
    seq = last_event if seq is None else max(0, min(seq, last_event))
    window = window_rows(session=session, seq=seq, kinds=kinds or None, before=BEFORE, after=AFTER)
    events = window_dict(window, session=session)["events"]
    # The window holds the event itself (and often its pair): the context reads neither again.
    read = {row.seq: row for row in window.rows}
    context = (
        replay.context_at(session=session, seq=seq, shown=SHOWN_HISTORY, read=read) if session.event_count else None
    )

    earlier = [e for e in events if e["seq"] < seq]
    later = [e for e in events if e["seq"] > seq]
    ts = _epoch_ms(context["event"]["timestamp"]) if context else None
    nav: dict[str, Any] = {
        "seq": seq,
        "prev": earlier[-1]["seq"] if earlier else None,
        "next": later[0]["seq"] if later else None,
        "next_ts": _epoch_ms(later[0]["timestamp"]) if later else None,
        "first": 0,
        "last": last_event,
        "last_event": last_event,
        "count": session.event_count,
        "ts": ts,
        "turn": None,
        "turn_ts": None,
        "prev_error": None,
        "next_error": None,
    }
    if _kind_totals(session).get(Kind.USER_MESSAGE):
        turn = replay.next_turn_boundary(session=session, seq=seq)
        if turn is not None:
            nav["turn"] = turn
            shown = next((e for e in later if e["seq"] == turn), None)
            nav["turn_ts"] = _epoch_ms(shown["timestamp"]) if shown else _ts_of(session, turn)
    if session.error_count or session.step_error_count:
        nav["prev_error"], nav["next_error"] = replay.errors_around(session=session, seq=seq)

    start = start_ms(session)
    priced = session.cost_known
    panel = panel_context(context, priced=priced, start=start) if context is not None else None
    rows = step_rows(events, seq, start=start)
    frame = Frame(session=session, seq=seq, events=rows, context=panel, nav=nav, kinds=kinds)
    if kinds and panel is not None and panel.event.kind not in kinds:
        frame.hidden_kind = panel.event.kind
    if context is not None:
        variables = context.get("variables") or {}
        names = list(variables)[-SHOWN_VARIABLES:]
        frame.variables = [(str(name), ClippedValue.of(variables[name])) for name in names]
        frame.variables_hidden = len(variables) - len(names)
        notes = [note for note in context.get("memoryNotes") or [] if not _is_blank(note)]
        frame.memory = [ClippedValue.of(note, text_as_is=True) for note in notes[-SHOWN_NOTES:]]
        frame.memory_hidden = len(notes) - len(frame.memory)
        if session.source_format == "daycare":
            frame.block = run_python_block(session=session, seq=seq, context=context)
        if _kind_totals(session).get(Kind.CHILD_SPAWN):
            frame.children = child_agents(session=session, seq=seq)
        if _kind_totals(session).get(Kind.USER_MESSAGE):
            frame.conversation, frame.typing = conversation(session=session, seq=seq, kinds=_kind_totals(session))
    return frame


def _is_blank(value: Any) -> bool:
    """A list entry with nothing to show (None, blank text): left out, never a "1. none" line."""
    return value is None or (isinstance(value, str) and not value.strip())


def _ts_of(session: Session, seq: int) -> float | None:
    # [:1] rather than .first(): Event's default ordering is by session, and ordering by a
    # foreign key joins the session table to sort by the session's own ordering.
    found = list(Event.objects.filter(session=session, seq=seq).values_list("ts", flat=True)[:1])
    return found[0].timestamp() * 1000.0 if found and found[0] else None


def run_python_block(*, session: Session, seq: int, context: dict[str, Any]) -> dict[str, Any] | None:
    """The daycare run_python block event `seq` belongs to, as it stood at `seq`: its code, the
    inner tool calls with their results, the print output so far and, once complete, the result.
    """
    event = context["event"]
    step = context.get("step")
    step_seq = context.get("stepSeq")
    if event.get("step") is None or step is None or step_seq is None:
        return None
    # The block runs from its rlm_start (step_start) to its rlm_complete (the step's closing
    # event); only what had happened by `seq` is shown.
    start = (
        Event.objects.filter(session=session, kind=Kind.STEP_START, seq__lte=min(seq, step_seq))
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    if start is None:
        return None
    inner = list(
        Event.objects.filter(
            session=session, seq__gte=start, seq__lte=min(seq, step_seq),
            kind__in=[Kind.TOOL_CALL, Kind.TOOL_RESPONSE, Kind.TOOL_ERROR],
        )
        .order_by("seq")
        .values_list("seq", "kind", "tool", "payload", "pair_seq", "pair_duration_ms", "is_error")[:BLOCK_EVENTS]
    )  # fmt: skip
    calls: list[dict[str, Any]] = []
    by_seq: dict[int, dict[str, Any]] = {}
    print_output: list[Any] = []
    for inner_seq, kind, tool, payload_text, pair_seq, duration, is_error in inner:
        payload = decoded_payload(payload_text)
        if kind == Kind.TOOL_CALL:
            call = {"seq": inner_seq, "tool": tool, "args": payload.get("toolArgs", payload.get("arguments")),
                    "result": None, "result_seq": None, "is_error": False, "duration_ms": duration}  # fmt: skip
            calls.append(call)
            by_seq[inner_seq] = call
            printed = payload.get("printOutput")
            if isinstance(printed, list):
                print_output = printed
        else:
            call = by_seq.get(pair_seq) if pair_seq is not None else None
            if call is None:
                call = {"seq": None, "tool": tool, "args": None, "duration_ms": None}
                calls.append(call)
            call.update(result=payload.get("toolResult", payload.get("result")), result_seq=inner_seq,
                        is_error=bool(is_error))  # fmt: skip
    complete = seq >= step_seq
    if complete:
        observation = step.get("raw_observation") or {}
        if isinstance(observation.get("printOutput"), list):
            print_output = observation["printOutput"]
    pending = session.metadata.get("pending_phase") if isinstance(session.metadata, dict) else None
    return {
        "step": step.get("step"),
        "start_seq": start,
        "end_seq": step_seq,
        "code": step.get("action_code", ""),
        "description": step.get("action_rationale", ""),
        "calls": calls,
        "print_output": print_output,
        "complete": complete,
        "output": step.get("output") if complete else None,
        "error": step.get("error") if complete else None,
        "interrupted": bool(pending) and str(step.get("error", "")).startswith("interrupted"),
    }


def child_agents(*, session: Session, seq: int) -> list[dict[str, Any]]:
    """Child agents spawned up to `seq`, each with its own cost: what the session spent between
    the spawn and the child's result (running totals at both ends, no scan)."""
    spawns = list(
        Event.objects.filter(session=session, kind=Kind.CHILD_SPAWN, seq__lte=seq)
        .order_by("-seq")
        .values_list("seq", "child_id", "pair_id", "depth", "payload", "pair_seq", "cost_total", "tokens_total")[
            :CHILDREN
        ]
    )
    spawns.reverse()
    with planned_for_values():  # a list of seqs: planning.py says why
        ends = {
            row[0]: row[1:]
            for row in Event.objects.filter(session=session, seq__in=[s[5] for s in spawns if s[5] is not None])
            .order_by()
            .values_list("seq", "cost_total", "tokens_total", "is_error")
        }
    children = []
    for spawn_seq, child_id, pair_id, depth, payload_text, result_seq, cost0, tokens0 in spawns:
        payload = decoded_payload(payload_text)
        end = ends.get(result_seq) if result_seq is not None and result_seq <= seq else None
        children.append({
            "seq": spawn_seq, "child_id": child_id or pair_id, "depth": depth,
            "task": _clip(display_text(payload.get("task")), 120),
            "result_seq": result_seq if end else None,
            "finished": end is not None,
            # None when no event of the session has a price: unpriced, not $0.
            "cost": (end[0] - cost0) if end and session.cost_known else None,
            "tokens": (end[1] - tokens0) if end else None,
            "failed": bool(end[2]) if end else False,
            # A sub-agent recorded as a session of its own (OpenTelemetry ingest).
            "session_id": payload["sessionId"] if type(payload.get("sessionId")) is int else None,
        })  # fmt: skip
    return children


def step_seqs(*, session: Session, start: int, stop: int) -> dict[int, int]:
    """{step position: seq of the event closing it} for positions start..stop-1 (one range read
    on the step_pos index): links from a step into the player."""
    return dict(
        Event.objects.filter(session=session, step_pos__gte=start, step_pos__lt=stop).values_list("step_pos", "seq")
    )


CONVERSATION_MESSAGES = 10
TYPING_CHUNKS = 2000
REWRITES = 200  # assistant_rewrite records read for one conversation window, at most


def conversation(*, session: Session, seq: int, kinds: dict[str, int]) -> tuple[list[dict[str, Any]], str]:
    """The last user and agent messages up to `seq` (flux0's rebuilt message of each turn,
    daycare's messages), oldest first, and, while a turn is still streaming, the reply so far
    rebuilt from its chunks (text appended at `/-`, as flux0 streams message text). `kinds` are
    the session's counts by kind: kinds it never had are not looked for."""
    found: list[tuple[int, str, str]] = []
    for kind in (k for k in (Kind.USER_MESSAGE, Kind.AGENT_MESSAGE) if kinds.get(k)):
        found += (
            Event.objects.filter(session=session, kind=kind, seq__lte=seq)
            .order_by("-seq")
            .values_list("seq", "kind", "payload")[:CONVERSATION_MESSAGES]
        )
    found.sort()
    found = found[-CONVERSATION_MESSAGES:]
    messages = [
        {
            "seq": s,
            "kind": kind,
            "user": kind == Kind.USER_MESSAGE,
            "text": clip_block(message_text(decoded_payload(p)), 4000),
        }
        for s, kind, p in found
    ]
    if session.source_format == "daycare" and kinds.get(Kind.NOTE):
        _apply_rewrites(session, messages, seq)
    typing = ""
    if messages and messages[-1]["user"] and kinds.get(Kind.CHUNK):
        pieces: list[str] = []
        for (payload_text,) in (
            Event.objects.filter(session=session, kind=Kind.CHUNK, seq__gt=messages[-1]["seq"], seq__lte=seq)
            .order_by("seq")
            .values_list("payload")[:TYPING_CHUNKS]
        ):
            payload = decoded_payload(payload_text)
            for patch in payload.get("patches") or []:
                if isinstance(patch, dict) and patch.get("path") == "/-" and isinstance(patch.get("value"), str):
                    pieces.append(patch["value"])
        typing = clip_block("".join(pieces), 4000)
    return messages, typing


def _apply_rewrites(session: Session, messages: list[dict[str, Any]], seq: int) -> None:
    """daycare's assistant_rewrite: from the rewrite on, the message it names reads its new text,
    as daycare's agentHistoryContext rebuilds the conversation (the importer resolved which
    message it names: `rewrites.seq`). Only rewrites after the oldest message shown can touch
    one, so the read stays within the window."""
    shown = {m["seq"]: m for m in messages if not m["user"]}
    if not shown:
        return
    rewrites = (
        Event.objects.filter(
            session=session, kind=Kind.NOTE, source_type="assistant_rewrite", seq__gt=min(shown), seq__lte=seq
        )
        .order_by("seq")
        .values_list("payload", flat=True)[:REWRITES]
    )
    for payload_text in rewrites:
        payload = decoded_payload(payload_text)
        target = shown.get((payload.get("rewrites") or {}).get("seq"))
        if target is not None and isinstance(payload.get("text"), str):
            target["text"] = clip_block(payload["text"], 4000)
            target["rewritten"] = True
