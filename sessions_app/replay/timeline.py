"""The scrubber's overview of a whole session, drawn from a bounded number of rows.

Every event row carries running totals *after* itself (counts by kind, errors, elapsed time), so
the events between two rows are the difference of their totals. Reading ~240 rows spaced evenly
by seq therefore gives exact counts by kind and errors for 240 buckets, each placed by its
recorded time, whatever the session's length: one indexed `seq IN (...)` read, never a scan.
The overview is a handful of SVG paths (one per colour), never one DOM node per event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..canonical import Kind
from ..models import Checkpoint, Event, Session
from ..models.planning import planned_for_values

BUCKETS = 240
WIDTH = 1000.0  # SVG user units; the element is stretched to the page width
HEIGHT = 36.0

# Colour groups of the overview, in drawing order (bottom to top of a column).
CATEGORIES: dict[str, frozenset[str]] = {
    "llm": frozenset({Kind.LLM_CALL, Kind.LLM_RESPONSE, Kind.COST}),
    "tool": frozenset({Kind.TOOL_CALL, Kind.TOOL_RESPONSE, Kind.TOOL_ERROR}),
    "step": frozenset({Kind.STEP_START, Kind.ACTION, Kind.RESULT, Kind.STEP_END, Kind.FINAL}),
    "message": frozenset({Kind.USER_MESSAGE, Kind.AGENT_MESSAGE, Kind.CHUNK, Kind.STATUS}),
    "agent": frozenset({Kind.CHILD_SPAWN, Kind.CHILD_RESULT, Kind.APPROVAL_REQUESTED,
                        Kind.APPROVAL_GRANTED, Kind.APPROVAL_DENIED, Kind.APPROVAL_EXPIRED}),
}  # fmt: skip
CATEGORY_OF: dict[str, str] = {kind: name for name, kinds in CATEGORIES.items() for kind in kinds}
OTHER = "other"
CATEGORY_NAMES = (*CATEGORIES, OTHER)

# A bucket longer than this many times the typical one is an idle gap: it is drawn compressed
# to that width and marked, so an hour of waiting does not squeeze the work into a sliver.
IDLE_FACTOR = 6.0
# Each bucket keeps at least this share of its fair width, so a burst of events that share one
# timestamp stays visible and clickable.
MIN_SHARE = 0.15


@dataclass
class IdleGap:
    x: float  # 0..1 of the scrubber width
    width: float
    seconds: float


@dataclass
class Mark:
    name: str
    seq: int
    x: float


@dataclass
class Overview:
    event_count: int
    duration_ms: float
    by_time: bool  # False when the session has no timestamps: positions follow seq instead
    # [seq, x] pairs, x in 0..1, increasing: seq -1 sits at 0 and event s spans x(s-1)..x(s).
    samples: list[list[float]]
    paths: dict[str, str]
    error_path: str
    error_buckets: int
    idle: list[IdleGap] = field(default_factory=list)
    checkpoints: list[Mark] = field(default_factory=list)

    def script_data(self) -> dict[str, Any]:
        """What the scrubber's script needs to map between pointer position and seq."""
        return {"samples": self.samples, "count": self.event_count}


