"""Reading and checking an evidence bundle (sessions_app/bundles.py writes them) with no database
and no server: zipfile, cryptography (through signing.py) and chain.py only.

`read_bundle(path, key=...)` checks, in this order, and raises BundleError naming the first
thing that does not match:

1. the signature of manifest.json's exact bytes (manifest.sig), against the pinned key when one
   is given, else against the key the manifest carries (which proves only that the bundle is
   whole, not who made it: `Bundle.pinned` says which);
2. every file's SHA-256 against the manifest, and no file missing or extra;
3. the event chain: each line of events.jsonl, from genesis, recomputed with chain.link_hash
   over its recorded fields and the commitments of its content, linked to the line before,
   ending at the manifest's `chain.head`. A field whose value was removed after the fact counts
   by the commitment its line's `redacted` record kept, and redactions.json must list exactly
   the removals those records name (seq, field, label).

What it returns gives an importer everything: the manifest, the session's summary, the events
(an iterator, read again from the zip each time), comments, sign-offs and the original file.
"""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import ijson
import orjson

from . import signing
from .chain import (
    CONTENT_FIELDS,
    GENESIS_HASH,
    RECORDED_FIELDS,
    edited_after_redaction,
    link_hash,
    parse_redacted,
    recorded_values,
    removals,
    stored_commitments,
)
from .formats.fields import json_kind
from .formats.json_documents import read_events
from .lookalikes import MAX_FILE_NAME_BYTES, hiding_characters, safe_file_name

FORMAT = "replay-bundle/1"
# The two members the manifest cannot list (it is what they sign), and the files it must.
SIGNED_BY_MANIFEST = ("manifest.json", "manifest.sig")
REQUIRED_FILES = ("events.jsonl", "comments.json", "reviews.json", "index.html")
_READ = 1 << 20
# What a member may hold uncompressed before it is read (its declared size, which zipfile never
# reads past): a small zip must not inflate into gigabytes of memory. The lists are read an entry
# at a time (ijson) and hold at most MAX_ENTRIES: a megabyte of `{},` is a third of a million
# objects, some 40 times its size in memory.
MEMBER_CAPS = {"manifest.json": 1 << 20, "manifest.sig": 4096, "comments.json": 64 << 20, "reviews.json": 16 << 20,
               "redactions.json": 256 << 20}  # fmt: skip
MAX_ENTRIES = {"comments.json": 100_000, "reviews.json": 10_000}
# Objects and lists in all (a comment is one, with its revisions a few more; a redaction entry
# one), and how deep: Replay writes them three deep.
MAX_CONTAINERS = {"comments.json": 600_000, "reviews.json": 20_000}
MAX_DEPTH = 16
LINE_CAP = 64 << 20  # one line of events.jsonl
# Removals (a removed value's labels, one per rule or redaction that removed it): on one event,
# and in all. A session redacted in every event's payload and record lists two an event.
MAX_REMOVALS_AN_EVENT = 100
MAX_REMOVALS = 1_000_000
_INT64 = (-(1 << 63), (1 << 63) - 1)
_TEXT_LIMITS = {"kind": 32, "source_type": 64, "agent_id": 200, "parent_id": 200, "child_id": 200, "tool": 200,
                "pair_id": 200}  # fmt: skip
_INTS = ("line", "step", "depth", "tokens")
_FLOATS = ("duration_ms", "cost_usd", "reward", "cumulative_reward")


class BundleError(Exception):
    """The bundle is not what its manifest and signature say; the message names where."""


@dataclass
class Bundle:
    path: Path
    manifest: dict[str, Any]
    public_key: str  # base64, the key the signature was checked against
    fingerprint: str
    pinned: bool  # checked against a key the caller gave, not only the one inside the bundle
    signature_valid: bool
    files_valid: bool
    chain_valid: bool
    events_checked: int
    comments: list[dict[str, Any]]
    reviews: list[dict[str, Any]]
    # The values removed after the fact: seq, field, label, by, at (redactions.json).
    redactions: list[dict[str, Any]]

    @property
    def session(self) -> dict[str, Any]:
        return self.manifest["session"]

    @property
    def chain(self) -> dict[str, Any]:
        return self.manifest["chain"]

    @property
    def original_name(self) -> str | None:
        """The original upload's name (without `original/`), when the bundle holds it."""
        for name in self.manifest["files"]:
            if name.startswith("original/"):
                return name.removeprefix("original/")
        return None

    def open_original(self) -> IO[bytes]:
        """The original upload as a binary stream (close it, or use `with`)."""
        name = self.original_name
        if name is None:
            raise BundleError("the bundle holds no original file")
        archive = zipfile.ZipFile(self.path)
        stream = archive.open(f"original/{name}")
        stream_close = stream.close

        def close() -> None:
            stream_close()
            archive.close()

        stream.close = close  # type: ignore[method-assign]
        return stream

    def events(self) -> Iterator[dict[str, Any]]:
        """The events of events.jsonl in seq order, one dict a line, every stored column."""
        with zipfile.ZipFile(self.path) as archive, archive.open("events.jsonl") as stream:
            for line in stream:
                yield orjson.loads(line)


