"""Large JSON documents read with ijson (its C backend, yajl2_c): the items of a list, or the
members of the top-level object, one at a time, each with the line it starts on. Memory holds one
read block and one piece of it (64 KiB at most) with the items it completes, whatever the
document's size.

ijson tells no positions, so it is fed the document in pieces and told the line each starts on.
For `items`, a piece starts at every line holding a `{` that may open an item (one right after a
colon opens a member's value): every such `{` of a piece is then on its first line, so the item
ijson starts building when it asks `map_type` for a new object began on that line. An item that
is no object (a problem, never a record) is placed by a second reading, fed a line at a time to
ijson's push parser, up to that item: only a document holding one pays for it. (Feeding a
line at a time would cost as much again as the parsing: a pretty-printed record spans a dozen
lines or more.) `members` does feed a line at a time, and builds each value from ijson's events
in Python: for an rlm snapshot, whose members and steps all need their lines; 20,000 steps
(16 MB) read in about 1.3 s.

A syntax error ends the document: the parser cannot go on past it. What came before it is kept;
the error is one problem naming its line and column, found by feeding the document again, in
blocks up to the piece that failed and then a byte at a time. Text after the document is left
to the caller (`after`), which may read it some other way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

import ijson

from ..canonical import Problems
from . import Source, iter_lines, read_blocks, whole_line_breaks

_PIECE_BYTES = 1 << 16
_STARTS = frozenset({"start_map", "start_array"})
_ENDS = frozenset({"end_map", "end_array"})
_WHITESPACE = b" \t\n"
# What ijson raises at bad input: its own errors, and a UnicodeDecodeError for bytes that yajl
# let through but are no UTF-8 (an encoded surrogate).
_BAD_INPUT = (ijson.JSONError, ValueError)


@dataclass
class After:
    """Text after the end of the document: where it starts, and the bytes from there on."""

    line: int
    column: int
    rest: Iterator[bytes]


class JsonDocument:
    """One JSON document, the whole file (a BOM at its start skipped)."""

    def __init__(self, source: Source, problems: Problems, *, blocks: Iterator[bytes] | None = None) -> None:
        """`blocks`: the file's, when the caller has begun reading it (and reported its BOM);
        the document is read again only to find where a syntax error is."""
        self.source = source
        self.problems = problems
        self._given = blocks
        self.after: After | None = None
        self.stopped = False  # at a syntax error, reported

    def items(self, prefix: str) -> Iterator[tuple[int, int, Any]]:
        """(line, up to line, value) of each item at ijson's `prefix` ("item": the document is
        a list; "events.item": the list at the top-level object's "events"), each on the line it
        starts on (both lines the same). An object's line comes with it; a value of another type
        (never a record: a problem) is placed by reading the document a second time, as far as
        that item, so a document of objects only is read once."""
        # Every map ijson makes, in order, after the line of the piece it was made in: the line
        # of an item is the last one before the item's own map.
        stamps: list[int | dict[str, Any]] = []
        feed = _Feed(self._first_blocks(), per_line=False, lines=stamps)
        stamp = stamps.append

        def new_map() -> dict[str, Any]:
            made: dict[str, Any] = {}
            stamp(made)
            return made

        found = ijson.items(feed, prefix, map_type=new_map, use_float=True)
        lines_of_items: _ItemLines | None = None
        index = -1
        while True:
            try:
                value = next(found)
            except StopIteration:
                return
            except _BAD_INPUT as error:
                self._stop(error, feed.offset)
                return
            index += 1
            if type(value) is dict:
                at, line = 0, 1
                while (entry := stamps[at]) is not value:  # passing maps nested in items before
                    if type(entry) is int:
                        line = entry
                    at += 1
                stamps[: at + 1] = [line]
                yield line, line, value
            else:
                _forget_nested(stamps, value)
                if lines_of_items is None:
                    lines_of_items = _ItemLines(self._blocks(), prefix)
                line = lines_of_items.line_of(index)
                yield (line, line, value) if line is not None else (feed.line, feed.last_line, value)

    def members(self, streamed: str) -> Iterator[tuple[int, str, Any, bool]]:
        """(line, key, value, is an item of `streamed`) of each member of the top-level object,
        in order, the list at `streamed` given item by item. The line is where a member's key
        or an item starts. A document that is no object is a problem."""
        feed = _Feed(self._first_blocks(), per_line=True)
        events = ijson.basic_parse(feed, use_float=True)
        try:
            event, value = next(events, ("", None))
            if event != "start_map":
                if event:
                    kind = "array" if event == "start_array" else type(value).__name__
                    self.problems.add(feed.line, "line", f"expected a JSON object, got {kind}")
                return
            yield from _members(events, feed, streamed)
            deque(events, maxlen=0)  # the rest: only text after the object, if anything
        except _BAD_INPUT as error:
            self._stop(error, feed.offset)

    def has_list(self, prefix: str) -> bool:
        """Whether the document holds a list at `prefix`, read again: tells an empty list of
        items from none."""
        feed = _Feed(self._blocks(), per_line=False)
        try:
            return any(
                path == prefix and event == "start_array" for path, event, _ in ijson.parse(feed, use_float=True)
            )
        except _BAD_INPUT:
            return False

    def _first_blocks(self) -> Iterator[bytes]:
        blocks, self._given = self._given, None
        return _one_line_break(blocks if blocks is not None else read_blocks(self.source, self.problems))

    def _blocks(self) -> Iterator[bytes]:
        return _one_line_break(read_blocks(self.source))

    def _stop(self, error: Exception, failed_at: int) -> None:
        line, column, ended, rest = _locate(self._blocks(), failed_at)
        reason = _reason(error)
        if reason == "trailing garbage":
            self.after = After(line, column, rest)
            return
        self.stopped = True
        if ended:
            self.problems.add(
                line, "line", "file ends inside the JSON document (truncated); the rest could not be read"
            )
        elif isinstance(error, UnicodeDecodeError) or "UTF8" in reason:
            self.problems.add(
                line, "line", f"invalid UTF-8 at column {column}; the rest of the document could not be read"
            )
        else:
            self.problems.add(
                line, "line", f"malformed JSON at column {column}: {reason}; the rest of the document could not be read"
            )


class _ItemLines:
    """The line each item of a list starts on, read on demand from a second reading of the
    document fed to ijson's push parser a line at a time: the parser hands over the events of
    each line as it is sent, so an item's first event arrives with the line it starts on. Asked
    for items in order, it reads the document once however many it is asked for."""

    def __init__(self, blocks: Iterator[bytes], prefix: str) -> None:
        self._lines = iter_lines(blocks)
        self._prefix = prefix
        self._events = ijson.sendable_list()
        self._parser = ijson.parse_coro(self._events, use_float=True)
        self._starts: dict[int, int] = {}  # item index -> line, of the items not yet asked for
        self._count = 0  # items started so far
        self._line = 0  # lines sent so far

    def line_of(self, index: int) -> int | None:
        """The line item `index` (0-based) starts on; None if the document ends (or breaks) first."""
        while index >= self._count:
            line = next(self._lines, None)
            if line is None:
                return None
            self._line += 1
            try:
                self._parser.send(line)
            except _BAD_INPUT:  # the first reading reported it; nothing past it is an item
                self._lines = iter(())
                return None
            for path, event, _ in self._events:
                if path == self._prefix and event not in _NOT_STARTS:
                    if self._count >= index:  # only what may still be asked: memory stays flat
                        self._starts[self._count] = self._line
                    self._count += 1
            del self._events[:]
        line = self._starts.pop(index, None)
        for passed in [n for n in self._starts if n < index]:
            del self._starts[passed]
        return line


_NOT_STARTS = frozenset({"map_key", "end_map", "end_array"})


def _members(events: Iterator[tuple[str, Any]], feed: _Feed, streamed: str) -> Iterator[tuple[int, str, Any, bool]]:
    """After the top-level `start_map`: its members (see JsonDocument.members)."""
    key, line = "", 0
    for event, value in events:
        if event == "map_key":
            key, line = value, feed.line
            continue
        if event == "end_map":  # of the top-level object
            return
        if event not in _STARTS:
            yield line, key, value, False
            continue
        if key == streamed and event == "start_array":
            yield from _array_items(events, feed, key)
            continue
        yield line, key, _build(event, events), False


def _array_items(events: Iterator[tuple[str, Any]], feed: _Feed, key: str) -> Iterator[tuple[int, str, Any, bool]]:
    for event, value in events:
        if event == "end_array":
            return
        line = feed.line
        yield line, key, (_build(event, events) if event in _STARTS else value), True


def _build(start: str, events: Iterator[tuple[str, Any]]) -> Any:
    """The object or list whose `start` event was just read, from the events up to its end."""
    builder = ijson.ObjectBuilder()
    builder.event(start, None)
    depth = 1
    for event, value in events:
        builder.event(event, value)
        if event in _STARTS:
            depth += 1
        elif event in _ENDS:
            depth -= 1
            if not depth:
                break
    return builder.value


def _forget_nested(stamps: list[int | dict[str, Any]], value: Any) -> None:
    """Drop the stamps of the maps inside `value`, an item that is not one itself, and of any
    item before it (the stamps hold every map alive, so no two of them share an id)."""
    nested: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            nested.add(id(item))
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    if nested:
        last = max(index for index, made in enumerate(stamps) if id(made) in nested)
        line = next(entry for entry in reversed(stamps[:last]) if type(entry) is int)
        stamps[: last + 1] = [line]


def _reason(error: Exception) -> str:
    """yajl's message without its context lines and `parse error: ` prefix."""
    if isinstance(error, UnicodeDecodeError):
        return "invalid UTF-8"
    message = error.args[0] if error.args else str(error)
    if isinstance(message, bytes):  # ijson gives bytes when the context is no UTF-8
        message = message.decode("utf-8", "replace")
    first = str(message).split("\n", 1)[0].strip().rstrip(".")
    return first.split(" error: ", 1)[-1]


