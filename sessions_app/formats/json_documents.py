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

yajl reads numbers as doubles and 64-bit integers; an integer past 64 bits (an rlm snapshot of a
variable holding factorial(25)) or a number past a double (1e400) is a syntax error to it that
way. The reading then goes on from the record it stopped at with exact numbers (Python integers
and Decimals, read by ijson's pure-Python parser: see _EXACT_READER), each value then made what
the fast reading gives (`_as_read`): a decimal is a float, an integer past 64 bits the float it
rounds to, as orjson reads a JSON line (null past any float). Only such a document pays for it;
an integer of more than 4,300 digits ends it, as a syntax error does.

A syntax error ends the document: the parser cannot go on past it. What came before it is kept;
the error is one problem naming its line and column, found by feeding the document again, in
blocks up to the piece that failed and then a byte at a time. Text after the document is left
to the caller (`after`), which may read it some other way.
"""

from __future__ import annotations

import io
import json
import re
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from itertools import accumulate, chain, repeat
from operator import itemgetter
from typing import Any

import ijson

from ..canonical import Problems
from . import MAX_DEPTH, NOT_UTF8, Source, finite_or_null, read_blocks, size_text, too_long, whole_line_breaks
from .fields import json_kind

_PIECE_BYTES = 1 << 16
_STARTS = frozenset({"start_map", "start_array"})
_ENDS = frozenset({"end_map", "end_array"})
_WHITESPACE = b" \t\n"
# What ijson raises at bad input: its own errors, and a UnicodeDecodeError for bytes that yajl
# let through but are no UTF-8 (an encoded surrogate).
_BAD_INPUT = (ijson.JSONError, ValueError)
# Records over the limit a document may hold and still be read on past each (each one costs a
# reading of the document up to it).
LONG_RECORDS_PASSED = 16


class _TooLong(Exception):
    """Raised by the feed when the record being built has grown past the limit: ijson stops
    there, holding no more than about the limit of it."""


class _ExactNumbers(Exception):
    """Raised by a reading that stopped at an integer past 64 bits: it is read again, with
    exact numbers, from the record it stopped at."""


class _NonFinite(Exception):
    """Raised by a reading that stopped at a bare NaN, Infinity or -Infinity (Python's json
    writes them; rlm-code's SessionStore does for a `float('inf')` variable): each is found once
    and read as null, and the document is read again from the record it stopped at."""


# What yajl says of an integer past 64 bits, and of a number past a double (1e400), when it reads
# numbers as doubles: both are read again exactly, and stored as the float they round to (null
# past any float), as the JSON-lines reader stores them.
_OVERFLOWS = ("integer overflow", "numeric (floating point) overflow")
# Exact numbers are read by ijson's pure-Python parser: yajl2_c's, asked for them, makes each
# integer with int(), whose refusal of more than 4,300 digits (sys.int_max_str_digits) it does
# not hand on: the worker crashed (a segmentation fault, or a SystemError). About 20 times
# slower (19 MB in 1.7 s), paid only by a document holding such an integer, from it on.
_EXACT_READER = ijson.get_backend("python")


def _reader(exact: bool) -> Any:
    return _EXACT_READER if exact else ijson


class _TooDeep(Exception):
    """Raised by the feed before it hands over a piece that nests the document deeper than
    _DEEPEST (see _Nesting)."""


# How deep a document may nest: a record deeper than MAX_DEPTH is a problem and the rest is read
# (it cannot be stored, tests/test_format_json_documents.py); past twice that, the document
# stops.
_DEEPEST = 2 * MAX_DEPTH
# What ijson's paths may hold at once: one path an open level, each as long as the keys above it,
# so about depth² × key length / 2 (505 levels of 1,900-character keys, a 1 MB file: 566 MB).
# Estimated with the longest key read so far; a real document stays far below (30 levels of
# 100-character keys: 47 KB).
_PATHS_BUDGET = 64 * 1024 * 1024
_LEVEL = {"start_map": 1, "start_array": 1, "end_map": -1, "end_array": -1}
_EVENT_NAME = itemgetter(0)


def _basic_events(data: bytes, *, exact: bool = False) -> Iterator[tuple[str, Any]]:
    """ijson's events of `data` without paths (basic_parse): numbers as floats, or `exact` by the
    pure-Python reader (see _EXACT_READER: yajl's C parser, asked for exact numbers, crashed the
    process on an integer past 4,300 digits; the pure-Python one raises a ValueError for it)."""
    if exact:
        return _EXACT_READER.basic_parse(io.BytesIO(data))
    return ijson.basic_parse(io.BytesIO(data), use_float=True)


def _overflowed(error: Exception) -> bool:
    """Whether yajl stopped at a number it cannot read as a float (an integer past 64 bits, a
    float past a double): `_basic_events(..., exact=True)` reads it."""
    return any(overflow in str(error) for overflow in _OVERFLOWS)


def read_events[T](data: bytes, visit: Callable[[Iterator[tuple[str, Any]]], T]) -> T:
    """`visit` of `data`'s `_basic_events`, read again from the start, exactly, where yajl's floats
    stop at a number they cannot hold (orjson reads it). Any other error is the caller's."""
    try:
        return visit(_basic_events(data))
    except ijson.JSONError as error:
        if not _overflowed(error):
            raise
    return visit(_basic_events(data, exact=True))


def top_level_keys(data: bytes) -> set[str]:
    """The top-level keys of the JSON object `data` starts with, as far as `data` reaches (a
    file's head: cut anywhere). Read without paths (`read_events`), as _Nesting reads: a head
    nested thousands deep costs no more than a flat one; and no deeper than a document may nest
    (_DEEPEST), where reading it would stop."""
    keys: set[str] = set()

    def visit(events: Iterator[tuple[str, Any]]) -> None:
        keys.clear()
        depth = 0
        for event, value in events:
            if event == "map_key" and depth == 1:
                keys.add(value)
            depth += _LEVEL.get(event, 0)
            if depth == 0 or depth > _DEEPEST:
                return  # the first record's end, or as deep as a document is read

    try:
        read_events(data, visit)
    except (ijson.JSONError, UnicodeDecodeError, ValueError):  # the head's cut, or not JSON
        pass
    return keys


class _Nesting:
    """How deep the document nests, followed piece by piece by a parser of its own that names
    no paths. ijson's path-naming parsers (`items`, `parse`) make every event of a piece with
    its whole path before handing any over, so "[" nested 40,000 deep (an 80 KB file) took
    3.9 GB before anything could refuse it. Its cost: a second parse of the bytes, about as
    long as the reading itself (a JSON document reads in about twice the time; JSON lines do
    not pay it)."""

    def __init__(self, *, exact: bool = False) -> None:
        self._events = ijson.sendable_list()
        self._parser: Any = _reader(exact).basic_parse_coro(self._events, use_float=not exact)
        self.depth = 0
        self.longest_key = 0

    def check(self, piece: bytes) -> None:
        """Raise _TooDeep if `piece` takes the document past _DEEPEST, or its paths past
        _PATHS_BUDGET."""
        if self._parser is None:
            return
        events = self._events
        try:
            self._parser.send(piece)
        except _BAD_INPUT:  # the reading it guards stops at the same byte, and says why
            self._parser = None
        except StopIteration:  # the pure-Python parser ends at the end of the bytes (b"")
            self._parser = None
        if events:
            levels = list(accumulate(map(_LEVEL.get, map(_EVENT_NAME, events), repeat(0)), initial=self.depth))
            keys = [value for name, value in events if name == "map_key"]
            del events[:]
            self.depth, deepest = levels[-1], max(levels)
            if keys:
                self.longest_key = max(self.longest_key, max(map(len, keys)))
            if deepest > _DEEPEST:
                raise _TooDeep(f"nested deeper than {_DEEPEST} levels")
            if deepest * deepest * (self.longest_key + 5) // 2 > _PATHS_BUDGET:
                raise _TooDeep(f"nested {deepest} levels deep with keys of up to {self.longest_key:,} characters")


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
        self._stopped_line: int | None = None  # and its line: no line after it was read
        self._stopped_at: int | None = None  # and the byte of a syntax error that stopped it
        self._exact = False  # numbers read exactly (an integer past 64 bits was met), then made floats
        # Byte ranges of the records over the limit: blanked (`_blanked`) in every later reading.
        self._long: list[tuple[int, int]] = []
        # Whether a reading met a bare NaN/Infinity: every later reading sees each as null.
        self._non_finite = False

    def items(self, prefix: str) -> Iterator[tuple[int, int, Any]]:
        """(line, up to line, value) of each item at ijson's `prefix` ("item": the document is
        a list; "events.item": the list at the top-level object's "events"), each on the line it
        starts on (both lines the same). An object's line comes with it; a value of another type
        (never a record: a problem) is placed by reading the document a second time, as far as
        that item, so a document of objects only is read once.

        An item longer than the source's `max_record_bytes` is a problem, not a value: ijson is
        stopped once it has read about that much of it (within a piece, 64 KiB), the item's bytes
        are found (`_item_range`) and blanked, and the document is read again from the item after
        it; after LONG_RECORDS_PASSED of them, the rest of the document is not read."""
        yield from self._read_items(prefix)
        self._say_non_finite()

    def _read_items(self, prefix: str) -> Iterator[tuple[int, int, Any]]:
        blocks = self._first_blocks()
        done = 0  # items dealt with by the readings so far: a re-reading passes over them
        while True:
            try:
                long_item = yield from self._items(blocks, prefix, done)
            except _ExactNumbers as stopped:
                self._exact, done, blocks = True, stopped.args[0], self._blocks()
                continue
            except _NonFinite as stopped:
                self._find_non_finite()
                done, blocks = stopped.args[0], self._blocks()
                continue
            if long_item is None:
                return
            index, line = long_item
            limit = self.source.max_record_bytes
            found = _item_range(self._raw_blocks(), prefix, index)
            if found is None or len(self._long) >= LONG_RECORDS_PASSED:
                self._stop_on(line)
                self.problems.add(line, "line", f"a value over the limit of {size_text(limit)} "
                                  "(REPLAY_MAX_RECORD_BYTES); the rest of the document could not be read")  # fmt: skip
                return
            start, end, line = found
            self.problems.add(line, "line", f"record {too_long(end - start, limit)}")
            self._long.append((start, end))
            done = index + 1
            blocks = self._blocks()

    def _items(
        self, blocks: Iterator[bytes], prefix: str, done: int
    ) -> Generator[tuple[int, int, Any], None, tuple[int, int] | None]:
        """One reading of `items`, the first `done` items passed over; returns the index and
        line of an item found too long (the reading stops there), or None at the end."""
        # Every map ijson makes, in order, after the line of the piece it was made in: the line
        # of an item is the last one before the item's own map.
        stamps: list[int | dict[str, Any]] = []
        feed = _Feed(blocks, per_line=False, lines=stamps, limit=self.source.max_record_bytes, blank=self._long,
                     exact=self._exact)  # fmt: skip
        stamp = stamps.append

        def new_map() -> dict[str, Any]:
            made: dict[str, Any] = {}
            stamp(made)
            if feed.item_start is None:  # the list's first item is being built
                feed.item_start = feed.fed
            return made

        # Bytes are counted from the last item handed over (or the list's first map): only
        # items and their commas lie between, so more than the limit is an item too long. A
        # top-level array counts from its start, which also catches a long first item that is
        # no object (ijson makes no map for it).
        feed.item_start = 0 if prefix == "item" else None

        found = _reader(self._exact).items(feed, prefix, map_type=new_map, use_float=not self._exact)
        read = _as_read if self._exact else _as_is
        lines_of_items: _ItemLines | None = None
        index = -1
        while True:
            try:
                value = next(found)
            except StopIteration:
                return None
            except _TooLong:
                return index + 1, feed.line
            except _TooDeep as why:
                self._stop_on(feed.line)
                self.problems.add(feed.line, "line", f"{why}; the rest of the document could not be read")
                return None
            except _BAD_INPUT as error:
                if _reason(error) in _OVERFLOWS and not self._exact:
                    raise _ExactNumbers(index + 1) from None
                if self._stopped_at_non_finite(feed.last_line):
                    raise _NonFinite(index + 1) from None
                self._stop(error, feed.offset)
                return None
            index += 1
            feed.item_start = feed.fed
            if type(value) is dict:
                at, line = 0, 1
                while (entry := stamps[at]) is not value:  # passing maps nested in items before
                    if type(entry) is int:
                        line = entry
                    at += 1
                stamps[: at + 1] = [line]
                if index >= done:
                    yield line, line, read(value)
            else:
                _forget_nested(stamps, value)
                if index < done:
                    continue
                if lines_of_items is None:
                    lines_of_items = _ItemLines(self._blocks(), prefix, exact=self._exact)
                line = lines_of_items.line_of(index)
                value = read(value)
                yield (line, line, value) if line is not None else (feed.line, feed.last_line, value)

    def members(self, streamed: str) -> Iterator[tuple[int, str, Any, bool]]:
        """(line, key, value, is an item of `streamed`) of each member of the top-level object,
        in order, the list at `streamed` given item by item. The line is where a member's key
        or an item starts. A document that is no object is a problem."""
        yield from self._read_members(streamed)
        self._say_non_finite()

    def _read_members(self, streamed: str) -> Iterator[tuple[int, str, Any, bool]]:
        blocks, given = self._first_blocks(), 0  # given: members and items handed over so far
        while True:
            try:
                for at, member in enumerate(self._members(blocks, streamed)):
                    if at >= given:  # a reading again passes over what the one before gave
                        given += 1
                        line, key, value, is_item = member
                        yield (line, key, _as_read(value), is_item) if self._exact else member
                return
            except _ExactNumbers:
                self._exact, blocks = True, self._blocks()
            except _NonFinite:
                self._find_non_finite()
                blocks = self._blocks()

    def _members(self, blocks: Iterator[bytes], streamed: str) -> Iterator[tuple[int, str, Any, bool]]:
        """One reading of `members`."""
        feed = _Feed(blocks, per_line=True, limit=self.source.max_record_bytes)
        events = _reader(self._exact).basic_parse(feed, use_float=not self._exact)
        try:
            event, value = next(events, ("", None))
            if event != "start_map":
                if event:
                    kind = "a list" if event == "start_array" else json_kind(value)
                    self.problems.add(feed.line, "line", f"expected a JSON object, got {kind}")
                return
            yield from _members(events, feed, streamed)
            deque(events, maxlen=0)  # the rest: only text after the object, if anything
        except _BAD_INPUT as error:
            if _reason(error) in _OVERFLOWS and not self._exact:
                raise _ExactNumbers from None
            if self._stopped_at_non_finite(feed.last_line):
                raise _NonFinite from None
            self._stop(error, feed.offset)
        except _TooLong:
            # A member or step is built in Python from ijson's events: it is not read on past.
            self._stop_on(feed.building_line)
            limit = size_text(self.source.max_record_bytes)
            self.problems.add(feed.building_line, "line", f"a value over the limit of {limit} "
                              "(REPLAY_MAX_RECORD_BYTES); the rest of the document could not be read")  # fmt: skip

    def has_list(self, prefix: str) -> bool:
        """Whether the document holds a list at `prefix`, read again: tells an empty list of
        items from none."""
        feed = _Feed(self._blocks(), per_line=False)
        try:
            return any(
                path == prefix and event == "start_array" for path, event, _ in ijson.parse(feed, use_float=False)
            )
        except (*_BAD_INPUT, _TooDeep):
            return False

    def _first_blocks(self) -> Iterator[bytes]:
        blocks, self._given = self._given, None
        return _one_line_break(blocks if blocks is not None else read_blocks(self.source, self.problems))

    def _blocks(self) -> Iterator[bytes]:
        """The document as every reading after the first reads it: the records over the limit
        blanked, and once one was met, each bare NaN and Infinity written as null."""
        blocks = self._raw_blocks()
        return _nulled(blocks) if self._non_finite else blocks

    def _raw_blocks(self) -> Iterator[bytes]:
        # Offsets of records over the limit are of this text (`_item_range` reads it: a NaN, no
        # bracket, comma or string, is nothing to it), blanked before NaN grows into null.
        blocks = _one_line_break(read_blocks(self.source))
        return _blanked(blocks, self._long) if self._long else blocks

    def _stopped_at_non_finite(self, failed_line: int) -> bool:
        """Whether the reading stopped at a bare NaN, Infinity or -Infinity (not yet read as
        null): the document's first is on the line the parser stopped on or before it, whatever
        the parser said there (the exact reader stops past the word); one after it is not what
        stopped the reading, nor read (a syntax error before it had been taken for it). A stop
        for another reason is met again, and said, in the next reading."""
        if self._non_finite:
            return False

        def found(line: int, word: bytes, offset: int) -> None:
            raise _NonFinite(line)

        try:
            deque(_nulled(self._raw_blocks(), on_word=found), maxlen=0)
        except _NonFinite as first:
            return first.args[0] <= failed_line
        return False

    def _find_non_finite(self) -> None:
        """Read every bare NaN, Infinity and -Infinity of the document as null from the next
        reading on, as the JSON-lines reader reads them (`_say_non_finite` reports them)."""
        self._non_finite = True

    def _say_non_finite(self) -> None:
        """Report each bare NaN, Infinity and -Infinity read as null on its line (but in records
        over the limit, never read), once the readings are over: none past where they stopped
        (the byte of a syntax error; else the line), which no reading read."""
        if not self._non_finite:
            return
        said, last, stop = self.problems.add, self._stopped_line, self._stopped_at

        def report(line: int, word: bytes, offset: int) -> None:
            if (stop is not None and offset > stop) or (last is not None and line > last):
                raise _NonFinite(line)
            said(line, "line", f"{word.decode()}: JSON has no such number; read as null")

        try:
            deque(_nulled(self._raw_blocks(), on_word=report), maxlen=0)
        except _NonFinite:
            pass  # past the last line read

    def _grown_before(self, line: int, at: int) -> int:
        """How many bytes `line` grew before byte `at` of the text read, its words read as null
        ("NaN" one more, "Infinity" four fewer): the file's column is that many fewer."""
        grown = 0

        def count(word_line: int, word: bytes, offset: int) -> None:
            nonlocal grown
            if offset >= at:
                raise _NonFinite(word_line)
            if word_line == line:
                grown += 4 - len(word)

        try:
            deque(_nulled(self._raw_blocks(), on_word=count), maxlen=0)
        except _NonFinite:
            pass  # past the stop
        return grown

    def _stop_on(self, line: int, offset: int | None = None) -> None:
        self.stopped, self._stopped_line, self._stopped_at = True, line, offset

    def _stop(self, error: Exception, failed_at: int) -> None:
        line, column, ended, rest, at = _locate(self._blocks(), failed_at, exact=self._exact)
        reason = _reason(error)
        if reason == "trailing garbage":
            self.after = After(line, column, rest)
            return
        # The byte, when it is of the text `_say_non_finite` reads (NaN read as null by now).
        self._stop_on(line, at if self._non_finite else None)
        if self._non_finite:
            column -= self._grown_before(line, at)
        if ended:
            self.problems.add(
                line, "line", "file ends inside the JSON document (truncated); the rest could not be read"
            )
        elif isinstance(error, UnicodeDecodeError) or "UTF8" in reason:
            self.problems.add(
                line, "line", f"invalid UTF-8 at column {column}; the rest of the document could not be read{NOT_UTF8}"
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

    def __init__(self, blocks: Iterator[bytes], prefix: str, *, exact: bool = False) -> None:
        self._lines = _line_pieces(blocks)
        self._prefix = prefix
        self._events = ijson.sendable_list()
        self._parser = _reader(exact).parse_coro(self._events, use_float=not exact)
        self._nesting = _Nesting(exact=exact)
        # (item index, line) of the items not yet asked for, in index order: asked in that order,
        # the passed ones leave from the left (a scan of them all a call made a one-line list
        # of a million items cost hours).
        self._starts: deque[tuple[int, int]] = deque()
        self._count = 0  # items started so far
        self._line = 0  # lines sent so far

    def line_of(self, index: int) -> int | None:
        """The line item `index` (0-based) starts on; None if the document ends (or breaks) first."""
        while index >= self._count:
            line, piece = next(self._lines, (0, b""))
            if not piece:
                return None
            self._line = line
            try:
                self._nesting.check(piece)
                self._parser.send(piece)
            except (*_BAD_INPUT, _TooDeep, StopIteration):  # the first reading reported it; nothing past it is an item
                self._lines = iter(())
                return None
            for path, event, _ in self._events:
                if path == self._prefix and event not in _NOT_STARTS:
                    if self._count >= index:  # only what may still be asked: memory stays flat
                        self._starts.append((self._count, self._line))
                    self._count += 1
            del self._events[:]
        starts = self._starts
        while starts and starts[0][0] < index:
            starts.popleft()
        return starts.popleft()[1] if starts and starts[0][0] == index else None


_NOT_STARTS = frozenset({"map_key", "end_map", "end_array"})


def _line_pieces(blocks: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """(line, piece) of the document (its line breaks made one `\n`), no piece longer than
    _PIECE_BYTES nor holding a line break but at its end: a long line comes in parts."""
    line = 1
    for block in blocks:
        for whole in block.splitlines(keepends=True):
            for start in range(0, len(whole), _PIECE_BYTES):
                yield line, whole[start : start + _PIECE_BYTES]
            if whole[-1] == 0x0A:
                line += 1


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
        yield line, key, _build(event, events, feed), False


def _array_items(events: Iterator[tuple[str, Any]], feed: _Feed, key: str) -> Iterator[tuple[int, str, Any, bool]]:
    for event, value in events:
        if event == "end_array":
            return
        line = feed.line
        yield line, key, (_build(event, events, feed) if event in _STARTS else value), True


def _build(start: str, events: Iterator[tuple[str, Any]], feed: _Feed) -> Any:
    """The object or list whose `start` event was just read, from the events up to its end;
    the feed stops (_TooLong) once it would hand over more than its limit of it."""
    feed.item_start, feed.building_line = feed.offset, feed.line
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
    feed.item_start = None
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


def _as_is(value: Any) -> Any:
    return value


def _as_read(value: Any) -> Any:
    """A value read with exact numbers, as the fast reading gives it: a Decimal the float it
    rounds to, an integer past 64 bits too (as orjson reads a JSON line; null past any float,
    which JSON cannot write). Lists and dicts are changed in place."""
    if type(value) is dict:
        for key, item in value.items():
            if type(item) in _CONTAINERS_AND_NUMBERS:
                value[key] = _as_read(item)
        return value
    if type(value) is list:
        for index, item in enumerate(value):
            if type(item) in _CONTAINERS_AND_NUMBERS:
                value[index] = _as_read(item)
        return value
    if type(value) is int and not -(2**63) <= value < 2**64:
        return finite_or_null(value)
    if isinstance(value, Decimal):
        return finite_or_null(value)
    return value


_CONTAINERS_AND_NUMBERS = frozenset({dict, list, int, Decimal})


def _reason(error: Exception) -> str:
    """yajl's message without its context lines and `parse error: ` prefix."""
    if isinstance(error, UnicodeDecodeError):
        return "invalid UTF-8"
    message = error.args[0] if error.args else str(error)
    if isinstance(message, bytes):  # ijson gives bytes when the context is no UTF-8
        message = message.decode("utf-8", "replace")
    first = str(message).split("\n", 1)[0].strip().rstrip(".")
    reason = first.split(" error: ", 1)[-1]
    # The pure-Python parser quotes the token it refused whole (an integer of 4,400 digits).
    return reason if len(reason) <= 160 else reason[:120] + "…" + reason[-30:]


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

    def __init__(
        self,
        blocks: Iterator[bytes],
        *,
        per_line: bool,
        lines: list[Any] | None = None,
        limit: int | None = None,
        blank: list[tuple[int, int]] | None = None,
        exact: bool = False,
    ) -> None:
        self.line = self.last_line = 1
        self.offset = 0
        self.fed = 0  # bytes handed to ijson so far
        # Where the bytes of the value being built are counted from (`items`: see there;
        # `members`: the piece it starts in): with a `limit`, the feed stops (_TooLong) before
        # handing over a piece that takes the value past it.
        self.item_start: int | None = None
        self.building_line = 1  # `members`: the line the value being built starts on
        self.limit = limit
        self.blank = blank or []  # ranges blanked in the blocks: they count for nothing
        self._pieces = self._lines(blocks) if per_line else self._cut(blocks, lines if lines is not None else [])
        # Only for the path-naming parsers: `members`' own (per_line) names none, and builds
        # each value in Python an event at a time.
        self._nesting = None if per_line else _Nesting(exact=exact)

    def read(self, size: int) -> bytes:
        if not size:  # ijson's check that it is given bytes
            return b""
        piece = next(self._pieces, b"")
        if self._nesting is not None:
            self._nesting.check(piece)
        return piece

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
                    self._check(offset + stop)
                    piece = block[start:stop]
                    breaks = piece.count(b"\n")
                    self.line, self.offset = line, offset + start
                    self.last_line = line + breaks - (piece[-1] == 0x0A and breaks > 0)
                    if lines and type(lines[-1]) is int:  # no map made since: one line kept
                        lines[-1] = line
                    else:
                        note(line)
                    self.fed = offset + stop
                    yield piece
                    line += breaks
                    start = stop
            offset += len(block)

    def _check(self, fed: int) -> None:
        if self.limit is None or self.item_start is None or fed - self.item_start <= self.limit:
            return
        start = self.item_start
        blanked = sum(max(0, min(stop, fed) - max(begin, start)) for begin, stop in self.blank)
        if fed - start - blanked > self.limit:
            raise _TooLong

    def _lines(self, blocks: Iterator[bytes]) -> Iterator[bytes]:
        line, offset = 1, 0
        for block in blocks:
            for piece in block.splitlines(keepends=True):
                self._check(offset + len(piece))
                self.line = self.last_line = line
                self.offset = offset
                self.fed = offset + len(piece)
                yield piece
                offset += len(piece)
                if piece[-1] == 0x0A:
                    line += 1


def _locate(blocks: Iterator[bytes], failed_at: int, *, exact: bool) -> tuple[int, int, bool, Iterator[bytes], int]:
    """Where the parser stops, fed the document again: (line, column, whether it stopped at the
    end, for a text after the document the bytes from there on, the offset of the byte). Up to
    `failed_at`, where the piece the first reading failed in starts, it is fed in blocks; then a
    byte at a time."""
    spot = _Spot()
    try:
        deque(_reader(exact).basic_parse(spot.feed(blocks, failed_at), use_float=not exact), maxlen=0)
    except _BAD_INPUT:
        pass
    if spot.ended:  # a truncated document: where its last character is
        return spot.last_line, spot.last_column, True, iter(()), spot.offset
    return spot.line, spot.column, False, spot.rest, spot.offset


class _Spot:
    """The reader `_locate` feeds the parser: it knows the position of the byte read last."""

    def __init__(self) -> None:
        self.line = self.column = 1
        self.offset = 0  # of the byte read last
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
                self.line, self.column, self.offset = line, column, offset + index
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


# Records over the limit ---------------------------------------------------------------------------

_STRUCTURE = re.compile(rb'[\[\]{}",:]')  # what matters outside strings
_IN_STRING = re.compile(rb'["\\]')
_NOT_SPACE = re.compile(rb"[^ \t\n\r]")
_KEY_BYTES = 1024  # a longer key is no key `items` looks for


def _item_range(blocks: Iterable[bytes], prefix: str, index: int) -> tuple[int, int, int] | None:
    """Where item `index` of the list at `prefix` ("item", or "<key>.item" of the top-level
    object) is in the document: (start, end) offsets and the line it starts on; None if the
    document has no such item. Reads only brackets, commas, colons and the edges of strings (a
    regular expression finds each), holding nothing of the item: only `items`' re-reading past
    a record over the limit pays for it."""
    key = None if prefix == "item" else prefix.removesuffix(".item")
    if key is not None and "." in key:
        return None
    list_depth = 1 if key is None else 2
    depth, line, offset = 0, 1, 0
    in_string = escaped = in_list = want_start = False
    top_object = False
    count, start, start_line = -1, -1, 0
    key_parts: list[bytes] | None = None  # a string at the top-level object's depth, as read
    last_string = current_key = None
    for block in blocks:
        pos, size = 0, len(block)
        if escaped:  # the character a backslash at the end of the block before escapes
            if key_parts is not None:
                key_parts.append(block[:1])
            pos, escaped = 1, False
        while pos < size:
            if want_start:  # after `[` or `,` of the list: the next character starts an item
                found = _NOT_SPACE.search(block, pos)
                if found is None:
                    break
                pos, want_start = found.start(), False
                if block[pos] != 0x5D:  # "]": an empty list
                    count += 1
                    if count == index:
                        start, start_line = offset + pos, line + block.count(b"\n", 0, pos)
            if in_string:
                found = _IN_STRING.search(block, pos)
                if found is None:
                    if key_parts is not None:
                        key_parts.append(block[pos:])
                    break
                if found.group() == b"\\":
                    if key_parts is not None:
                        key_parts.append(block[pos : found.end() + 1])
                    pos = found.end() + 1
                    escaped = pos > size
                    continue
                in_string = False
                if key_parts is not None:
                    key_parts.append(block[pos : found.start()])
                    last_string = _key_text(key_parts)
                    key_parts = None
                pos = found.end()
                continue
            found = _STRUCTURE.search(block, pos)
            if found is None:
                break
            char, pos = found.group(), found.end()
            if char == b'"':
                in_string = True
                key_parts = [] if top_object and depth == 1 else None
            elif char == b":":
                if top_object and depth == 1:
                    current_key = last_string
            elif char in b"[{":
                depth += 1
                if depth == 1:
                    top_object = char == b"{"
                opens_list = char == b"[" and depth == list_depth
                if opens_list and (key is None or (top_object and current_key == key)):
                    in_list = want_start = True
            elif char == b",":
                if in_list and depth == list_depth:
                    if count == index and start >= 0:
                        return start, offset + found.start(), start_line
                    want_start = True
                elif top_object and depth == 1:
                    current_key = None
            else:  # "]" or "}"
                if in_list and depth == list_depth:
                    if count == index and start >= 0:
                        return start, offset + found.start(), start_line
                    in_list = False
                depth -= 1
        line += block.count(b"\n")
        offset += size
    return None


def _key_text(parts: list[bytes]) -> str | None:
    raw = b"".join(parts)
    if len(raw) > _KEY_BYTES:
        return None
    try:
        return json.loads(b'"' + raw + b'"')
    except ValueError:
        return None


# Every byte a space but line breaks, which keep the lines of what follows where they were.
_BLANK = bytes(0x0A if byte == 0x0A else 0x20 for byte in range(256))


def _blanked(blocks: Iterable[bytes], ranges: list[tuple[int, int]]) -> Iterator[bytes]:
    """The document with each of `ranges` (a record over the limit) turned into `0` and spaces:
    the same length and lines, so offsets, lines and item indexes stay those of the file."""
    offset = 0
    for block in blocks:
        end = offset + len(block)
        for start, stop in ranges:
            if stop <= offset or start >= end:
                continue
            first, last = max(start, offset) - offset, min(stop, end) - offset
            blank = block[first:last].translate(_BLANK)
            if start >= offset:  # the record's first character: a number stands in for it
                blank = b"0" + blank[1:]
            block = block[:first] + blank + block[last:]
        yield block
        offset = end


# Bare NaN and Infinity ---------------------------------------------------------------------------

# Outside strings: a string's opening quote, or a word JSON lacks. Inside: an escape (its two
# characters) or the closing quote. A word or an escape cut by a block's end is read with the next.
_OUTSIDE_STRINGS = re.compile(rb'"|-?Infinity|NaN')
_INSIDE_STRINGS = re.compile(rb'\\.|"', re.DOTALL)
_LONGEST_WORD = len(b"-Infinity")


def _nulled(blocks: Iterable[bytes], on_word: Callable[[int, bytes, int], None] | None = None) -> Iterator[bytes]:
    """The document with each bare NaN, Infinity and -Infinity outside strings written as null
    (`on_word`: told each, with its line and the offset of its null in the text written), as it
    streams: memory holds a block and the few bytes that may begin a word or an escape at its
    end. "NaN" grows by a byte: every reading goes through here, so the offsets readings compare
    are all of this text."""
    inside, carry, line = False, b"", 1  # line: of the text's byte at `seen`
    written = 0  # the bytes yielded so far
    for block in chain(blocks, [b""]):
        last = not block
        text = carry + block
        out, position, seen, copied = bytearray(), 0, 0, 0  # copied: the text up to there is in `out`
        # Every match is whole; what may begin one (a word, an escape) at the end is carried.
        while found := (_INSIDE_STRINGS if inside else _OUTSIDE_STRINGS).search(text, position):
            position = found.end()
            if found.group() == b'"':
                inside = not inside
            elif not inside:
                out += memoryview(text)[copied : found.start()]
                out += b"null"
                copied = position
                if on_word is not None:
                    line += text.count(b"\n", seen, found.start())
                    seen = found.start()
                    on_word(line, found.group(), written + len(out) - 4)
        cut = len(text) if last else max(position, len(text) - _LONGEST_WORD)
        if on_word is not None:
            line += text.count(b"\n", seen, cut)
        carry = text[cut:]
        if not copied:  # nothing written as null: the text itself
            written += cut
            yield text[:cut]
            continue
        out += memoryview(text)[copied:cut]
        written += len(out)
        yield bytes(out)