def read_bundle(path: str | Path, *, key: str | None = None, max_bytes: int | None = None) -> Bundle:
    """Check the bundle at `path` (see the module docstring) and open it for reading.
    `key`: the public key (base64 of its raw 32 bytes) it must be signed by. `max_bytes`: a
    server's upload limit, which the members' uncompressed sizes must fit (`_check_sizes`) before
    any is read, so a small zip cannot make it read, hash or write out more."""
    path = Path(path)
    try:
        return _read_bundle(path, key, max_bytes)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as error:
        # A member whose bytes do not match its entry (a size it lied about, a damaged stream), an
        # unknown compression method, an encrypted member: none Replay writes.
        raise BundleError(f"a damaged or unreadable zip member ({error})") from None


# What a bundle's members may hold uncompressed, as multiples of the server's upload limit: its
# original at most one upload, the rest (events.jsonl, about three times the source it came
# from, the offline viewer, the lists) at most four, so a session imported here round-trips.
_OTHERS_PER_UPLOAD = 4


def _check_sizes(archive: zipfile.ZipFile, max_bytes: int) -> None:
    """Before any member is read: what they declare (zipfile never reads past it) within limits."""
    original = sum(i.file_size for i in archive.infolist() if i.filename.startswith("original/"))
    others = sum(i.file_size for i in archive.infolist() if not i.filename.startswith("original/"))
    if original > max_bytes:
        raise BundleError(f"original/: {original:,} bytes uncompressed, more than this server's upload limit of "
                          f"{max_bytes:,} (REPLAY_MAX_UPLOAD_MB)")  # fmt: skip
    if others > _OTHERS_PER_UPLOAD * max_bytes:
        raise BundleError(f"its files hold {others:,} bytes uncompressed besides the original, more than "
                          f"{_OTHERS_PER_UPLOAD} times this server's upload limit of {max_bytes:,} "
                          "(REPLAY_MAX_UPLOAD_MB)")  # fmt: skip


def _read_bundle(path: Path, key: str | None, max_bytes: int | None) -> Bundle:
    if path.is_dir():
        raise BundleError(f"{path.name or path}: a folder, not a bundle: give the bundle's .zip file itself")
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as error:
        raise BundleError(f"{path.name}: not a readable zip file ({error})") from None
    with archive:
        # A folder's own entry ("original/", as `zip -r` writes one for each folder) holds no
        # bytes and is no file of the bundle: a re-zipped untouched bundle still verifies.
        listed = Counter(info.filename for info in archive.infolist() if not (info.is_dir() and info.file_size == 0))
        if folders := sorted(info.filename for info in archive.infolist() if info.is_dir() and info.file_size):
            raise BundleError(f"{folders[0]!r}: a folder's entry holding bytes (an unzip tool shows a folder)")
        names = set(listed)
        if twice := sorted(name for name, count in listed.items() if count > 1):
            # Python reads a name's last copy, an unzip tool may show the first: what was checked
            # would not be what a reader opens.
            raise BundleError(f"{twice[0]}: in the bundle more than once")
        for name in sorted({info.filename for info in archive.infolist()}):
            if why := _unsafe_name(name.removesuffix("/")):  # a folder's entry ends in "/"
                raise BundleError(f"{name!r}: {why}")
        for needed in SIGNED_BY_MANIFEST:
            if needed not in names:
                raise BundleError(f"{needed}: missing from the bundle")
        for info in archive.infolist():
            cap = MEMBER_CAPS.get(info.filename)
            if cap is not None and info.file_size > cap:
                raise BundleError(f"{info.filename}: {info.file_size:,} bytes uncompressed, more than {cap:,}")
        if max_bytes is not None:
            _check_sizes(archive, max_bytes)
        manifest_bytes = archive.read("manifest.json")
        signature = archive.read("manifest.sig").decode("ascii", "replace")
        manifest = _manifest(manifest_bytes)
        public_key, fingerprint = _check_signature(manifest, manifest_bytes, signature, key)
        _check_files(archive, manifest, names)
        events, removed = _check_chain(archive, manifest)
        redactions = _check_redactions(archive, names, removed)
        comments = _json_list(archive, "comments.json")
        reviews = _json_list(archive, "reviews.json")
    return Bundle(
        path=path, manifest=manifest, public_key=public_key, fingerprint=fingerprint, pinned=key is not None,
        signature_valid=True, files_valid=True, chain_valid=True, events_checked=events, comments=comments,
        reviews=reviews, redactions=redactions,
    )  # fmt: skip


