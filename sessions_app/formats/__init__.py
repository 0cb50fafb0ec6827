"""Input formats: one module per format, each turning a file into canonical events, nothing else.

The contract every format module follows:

    NAME: str                                   # "rlm_native", "agentlens", ...
    def sniff(head: Head) -> bool               # decide by content, never by file name
    def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]

`parse` streams: it reads the source line by line (or item by item), never the whole file at
once, and yields one ParsedSession per session the file holds. A ParsedSession's `events` is a
lazy iterator; its `meta` is complete once the events are exhausted. Every line it cannot use
becomes a problem `{line, field, message}`; nothing is dropped silently.

Formats that agents can also stream live (rlm-code native, AgentLens) expose a `Converter`
class: `Converter(state: dict | None)`, `.convert(record: dict, raw: str, line: int | None,
problems: Problems) -> list[CanonicalEvent]`, `.state() -> dict` (JSON-serialisable, so a later
batch continues where the last stopped), and `.meta: SessionMeta`. Their `parse` uses it too.

Helpers here for JSON-lines formats: `read_records(source, problems)` yields (line, record, raw
text) for every usable line and reports the rest (BOM, invalid UTF-8, malformed JSON, truncated
last line, non-objects); `read_blocks` and `numbered_lines` give a file's bytes and its numbered lines (`\n`,
`\r\n` and a lone `\r` each end one; blank ones are left out); `source_stem(name)` is a file's stem the way rlm-code names
a session without a run id. JSON documents (arrays, request bodies, snapshots) are streamed by
`json_documents` and `records`. A format that reads a folder gets a Source whose `is_dir` is
true and a Head without text; its `sniff` looks at the folder's layout.
"""

from __future__ import annotations

import gzip
import importlib
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import orjson

from ..canonical import CanonicalEvent, ParsedSession, Problems
from .fields import json_kind

BOM = b"\xef\xbb\xbf"
GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 * 1024
# JSON is UTF-8: what a problem of invalid UTF-8 adds, since a whole file in another encoding
# (Latin-1, Windows-1252: "café" as one byte é) is the likely cause.
NOT_UTF8 = " (JSON is UTF-8; a file in Latin-1 converts with `iconv -f latin1 -t utf-8`)"
# Detection reads at least this many whole lines, however long (`Head.of`).
HEAD_LINES = 3
# A line (or a record of a JSON document) longer than this is a problem, never held whole in
# memory; an import passes the server's REPLAY_MAX_RECORD_BYTES in its Source.
MAX_RECORD_BYTES = 16 * 1024 * 1024


@dataclass
class Source:
    """A file or folder to import. `open()` gives a fresh binary stream (gzip undone) each time,
    so a format may read it more than once (e.g. to group AgentLens events by session)."""

    path: Path
    display_name: str = ""
    # Called with the number of compressed/raw bytes read so far; import progress uses it.
    on_bytes: Callable[[int], None] | None = None
    # The longest line or record read whole; a longer one is skipped and reported (`LongLine`).
    max_record_bytes: int = MAX_RECORD_BYTES

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not self.display_name:
            self.display_name = self.path.name

    @property
    def is_dir(self) -> bool:
        return self.path.is_dir()

    def within(self, path: Path, display_name: str) -> Source:
        """A file of this folder, read with the same limits."""
        return Source(path=path, display_name=display_name, max_record_bytes=self.max_record_bytes)

    def open(self) -> IO[bytes]:
        raw = self.path.open("rb")
        if raw.read(2) == GZIP_MAGIC:
            raw.seek(0)
            return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
        raw.seek(0)
        return raw


READ_BLOCK = 1 << 20