def _opening_lines(block: bytes) -> list[int]:
    """Where the lines that may open an item start (but at the block's start): those holding a
    `{` that does not follow a colon. One that does (`"payload": {`) opens a member's value, or
    lies in a string, and never an item; masking those first leaves `find` a brace or so a record
    to look at. (A regular expression finding the lines was ten times slower.)"""
    masked = block.replace(b":{", b":_").replace(b": {", b": _")
    find = masked.find
    starts = []
    brace = find(b"{")
    while brace >= 0:
        start = masked.rfind(b"\n", 0, brace) + 1
        if start:
            starts.append(start)
        end = find(b"\n", brace)
        if end < 0:
            break
        brace = find(b"{", end)
    return starts


def _one_line_break(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The blocks with every line break one `\\n`, at the same offsets: `\\r\\n` becomes a space
    and `\\n`, a lone `\\r` (old Mac files) `\\n`. Outside strings JSON reads both as whitespace,
    and inside one both are an error either way."""
    for block in whole_line_breaks(blocks):
        if b"\r" in block:
            block = block.replace(b"\r\n", b" \n").replace(b"\r", b"\n")
        yield block


class _Feed:
    """What ijson reads: the document in pieces (a line each, or see the module docstring),
    with the line and the offset of the piece it read last."""

    def __init__(self, blocks: Iterator[bytes], *, per_line: bool, lines: list[Any] | None = None) -> None:
        self.line = self.last_line = 1
        self.offset = 0
        self._pieces = self._lines(blocks) if per_line else self._cut(blocks, lines if lines is not None else [])

    def read(self, size: int) -> bytes:
        if not size:  # ijson's check that it is given bytes
            return b""
        return next(self._pieces, b"")

    def _cut(self, blocks: Iterator[bytes], lines: list[Any]) -> Iterator[bytes]:
        """The pieces of `items`, each line they start on also added to `lines`."""
        note = lines.append
        line, offset = 1, 0
        for block in blocks:
            start = 0
            for end in chain(_opening_lines(block), [len(block)]):
                # A long piece (a document on one line) in parts: ijson hands over the items a
                # piece completes only once it is parsed whole.
                while start < end:
                    stop = min(end, start + _PIECE_BYTES)
                    piece = block[start:stop]
                    breaks = piece.count(b"\n")
                    self.line, self.offset = line, offset + start
                    self.last_line = line + breaks - (piece[-1] == 0x0A and breaks > 0)
                    if lines and type(lines[-1]) is int:  # no map made since: one line kept
                        lines[-1] = line
                    else:
                        note(line)
                    yield piece
                    line += breaks
                    start = stop
            offset += len(block)

    def _lines(self, blocks: Iterator[bytes]) -> Iterator[bytes]:
        line, offset = 1, 0
        for block in blocks:
            for piece in block.splitlines(keepends=True):
                self.line = self.last_line = line
                self.offset = offset
                yield piece
                offset += len(piece)
                if piece[-1] == 0x0A:
                    line += 1


def _locate(blocks: Iterator[bytes], failed_at: int) -> tuple[int, int, bool, Iterator[bytes]]:
    """Where the parser stops, fed the document again: (line, column, whether it stopped at the
    end, for a text after the document the bytes from there on). Up to `failed_at`, where the
    piece the first reading failed in starts, it is fed in blocks; then a byte at a time."""
    spot = _Spot()
    try:
        deque(ijson.basic_parse(spot.feed(blocks, failed_at), use_float=True), maxlen=0)
    except _BAD_INPUT:
        pass
    if spot.ended:  # a truncated document: where its last character is
        return spot.last_line, spot.last_column, True, iter(())
    return spot.line, spot.column, False, spot.rest


class _Spot:
    """The reader `_locate` feeds the parser: it knows the position of the byte read last."""

    def __init__(self) -> None:
        self.line = self.column = 1
        self.last_line = self.last_column = 1  # of the last byte that is not whitespace
        self.ended = False
        self._pieces: Iterator[bytes] = iter(())
        self._at: tuple[bytes, int, Iterator[bytes]] = (b"", 0, iter(()))

    @property
    def rest(self) -> Iterator[bytes]:
        """The bytes from the one read last on."""
        block, index, blocks = self._at
        return chain([block[index:]], blocks)

    def feed(self, blocks: Iterator[bytes], failed_at: int) -> _Spot:
        self._pieces = self._bytes(blocks, failed_at)
        return self

    def read(self, size: int) -> bytes:
        if not size:
            return b""
        piece = next(self._pieces, b"")
        if not piece:
            self.ended = True
        return piece

    def _bytes(self, blocks: Iterator[bytes], failed_at: int) -> Iterator[bytes]:
        line, column, offset = 1, 1, 0  # of the next byte
        for block in blocks:
            whole = max(0, min(len(block), failed_at - offset))
            if whole:
                head = block[:whole]
                self._note_last(head, line, column)
                yield head
                breaks = head.count(b"\n")
                line += breaks
                column = whole - head.rfind(b"\n") if breaks else column + whole
            for index in range(whole, len(block)):
                byte = block[index : index + 1]
                self.line, self.column = line, column
                self._at = (block, index, blocks)
                if byte not in _WHITESPACE:
                    self.last_line, self.last_column = line, column
                yield byte
                if byte == b"\n":
                    line, column = line + 1, 1
                else:
                    column += 1
            offset += len(block)

    def _note_last(self, chunk: bytes, line: int, column: int) -> None:
        end = len(chunk.rstrip(_WHITESPACE))
        if end:
            index = end - 1
            newline = chunk.rfind(b"\n", 0, index)
            self.last_line = line + chunk.count(b"\n", 0, index)
            self.last_column = index - newline if newline >= 0 else column + index
