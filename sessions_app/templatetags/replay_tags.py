"""Display filters of the dashboard: formatting only, no queries and no decisions."""

from __future__ import annotations

from typing import Any

import orjson
from django import template
from django.utils.safestring import SafeString

from .. import highlighting
from ..canonical import Kind
from ..replay.frames import display_text

register = template.Library()

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


@register.filter
def kind_icon(kind: str) -> str:
    return KIND_ICONS.get(kind, "•")


@register.filter
def duration(seconds: Any) -> str:
    """Seconds as `850 ms`, `4.2 s`, `3 m 12 s`, `2 h 05 m`."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return ""
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


@register.filter
def duration_ms(milliseconds: Any) -> str:
    try:
        return duration(float(milliseconds) / 1000.0)
    except (TypeError, ValueError):
        return ""


@register.filter
def usd(value: Any) -> str:
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return ""
    return f"${amount:.4f}" if amount < 100 else f"${amount:,.2f}"


@register.filter
def python(code: Any) -> SafeString:
    return highlighting.highlight_python("" if code is None else str(code))


@register.filter
def pretty_json(value: Any) -> SafeString:
    """A decoded JSON value, indented and highlighted (escaped inside)."""
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode()
    return highlighting.highlight_json(text)


@register.filter
def to_text(value: Any) -> str:
    return display_text(value)


@register.filter
def is_long(value: Any, lines: int = 12) -> bool:
    """Whether a text is long enough to be folded."""
    text = to_text(value)
    return len(text) > 800 or text.count("\n") >= lines


@register.filter
def get(mapping: Any, key: Any) -> Any:
    if isinstance(mapping, dict):
        return mapping.get(key)
    return None


@register.filter
def percent(value: Any) -> str:
    try:
        return f"{float(value) * 100:.2f}%"
    except (TypeError, ValueError):
        return ""