def read_blocks(
    source: Source, problems: Problems | None = None, *, on_bytes: Callable[[int], None] | None = None
) -> Iterator[bytes]:
    """The file's bytes in blocks of READ_BLOCK (or the record limit), a BOM at its start removed (reported when
    `problems` is given). `on_bytes` hears the bytes read so far, of the file on disk (a .gz
    counts its own size)."""
    # Blocks no larger than the longest record either: memory stays within a few times the
    # limit when the limit is set below a block (never below HEAD_BYTES, for speed).
    size = min(READ_BLOCK, max(source.max_record_bytes, HEAD_BYTES))
    with source.open() as stream:
        position = getattr(stream, "fileobj", stream).tell
        first = True
        while block := stream.read(size):
            if on_bytes is not None:
                on_bytes(position())
            if first:
                first = False
                if block.startswith(BOM):
                    if problems is not None:
                        problems.add(1, "line", "byte-order mark at the start of the file (ignored)")
                    block = block[3:]
                    if not block:
                        continue
            yield block


def numbered_lines(
    blocks: Iterable[bytes], *, limit: int | None = None, first: int = 1
) -> Iterator[tuple[int, bytes | LongLine]]:
    """(number, line) for each line that holds more than white space, numbered from `first`,
    with its ending, however the blocks cut them: `\n`, `\r\n` and a lone `\r` (old Mac files)
    each end a line. With a `limit`, a line longer than it comes as a `LongLine` in its place:
    its bytes are dropped as they are read, so memory holds `limit` bytes of a line at most (and
    a block), however long the line."""
    # Blank lines are counted, never yielded: no reader has a use for them, and a file of little
    # else (30 MiB of newlines gzip to 31 KB) must not cost a JSON parse and its failure a line
    # (37 s of CPU for those 30 MiB, while an import holds its session's transaction open).
    number = first - 1  # the last line passed
    held: list[bytes] = []  # the start of a line that the blocks so far leave open
    held_size = 0
    skipped = -1  # while passing over a line longer than the limit: its bytes so far
    blank = True  # and whether they were all white space (a blank line, however long)
    for block in whole_line_breaks(blocks):
        lines = block.splitlines(keepends=True)
        if skipped >= 0 or held:
            # The line the blocks before left open goes on in this one.
            piece = lines[0]
            if skipped >= 0:
                skipped += len(piece)
                blank = blank and piece.isspace()
            else:
                held.append(piece)
                held_size += len(piece)
                if limit is not None and held_size > limit:
                    blank = all(part.isspace() for part in held)
                    held, held_size, skipped = [], 0, held_size
            if piece[-1] not in _LINE_ENDS:  # no line break in the whole block
                continue
            number += 1
            if skipped >= 0:
                if not blank:
                    yield number, LongLine(skipped)
                skipped = -1
            else:
                line = b"".join(held)
                held, held_size = [], 0
                if not line.isspace():
                    yield number, line
            del lines[0]
            if not lines:
                continue
        if lines[-1][-1] not in _LINE_ENDS:
            last = lines.pop()
            if limit is not None and len(last) > limit:
                skipped, blank = len(last), last.isspace()
            else:
                held, held_size = [last], len(last)
        long_lines = limit is not None and len(block) > limit  # only then can a line within it be too long
        for line in lines:
            number += 1
            if line.isspace():
                continue
            yield number, (LongLine(len(line)) if long_lines and len(line) > limit else line)
    number += 1
    if skipped >= 0:
        if not blank:
            yield number, LongLine(skipped)
    elif held and not (line := b"".join(held)).isspace():
        yield number, line


class LongLine:
    """In place of a line longer than the limit: only its length (its ending included). Not
    bytes, so a reader that does not expect one fails loudly rather than reading it as empty."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def problem(self, limit: int) -> str:
        return too_long(self.length, limit)


def too_long(count: int, limit: int) -> str:
    """The problem of a line or record of `count` bytes, over the limit."""
    return f"{size_text(count)} long, over the limit of {size_text(limit)} (REPLAY_MAX_RECORD_BYTES); skipped"


def size_text(count: int) -> str:
    """A number of bytes for people: 512 bytes, 64.0 KiB, 16.0 MiB."""
    if count < 1024:
        return f"{count} bytes"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / 1024 / 1024:.1f} MiB"


_LINE_ENDS = b"\r\n"


def whole_line_breaks(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The blocks, none but the last ending with `\r`: its `\n` may open the next one."""
    held = b""
    for block in blocks:
        if held:
            block = held + block
        held = b""
        if block.endswith(b"\r"):
            block, held = block[:-1], b"\r"
        if block:
            yield block
    if held:
        yield held