def _unsafe_name(name: str) -> str:
    """Why a member's name is none a bundle holds ("" when it is): Replay writes its files at the
    top and the original as `original/<its file name>`. Nothing is ever written out under a
    member's name, but an unzip tool would: a name climbing out of its folder, or hiding
    characters, is refused rather than carried on."""
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or ".." in parts or "." in parts or "" in parts:
        return "not a plain path inside the bundle"
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "original"):  # (a folder: "original" alone)
        return "a folder no bundle has (only original/ holds a file)"
    if hidden := hiding_characters(name):
        return f"characters that hide or turn what a reader sees ({hidden})"
    if any(len(part.encode()) > MAX_FILE_NAME_BYTES for part in parts):
        return f"a name over {MAX_FILE_NAME_BYTES} bytes"
    if any(safe_file_name(part) != part for part in parts):
        return "a character a tool may read as part of a path (a colon, or a slash or dot that is not one)"
    return ""


def _manifest(data: bytes) -> dict[str, Any]:
    try:
        manifest = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise BundleError(f"manifest.json: not JSON ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"manifest.json: not a {FORMAT} manifest")
    for field, kind, said in (("files", dict, "an object"), ("chain", dict, "an object"),
                              ("session", dict, "an object"), ("public_key", str, "text")):  # fmt: skip
        if not isinstance(manifest.get(field), kind):
            raise BundleError(f"manifest.json: field {field!r} is missing or not {said}")
    return manifest


def _check_signature(manifest: dict[str, Any], data: bytes, signature: str, key: str | None) -> tuple[str, str]:
    embedded = manifest["public_key"]
    try:
        public, raw = signing.public_key_from_text(key if key is not None else embedded)
    except ValueError as error:
        where = "--key" if key is not None else "manifest.json: field 'public_key'"
        raise BundleError(f"{where}: not an Ed25519 public key: it {error}") from None
    fingerprint = signing.fingerprint(raw)
    if signing.verify(public, signature, data):
        return key if key is not None else embedded, fingerprint
    if key is None:
        raise BundleError(
            "manifest.sig: not a signature of manifest.json by the key the manifest names "
            f"({signing.grouped(fingerprint)}): manifest.json or manifest.sig was changed"
        )
    try:
        named = signing.grouped(signing.fingerprint(signing.public_key_from_text(embedded)[1]))
    except ValueError:
        named = "none"
    raise BundleError(
        f"manifest.sig: not a signature of manifest.json by the pinned key {signing.grouped(fingerprint)} "
        f"(the manifest names the key {named})"
    )


def _check_files(archive: zipfile.ZipFile, manifest: dict[str, Any], names: set[str]) -> None:
    listed = manifest["files"]
    for name in REQUIRED_FILES:
        if name not in listed:
            raise BundleError(f"manifest.json: lists no {name}")
    for name in listed:
        if name not in names:
            raise BundleError(f"{name}: listed in manifest.json but missing from the bundle")
    extra = sorted(names - set(listed) - set(SIGNED_BY_MANIFEST))
    if extra:
        raise BundleError(f"{extra[0]}: in the bundle but not listed in manifest.json")
    for name, expected in listed.items():
        digest = hashlib.sha256()
        with archive.open(name) as stream:
            while chunk := stream.read(_READ):
                digest.update(chunk)
        if digest.hexdigest() != expected:
            where = ""
            if name == "events.jsonl":
                # Say which event: the chain walk finds the first line whose link no longer holds.
                try:
                    _check_chain(archive, manifest)
                except BundleError as error:
                    where = f"; {error}"
            raise BundleError(f"{name}: its SHA-256 does not match manifest.json (the file was changed){where}")


def _check_chain(archive: zipfile.ZipFile, manifest: dict[str, Any]) -> tuple[int, set[tuple[int, str, str]]]:
    """Walk events.jsonl from genesis; the number of events and the removals its lines' `redacted`
    records name (seq, field, label) on success."""
    removed: set[tuple[int, str, str]] = set()
    chain = manifest["chain"]
    expected_seq = chain.get("first_seq", 0)
    prev = GENESIS_HASH
    line_number = 0
    with archive.open("events.jsonl") as stream:
        for line in iter(lambda: stream.readline(LINE_CAP + 1), b""):
            line_number += 1
            if len(line) > LINE_CAP:
                raise BundleError(f"events.jsonl line {line_number}: longer than {LINE_CAP:,} bytes")
            event = _event_line(line, line_number)
            seq = event["seq"]
            where = f"events.jsonl line {line_number} (seq {seq})"
            try:
                recorded = recorded_values([event[name] for name in RECORDED_FIELDS])
                contents = [event[name] for name in CONTENT_FIELDS]
                # Each is JSON text as stored (or null): a list there reached the hashing and
                # stopped the import with a traceback.
                for name, value in zip(CONTENT_FIELDS, contents):
                    if value is not None and type(value) is not str:
                        raise BundleError(
                            f"{where}: field {name}: not text (the event's stored JSON), got {json_kind(value)}"
                        )
                stored_prev, stored_hash, salt = event["prev_hash"], event["hash"], event["salt"]
                # A bundle of events with removed values (chain.redact_field) carries their
                # commitments in `redacted`; bundles written before it have no such field.
                commits = stored_commitments(salt, event.get("redacted"), contents)
            except (TypeError, ValueError) as error:
                # A value of the wrong type stopped the hashing: named by its field, as the
                # check after the link would name it, never by Python's words.
                raise BundleError(f"{where}: {_shape_problem(event, error)}") from None
            if event.get("redacted") is not None:
                try:
                    form = parse_redacted(event["redacted"])
                except ValueError as error:
                    raise BundleError(f"{where}: field redacted: not a record of removed values ({error})") from None
                found = removals(seq, form)
                if len(found) > MAX_REMOVALS_AN_EVENT or len(removed) + len(found) > MAX_REMOVALS:
                    # Each kept until redactions.json is checked: labels by the thousand on
                    # every line of a small zip had taken gigabytes.
                    raise BundleError(f"{where}: field redacted: more removals than a bundle may list")
                removed.update((entry["seq"], entry["field"], entry["label"]) for entry in found)
                edited = edited_after_redaction(form, contents)
                if edited:
                    raise BundleError(f"{where}: field {edited[0]}: the text its redaction left was changed since")
            if seq != expected_seq:
                raise BundleError(f"{where}: field seq: expected seq {expected_seq} (an event missing or moved)")
            if stored_prev != prev:
                raise BundleError(f"{where}: field prev_hash: does not point at the previous event's hash")
            if link_hash(prev, seq, recorded, commits) != stored_hash:
                raise BundleError(
                    f"{where}: field hash: the event's recorded fields or content "
                    f"({', '.join(CONTENT_FIELDS)}) do not hash to its link (the event was changed)"
                )
            try:
                check_event_shape(event)  # after the link: a changed event is named as changed
            except (ValueError, TypeError, orjson.JSONDecodeError) as error:
                raise BundleError(f"{where}: field {error}") from None
            prev, expected_seq = stored_hash, seq + 1
    if expected_seq - 1 != chain.get("last_seq"):
        raise BundleError(
            f"events.jsonl: ends at seq {expected_seq - 1}, manifest.json's chain.last_seq is {chain.get('last_seq')}"
        )
    if prev != chain.get("head"):
        raise BundleError("events.jsonl: the last event's hash is not manifest.json's chain.head")
    return line_number, removed


_LINE_FIELDS = ("seq", *RECORDED_FIELDS, *CONTENT_FIELDS, "prev_hash", "hash", "salt")


def _event_line(line: bytes, line_number: int) -> dict[str, Any]:
    """The line's event: one JSON object holding every field a link is made of, its seq an
    integer; else a BundleError naming the line and the field."""
    where = f"events.jsonl line {line_number}"
    try:
        if line.count(b"{") + line.count(b"[") > _BRACES_CHEAP and _nested(line):
            raise BundleError(f"{where}: not an event line (values nested in it)")
        event = orjson.loads(line)
    except (orjson.JSONDecodeError, ijson.JSONError) as error:
        raise BundleError(f"{where}: not JSON ({error})") from None
    if not isinstance(event, dict):
        raise BundleError(f"{where}: not an event (a JSON object), got {json_kind(event)}")
    for name in _LINE_FIELDS:
        if name not in event:
            raise BundleError(f"{where}: field {name}: missing")
    if not _is_int(event["seq"]) or event["seq"] < 0:
        raise BundleError(f"{where}: field seq: not a non-negative integer, got {event['seq']!r:.40}")
    return event


def _shape_problem(event: dict[str, Any], error: Exception) -> str:
    """What is wrong with an event line whose values could not be hashed, by field."""
    try:
        check_event_shape(event)
    except (ValueError, TypeError, orjson.JSONDecodeError) as problem:
        return f"field {problem}"
    return f"not an event line ({error})"


# An event line is one flat object: its content is JSON *text*. Counting brackets is a bound (they
# may stand in strings too); past it, a parse that builds nothing counts what is really nested
# before orjson builds it: 63 MiB of `[{},...]` on one line had taken 2 GB.
_BRACES_CHEAP = 10_000
_LINE_CONTAINERS = 16


def _nested(line: bytes) -> bool:
    def deeper(events: Iterator[tuple[str, Any]]) -> bool:
        containers = 0
        for kind, _value in events:
            if kind in ("start_map", "start_array"):
                containers += 1
                if containers > _LINE_CONTAINERS:
                    return True
        return False

    return read_events(line, deeper)


def _check_redactions(
    archive: zipfile.ZipFile, names: set[str], removed: set[tuple[int, str, str]]
) -> list[dict[str, Any]]:
    """redactions.json against what the event lines' records say was removed: the same (seq,
    field, label) entries, no more and no fewer. A bundle written before redactions existed has
    no such file, and then no line may be redacted."""
    if "redactions.json" not in names:
        if removed:
            seq, name, _label = min(removed)
            raise BundleError(f"redactions.json: missing, but events.jsonl's event {seq} has its {name} removed")
        return []
    # Each entry checked as it is read, so what is held is never more than the events name.
    listed: list[dict[str, Any]] = []
    entries: set[tuple[int, str, str]] = set()
    for index, entry in enumerate(_list_items(archive, "redactions.json", 2 * len(removed) + 10)):
        if not isinstance(entry, dict) or not _is_int(entry.get("seq")) or not isinstance(entry.get("field"), str) \
                or not isinstance(entry.get("label"), str):  # fmt: skip
            raise BundleError(f"redactions.json: entry {index} is not a seq, field and label")
        found = (entry["seq"], entry["field"], entry["label"])
        if found in entries:
            raise BundleError("redactions.json: lists a removal twice")
        if found not in removed:
            raise BundleError(
                f"redactions.json: lists the removal of {found[2]!r} from event {found[0]}'s {found[1]}, "
                "unlike events.jsonl"
            )
        entries.add(found)
        listed.append(entry)
    if entries != removed:
        seq, name, label = min(removed - entries)
        raise BundleError(
            f"redactions.json: does not list the removal of {label!r} from event {seq}'s {name}, unlike events.jsonl"
        )
    return listed


def check_event_shape(event: Any) -> None:
    """Every column of an event line has the type and form its column and the pages expect
    (a ValueError names the field): a bundle is hashed by whoever signed it, so its lines are
    input like any other. Content fields must be the writer's own JSON text, which pages splice
    into responses as it is."""
    if not isinstance(event, dict):
        raise ValueError("the line is not an object")
    if not _is_int(event.get("seq")) or event["seq"] < 0:
        raise ValueError("seq: not a non-negative integer")
    for name, limit in _TEXT_LIMITS.items():
        value = event.get(name)
        if not isinstance(value, str) or len(value) > limit or "\x00" in value:
            raise ValueError(f"{name}: not a text of at most {limit} characters")
    ts = event.get("ts")
    if ts is not None:
        if not isinstance(ts, str):
            raise ValueError("ts: not a timestamp")
        try:
            datetime.fromisoformat(ts)
        except ValueError:
            raise ValueError("ts: not a timestamp") from None
    for name in _INTS:
        value = event.get(name)
        if value is not None and not (_is_int(value) and _INT64[0] <= value <= _INT64[1]):
            raise ValueError(f"{name}: not a 64-bit integer")
    for name in _FLOATS:
        value = event.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"{name}: not a number")
    for name in ("cost_unpriced", "is_error"):
        if not isinstance(event.get(name), bool):
            raise ValueError(f"{name}: not true or false")
    if event.get("failed") is not None and not isinstance(event["failed"], bool):
        raise ValueError("failed: not true, false or null")
    for name, must_be_object in (("payload", False), ("step_state", True), ("state_change", True)):
        text = event.get(name)
        if text is None and name != "payload":
            continue
        value: Any = _NOT_JSON
        if isinstance(text, str):
            try:
                value = orjson.loads(text)
            except orjson.JSONDecodeError:
                pass
        if value is _NOT_JSON or orjson.dumps(value).decode() != text:
            raise ValueError(f"{name}: not JSON text as Replay writes it")
        if must_be_object and not isinstance(value, dict):
            raise ValueError(f"{name}: not a JSON object")
    if event.get("raw") is not None and not isinstance(event["raw"], str):
        raise ValueError("raw: not text")
    salt = event.get("salt")
    if event.get("redacted") is not None:
        if not isinstance(event["redacted"], str) or salt != "":
            raise ValueError("redacted: an event with removed values has their record as text and no salt")
    elif not isinstance(salt, str) or len(salt) != 32 or any(c not in "0123456789abcdef" for c in salt):
        raise ValueError("salt: not 32 hexadecimal digits")


