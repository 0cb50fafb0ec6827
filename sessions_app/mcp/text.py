"""How numbers, times and values read in the tools' text: plain formatting, no queries.

The tools answer in text because that is what a model reads best; every value an agent or a
user wrote is clipped, so one huge payload cannot make an answer megabytes long.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..replay.frames import display_text
from ..replay.rows import as_utc

# The most characters one tool answer holds, whatever the session holds. An answer goes whole
# into the calling model's context: 24,000 characters is some 6,000-8,000 tokens of English,
# JSON or code, under a quarter of a small (32k-token) context, so a few calls still leave room
# for the conversation, and enough for 100 plain timeline steps or 10 errors with their context.
# Each tool adds whole lines or blocks (a step, an error, a session, a thread) while they fit,
# and a cut answer ends with the call (or REST path) that gets the rest.
MAX_ANSWER_CHARS = 24_000
# Kept free under the budget for the closing lines: the "Showing …" line and the note saying
# how to continue (their sessionId, eventTypes and cursor are clipped, so this is enough).
NOTE_ROOM = 1_200


class ToolInputError(ValueError):
    """An argument the caller got wrong: the message names it and says what would do."""


def clip(text: str, limit: int = 160) -> str:
    """Text on one line, cut at `limit` characters. Python cuts between characters (code
    points), never inside one's UTF-8 bytes."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip_more(text: str, limit: int, where: str) -> str:
    """Text on one line, cut at `limit` characters; a cut one says how much is left and
    `where` to read it whole (a REST path)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters; whole: {where})"


def fit(head: list[str], blocks: list[str], separator: str = "\n", budget: int = MAX_ANSWER_CHARS) -> int:
    """How many of `blocks`, in order, fit after the lines `head` (joined by newlines, each
    block after `separator`) leaving NOTE_ROOM of `budget` for the closing note. At least one
    when there is one: the first block is bounded by its values' own cuts, and an answer that
    shows nothing could never be continued."""
    used = sum(len(line) + 1 for line in head)
    room = budget - NOTE_ROOM
    for count, block in enumerate(blocks):
        used += len(block) + len(separator)
        if used > room and count > 0:
            return count
    return len(blocks)


def cap(text: str, note: str, budget: int = MAX_ANSWER_CHARS) -> str:
    """The last guard: `text` unchanged if it fits `budget`, else cut at its last whole line
    that leaves room for `note` (how to get the rest), which ends it."""
    if len(text) <= budget:
        return text
    note = clip(note, NOTE_ROOM - 100)
    room = budget - len(note) - 60
    cut = text.rfind("\n", 0, room)
    kept = text[: cut if cut > 0 else room]
    return f"{kept}\n\n[Answer cut at {budget:,} characters ({len(text):,} in all). {note}]"


def clip_block(text: str, limit: int = 1000) -> str:
    """Text (line breaks kept), cut at `limit` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters in all)"


def value_text(value: Any, limit: int = 500) -> str:
    """Any value as one line: strings as they are, anything else as JSON."""
    return clip(display_text(value), limit)


def shrink(value: Any, chars: int = 200, items: int = 20, depth: int = 8) -> tuple[Any, bool]:
    """`value` with each string cut at `chars` (saying how much is left), each list or object at
    `items` entries and anything deeper than `depth` levels elided: still a value that dumps as
    valid JSON, unlike a cut of its text. Second: whether anything was cut."""
    if isinstance(value, str):
        if len(value) <= chars:
            return value, False
        return f"{value[:chars]}… ({len(value) - chars:,} more characters)", True
    if isinstance(value, dict | list) and depth <= 0:
        return f"… ({len(value)} entries, nested too deep to show)", True
    if isinstance(value, dict):
        out, cut = {}, len(value) > items
        for key, inner in list(value.items())[:items]:
            out[key], inner_cut = shrink(inner, chars, items, depth - 1)
            cut = cut or inner_cut
        if len(value) > items:
            out["…"] = f"{len(value) - items} more keys"
        return out, cut
    if isinstance(value, list):
        out, cut = [], len(value) > items
        for inner in value[:items]:
            shrunk, inner_cut = shrink(inner, chars, items, depth - 1)
            out.append(shrunk)
            cut = cut or inner_cut
        if len(value) > items:
            out.append(f"… {len(value) - items} more items")
        return out, cut
    return value, False


def json_block(value: Any, limit: int = 2000, where: str = "") -> str:
    """A value as indented JSON of at most about `limit` characters that still parses: long
    strings and lists are shortened inside it (shrink), more each round, never its text cut
    mid-structure. A shortened one is followed by a line saying so and `where` it is whole."""
    dump = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
    text = orjson.dumps(value, option=dump, default=str).decode()
    if len(text) <= limit:
        return text
    whole_length = len(text)
    for chars, items, depth in ((300, 20, 8), (120, 10, 5), (60, 5, 3), (30, 3, 2), (20, 2, 1), (10, 1, 0)):
        shrunk, _ = shrink(value, chars, items, depth)
        text = orjson.dumps(shrunk, option=dump, default=str).decode()
        if len(text) <= limit:
            break
    note = f"(shortened from {whole_length:,} characters"
    return f"{text}\n{note}{f'; whole: {where}' if where else ''})"


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
    """A cost; None, what no price is known for (the context's cost so far of a session with no
    priced event), is "unpriced", never $0."""
    return "unpriced" if value is None else f"${value:.4f}"


def session_cost(session: Any) -> str:
    """A session's cost, or "unpriced" when no event of it had a price: its 0 is a sum of
    nothing, never $0 (Session.cost_known, as every page and the API say)."""
    return usd(session.cost_usd) if session.cost_known else "unpriced"


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