def source_stem(name: str) -> str:
    """A file's stem the way rlm-code names a session without a run_id, extensions in any case
    and a .gz around them removed: "run_7.JSONL.gz" -> "run_7"."""
    base = Path(name).name
    if base.lower().endswith(".gz"):
        base = base[:-3]
    for suffix in (".jsonl", ".ndjson", ".json"):
        if base.lower().endswith(suffix):
            return base[: -len(suffix)] or base
    return Path(base).stem or base


def read_records(source: Source, problems: Problems) -> Iterator[tuple[int, dict[str, Any], str]]:
    """(line number, record, raw text) for every usable JSON-lines record of a file.

    Everything else becomes a problem on its line: a BOM, invalid UTF-8, malformed JSON, a
    truncated last line, a value that is not an object. The raw text is the line exactly as
    received, without its line ending (what the hash chain covers).
    """
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    limit = source.max_record_bytes
    blocks = read_blocks(source, problems, on_bytes=source.on_bytes)
    unusable = 0  # lines in a row that gave no record
    for number, line in numbered_lines(blocks, limit=limit):
        if unusable == MAX_UNUSABLE_RUN:
            problems.add(None, "file", gave_up(number))  # the file's own: kept before any line's
            return
        unusable += 1
        if type(line) is LongLine:
            problems.add(number, "line", line.problem(limit))
            continue
        body = line.rstrip(b"\r\n")
        try:
            record = loads(body)
        except decode_error as error:
            record = load_json_line(number, body, problems, last=len(body) == len(line), failed=error)
            if record is None:
                continue
        if type(record) is not dict:
            problems.add(number, "line", f"expected a JSON object, got {json_kind(record)}")
            continue
        if len(body) > _DEEP_LINE and not storable(number, record, body, problems):
            continue
        unusable = 0
        yield number, record, body.decode("utf-8")


Record = tuple[int, dict[str, Any], str]  # (line, parsed record, raw text)

# Lines in a row that give no record after which a JSON-lines file is read no further: a small
# gzip holds millions of lines of garbage, each a problem to find, while an import holds its
# session's transaction open (SQLite's one writer waits). Blank lines do not count.
MAX_UNUSABLE_RUN = 100_000


def gave_up(number: int) -> str:
    """The problem of a file read no further at line `number` (MAX_UNUSABLE_RUN): the file's
    own, with no line, as a line's would not be kept past the 1,000 lines before it."""
    return (
        f"read no further than line {number:,}: the {MAX_UNUSABLE_RUN:,} lines before it gave no record "
        "(a file of something else, or damaged); the records before them are kept"
    )


def parse_appended_sessions(
    source: Source,
    problems: Problems,
    *,
    new_converter: Callable[[str], Any],
    session_events: Callable[[Any, list[Record], Iterator[Record], Problems], Iterator[CanonicalEvent]],
) -> Iterator[ParsedSession]:
    """Split a JSON-lines file that appends several sessions into one ParsedSession each.

    rlm-code's writers open their file in append mode, so a file can hold run after run.
    `session_events(converter, pending, records, problems)` streams one session's events and,
    when it meets the first record of the next session, puts that record back into `pending`.
    `new_converter(stem)` makes the converter of each session (the file stem is its fallback id).
    """
    stem = source_stem(source.display_name)
    records = read_records(source, problems)
    pending: list[Record] = []
    while True:
        if not pending:
            first = next(records, None)
            if first is None:
                return
            pending.append(first)
        converter = new_converter(stem)
        events = session_events(converter, pending, records, problems)
        yield ParsedSession(meta=converter.meta, events=events)
        for _ in events:  # a consumer that stopped early: skip to the next session
            pass
        if not pending:
            return