_NOT_JSON = object()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_list(archive: zipfile.ZipFile, name: str) -> list[Any]:
    """A member holding a JSON list, at most MAX_ENTRIES[name] entries."""
    most = MAX_ENTRIES[name]
    items: list[Any] = []
    for item in _list_items(archive, name):
        if len(items) == most:
            raise BundleError(f"{name}: more than {most:,} entries")
        items.append(item)
    return items


def _list_items(archive: zipfile.ZipFile, name: str, most_containers: int | None = None) -> Iterator[Any]:
    """The entries of a member holding a JSON list, one at a time (ijson), never the whole."""
    most = MAX_CONTAINERS[name] if most_containers is None else most_containers
    with archive.open(name) as stream:
        try:
            yield from _entries(ijson.basic_parse(stream, use_float=True), name, most)
        except ijson.JSONError as error:
            raise BundleError(f"{name}: not readable JSON ({str(error).splitlines()[0]})") from None
        except UnicodeDecodeError:  # a lone surrogate escape ("\udfff"), which yajl passes on
            raise BundleError(f"{name}: not readable JSON (a text holding a lone surrogate escape, which no UTF-8 "
                              "text holds)") from None  # fmt: skip


_OPENS = frozenset({"start_map", "start_array"})
_CLOSES = frozenset({"end_map", "end_array"})