def boundaries(count: int, buckets: int = BUCKETS) -> list[int]:
    """The last seq of each bucket: evenly spaced, strictly increasing, ending at count - 1."""
    if count <= 0:
        return []
    n = min(count, buckets)
    return sorted({(count * (k + 1)) // n - 1 for k in range(n)})


def session_overview(*, session: Session, buckets: int = BUCKETS) -> Overview:
    count = session.event_count
    ends = boundaries(count, buckets)
    with planned_for_values():  # a list of seqs: planning.py says why
        rows = {
            seq: (elapsed or 0.0, kind_counts, errors)
            for seq, elapsed, kind_counts, errors in Event.objects.filter(session=session, seq__in=ends)
            .order_by()
            .values_list("seq", "elapsed_ms", "kind_counts", "errors_total")
        }
    ends = [seq for seq in ends if seq in rows]  # a live session may have grown meanwhile
    previous_counts: dict[str, int] = {}
    previous_errors = 0
    previous_elapsed = 0.0
    columns: list[tuple[int, int, dict[str, int], int, float]] = []  # (first, last, cats, errs, ms)
    start = 0
    for seq in ends:
        elapsed, kind_counts_json, errors = rows[seq]
        counts = orjson.loads(kind_counts_json)
        cats = dict.fromkeys(CATEGORY_NAMES, 0)
        for kind, value in counts.items():
            delta = value - previous_counts.get(kind, 0)
            if delta:
                cats[CATEGORY_OF.get(kind, OTHER)] += delta
        columns.append((start, seq, cats, errors - previous_errors, max(0.0, elapsed - previous_elapsed)))
        previous_counts, previous_errors, previous_elapsed = counts, errors, elapsed
        start = seq + 1

    duration = previous_elapsed
    widths, idle_flags, by_time = _widths(columns, duration)
    total_width = sum(widths) or 1.0

    samples: list[list[float]] = [[-1, 0.0]]
    paths = {name: [] for name in CATEGORY_NAMES}
    error_parts: list[str] = []
    idle: list[IdleGap] = []
    x = 0.0
    error_buckets = 0
    for (first, last, cats, errs, ms), width, is_idle in zip(columns, widths, idle_flags):
        share = width / total_width
        if is_idle:
            # The gap lies before this bucket's events: draw it as a hatched span, then the
            # bucket itself at its fair width.
            gap = share * 0.6
            idle.append(IdleGap(x=x, width=gap, seconds=ms / 1000.0))
            x += gap
            share -= gap
            samples.append([first - 1, round(x, 6)])
        x0, x1 = x * WIDTH, (x + share) * WIDTH
        events = sum(cats.values()) or 1
        y = HEIGHT
        for name in CATEGORY_NAMES:
            if cats[name]:
                h = HEIGHT * cats[name] / events
                paths[name].append(_rect(x0, y - h, x1 - x0, h))
                y -= h
        if errs > 0:
            error_buckets += 1
            middle = (x0 + x1) / 2
            error_parts.append(f"M{middle:.2f} 0V{HEIGHT * 0.45:.2f}")
        x += share
        samples.append([last, round(x, 6)])
    if len(samples) > 1:
        samples[-1][1] = 1.0

    overview = Overview(
        event_count=count,
        duration_ms=duration,
        by_time=by_time,
        samples=samples,
        paths={name: "".join(parts) for name, parts in paths.items() if parts},
        error_path="".join(error_parts),
        error_buckets=error_buckets,
        idle=idle,
    )
    overview.checkpoints = [
        Mark(name=name, seq=seq, x=position_of(seq, samples))
        for name, seq in Checkpoint.objects.filter(session=session).values_list("name", "seq")[:200]
    ]
    return overview


def position_of(seq: int, samples: list[list[float]]) -> float:
    """The x (0..1) of the middle of event `seq`'s span on the scrubber."""
    return (_x_at(seq - 1, samples) + _x_at(seq, samples)) / 2


def _x_at(seq: float, samples: list[list[float]]) -> float:
    if not samples:
        return 0.0
    if seq <= samples[0][0]:
        return samples[0][1]
    for (s0, x0), (s1, x1) in zip(samples, samples[1:]):
        if seq <= s1:
            return x0 + (x1 - x0) * (seq - s0) / ((s1 - s0) or 1)
    return samples[-1][1]


def _widths(columns, duration: float) -> tuple[list[float], list[bool], bool]:
    """Each bucket's drawn width: its recorded duration, with idle gaps compressed and a
    minimum so no bucket vanishes; by event count when the session has no usable times."""
    if not columns:
        return [], [], False
    counts = [last - first + 1 for first, last, *_ in columns]
    if duration <= 0:
        return [float(c) for c in counts], [False] * len(columns), False
    spans = [ms for *_, ms in columns]
    positive = sorted(s for s in spans if s > 0)
    typical = positive[len(positive) // 2] if positive else duration / len(columns)
    cap = max(typical * IDLE_FACTOR, duration / len(columns))
    floor = (duration / len(columns)) * MIN_SHARE
    widths, flags = [], []
    for span in spans:
        is_idle = span > cap and span > 60_000  # shorter pauses are just slow calls
        widths.append(max(floor, cap if is_idle else span))
        flags.append(is_idle)
    return widths, flags, True


def _rect(x: float, y: float, w: float, h: float) -> str:
    return f"M{x:.2f} {y:.2f}h{max(w, 0.6):.2f}v{h:.2f}h{-max(w, 0.6):.2f}z"