# orjson reads JSON nested up to 1024 levels but writes only 254 (the record itself the first;
# orjson 3's dumps raises "Recursion limit reached" at 255, checked by tests/test_small_fixes.py):
# a record nested deeper could be read but its payload not stored, so it is refused when read (a
# line this short cannot be). The live ingest API (sessions_app/ingest/live.py) uses this number too.
MAX_DEPTH = 254
# A line nested deeper holds at least this many brackets (each opened one is closed): shorter
# lines, most of them, skip the check.
_DEEP_LINE = 2 * (MAX_DEPTH + 1)


def storable(number: int, record: Any, body: bytes, problems: Problems, *, by_orjson: bool = True) -> bool:
    """Whether a parsed record can be written back as JSON (what every stored column is); if
    not, a problem on its line. A record orjson read can only be too deep, which takes more
    brackets than MAX_DEPTH; one the stdlib fallback read may also hold a lone surrogate
    escape (`"\\ud800"`), which no UTF-8 text can, so it is always written once to check."""
    if by_orjson and body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return True
    try:
        orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError as error:
        problems.add(number, "line", cannot_store(error))
        return False
    return True


def cannot_store(error: orjson.JSONEncodeError) -> str:
    """The problem of a record orjson cannot write back."""
    why = f"nested deeper than {MAX_DEPTH} levels" if "ecursion" in str(error) else str(error)
    return f"cannot be stored: {why}"


def load_json_line(
    number: int, line: bytes, problems: Problems, *, last: bool = False, failed: orjson.JSONDecodeError | None = None
) -> dict[str, Any] | None:
    """Parse one JSON-lines record, reporting why it cannot be used; None means skip it
    (`failed`: orjson's error on this line, already met by the caller).

    Accepts the bare NaN/Infinity rlm-code's recorder may write (Python's json writes them).
    """
    stripped = line.strip()
    if not stripped:
        return None
    by_orjson = True
    try:
        if failed is not None and len(stripped) == len(line):
            raise failed  # orjson's error on these very bytes (a vertical tab is stripped here only)
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError as exc:
        by_orjson = False
        try:
            stripped.decode("utf-8")
        except UnicodeDecodeError as ude:
            problems.add(number, "line", f"invalid UTF-8 at byte {ude.start}{NOT_UTF8}")
            return None
        # Python's reader only where it reads what orjson does not: a line of other garbage
        # costs one failed parse, not three (a gzip of a million such lines is 2 KB).
        value = _load_with_nan(stripped) if _ONLY_PYTHON_READS.search(stripped) else None
        if value is None:
            why = (
                "truncated record (file ends mid-line)" if last else f"malformed JSON at column {exc.colno}: {exc.msg}"
            )
            problems.add(number, "line", why)
            return None
    if not isinstance(value, dict):
        problems.add(number, "line", f"expected a JSON object, got {json_kind(value)}")
        return None
    if not storable(number, value, stripped, problems, by_orjson=by_orjson):
        return None
    return value


# What Python's json reads and orjson refuses: bare NaN and Infinity, integers past 64 bits (19
# digits and more), numbers past a double (an exponent of three digits: 1e400), escapes of lone
# surrogates.
_ONLY_PYTHON_READS = re.compile(rb"NaN|Infinity|[0-9]{19}|[eE]\+?[0-9]{3}|\\u[dD][89a-fA-F]")


def _load_with_nan(data: bytes) -> Any:
    """`load_python_json`, None for what it cannot read."""
    try:
        return load_python_json(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):  # not JSON, or nested too deep
        return None