def _entries(events: Iterator[tuple[str, Any]], name: str, most: int) -> Iterator[Any]:
    """The entries of a list, built from parse events that name no paths, refused as soon as it
    nests deeper than MAX_DEPTH or holds more than `most` objects and lists in all (one entry of
    a million `{}` is one entry). ijson's path-naming parser makes every event of a read buffer
    with its whole path before handing any over: a list 100,000 deep (27 KB) took 10 GB before
    a guard on those events could see the first one."""
    first = next(events, None)
    if first is None or first[0] != "start_array":
        raise BundleError(f"{name}: not a list")
    depth, containers = 1, 1
    builder: ijson.ObjectBuilder | None = None
    for event, value in events:
        if event in _OPENS:
            depth += 1
            containers += 1
            if depth > MAX_DEPTH:
                raise BundleError(f"{name}: nested deeper than {MAX_DEPTH}")
            if containers > most:
                raise BundleError(f"{name}: more than {most:,} objects and lists")
            if builder is None:
                builder = ijson.ObjectBuilder()
        elif event in _CLOSES:
            depth -= 1
            if not depth:  # the list's own end
                deque(events, maxlen=0)  # anything after it is an error (ijson raises it)
                return
        if builder is None:
            yield value  # an entry that is no object or list
            continue
        builder.event(event, value)
        if depth == 1:  # the entry just ended
            yield builder.value
            builder = None
