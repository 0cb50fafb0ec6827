"""How numbers, times and kinds read on a page: plain formatting, no queries, no decisions.

The dashboard's templates use these as filters (templatetags/replay_tags.py registers them);
the step list's rows get them precomputed (frames.StepRow), because that loop is the hottest
part of a player frame: a filter call through the template engine costs several times the
formatting itself (bench/player_bench.py).
"""

from __future__ import annotations

from typing import Any

from django.utils.html import format_html
from django.utils.safestring import mark_safe

from ..canonical import Kind

# One glyph per kind in the step list (the kind's name is always shown beside it, so the glyph
# is decoration and stays aria-hidden). Plain symbols that common system fonts carry: emoji
# render as empty boxes on servers and kiosks without an emoji font.
KIND_ICONS: dict[str, str] = {
    Kind.SESSION_START: "▶", Kind.SESSION_END: "■", Kind.STEP_START: "┌", Kind.ACTION: "✎",
    Kind.RESULT: "↳", Kind.STEP_END: "└", Kind.MEMORY_UPDATE: "☰", Kind.VARIABLE_UPDATE: "≔",
    Kind.STATE: "◆", Kind.LLM_CALL: "⇒", Kind.LLM_RESPONSE: "⇐", Kind.TOOL_CALL: "⚙",
    Kind.TOOL_RESPONSE: "✔", Kind.TOOL_ERROR: "✖", Kind.CHILD_SPAWN: "↘", Kind.CHILD_RESULT: "↖",
    Kind.APPROVAL_REQUESTED: "?", Kind.APPROVAL_GRANTED: "✓", Kind.APPROVAL_DENIED: "⊘",
    Kind.APPROVAL_EXPIRED: "×", Kind.COST: "$", Kind.FINAL: "★", Kind.CHECKPOINT: "⚑",
    Kind.ERROR: "⚠", Kind.USER_MESSAGE: "☺", Kind.AGENT_MESSAGE: "◇", Kind.CHUNK: "…",
    Kind.STATUS: "○", Kind.CONTEXT: "≡", Kind.NOTE: "✱", Kind.CUSTOM: "•",
}  # fmt: skip


def kind_icon(kind: str) -> str:
    return KIND_ICONS.get(kind, "•")


# A span of time below zero means the source's timestamps are out of order (a clock went back, an
# answer stamped before its call): said so, never shown as if it were a length of time.
NEGATIVE_DURATION = (
    '<span class="negative-duration" title="the end is stamped before the start">'
    "⚠ negative duration ({}): timestamps out of order</span>"
)


def duration(seconds: Any) -> str:
    """Seconds as `850 ms`, `4.2 s`, `3 m 12 s`, `2 h 05 m`; below zero, flagged."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return ""
    if value != value:  # NaN
        return ""
    if value < 0:
        return format_html(NEGATIVE_DURATION, "-" + duration(-value))
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes} m {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} m"
    return f"{hours // 24} d {hours % 24:02d} h"


def duration_ms(milliseconds: Any) -> str:
    try:
        return duration(float(milliseconds) / 1000.0)
    except (TypeError, ValueError):
        return ""


UNPRICED = mark_safe('<em class="unpriced" title="no price is known for what this used">unpriced</em>')


def usd(value: Any) -> str:
    """A cost in dollars; None, a cost no price is known for, is *unpriced* (never $0)."""
    if value is None:
        return UNPRICED
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return ""
    return f"${amount:.4f}" if amount < 100 else f"${amount:,.2f}"


def offset(milliseconds: Any) -> str:
    """Time since the session's start as `+1m 23.4s` (`+23.4s`, `+2h 05m 03.4s`, `+3d 02h 05m
    03.4s`); before the start (a clock that went back), flagged."""
    try:
        value = float(milliseconds)
    except (TypeError, ValueError):
        return ""
    if value != value:
        return ""
    if value < 0:
        return format_html(
            '<span class="negative-duration" title="stamped before the session\'s start: timestamps out of order">'
            "⚠ {}</span>",
            "-" + offset(-value)[1:],
        )
    tenths = int(value / 100 + 0.5)  # half up: 3.45 s shows as 3.5 s
    seconds, tenth = divmod(tenths, 10)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"+{days}d {hours:02d}h {minutes:02d}m {seconds:02d}.{tenth}s"
    if hours:
        return f"+{hours}h {minutes:02d}m {seconds:02d}.{tenth}s"
    if minutes:
        return f"+{minutes}m {seconds:02d}.{tenth}s"
    return f"+{seconds}.{tenth}s"


def one_based(position: Any) -> Any:
    """A 0-based seq or step index as people count: the player shows seq 0 as event #1 and
    step index 0 as step 1 (URLs and the API keep the 0-based values)."""
    try:
        return int(position) + 1
    except (TypeError, ValueError):
        return ""
