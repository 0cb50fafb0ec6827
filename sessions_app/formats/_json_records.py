"""JSON records of a file, one at a time, whatever the container: JSON lines, a JSON array, or an
object whose list holds them (`{"events": [...]}`, the body of AgentLens' ingest API).

Used by the AgentLens, flux0 and daycare formats. Each record comes with its exact bytes (what
the hash chain covers and what an export writes back) and the line it starts on. A JSON array is
never read whole: `split_array` walks the bytes with two small regular expressions (one outside
strings, one inside) and cuts each element out as its closing separator arrives, so memory holds
one element plus one read block, whatever the file size.

Every record that cannot be used becomes a problem on its line (BOM, invalid UTF-8, malformed
JSON, a truncated last record, a value that is not an object); the rest still comes through.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Callable, Iterable, Iterator

import orjson

from ..canonical import Problems
from . import BOM, Source, load_json_line

READ_BLOCK = 1 << 20
# How many leading lines decide between JSON lines and one pretty-printed JSON object.
SNIFF_LINES = 20

_OUTSIDE = re.compile(rb'[\[\]{}",:]')
_INSIDE = re.compile(rb'["\\]')
_LBRACKET, _RBRACKET, _LBRACE, _RBRACE = 0x5B, 0x5D, 0x7B, 0x7D
_QUOTE, _COMMA, _COLON, _BACKSLASH = 0x22, 0x2C, 0x3A, 0x5C


@dataclass(slots=True)
class Record:
    line: int
    raw: bytes
    value: dict[str, Any]

    @property
    def text(self) -> str:
        # orjson accepted these bytes, so they are valid UTF-8.
        return self.raw.decode("utf-8")


def iter_records(
    source: Source,
    problems: Problems,
    *,
    body_keys: tuple[str, ...] = (),
    on_bytes: Callable[[int], None] | None = None,
) -> Iterator[Record]:
    """Every usable JSON object of the file, in file order.

    `body_keys` names the keys of a top-level object whose list holds the records (also when
    each line of a JSON-lines file is such an object, e.g. a log of API request bodies).
    """
    with source.open() as stream:
        underlying = getattr(stream, "fileobj", None)
        consumed = 0

        def blocks() -> Iterator[bytes]:
            nonlocal consumed
            while True:
                block = stream.read(READ_BLOCK)
                if not block:
                    break
                consumed += len(block)
                if on_bytes is not None:
                    on_bytes(underlying.tell() if underlying is not None else consumed)
                yield block

        chunks = blocks()
        first = next(chunks, b"")
        if first.startswith(BOM):
            problems.add(1, "line", "byte-order mark at the start of the file (ignored)")
            first = first[3:]
        lead = first.lstrip()
        if lead.startswith(b"["):
            container = "array"
        elif lead.startswith(b"{") and body_keys and not _looks_like_lines(first, body_keys):
            container = "body"
        else:
            container = "lines"
        rest = _prepend(first, chunks)
        if container == "lines":
            yield from _records_of_lines(rest, problems, body_keys)
        else:
            for line, raw, last in split_array(
                rest, problems, body_keys=body_keys if container == "body" else ()
            ):
                record = _load(line, raw, problems, last=last)
                if record is not None:
                    yield Record(line, raw, record)


def _prepend(first: bytes, chunks: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from chunks


def _looks_like_lines(first: bytes, body_keys: tuple[str, ...]) -> bool:
    """True when one of the first lines is a complete JSON object on its own: JSON lines."""
    lines = first.split(b"\n")
    if len(first) >= READ_BLOCK:
        lines = lines[:-1]  # the last piece may be cut by the block boundary
    for line in lines[:SNIFF_LINES]:
        line = line.strip()
        if not line.startswith(b"{"):
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return True
    return False


def _records_of_lines(
    chunks: Iterable[bytes], problems: Problems, body_keys: tuple[str, ...]
) -> Iterator[Record]:
    for number, line, last in _lines(chunks):
        body = line.strip()
        if not body:
            continue
        record = _load(number, body, problems, last=last)
        if record is None:
            continue
        listed = _body_list_key(record, body_keys)
        if listed is None:
            yield Record(number, body, record)
            continue
        # A whole request body on one line: its elements, each with its exact bytes.
        for _, raw, _last in split_array([body], problems, body_keys=body_keys, first_line=number):
            element = _load(number, raw, problems)
            if element is not None:
                yield Record(number, raw, element)


def _body_list_key(record: dict[str, Any], body_keys: tuple[str, ...]) -> str | None:
    for key in body_keys:
        if isinstance(record.get(key), list):
            return key
    return None


def _lines(chunks: Iterable[bytes]) -> Iterator[tuple[int, bytes, bool]]:
    """(line number from 1, line without its ending, is the file's last line and unterminated)."""
    number = 0
    pending = b""
    for chunk in chunks:
        parts = (pending + chunk).split(b"\n")
        pending = parts.pop()
        for part in parts:
            number += 1
            yield number, part.rstrip(b"\r"), False
    if pending:
        yield number + 1, pending.rstrip(b"\r"), True


def _load(number: int, raw: bytes, problems: Problems, *, last: bool = False) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return load_json_line(number, raw, problems, last=last)
    if type(value) is not dict:
        problems.add(number, "line", f"expected a JSON object, got {type(value).__name__}")
        return None
    return value


def split_array(
    chunks: Iterable[bytes],
    problems: Problems,
    *,
    body_keys: tuple[str, ...] = (),
    first_line: int = 1,
) -> Iterator[tuple[int, bytes, bool]]:
    """(line, exact bytes, file ended inside it) of each element of a JSON array.

    The array is the document itself, or with `body_keys` the value of one of those keys of the
    top-level object. Elements are cut at the separators of the array's own depth; strings
    (with their escapes) are skipped whole so brackets inside them do not count.
    """
    keys = {key.encode() for key in body_keys}
    source = iter(chunks)
    buf = b""
    pos = 0
    line = first_line  # the line number at byte `line_pos`
    line_pos = 0
    depth = 0
    target: int | None = None  # container depth whose separators cut elements
    found = False
    root_object = False
    expect_key = False
    key_start = -1
    last_key: bytes | None = None
    value_pending = False  # after `"events":` at depth 1, waiting for its `[`
    elem_from = -1  # first byte after the separator that opened the current element
    after_comma = False
    in_string = False
    string_start = -1

    def refill() -> bool:
        nonlocal buf, pos, line, line_pos, elem_from, string_start, key_start
        block = next(source, None)
        if block is None:
            return False
        anchor = pos
        if target is not None and elem_from >= 0:
            anchor = min(anchor, elem_from)
        if in_string:
            anchor = min(anchor, string_start)
        line += buf.count(b"\n", line_pos, anchor)
        buf = buf[anchor:] + block
        pos -= anchor
        line_pos = 0
        if elem_from >= 0:
            elem_from -= anchor
        if string_start >= 0:
            string_start -= anchor
        if key_start >= 0:
            key_start -= anchor
        return True

    def cut(end: int, *, truncated: bool = False) -> tuple[int, bytes, bool] | None:
        nonlocal line, line_pos
        piece = buf[elem_from:end]
        stripped = piece.lstrip()
        if not stripped.strip():
            return None
        start = elem_from + (len(piece) - len(stripped))
        line += buf.count(b"\n", line_pos, start)
        line_pos = start
        return line, stripped.rstrip(), truncated

    while True:
        if in_string:
            match = _INSIDE.search(buf, pos)
            if match is None:
                pos = len(buf)
                if not refill():
                    break
                continue
            j = match.start()
            if buf[j] == _BACKSLASH:
                if j + 1 >= len(buf):
                    pos = j
                    if not refill():
                        break
                    continue
                pos = j + 2
                continue
            in_string = False
            pos = j + 1
            if key_start >= 0:
                last_key = buf[key_start + 1 : j]
                key_start = -1
            continue
        match = _OUTSIDE.search(buf, pos)
        if match is None:
            pos = len(buf)
            if not refill():
                break
            continue
        j = match.start()
        c = buf[j]
        pos = j + 1
        if c == _QUOTE:
            in_string = True
            string_start = j
            if root_object and depth == 1 and expect_key:
                key_start = j
                expect_key = False
            elif depth == 1:
                value_pending = False
            continue
        if c == _LBRACKET or c == _LBRACE:
            if depth == 0:
                if c == _LBRACKET and not keys and not found:
                    target, found, elem_from, after_comma = 1, True, j + 1, False
                elif c == _LBRACE and keys:
                    root_object, expect_key = True, True
            elif depth == 1 and root_object:
                if c == _LBRACKET and value_pending and not found:
                    target, found, elem_from, after_comma = 2, True, j + 1, False
                value_pending = False
            depth += 1
            continue
        if c == _RBRACKET or c == _RBRACE:
            if target is not None and depth == target and c == _RBRACKET:
                element = cut(j)
                if element is not None:
                    yield element
                elif after_comma:
                    problems.add(line, "line", "empty array element (trailing comma)")
                target, elem_from = None, -1
            depth -= 1
            if depth < 0:
                problems.add(line + buf.count(b"\n", line_pos, j), "line", "unbalanced closing bracket; the rest of the file is ignored")
                return
            continue
        if c == _COMMA:
            if target is not None and depth == target:
                element = cut(j)
                if element is not None:
                    yield element
                else:
                    problems.add(line + buf.count(b"\n", line_pos, j), "line", "empty array element")
                elem_from, after_comma = j + 1, True
            elif root_object and depth == 1:
                expect_key, value_pending = True, False
            continue
        if c == _COLON and root_object and depth == 1:
            value_pending = last_key in keys
            continue

    if target is not None:
        element = cut(len(buf), truncated=True)
        if element is not None:
            yield element
        else:
            problems.add(line + buf.count(b"\n", line_pos, len(buf)), "line", "file ends before the array is closed")
    elif not found:
        if keys:
            wanted = " or ".join(f'"{key}"' for key in body_keys)
            problems.add(None, "file", f"no top-level array or {wanted} list found")
        else:
            problems.add(None, "file", "no top-level JSON array found")


# Values -----------------------------------------------------------------------------------------

_MISSING = object()


def number(
    container: dict[str, Any] | Any, key: str, field: str, line: int | None, problems: Problems
) -> float | None:
    """A finite number at `container[key]`, or None. Absent is fine; null, text, booleans and
    NaN/Infinity are reported on `field` and ignored."""
    if not isinstance(container, dict):
        return None
    value = container.get(key, _MISSING)
    if value is _MISSING:
        return None
    if value is None:
        problems.add(line, field, "null where a number was expected (ignored)")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.add(line, field, f"not a number: {_preview(value)} (ignored)")
        return None
    if not math.isfinite(value):
        problems.add(line, field, f"not a finite number: {value} (ignored)")
        return None
    return value


def text(value: Any) -> str:
    """A value shown as text: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return str(value)


def clip(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[:limit] + f"… [{len(value) - limit} more characters]"


def _preview(value: Any) -> str:
    return clip(text(value), 60)


def parse_iso(value: Any, field: str, line: int | None, problems: Problems) -> datetime | None:
    """An ISO 8601 timestamp (a trailing Z allowed; naive means UTC), or None with a problem."""
    if value is None or value == "":
        problems.add(line, field, "missing timestamp")
        return None
    if not isinstance(value, str):
        problems.add(line, field, f"not an ISO 8601 timestamp: {_preview(value)}")
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        problems.add(line, field, f"not an ISO 8601 timestamp: {_preview(value)}")
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def parse_epoch_ms(value: Any, field: str, line: int | None, problems: Problems) -> datetime | None:
    """Epoch milliseconds as an aware UTC datetime, or None with a problem."""
    if value is None:
        problems.add(line, field, "null where epoch milliseconds were expected")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        problems.add(line, field, f"not epoch milliseconds: {_preview(value)}")
        return None
    try:
        return datetime.fromtimestamp(value / 1000.0, tz=UTC)
    except (OverflowError, OSError, ValueError):
        problems.add(line, field, f"epoch milliseconds out of range: {value}")
        return None


def monotonic_progress(on_bytes: Callable[[int], None] | None) -> Callable[[int], None] | None:
    """A progress callback that never goes backwards (a format may read its file several times)."""
    if on_bytes is None:
        return None
    high = 0

    def report(count: int) -> None:
        nonlocal high
        if count > high:
            high = count
            on_bytes(count)

    return report
