"""A file's JSON records, one at a time, whatever the container: JSON lines, a JSON array, or an
object whose list holds them (`{"events": [...]}`, the body of AgentLens' ingest API); and the
spool that groups them by session on disk.

Used by the AgentLens, flux0 and daycare formats. Each record comes with the line it starts on and
its raw text: a JSON line exactly as it is in the file, an element of a JSON document written
again by orjson (the upload keeps the file's own bytes). JSON lines are read with orjson a line
at a time; a JSON document is streamed with ijson (`json_documents`), never read whole.

Every record that cannot be used becomes a problem on its line (BOM, invalid UTF-8, malformed
JSON, a truncated last line, a value that is not an object); the rest still comes through. In a
JSON document, a syntax error ends the document there: the records before it are kept.
"""

from __future__ import annotations

import heapq
import re
import struct
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import IO, Any

import orjson

from ..canonical import Problems
from . import MAX_UNUSABLE_RUN, LongLine, Source, cannot_store, gave_up, load_json_line, numbered_lines, read_blocks
from .fields import json_kind
from .json_documents import JsonDocument

# Bytes read, at most, to find the end of the first line before deciding the container.
DECIDE_BYTES = 1 << 16


@dataclass(slots=True)
class Record:
    line: int
    raw: bytes
    value: dict[str, Any]

    @property
    def text(self) -> str:
        # orjson read or wrote these bytes, so they are valid UTF-8.
        return self.raw.decode("utf-8")


def iter_records(
    source: Source,
    problems: Problems,
    *,
    body_keys: tuple[str, ...] = (),
    on_bytes: Callable[[int], None] | None = None,
) -> Iterator[Record]:
    """Every usable JSON object of the file, in file order.

    `body_keys` names the key of a top-level object whose list holds the records (also when each
    line of a JSON-lines file is such an object, e.g. a log of API request bodies); a document
    is read for the first of them only.
    """
    blocks = read_blocks(source, problems, on_bytes=on_bytes)
    first, whole_file = _start(blocks)
    blocks = chain([first], blocks)
    container = _container(first, body_keys, whole_file=whole_file)
    limit = source.max_record_bytes
    if container == "lines":
        yield from _records_of_lines(numbered_lines(blocks, limit=limit), problems, body_keys, limit=limit)
        return
    key = body_keys[0] if container == "body" else None
    document = JsonDocument(source, problems, blocks=blocks)
    found = 0
    for line, up_to, value in document.items("item" if key is None else f"{key}.item"):
        found += 1
        record = _record(line, value, problems, up_to=up_to)
        if record is not None:
            yield record
    after = document.after
    if after is not None:
        # A JSON-lines file whose first line is a list (`[]`), say: the lines after it.
        problems.add(after.line, "line", "text after the end of the JSON document: read as JSON lines")
        yield from _records_of_lines(
            numbered_lines(after.rest, limit=limit, first=after.line), problems, body_keys, limit=limit
        )
    elif key is not None and not found and not document.stopped and not document.has_list(key):
        problems.add(None, "file", f'no top-level array or "{key}" list found')


def _start(blocks: Iterator[bytes]) -> tuple[bytes, bool]:
    """The blocks up to the end of the first line (or DECIDE_BYTES), and whether that is the
    whole file."""
    first = b""
    while b"\n" not in first and b"\r" not in first and len(first) < DECIDE_BYTES:
        block = next(blocks, None)
        if block is None:
            return first, True
        first += block
    return first, False


def _container(first: bytes, body_keys: tuple[str, ...], *, whole_file: bool) -> str:
    """Which container the file's start shows: "lines", "array" or "body"."""
    lead = first.lstrip()
    if lead.startswith(b"["):
        return "array"
    if lead.startswith(b"{") and body_keys and not _looks_like_lines(first, whole_file=whole_file):
        return "body"
    return "lines"


def _looks_like_lines(first: bytes, *, whole_file: bool) -> bool:
    """JSON lines, or one JSON object spread over lines (a request body)?

    The first non-empty line decides: a complete object on its own means JSON lines; a line that
    only opens a body (`{`, `{"events": [`, ...) means one object. Anything else is a damaged
    first line of JSON lines, reported as such while the rest still imports. (A whole body on
    one line counts as JSON lines too: that line's list is read element by element.)
    """
    lines = first.splitlines(keepends=True)
    for index, line in enumerate(lines):
        body = line.strip()
        if not body:
            continue
        opening = body == b"{" or _BODY_OPENING.match(body) is not None
        if index == len(lines) - 1 and not whole_file and line[-1:] not in b"\r\n":
            return not opening  # a first line longer than we read: only its opening can tell
        try:
            return isinstance(orjson.loads(body), dict)
        except orjson.JSONDecodeError:
            return not opening
    return False


_BODY_OPENING = re.compile(rb'\{\s*"[^"]*"\s*:\s*\[')


