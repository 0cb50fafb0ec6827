"""How numbers, times and values read in the tools' text: plain formatting, no queries.

The tools answer in text because that is what a model reads best; every value an agent or a
user wrote is clipped, so one huge payload cannot make an answer megabytes long.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..replay.frames import display_text
from ..replay.rows import as_utc


class ToolInputError(ValueError):
    """An argument the caller got wrong: the message names it and says what would do."""


def clip(text: str, limit: int = 160) -> str:
    """Text on one line, cut at `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip_block(text: str, limit: int = 1000) -> str:
    """Text (line breaks kept), cut at `limit` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters in all)"


def value_text(value: Any, limit: int = 500) -> str:
    """Any value as one line: strings as they are, anything else as JSON."""
    return clip(display_text(value), limit)


def json_block(value: Any, limit: int = 2000) -> str:
    """A value as indented JSON, cut at `limit` characters."""
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode()
    return clip_block(text, limit)


def duration(ms: float | None) -> str:
    """AgentLens's durations: `850ms`, `1.2s`, `2m 15s`; from an hour on, `1h 05m`."""
    if ms is None:
        return ""
    if ms < 0:
        return f"{ms:.0f}ms (timestamps out of order)"
    if ms < 1000:
        return f"{ms:.0f}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    if ms < 3_600_000:
        minutes, seconds = divmod(round(ms / 1000), 60)
        return f"{minutes}m {seconds}s"
    hours, minutes = divmod(round(ms / 60_000), 60)
    return f"{hours}h {minutes:02d}m"


def usd(value: float | None) -> str:
    return f"${value or 0.0:.4f}"


def iso(value: Any) -> str:
    """A stored time as ISO 8601 UTC (`2026-02-08T10:30:00Z`), or `-`."""
    moment = as_utc(value)
    if moment is None:
        return "-"
    text = moment.replace(tzinfo=None).isoformat(timespec="milliseconds")
    return (text[:-4] if text.endswith(".000") else text) + "Z"


def clock(value: Any) -> str:
    """The time of day of a stored time, `HH:MM:SS` (UTC), as the timeline shows it."""
    moment = as_utc(value)
    return moment.strftime("%H:%M:%S") if moment is not None else "--:--:--"


def number(value: Any) -> str:
    """Whole numbers with thousands separators, others as they are."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