def load_python_json(text: str) -> Any:
    """The stdlib parser, which accepts the bare NaN / Infinity rlm-code may write and numbers
    past a double (1e400, read as infinity). JSON has no such values (orjson would write them
    back as null, and the database's JSON checks refuse them: a variable holding one failed the
    whole import, as it failed the session's stored state), so they are read as null; a numeric
    field holding one is then reported as null. Raises what `json.loads` raises."""
    import json

    return json.loads(text, parse_constant=_constant_as_null, parse_int=int_as_orjson_reads, parse_float=finite_or_null)


def _constant_as_null(name: str) -> None:
    return None


def finite_or_null(number: str | int | Decimal) -> float | None:
    """The float a number rounds to, null past any float (JSON cannot write infinity)."""
    try:
        value = float(number)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def int_as_orjson_reads(digits: str) -> int | float | None:
    """An integer as orjson reads it: past 64 bits, the float it rounds to (null past any
    float). The stdlib parser (the fallback for NaN, here and in api/bodies.py) keeps it whole,
    which no column stores: a record holding NaN beside such an integer was refused, though
    either alone was stored."""
    value = int(digits)
    if -(2**63) <= value < 2**64:
        return value
    try:
        return float(value)
    except OverflowError:
        return None


@dataclass
class Head:
    """What detection looks at: the first bytes and the first parsed JSON records."""

    source: Source
    text: bytes = b""
    records: list[dict[str, Any]] = field(default_factory=list)
    # Whether the first line read whole is the first of `records` (a JSON-lines file's first
    # record, or a JSON document written on one line); a cut or pretty-printed one is not.
    first_line_read: bool = False

    @classmethod
    def of(cls, source: Source, *, max_records: int = 20) -> Head:
        if source.is_dir:
            return cls(source=source)
        with source.open() as stream:
            text = stream.read(HEAD_BYTES)
            # A first record longer than the head (an 80 KB task) would leave detection no whole
            # record: read on to the end of the first few lines, within the record limit.
            while text.count(b"\n") < HEAD_LINES and len(text) < HEAD_BYTES + source.max_record_bytes:
                more = stream.readline(HEAD_BYTES + source.max_record_bytes - len(text))
                if not more:
                    break
                text += more
        if text.startswith(BOM):
            text = text[3:]
        records = []
        first_line_read = False
        for index, line in enumerate(text.splitlines()[:max_records]):
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                value = _load_with_nan(line.strip())
            if isinstance(value, dict):
                records.append(value)
                first_line_read = first_line_read or index == 0
        return cls(source=source, text=text, records=records, first_line_read=first_line_read)


# Each format's NAME and its module, in detection order (most specific first).
_MODULES = {
    "rlm_snapshot": "rlm_snapshot", "rlm_sink": "rlm_sink", "agentlens": "agentlens",
    "flux0": "flux0", "daycare": "daycare", "rlm_native": "rlm_native",
    "rlm_trajectory": "rlm_trajectory", "rlm_steps": "rlm_steps", "canonical": "canonical_json",
}  # fmt: skip


def format_module(name: str) -> Any:
    """The module of one format, importing no other (the parse worker needs only its own)."""
    module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    assert module.NAME == name, (module.NAME, name)
    return module


def registry() -> dict[str, Any]:
    """Format modules by NAME, in detection order (most specific first)."""
    return {name: format_module(name) for name in _MODULES}


# A Replay evidence bundle (ingest/bundles.py) is no format module: it restores a session
# rather than converting records, and is recognised before any format. Its name is here so that
# every list of what an import takes names it too.
BUNDLE_FORMAT = "replay_bundle"


def known_formats() -> list[str]:
    """Every name an import may be given: the format modules' and the evidence bundle's."""
    return [*registry(), BUNDLE_FORMAT]


def detect(source: Source) -> str | None:
    head = Head.of(source)
    for name, module in registry().items():
        try:
            if module.sniff(head):
                return name
        except (TypeError, ValueError, AttributeError, KeyError):
            # A sniff looks at records of any shape (a list where a string belongs): a record
            # it cannot read is not its format.
            continue
    return None