def _records_of_lines(
    lines: Iterable[tuple[int, bytes | LongLine]],
    problems: Problems,
    body_keys: tuple[str, ...],
    *,
    limit: int,
) -> Iterator[Record]:
    unusable = 0  # lines in a row that gave no record
    for number, line in lines:
        if unusable == MAX_UNUSABLE_RUN:
            problems.add(None, "file", gave_up(number))  # the file's own: kept before any line's
            return
        unusable += 1
        if type(line) is LongLine:
            problems.add(number, "line", line.problem(limit))
            continue
        body = line.strip()
        if not body:
            continue
        value = load_json_line(number, body, problems, last=line[-1:] not in b"\r\n")
        if value is None:
            continue
        unusable = 0
        listed = _body_list_key(value, body_keys)
        if listed is None:
            yield Record(number, body, value)
            continue
        for element in value[listed]:  # a whole request body on one line
            record = _record(number, element, problems)
            if record is not None:
                yield record


def _body_list_key(record: dict[str, Any], body_keys: tuple[str, ...]) -> str | None:
    for key in body_keys:
        if isinstance(record.get(key), list):
            return key
    return None


def _record(line: int, value: Any, problems: Problems, *, up_to: int | None = None) -> Record | None:
    """An element of a list of records, written again as its raw text. One that is no object
    and is known only to end on one of the lines from `line` to `up_to` says so."""
    if type(value) is not dict:
        where = f" (an element ending on one of lines {line}-{up_to})" if up_to and up_to != line else ""
        problems.add(line, "line", f"expected a JSON object, got {json_kind(value)}{where}")
        return None
    try:
        raw = orjson.dumps(value)
    except orjson.JSONEncodeError as error:
        problems.add(line, "line", cannot_store(error))
        return None
    return Record(line, raw, value)


class DiscardProblems(Problems):
    """For a second pass over a file whose file-level problems the first pass reported."""

    def add(self, line: int | None, field: str, message: str) -> None:
        pass


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

    def __init__(self, *, file_bytes: int = 0, on_bytes: Callable[[int], None] | None = None) -> None:
        import tempfile  # here, not at the top: the parse worker's start need not pay for it

        self.folder = Path(tempfile.mkdtemp(prefix="replay-spool-"))
        self.groups: dict[str, int] = {}
        self.handles: OrderedDict[int, IO[bytes]] = OrderedDict()
        self.total = 0
        self.read = 0
        # Reading back reports progress to `on_bytes` in bytes of the source file (`file_bytes`),
        # in the proportion of the spool read so far, so a job's progress bar moves with the writes.
        self.file_bytes = file_bytes
        self.on_bytes = on_bytes

    @classmethod
    def of(cls, source: Source) -> RecordSpool:
        """A spool for the records of `source`, reporting its reading back as the source's progress."""
        return cls(file_bytes=file_bytes(source), on_bytes=monotonic_progress(source.on_bytes))

    def __enter__(self) -> RecordSpool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
        self, key: str, *, newest_first: bool = False, sort_keys: Sequence[int] | None = None
    ) -> Iterator[Record]:
        """The group's records in the order they were added, or the reverse, or in the order of
        `sort_keys` (one a record, in the order added; ties keep it); each group once."""
        on_bytes = self.on_bytes
        number = self.groups[key]
        handle = self.handles.pop(number, None)
        if handle is not None:
            handle.close()
        path = self._path(number)
        with open(path, "rb") as stream:
            if sort_keys is not None:
                frames = _frames_sorted(stream, sort_keys)
            else:
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


def _frame_positions(stream: IO[bytes]) -> array:
    offsets = array("Q")
    position = 0
    while header := stream.read(_FRAME.size):
        offsets.append(position)
        position += _FRAME.size + _FRAME.unpack(header)[1]
        stream.seek(position)
    return offsets


def _frames_at(stream: IO[bytes], positions: Iterable[int]) -> Iterator[tuple[int, bytes]]:
    for offset in positions:
        stream.seek(offset)
        line, length = _FRAME.unpack(stream.read(_FRAME.size))
        yield line, stream.read(length)


def _frames_reversed(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    return _frames_at(stream, reversed(_frame_positions(stream)))


# Records sorted at once, at most: a run's sort holds Python objects (about 84 bytes a record).
_SORT_RUN = 1 << 16


def _frames_sorted(stream: IO[bytes], sort_keys: Sequence[int]) -> Iterator[tuple[int, bytes]]:
    """The frames in the order of their `sort_keys`, ties in file order. Sorted in runs kept as
    arrays (16 bytes a record) and merged as they are read: one sort of them all held a Python
    object a record, 84 MiB a million records."""
    positions = _frame_positions(stream)
    runs = []
    for start in range(0, len(positions), _SORT_RUN):
        stop = start + _SORT_RUN
        # (key, position): a frame's position grows with its place in the file, so ties keep it.
        pairs = sorted(zip(sort_keys[start:stop], positions[start:stop], strict=True))
        runs.append(zip(array("q", [key for key, _ in pairs]), array("q", [spot for _, spot in pairs]), strict=True))
        del pairs
    return _frames_at(stream, (spot for _, spot in heapq.merge(*runs)))


def file_bytes(source: Source) -> int:
    """The size on disk of a file (what import progress counts), 0 for a folder or when gone."""
    try:
        return source.path.stat().st_size
    except OSError:
        return 0
