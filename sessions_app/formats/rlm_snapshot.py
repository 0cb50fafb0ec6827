"""rlm-code snapshot JSON (`SessionSnapshot.to_dict()`) and SessionStore folders (FORMATS.md 1d).

A snapshot file is one JSON object: the session's fields, then `steps` (StepState dicts with the
variables and memory notes at each step), then the final `memory_notes`, `variables` and
`metadata`. It is read item by item: `members` walks the top-level object and cuts out each
member, and each element of `steps`, as its closing separator arrives, so memory holds one step
at a time however long the session.

Each step becomes one step_end event whose raw record is the step's own JSON text; its
variables and memory notes become the event's state change. A final `state` event carries the
snapshot's top-level variables/memory when they differ from the last step's.

A SessionStore folder (`snapshots/<session_id>_<snapshot_id>.json`,
`checkpoints/<session_id>_<name>.json`) gives one session per session id, from its snapshot with
the most steps (a checkpoint when there is no snapshot); every checkpoint of that session becomes
a named checkpoint at its step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any, Iterator

import orjson

from ..canonical import CanonicalEvent, CheckpointSpec, Kind, ParsedSession, Problems, SessionMeta, StateChange
from . import BOM, Head, Source, _load_with_nan
from .rlm_native import STEP_DEFAULTS, mapping, number, parse_timestamp, text

NAME = "rlm_snapshot"

READ_BLOCK = 1 << 20
_OUTSIDE = re.compile(rb'[\[\]{}",:]')
# Inside a string: its end, an escape, or a raw line break, which no JSON string holds (json.dumps
# escapes it): a string whose next line opens with structure was left unclosed and ends with its
# line.
_INSIDE = re.compile(rb'["\\\n]')
_NON_SPACE = re.compile(rb"[^ \t\r\n]")
_LEADING = re.compile(rb"[ \t]*")
_HEADER_KEYS = ("snapshot_id", "session_id", "total_steps")


def sniff(head: Head) -> bool:
    if head.source.is_dir:
        return is_store(head.source.path)
    text_ = head.text.lstrip()
    if not text_.startswith(b"{"):
        return False
    first_line = text_.split(b"\n", 1)[0]
    if b'"event_type"' in first_line or b'"eventType"' in first_line:
        return False
    return all(f'"{key}"'.encode() in text_ for key in _HEADER_KEYS)


def is_store(path: Path) -> bool:
    return (path / "snapshots").is_dir() or (path / "checkpoints").is_dir()


def parse(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    if source.is_dir:
        yield from _parse_store(source, problems)
        return
    yield from _parse_snapshot(source, problems)


# --- one snapshot file -------------------------------------------------------------------------


@dataclass
class Member:
    key: str
    raw: bytes
    line: int
    in_array: bool  # an element of the streamed array rather than a member of the object
    truncated: bool = False


def members(stream: IO[bytes], problems: Problems, *, array_key: str) -> Iterator[Member]:
    """The top-level object's members, in order, with `array_key`'s array given element by
    element. Strings (with escapes) are skipped whole, so brackets inside them do not count.

    What surrounds the object is reported, never dropped unseen: a `}` followed by a comma is a
    stray brace and the members after it are read; empty objects before the snapshot are
    skipped; any other text after the object ends the reading with a problem on its line."""
    buf = stream.read(READ_BLOCK)
    if buf.startswith(BOM):
        problems.add(1, "line", "byte-order mark at the start of the file (ignored)")
        buf = buf[3:]
    pos = 0
    line = 1  # line number at byte `line_pos`
    line_pos = 0
    depth = 0
    in_string = False
    string_start = -1
    key: str | None = None
    expect_key = False
    value_from = -1  # start of the current top-level value
    elem_from = -1  # start of the current element of the streamed array
    in_array = False
    # The array's opening line (`"steps": [`), should it come again inside the array.
    opening_line = re.compile(rb'"' + re.escape(array_key.encode()) + rb'"\s*:\s*\[')
    # How the array's elements open: a line `{` at their indentation, that of the last element
    # that ended where it should, else twice the opening line's (json.dumps' layout). Inside an
    # element every line is indented deeper, so such a line within one means it was left open.
    opening_indent: bytes | None = None
    element_indent: bytes | None = None
    started_indent: bytes | None = None  # the current element's, when it opened with such a line
    string_broken = False  # a string of the current element ended at a line break
    yielded = False  # any member so far: an empty object before the snapshot is skipped

    # The start of the line the buffer begins in, up to 256 bytes, for indentations; None when
    # longer (a one-line file) or unknown.
    carry: bytes | None = b""

    def refill() -> bool:
        nonlocal buf, pos, line, line_pos, value_from, elem_from, string_start, carry
        block = stream.read(READ_BLOCK)
        if not block:
            return False
        anchor = pos
        for mark in (value_from, elem_from, string_start):
            if mark >= 0:
                anchor = min(anchor, mark)
        carry = line_prefix(anchor)
        if carry is not None and len(carry) > 256:
            carry = None
        # Lines are counted up to `line_pos`; it may already be past the anchor (a line number
        # asked for inside the element being read), and is then kept, not counted again.
        if line_pos <= anchor:
            line += buf.count(b"\n", line_pos, anchor)
            line_pos = 0
        else:
            line_pos -= anchor
        buf = buf[anchor:] + block
        pos -= anchor
        if value_from >= 0:
            value_from -= anchor
        if elem_from >= 0:
            elem_from -= anchor
        if string_start >= 0:
            string_start -= anchor
        return True

    def line_at(index: int) -> int:
        nonlocal line, line_pos
        line += buf.count(b"\n", line_pos, index)
        line_pos = index
        return line

    def next_significant() -> int | None:
        """Where the next non-blank byte is, reading on as needed; None at the end."""
        nonlocal pos
        while True:
            match = _NON_SPACE.search(buf, pos)
            if match is not None:
                return match.start()
            pos = len(buf)
            if not refill():
                return None

    def line_prefix(index: int) -> bytes | None:
        """What precedes `index` on its line (None when that is not known)."""
        newline = buf.rfind(b"\n", 0, index)
        if newline >= 0:
            return buf[newline + 1 : index]
        return None if carry is None else carry + buf[:index]

    def indent_of(index: int) -> bytes | None:
        """The whitespace before `index` on its line when nothing else precedes it there."""
        prefix = line_prefix(index)
        return prefix if prefix is not None and not prefix.strip() else None

    def at_line_start(j: int, indent: bytes | None) -> bool:
        """Whether `indent` alone precedes `j` on its line (a slice compare on the hot path:
        every `{` and `}` inside a step asks)."""
        if indent is None:
            return False
        start = j - len(indent) - 1
        if start >= 0:
            return buf[start] == 0x0A and buf.startswith(indent, start + 1)
        return indent_of(j) == indent

    def left_open(j: int) -> bool:
        """Whether the `{` at `j`, inside the array but not at an element's start, opens the
        next element: it sits alone at the elements' indentation, and the element before cannot
        go on with it in JSON (a string in it ended at a line break, or a `{` cannot follow what
        comes before it). Where a `{` may go on a valid element laid out otherwise (after `:`,
        `[`, or a comma inside a nested list), it never cuts."""
        landmark = element_indent
        if landmark is None and opening_indent:
            landmark = opening_indent * 2
        if landmark is None or not at_line_start(j, landmark):
            return False
        if string_broken:
            return True
        # The last byte before the line's indentation (a step may be megabytes: never copied).
        last = j - len(landmark) - 2
        while last >= elem_from and buf[last] in b" \t\r\n":
            last -= 1
        if last < elem_from or buf[last] in b":[":
            return False
        # After a comma: only directly inside an object element (depth 3), where a member's key
        # must come next; deeper, it may be the next item of a list.
        return buf[last] != 0x2C or (depth == 3 and buf[_NON_SPACE.search(buf, elem_from).start()] == 0x7B)

    def piece(start: int, end: int) -> tuple[bytes, int] | None:
        chunk = buf[start:end]
        stripped = chunk.strip()
        if not stripped:
            return None
        offset = start + (len(chunk) - len(chunk.lstrip()))
        return stripped, line_at(offset)

    while True:
        if in_string:
            match = _INSIDE.search(buf, pos)
            if match is None:
                pos = len(buf)
                if not refill():
                    break
                continue
            j = match.start()
            if buf[j] == 0x0A:  # a raw line break: malformed whatever follows
                pos = j
                after = _NON_SPACE.search(buf, pos + 1)
                while after is None and refill():
                    after = _NON_SPACE.search(buf, pos + 1)
                if after is None or buf[after.start()] in b'"{}[]':
                    # Left unclosed: the next line opens with structure, so it is the document
                    # going on. (When text goes on, the string runs to its quote as before, and
                    # only its member is malformed.)
                    in_string, string_start = False, -1
                    string_broken = string_broken or in_array
                    continue
                pos += 1
                continue
            if buf[j] == 0x5C:  # backslash: skip the escaped character
                if j + 1 >= len(buf):
                    pos = j
                    if not refill():
                        break
                    continue
                pos = j + 2
                continue
            in_string = False
            pos = j + 1
            if depth == 1 and expect_key:
                try:
                    key = orjson.loads(buf[string_start : j + 1])
                except orjson.JSONDecodeError:
                    key = buf[string_start + 1 : j].decode("utf-8", "replace")
                expect_key = False
            string_start = -1
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
        if c == 0x22:  # quote
            in_string = True
            string_start = j
            continue
        if c == 0x7B or c == 0x5B:  # { [
            if depth == 0:
                if c != 0x7B:
                    problems.add(line_at(j), "line", "expected a JSON object (a SessionSnapshot)")
                    return
                expect_key = True
            elif depth == 1 and c == 0x5B and key == array_key and buf[value_from:j].strip() == b"":
                # Given element by element: the array itself is no member, and holding the
                # buffer from its start would keep the whole of it in memory.
                prefix = line_prefix(j)
                if prefix is not None:
                    opening_indent = _LEADING.match(prefix).group()
                in_array, value_from = True, -1
                elem_from = j + 1
            elif in_array and c == 0x7B:
                if depth == 2 and not buf[elem_from:j].strip():
                    started_indent = indent_of(j)
                elif left_open(j):
                    # The element before was left open (a brace too many, a string or a member
                    # never closed) or lacks its comma: it ends here.
                    started_indent = indent_of(j)
                    element = piece(elem_from, j)
                    if element is not None:
                        raw = element[0].rstrip(b",").rstrip()
                        if depth == 2 and not string_broken and _parses(raw):
                            problems.add(line_at(j), "line", "missing ',' between steps")
                        yielded = True
                        yield Member(array_key, raw, element[1], True)
                    elem_from, depth, string_broken = j, 2, False
            depth += 1
            continue
        if c == 0x5D or c == 0x7D:  # ] }
            if in_array and depth == 2 and c == 0x7D:
                # A `}` that closes nothing between the array's elements (an opening brace
                # lost): part of a malformed element, not the end of the snapshot object.
                continue
            if in_array and depth == 2 and c == 0x5D:
                element_indent = started_indent or element_indent
                element = piece(elem_from, j)
                if element is not None:
                    yielded = True
                    yield Member(array_key, element[0], element[1], True)
                in_array, elem_from = False, -1
            elif depth == 1 and c == 0x7D:
                if value_from >= 0 and key is not None:
                    value = piece(value_from, j)
                    if value is not None:
                        yielded = True
                        yield Member(key, value[0], value[1], False)
                value_from, key = -1, None
                brace_line = line_at(j)
                after = next_significant()
                if after is None:
                    return
                if buf[after] == 0x2C:
                    # `..., "duration_seconds": 1.0},` then `"steps": [...]`: a stray brace,
                    # with the rest of the snapshot after it.
                    problems.add(brace_line, "line", "stray '}' before the end of the snapshot object (ignored)")
                    pos = after
                    continue
                if buf[after] == 0x7B and not yielded:
                    problems.add(brace_line, "line", "empty JSON object before the snapshot (ignored)")
                    pos, depth = after, 0
                    continue
                problems.add(
                    line_at(after), "line",
                    "text after the end of the snapshot object (ignored): a snapshot file holds one object",
                )  # fmt: skip
                return
            depth -= 1
            continue
        if c == 0x2C:  # comma
            if in_array and depth == 2:
                element_indent = started_indent or element_indent
                started_indent, string_broken = None, False
                element = piece(elem_from, j)
                if element is not None:
                    yielded = True
                    yield Member(array_key, element[0], element[1], True)
                elem_from = j + 1
            elif depth == 1:
                if value_from >= 0 and key is not None:
                    value = piece(value_from, j)
                    if value is not None:
                        yielded = True
                        yield Member(key, value[0], value[1], False)
                value_from, key, expect_key = -1, None, True
            continue
        if c == 0x3A and depth == 1:  # colon
            value_from = j + 1
            continue
        if c == 0x3A and in_array and depth == 2:
            # The array's own opening line (`"steps": [`) again where an element belongs, on a
            # line of its own (found by fuzzing): skipped, or its `[` would take every step
            # after it in. Any other member there stays one malformed element.
            newline_before = buf.rfind(b"\n", elem_from, j)
            if newline_before >= 0:
                line_from, resume = newline_before + 1 - elem_from, pos - elem_from
                while (newline := buf.find(b"\n", pos)) < 0:
                    pos = len(buf)
                    if not refill():
                        break
                line_start = elem_from + line_from
                line_end = newline if newline >= 0 else len(buf)
                if opening_line.fullmatch(buf[line_start:line_end].strip()) and not buf[elem_from:line_start].strip():
                    problems.add(line_at(line_start), "line", "the array's opening line again inside it (skipped)")
                    pos = elem_from = line_end
                else:
                    pos = elem_from + resume
            continue
    # The file ended before the object closed.
    if in_array and elem_from >= 0:
        element = piece(elem_from, len(buf))
        if element is not None:
            yield Member(array_key, element[0], element[1], True, truncated=True)
    problems.add(line_at(len(buf)), "line", "file ends before the snapshot object is closed (truncated)")


def _parses(raw: bytes) -> bool:
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return True


def _load(member: Member, problems: Problems) -> Any:
    try:
        return orjson.loads(member.raw)
    except orjson.JSONDecodeError as exc:
        value = _load_with_nan(member.raw)
        if value is not None:
            return value
        try:
            member.raw.decode("utf-8")
        except UnicodeDecodeError as ude:
            problems.add(member.line, member.key, f"invalid UTF-8 at byte {ude.start}")
            return None
        why = "truncated (file ends inside it)" if member.truncated else f"malformed JSON: {exc}"
        problems.add(member.line, member.key, why)
        return None


def read_header(source: Source, problems: Problems, *, whole: bool = False) -> dict[str, Any]:
    """The members before `steps` (what the store needs to group snapshots by session); with
    `whole`, also those after it (a checkpoint's name is in its trailing metadata)."""
    header: dict[str, Any] = {}
    with source.open() as stream:
        for member in members(stream, problems, array_key="steps"):
            if member.in_array:
                if whole:
                    continue
                break
            value = _load(member, problems)
            if value is not None or member.raw == b"null":
                header[member.key] = value
    return header


class SnapshotSteps:
    """Turns one snapshot's members into the session's metadata and step events."""

    def __init__(self, meta: SessionMeta, problems: Problems) -> None:
        self.meta = meta
        self.problems = problems
        self.header: dict[str, Any] = {}
        self.cumulative = 0.0
        self.last_variables: Any = None
        self.last_memory: Any = None
        self.tail: dict[str, tuple[Any, Member]] = {}
        self.steps = 0
        self.duration: tuple[float, int] | None = None  # duration_seconds, checked, and its line

    def apply_header(self, key: str, value: Any, line: int) -> None:
        meta, problems = self.meta, self.problems
        self.header[key] = value
        if key == "session_id" and value:
            meta.source_session_id = str(value)
        elif key == "run_id" and value:
            meta.run_id = str(value)
        elif key in ("task", "environment", "model", "final_answer"):
            setattr(meta, key, str(text(value)))
        elif key == "completed":
            meta.completed = bool(value)
        elif key == "total_reward":
            total = number(value, "total_reward", line, problems)
            meta.total_reward = float(total) if total is not None else None
        elif key in ("total_tokens", "step", "total_steps"):
            number(value, key, line, problems)
        elif key == "duration_seconds":
            duration = number(value, key, line, problems)
            self.duration = (duration, line) if duration is not None else None
        elif key == "steps":  # an array arrives element by element, never as a member
            kind = "null" if value is None else type(value).__name__
            problems.add(line, key, f"expected an array of StepState objects, got {kind}: no steps read")
        elif key == "created_at":
            meta.ended_at = parse_timestamp(value)
            if meta.ended_at is None and value is not None:
                problems.add(line, key, f"not a timestamp: {str(value)[:40]!r}")
        if key in ("created_at", "duration_seconds") and meta.ended_at is not None and self.duration:
            # A snapshot states when it was taken and how long the run had been going.
            self._set_start(meta.ended_at, *self.duration)

    def _set_start(self, ended_at: datetime, duration: float, line: int) -> None:
        if duration < 0:
            self.problems.add(line, "duration_seconds", f"negative duration {duration}: start time left unset")
            return
        try:
            self.meta.started_at = ended_at - timedelta(seconds=duration)
        except OverflowError:
            # timedelta stops at 999,999,999 days and datetime at year 1.
            self.problems.add(
                line, "duration_seconds",
                f"{duration} seconds before created_at is before year 1: start time left unset",
            )  # fmt: skip

    def step_event(self, member: Member) -> CanonicalEvent | None:
        problems, line = self.problems, member.line
        value = _load(member, problems)
        if value is None:
            return None
        if type(value) is not dict:
            problems.add(line, "steps", f"expected a StepState object, got {type(value).__name__}")
            return None
        state: dict[str, Any] = {}
        for name, default in STEP_DEFAULTS.items():
            got = value.get(name, default)
            if name in ("reward", "cumulative_reward", "duration_ms", "tokens_used", "step"):
                if got is not default:
                    got = number(got, f"steps[{self.steps}].{name}", line, problems)
                    if got is None:
                        got = default
                if name in ("tokens_used", "step"):
                    got = int(got)
            elif name in ("raw_action", "raw_observation") and type(got) is not dict:
                got = mapping(got, f"steps[{self.steps}].{name}", line, problems)
            elif name in ("action_type", "action_code", "action_rationale", "output", "error"):
                got = text(got)
            state[name] = got
        state["success"] = bool(state["success"])
        variables = value.get("variables")
        memory = value.get("memory_notes")
        if variables is not None and type(variables) is not dict:
            variables = mapping(variables, f"steps[{self.steps}].variables", line, problems) or None
        if memory is not None and type(memory) is not list:
            problems.add(line, f"steps[{self.steps}].memory_notes", "expected an array")
            memory = None
        self.last_variables, self.last_memory = variables, memory
        self.steps += 1
        self.cumulative = state["cumulative_reward"]
        event = CanonicalEvent(
            kind=Kind.STEP_END,
            source_type="snapshot_step",
            raw=member.raw.decode("utf-8"),
            payload={k: v for k, v in value.items() if k not in STEP_DEFAULTS and k not in ("variables", "memory_notes")},
            timestamp=parse_timestamp(state["timestamp"]),
            line=line,
            step=state["step"],
            tokens=state["tokens_used"],
            reward=state["reward"],
            cumulative_reward=state["cumulative_reward"],
            failed=not state["success"],
            step_state=state,
            duration_ms=state["duration_ms"],
        )
        if variables is not None or memory is not None:
            event.state_change = StateChange(
                memory=memory, variables=variables, replace_variables=variables is not None
            )
        return event

    def final_state_event(self) -> CanonicalEvent | None:
        """The snapshot's own variables/memory, when they differ from its last step's."""
        values = {key: self.tail[key][0] for key in ("memory_notes", "variables") if key in self.tail}
        variables = values.get("variables")
        memory = values.get("memory_notes")
        if type(variables) is not dict:
            variables = None
        if type(memory) is not list:
            memory = None
        if (variables is None or variables == self.last_variables) and (
            memory is None or memory == self.last_memory
        ):
            return None
        parts = [f'"{key}": {self.tail[key][1].raw.decode("utf-8")}' for key in ("memory_notes", "variables") if key in self.tail]
        return CanonicalEvent(
            kind=Kind.STATE,
            source_type="snapshot_state",
            raw="{" + ", ".join(parts) + "}",
            payload={},
            timestamp=self.meta.ended_at,
            line=min(self.tail[key][1].line for key in ("memory_notes", "variables") if key in self.tail),
            state_change=StateChange(
                memory=memory, variables=variables, replace_variables=variables is not None
            ),
        )


def _parse_snapshot(
    source: Source,
    problems: Problems,
    *,
    checkpoints: list[CheckpointSpec] | None = None,
) -> Iterator[ParsedSession]:
    meta = SessionMeta(completed=False)
    reader = SnapshotSteps(meta, problems)
    stream = source.open()
    walk = members(stream, problems, array_key="steps")
    first_step: list[Member] = []
    # The fields before `steps` (all of them, in to_dict order) fill the metadata first.
    for member in walk:
        if member.in_array:
            first_step.append(member)
            break
        value = _load(member, problems)
        if value is not None or member.raw == b"null":
            reader.apply_header(member.key, value, member.line)
            if member.key in ("memory_notes", "variables", "metadata"):
                reader.tail[member.key] = (value, member)
    if not reader.header and not first_step:
        stream.close()
        return
    if not meta.run_id:
        meta.run_id = meta.source_session_id
    if checkpoints:
        meta.checkpoints.extend(checkpoints)

    def events() -> Iterator[CanonicalEvent]:
        try:
            for member in first_step:
                event = reader.step_event(member)
                if event is not None:
                    yield event
            for member in walk:
                if member.in_array:
                    event = reader.step_event(member)
                    if event is not None:
                        yield event
                    continue
                value = _load(member, problems)
                if value is None and member.raw != b"null":
                    continue
                reader.apply_header(member.key, value, member.line)
                if member.key in ("memory_notes", "variables", "metadata"):
                    reader.tail[member.key] = (value, member)
            final = reader.final_state_event()
            if final is not None:
                yield final
            metadata = reader.tail.get("metadata", (None, None))[0]
            if isinstance(metadata, dict) and metadata:
                meta.metadata = {"snapshot": metadata}
            meta.failed = not meta.completed
        finally:
            stream.close()

    yield ParsedSession(meta=meta, events=events())


# --- SessionStore folders ----------------------------------------------------------------------


class _PrefixedProblems(Problems):
    """Problems of one file of a folder: the field names the file."""

    def __init__(self, target: Problems, prefix: str) -> None:
        self.target = target
        self.prefix = prefix

    def add(self, line: int | None, field: str, message: str) -> None:
        self.target.add(line, f"{self.prefix}:{field}", message)

    def __len__(self) -> int:
        return len(self.target)


def _parse_store(source: Source, problems: Problems) -> Iterator[ParsedSession]:
    base = source.path
    by_session: dict[str, dict[str, list[tuple[Path, dict[str, Any]]]]] = {}
    for folder in ("snapshots", "checkpoints"):
        directory = base / folder
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            if not path.is_file() or path.name.startswith("."):
                continue
            rel = f"{folder}/{path.name}"
            file_problems = _PrefixedProblems(problems, rel)
            try:
                header = read_header(
                    Source(path=path, display_name=rel), file_problems, whole=folder == "checkpoints"
                )
            except OSError as exc:
                problems.add(None, rel, f"cannot read: {exc}")
                continue
            session_id = header.get("session_id")
            if not session_id:
                file_problems.add(None, "session_id", "not a SessionSnapshot (no session_id); file skipped")
                continue
            by_session.setdefault(str(session_id), {}).setdefault(folder, []).append((path, header))

    for session_id, files in sorted(by_session.items()):
        snapshots = files.get("snapshots", [])
        checkpoints = files.get("checkpoints", [])
        base_file = max(snapshots or checkpoints, key=_completeness)
        specs = [_checkpoint_spec(path, session_id, header) for path, header in checkpoints]
        folder = "snapshots" if snapshots else "checkpoints"
        rel = f"{folder}/{base_file[0].name}"
        yield from _parse_snapshot(
            Source(path=base_file[0], display_name=rel),
            _PrefixedProblems(problems, rel),
            checkpoints=specs,
        )


def _completeness(item: tuple[Path, dict[str, Any]]) -> tuple[float, str]:
    header = item[1]
    steps = header.get("total_steps")
    return (steps if type(steps) in (int, float) else -1, str(header.get("created_at") or ""))


def _checkpoint_spec(path: Path, session_id: str, header: dict[str, Any]) -> CheckpointSpec:
    metadata = header.get("metadata") if isinstance(header.get("metadata"), dict) else {}
    name = metadata.get("checkpoint_name") if metadata else None
    if not name:
        stem = path.stem
        name = stem[len(session_id) + 1 :] if stem.startswith(session_id + "_") else stem
    steps = header.get("total_steps")
    step_pos = int(steps) - 1 if type(steps) is int and steps > 0 else None
    return CheckpointSpec(
        name=str(name),
        step_pos=step_pos,
        created_at=parse_timestamp(header.get("created_at")),
        created_by="rlm-code",
        note=f"SessionStore checkpoint {path.name}",
    )
