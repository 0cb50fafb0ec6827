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
import struct
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

import orjson

from ..canonical import INT64_MAX, INT64_MIN, Problems
from . import BOM, MAX_DEPTH, Source, _load_with_nan, load_json_line, storable

READ_BLOCK = 1 << 20
# Bytes read, at most, to find the end of the first line before deciding the container.
DECIDE_BYTES = 1 << 16

# Runs a value's scan skips in one regex call: everything but brackets and quotes, or whole
# strings (escapes included), so a bracket inside a string never counts. Possessive and
# unrolled: a plain `(?:[^"\\]|\\.)*` keeps backtracking state for every character of a string
# (about 120 bytes of memory a byte: 2 GB for a 20 MB string in a malformed element).
_IN_VALUE = re.compile(rb'(?:[^"\[\]{}]++|"(?:[^"\\]++|\\.)*+")*+', re.DOTALL)
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_SCALAR = re.compile(rb'[^\s,\]}]*')
_WS = re.compile(rb'[ \t\r\n]*')
# An object whose first value is a list: how a request body (`{"events": [`) opens.
_BODY_OPENING = re.compile(rb'\{\s*"[^"]*"\s*:\s*\[')
# How an object element opens, up to its first key (`{"id":`). In an array on one line it is
# the landmark of the next element after a broken one, as indentation is in a pretty-printed one.
_ELEMENT_HEAD = re.compile(rb'\{[ \t]*"[^"\\]{1,100}"[ \t]*:')
# How far past the text after an element of a one-line array the next element's opening is
# looked for (all of it stays in memory meanwhile).
HEAD_SEARCH_BYTES = 1 << 20
_LBRACKET, _RBRACKET, _LBRACE, _RBRACE = 0x5B, 0x5D, 0x7B, 0x7D
_QUOTE, _COMMA, _COLON = 0x22, 0x2C, 0x3A


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
        whole_file = False
        while b"\n" not in first and len(first) < DECIDE_BYTES:
            block = next(chunks, None)
            if block is None:
                whole_file = True
                break
            first += block
        if first.startswith(BOM):
            problems.add(1, "line", "byte-order mark at the start of the file (ignored)")
            first = first[3:]
        lead = first.lstrip()
        if lead.startswith(b"["):
            container = "array"
        elif lead.startswith(b"{") and body_keys and not _looks_like_lines(first, whole_file=whole_file):
            container = "body"
        else:
            container = "lines"
        rest = _prepend(first, chunks)
        if container == "lines":
            yield from _records_of_lines(rest, problems, body_keys)
        else:
            keys = body_keys if container == "body" else ()
            splitter = _ArraySplitter(rest, problems, {key.encode() for key in keys}, keys, 1)
            for line, raw, last, value in splitter.elements():
                record = _load(line, raw, problems, last=last, value=value)
                if record is not None:
                    yield Record(line, raw, record)
            if splitter.after_end is not None:
                # A JSON-lines file whose first line is an array (`[]`): the lines after it.
                line = splitter.line_at(splitter.after_end)
                problems.add(line, "line", "text after the end of the JSON array: read as JSON lines")
                yield from _records_of_lines(splitter.remaining(), problems, body_keys, first_line=line)


def _prepend(first: bytes, chunks: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from chunks


def _looks_like_lines(first: bytes, *, whole_file: bool) -> bool:
    """JSON lines, or one JSON object spread over lines (a request body)?

    The first non-empty line decides: a complete object on its own means JSON lines; a line that
    only opens a body (`{`, `{"events": [`, ...) means one object. Anything else is a damaged
    first line of JSON lines, reported as such while the rest still imports. (A whole body on
    one line counts as JSON lines too: that line's list is read element by element.)
    """
    lines = first.split(b"\n")
    for index, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        opening = line == b"{" or _BODY_OPENING.match(line) is not None
        if index == len(lines) - 1 and not whole_file:
            return not opening  # a first line longer than we read: only its opening can tell
        try:
            return isinstance(orjson.loads(line), dict)
        except orjson.JSONDecodeError:
            return not opening
    return False


def _records_of_lines(
    chunks: Iterable[bytes], problems: Problems, body_keys: tuple[str, ...], *, first_line: int = 1
) -> Iterator[Record]:
    for number, line, last in _lines(chunks, first_line=first_line):
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
        for _, raw, _last, value in split_array([body], problems, body_keys=body_keys, first_line=number):
            element = _load(number, raw, problems, value=value)
            if element is not None:
                yield Record(number, raw, element)


def _body_list_key(record: dict[str, Any], body_keys: tuple[str, ...]) -> str | None:
    for key in body_keys:
        if isinstance(record.get(key), list):
            return key
    return None


def _lines(chunks: Iterable[bytes], *, first_line: int = 1) -> Iterator[tuple[int, bytes, bool]]:
    """(line number from `first_line`, line without its ending, is the file's last line and
    unterminated)."""
    number = first_line - 1
    pending = b""
    for chunk in chunks:
        parts = (pending + chunk).split(b"\n")
        pending = parts.pop()
        for part in parts:
            number += 1
            yield number, part.rstrip(b"\r"), False
    if pending:
        yield number + 1, pending.rstrip(b"\r"), True


def _load(
    number: int, raw: bytes, problems: Problems, *, last: bool = False, value: Any = None
) -> dict[str, Any] | None:
    if value is None or value is _UNPARSED:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return load_json_line(number, raw, problems, last=last)
    if type(value) is not dict:
        problems.add(number, "line", f"expected a JSON object, got {type(value).__name__}")
        return None
    if len(raw) > 2 * MAX_DEPTH and not storable(number, value, raw, problems):
        return None
    return value


def split_array(
    chunks: Iterable[bytes],
    problems: Problems,
    *,
    body_keys: tuple[str, ...] = (),
    first_line: int = 1,
) -> Iterator[tuple[int, bytes, bool, Any]]:
    """(line, exact bytes, file ended inside it, parsed value or _UNPARSED) of each element of
    a JSON array.

    The array is the document itself, or with `body_keys` the value of one of those keys of the
    top-level object. An object element ends at the first `}` where its braces balance and its
    bytes parse: counting brackets and letting orjson validate is far faster than walking the
    bytes in Python. When that takes too many tries (deep nesting, a malformed element) the
    element's end is found structurally instead: brackets are counted, strings (with their
    escapes) skipped whole so brackets inside them do not count.
    """
    return _ArraySplitter(chunks, problems, {key.encode() for key in body_keys}, body_keys, first_line).elements()


_UNPARSED = object()
# Failed orjson tries, and closing braces looked at, before an element's end is found
# structurally instead.
MAX_PARSE_TRIES = 8
MAX_CANDIDATES = 512


class _Incomplete(Exception):
    """The input ended inside a value."""


class _ArraySplitter:
    """Positions are absolute offsets in the stream; `buf` holds the bytes from `base` on."""

    def __init__(
        self,
        chunks: Iterable[bytes],
        problems: Problems,
        keys: set[bytes],
        body_keys: tuple[str, ...],
        first_line: int,
    ) -> None:
        self.chunks = iter(chunks)
        self.problems = problems
        self.keys = keys
        self.body_keys = body_keys
        self.buf = b""
        self.base = 0
        self.line = first_line  # the line number at absolute position `line_pos`
        self.line_pos = 0
        self.eof = False
        # Where text follows the top-level array's end (a JSON-lines file opening with `[]`).
        self.after_end: int | None = None
        self.head_patterns: dict[bytes, re.Pattern[bytes]] = {}

    # Buffer -----------------------------------------------------------------------------------

    def more(self, keep: int) -> bool:
        """Drop the bytes before `keep` and read at least as many as are kept (so a value that
        spans many blocks is rescanned a logarithmic number of times); False at the end."""
        if self.eof:
            return False
        self.line_at(keep)
        drop = keep - self.base
        kept = self.buf[drop:]
        parts = [kept]
        added = 0
        while added <= len(kept):
            block = next(self.chunks, None)
            if block is None:
                self.eof = True
                break
            parts.append(block)
            added += len(block)
        self.buf = b"".join(parts)
        self.base = keep
        return added > 0

    def line_at(self, position: int) -> int:
        if position > self.line_pos:
            start = self.line_pos - self.base
            self.line += self.buf.count(b"\n", max(start, 0), position - self.base)
            self.line_pos = position
        return self.line

    def byte_at(self, position: int, keep: int) -> int | None:
        """The byte at `position`, reading on as needed; None at the end of the input."""
        while position - self.base >= len(self.buf):
            if not self.more(keep):
                return None
        return self.buf[position - self.base]

    def skip_ws(self, position: int, keep: int) -> int:
        while True:
            index = position - self.base
            end = _WS.match(self.buf, index).end()
            if end < len(self.buf):
                return self.base + end
            position = self.base + end
            if not self.more(min(keep, position)):
                return position

    def match_until(self, pattern: re.Pattern[bytes], position: int, keep: int) -> int:
        """Where `pattern` (a run of skippable bytes) stops matching from `position`: at a
        bracket. Reads on while it stops at the end of the buffer or before a string the buffer
        cuts off; raises _Incomplete when the input ends first."""
        while True:
            end = pattern.match(self.buf, position - self.base).end()
            if end < len(self.buf) and self.buf[end] != _QUOTE:
                return self.base + end
            position = self.base + end
            if not self.more(keep):
                raise _Incomplete

    def skip_value(self, position: int, keep: int) -> int:
        """The end (exclusive) of the value starting at `position` (not whitespace)."""
        first = self.byte_at(position, keep)
        if first is None:
            raise _Incomplete
        if first in (_LBRACE, _LBRACKET):
            depth = 0
            while True:
                position = self.match_until(_IN_VALUE, position, keep)
                c = self.buf[position - self.base]
                position += 1
                if c in (_LBRACE, _LBRACKET):
                    depth += 1
                else:
                    depth -= 1
                    if depth == 0:
                        return position
        if first == _QUOTE:
            while True:
                found = _STRING.match(self.buf, position - self.base)
                if found is not None:
                    return self.base + found.end()
                if not self.more(keep):
                    raise _Incomplete
        while True:  # a number or literal: up to the next separator
            end = _SCALAR.match(self.buf, position - self.base).end()
            if end < len(self.buf):
                return self.base + end
            if not self.more(keep):
                return self.base + end

    def parse_object(self, start: int) -> tuple[int, Any] | None:
        """(end, value) of the object at `start`, found by trying orjson on the first slices
        whose braces balance (counted in C, strings not excluded, so only a filter); None
        after MAX_PARSE_TRIES failed tries or MAX_CANDIDATES closing braces (brackets inside
        strings, a malformed element): the caller then walks the element structurally."""
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        balance = 0
        counted = start  # bytes before this are in `balance`
        tries = candidates = 0
        while tries < MAX_PARSE_TRIES and candidates < MAX_CANDIDATES:
            index = self.buf.find(b"}", counted - self.base)
            if index < 0:
                if not self.more(start):
                    return None
                continue
            candidates += 1
            # The bytes since the last candidate hold exactly one `}`: this one.
            balance += self.buf.count(b"{", counted - self.base, index) - 1
            counted = self.base + index + 1
            if balance == 0:
                try:
                    return counted, loads(self.buf[start - self.base : index + 1])
                except decode_error:
                    tries += 1
        return None

    # Structure --------------------------------------------------------------------------------

    def find_array(self) -> int | None:
        """The position just inside the array holding the elements, or None (reported)."""
        position = self.skip_ws(0, 0)
        first = self.byte_at(position, position)
        if first == _LBRACKET and not self.keys:
            return position + 1
        if first != _LBRACE or not self.keys:
            self._no_array()
            return None
        position += 1
        try:
            while True:
                position = self.skip_ws(position, position)
                c = self.byte_at(position, position)
                if c == _RBRACE or c is None:
                    break
                if c != _QUOTE:
                    raise _Incomplete
                key_end = self.skip_value(position, position)
                key = self.buf[position + 1 - self.base : key_end - 1 - self.base]
                position = self.skip_ws(key_end, key_end)
                if self.byte_at(position, position) != _COLON:
                    raise _Incomplete
                position = self.skip_ws(position + 1, position + 1)
                if key in self.keys and self.byte_at(position, position) == _LBRACKET:
                    return position + 1
                position = self.skip_ws(self.skip_value(position, position), position)
                if self.byte_at(position, position) == _COMMA:
                    position += 1
        except _Incomplete:
            pass
        self._no_array()
        return None

    def _no_array(self) -> None:
        if self.keys:
            wanted = " or ".join(f'"{key}"' for key in self.body_keys)
            self.problems.add(None, "file", f"no top-level array or {wanted} list found")
        else:
            self.problems.add(None, "file", "no top-level JSON array found")

    def remaining(self) -> Iterator[bytes]:
        """The input from `after_end` on."""
        yield self.buf[self.after_end - self.base :]
        yield from self.chunks

    def line_indent(self, position: int) -> bytes | None:
        """The whitespace before `position` on its line, when nothing else precedes it there (a
        pretty-printed array's element); None for an element that shares its line."""
        index = position - self.base
        newline = self.buf.rfind(b"\n", 0, index)
        if newline < 0:
            return None
        indent = self.buf[newline + 1 : index]
        return indent if not indent.strip() else None

    def next_sibling(self, position: int, stop: int | None, indent: bytes | None) -> int | None:
        """Where the next element starts, between `position` and `stop` (the end of the input
        when None, all of which the buffer then holds): the next line opening an object at the
        element's own indentation. Inside a well-formed pretty-printed element every line is
        indented deeper, so such a line is the next element. None for one-line arrays."""
        if indent is None:
            return None
        found = self.buf.find(
            b"\n" + indent + b"{",
            position - self.base,
            len(self.buf) if stop is None else stop - self.base,
        )
        return None if found < 0 else self.base + found + 1 + len(indent)

    def element_head(self, start: int) -> bytes | None:
        """How the object at `start` opens, up to its first key; None if not like `{"key":`."""
        found = _ELEMENT_HEAD.match(self.buf, start - self.base)
        return None if found is None else found.group()

    def next_head(self, position: int, stop: int | None, head: bytes) -> int | None:
        """Where the next element of a one-line array starts, between `position` and `stop`
        (the end of the buffer when None): the next comma followed by `head`, the opening of the
        elements around it. No string can hold that (its quotes would be escaped); a nested
        object of a broken element opening with the same key after a comma can, which costs
        that object being read as an element of its own."""
        pattern = self.head_patterns.get(head)
        if pattern is None:
            pattern = self.head_patterns[head] = re.compile(rb",[ \t\r\n]*" + re.escape(head))
        found = pattern.search(
            self.buf, position - self.base, len(self.buf) if stop is None else stop - self.base
        )
        return None if found is None else self.base + found.end() - len(head)

    def read_to_head(self, position: int, head: bytes) -> tuple[int | None, int | None]:
        """(`next_head` from `position` on its line, where that line ends), reading on up to
        HEAD_SEARCH_BYTES; Nones for what is not found there. Nothing is dropped: the caller
        may go on from `position` as before."""
        while True:
            newline = self.buf.find(b"\n", position - self.base)
            line_end = None if newline < 0 else self.base + newline
            found = self.next_head(position, line_end, head)
            if found is not None or line_end is not None:
                return found, line_end
            if len(self.buf) - (position - self.base) > HEAD_SEARCH_BYTES:
                return None, None
            if not self.more(position):
                return None, self.base + len(self.buf)

    def skip_to_sibling(self, position: int, indent: bytes) -> int | None:
        """`next_sibling` from `position` to wherever it is, reading on as needed; the bytes
        passed over are dropped, so memory stays one block whatever is skipped."""
        searched = position
        while True:
            found = self.next_sibling(searched, self.base + len(self.buf), indent)
            if found is not None:
                return found
            # The pattern may straddle the block boundary: search its length back again.
            searched = max(searched, self.base + len(self.buf) - len(indent) - 2)
            if not self.more(searched):
                return None

    def elements(self) -> Iterator[tuple[int, bytes, bool]]:
        position = self.find_array()
        if position is None:
            return
        after_comma = False
        # Elements are found again after a broken one by the indentation of the last whole
        # element (a stray line may sit at another), else by the broken one's own; in an array
        # on one line, by how the first whole object opened (`{"id":`), else the broken one.
        sibling_indent: bytes | None = None
        sibling_head: bytes | None = None
        while True:
            position = self.skip_ws(position, position)
            c = self.byte_at(position, position)
            if c is None:
                self.problems.add(self.line_at(position), "line", "file ends before the array is closed")
                return
            if c == _RBRACKET:
                position = self._past_close(position, after_comma)
                if position is None:
                    return
                after_comma = True
                continue
            if c == _COMMA:
                self.problems.add(self.line_at(position), "line", "empty array element")
                position += 1
                after_comma = True
                continue
            if c == _RBRACE:
                # A stray closing brace: skipped, or the scan would stand on it for ever.
                self.problems.add(
                    self.line_at(position), "line", "unexpected '}' between array elements (skipped)"
                )
                position += 1
                continue
            start = position
            indent = sibling_indent if sibling_indent is not None else self.line_indent(start)
            head = sibling_head
            if indent is None and head is None and c == _LBRACE:
                head = self.element_head(start)
            found = self.parse_object(start) if c == _LBRACE else None
            if found is not None:
                end, value = found
            else:
                try:
                    end = self.skip_value(start, start)
                except _Incomplete:
                    end = None
                value, sibling = self._swallowed(c, start, end, indent, head)
                if sibling is not None:
                    # A malformed element (an unclosed string, a bracket too many) swallowed the
                    # elements after it: it ends where the next one starts, the rest is kept.
                    broken = self.buf[start - self.base : sibling - self.base].rstrip(b", \t\r\n")
                    yield self.line_at(start), broken, False, value
                    position, after_comma = sibling, True
                    continue
                if end is None:
                    yield self.line_at(start), self.buf[start - self.base :].rstrip(), True, value
                    return
            if type(value) is dict:
                if sibling_indent is None:
                    sibling_indent = self.line_indent(start)
                if sibling_head is None and indent is None:
                    sibling_head = head
            yield self.line_at(start), self.buf[start - self.base : end - self.base], False, value
            position, after_comma = self._past_element(end, indent, head)
            if position is None:
                return

    def _past_close(self, closing: int, after_comma: bool) -> int | None:
        """After a `]` at `closing`: where the elements go on when it was a stray one inside the
        array, else None (the array ended; `after_end` marks any text that follows it)."""
        if self.keys:  # a request body's other keys follow its list
            if after_comma:
                self.problems.add(self.line_at(closing), "line", "empty array element (trailing comma)")
            return None
        position = self.skip_ws(closing + 1, closing + 1)
        c = self.byte_at(position, position)
        if c == _COMMA or (after_comma and c == _LBRACE):
            # More elements after a `]` (`},  ]  {`): a stray bracket inside the array.
            self.problems.add(self.line_at(closing), "line", "unexpected ']' inside the array (skipped)")
            return position + 1 if c == _COMMA else position
        if after_comma:
            self.problems.add(self.line_at(closing), "line", "empty array element (trailing comma)")
        if c is not None:
            self.after_end = position
        return None

    def _swallowed(
        self, c: int, start: int, end: int | None, indent: bytes | None, head: bytes | None
    ) -> tuple[Any, int | None]:
        """For an element the fast path could not cut (its end found structurally, or None at
        the end of the input): its value if it parses after all, and where a sibling element
        starts inside it when it swallowed the ones after it (an unclosed string, a brace too
        many)."""
        if c == _LBRACKET and indent is not None:
            # A list is never a record: one holding lines of sibling elements is a stray "["
            # that swallowed them.
            return _UNPARSED, self.next_sibling(start + 1, end, indent)
        if c != _LBRACE or (indent is None and head is None):
            return _UNPARSED, None
        if end is not None:
            try:  # valid after all (braces in strings, deep nesting): not cut
                return orjson.loads(self.buf[start - self.base : end - self.base]), None
            except orjson.JSONDecodeError:
                pass
        if indent is None:
            if end is not None and _load_with_nan(self.buf[start - self.base : end - self.base]) is not None:
                # Whole for the stdlib (a bare NaN, as Python's json writes it): read as a line
                # is, never cut at a nested object that opens like the elements.
                return _UNPARSED, None
            return _UNPARSED, self.next_head(start + 1, end, head)
        return _UNPARSED, self.next_sibling(start + 1, end, indent)

    def _past_element(self, end: int, indent: bytes | None, head: bytes | None) -> tuple[int | None, bool]:
        """Where the next element is looked for after a whole one, and whether a comma came;
        (None, False) when text after it runs to the end of the input."""
        position = self.skip_ws(end, end)
        c = self.byte_at(position, position)
        if c == _COMMA:
            return position + 1, True
        if c == _LBRACE:
            self.problems.add(self.line_at(position), "line", "missing ',' between array elements")
        if c in (_RBRACKET, _RBRACE, _LBRACE, None):
            return position, False
        where = self.line_at(position)
        if indent is None:
            # Text after a whole element of a one-line array (the rest of a broken one): skipped,
            # as one problem, to the next element's opening on the line, else to the line's
            # last `]` (the array's end).
            sibling, line_end = (None, None) if head is None else self.read_to_head(position, head)
            if sibling is not None:
                self.problems.add(where, "line", "unexpected text after an array element (skipped to the next element)")
                return sibling, True
            close = -1 if line_end is None else self.buf.rfind(b"]", position - self.base, line_end - self.base)
            if close >= 0:
                self.problems.add(where, "line", "unexpected text after an array element (skipped to the end of the array)")
                return self.base + close, False
            self.problems.add(where, "line", "missing ',' between array elements")
            return position, False
        # Text after a whole element (the rest of a broken one): skipped to the next element
        # at the same indentation, as one problem.
        sibling = self.skip_to_sibling(position, indent)
        if sibling is None:  # the input is read to its end
            self.problems.add(
                where, "line", "unexpected text after an array element (skipped to the end of the file)"
            )
            return None, False
        self.problems.add(where, "line", "unexpected text after an array element (skipped to the next element)")
        return sibling, True


class DiscardProblems(Problems):
    """For a second pass over a file whose file-level problems the first pass reported."""

    def add(self, line: int | None, field: str, message: str) -> None:
        pass


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
    if not INT64_MIN < value <= INT64_MAX:  # stored in 64-bit columns
        problems.add(line, field, f"a number beyond 64 bits: {value} (ignored)")
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
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    if not in_utc_range(parsed):
        problems.add(line, field, f"timestamp outside the years 1-9999 in UTC: {_preview(value)}")
        return None
    return parsed


def in_utc_range(moment: datetime) -> bool:
    """Whether an aware datetime exists in UTC ("0001-01-01T00:00+14:00" does not): it is
    stored and compared in UTC."""
    try:
        moment.astimezone(UTC)
    except OverflowError:
        return False
    return True


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


# Spooling records by session ---------------------------------------------------------------------

_FRAME = struct.Struct("<QI")  # a spooled record: its line, the length of its bytes, the bytes
# Spool files kept open at once while a file is split by session (each holds one write buffer).
SPOOL_OPEN_FILES = 64
_SPOOL_BUFFER = 1 << 16


class RecordSpool:
    """A file's records grouped by session on disk as the file is read once, then read back a
    session at a time: two passes over the records whatever the number of sessions in the file
    (a pass per session made a file of many sessions quadratic), in any order, newest first too.

    Memory holds one write buffer per open group file, at most SPOOL_OPEN_FILES of them, and a
    newest-first group's record offsets. The disk holds the records' bytes, in a temporary folder
    removed by `close()`. Group keys are the file's own text, so they never reach a file name:
    each group is a numbered file.
    """

    def __init__(self, *, file_bytes: int = 0) -> None:
        import tempfile  # here, not at the top: the parse worker's start need not pay for it

        self.folder = Path(tempfile.mkdtemp(prefix="replay-spool-"))
        self.groups: dict[str, int] = {}
        self.handles: OrderedDict[int, IO[bytes]] = OrderedDict()
        self.total = 0
        self.read = 0
        # Reading back reports progress in bytes of the source file (`file_bytes`), in the
        # proportion of the spool read so far, so a job's progress bar moves with the writes.
        self.file_bytes = file_bytes

    def add(self, key: str, line: int, raw: bytes) -> None:
        number = self.groups.get(key)
        if number is None:
            number = self.groups[key] = len(self.groups)
        handle = self.handles.get(number)
        if handle is None:
            if len(self.handles) >= SPOOL_OPEN_FILES:
                self.handles.popitem(last=False)[1].close()
            handle = self.handles[number] = open(self._path(number), "ab", buffering=_SPOOL_BUFFER)
        else:
            self.handles.move_to_end(number)
        handle.write(_FRAME.pack(line, len(raw)))
        handle.write(raw)
        self.total += _FRAME.size + len(raw)

    def records(
        self, key: str, *, newest_first: bool = False, on_bytes: Callable[[int], None] | None = None
    ) -> Iterator[Record]:
        """The group's records in the order they were added, or the reverse; each group once."""
        number = self.groups[key]
        handle = self.handles.pop(number, None)
        if handle is not None:
            handle.close()
        path = self._path(number)
        with open(path, "rb") as stream:
            frames = _frames_reversed(stream) if newest_first else _frames(stream)
            for count, (line, raw) in enumerate(frames, start=1):
                self.read += _FRAME.size + len(raw)
                if on_bytes is not None and not count & 255:
                    on_bytes(self.file_bytes * self.read // max(self.total, 1))
                # The first pass took these bytes for a JSON object; read them the same way.
                value = load_json_line(line, raw, _QUIET)
                if value is not None:
                    yield Record(line, raw, value)
        if on_bytes is not None:
            on_bytes(self.file_bytes * self.read // max(self.total, 1))
        path.unlink(missing_ok=True)

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()
        self.handles.clear()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)

    def _path(self, number: int) -> Path:
        return self.folder / f"{number}.records"


_QUIET = DiscardProblems(limit=0)


def _frames(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    read, size = stream.read, _FRAME.size
    while header := read(size):
        line, length = _FRAME.unpack(header)
        yield line, read(length)


def _frames_reversed(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    offsets = array("Q")
    position = 0
    while header := stream.read(_FRAME.size):
        offsets.append(position)
        position += _FRAME.size + _FRAME.unpack(header)[1]
        stream.seek(position)
    for offset in reversed(offsets):
        stream.seek(offset)
        line, length = _FRAME.unpack(stream.read(_FRAME.size))
        yield line, stream.read(length)


def file_bytes(source: Source) -> int:
    """The size on disk of a file (what import progress counts), 0 for a folder or when gone."""
    try:
        return source.path.stat().st_size
    except OSError:
        return 0
