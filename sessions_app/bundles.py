"""The evidence bundle: one signed .zip that holds a session, what reviewers said of it, and an
offline player, so it can be handed to someone outside the server and checked there.

    events.jsonl     every event with every stored column, in seq order: with chain.py alone
                     each link can be recomputed from genesis to the head
    original/<name>  the upload exactly as received (when its file is kept)
    comments.json    threads with their replies and revisions
    redactions.json  the values removed after the fact: seq, field, label, who, when (never the
                     value), as each redacted event's `redacted` field in events.jsonl says
    reviews.json     sign-offs, each with the chain head and seqs it covered
    index.html       the offline player (sessions_app/bundle_viewer/): data and code inlined
    manifest.json    the session's summary, the SHA-256 of every file above, the chain head,
                     who exported it and when, the server's public key
    manifest.sig     the Ed25519 signature of manifest.json's exact bytes (base64)

The zip is streamed as it is written (zipfile on an unseekable sink, members with data
descriptors): the events are read once, in keyset chunks, and each chunk goes into
events.jsonl at once and into a temporary file that becomes index.html's data block, so memory
stays flat whatever the session's length. Checking a bundle is sessions_app/bundle_reader.py.
"""

from __future__ import annotations

import hashlib
import tempfile
import zipfile
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import orjson
from django.db import connection
from django.utils import timezone

from . import signing
from .access import NotVisible
from .bundle_reader import FORMAT
from .chain import CONTENT_FIELDS, GENESIS_HASH, RECORDED_FIELDS, parse_redacted, recorded_values, removals
from .lookalikes import safe_file_name
from .models import Comment, Review, Session
from .replay.exports import event_chunks, export_original, original_name
from .replay.rows import _iso

# Level 1: a third of level 6's time for ~10 % more bytes, and the bundle's time is the budget
# (bench/bundle_bench.py).
COMPRESS_LEVEL = 1
VIEWER = Path(__file__).resolve().parent / "bundle_viewer"
# events.jsonl: what chain.py needs to recompute each link (the derived columns, running totals
# and pairing, are left out: they follow from these in seq order, as verification derives them).
LINE_FIELDS = ("seq", *RECORDED_FIELDS, *CONTENT_FIELDS, "salt", "redacted", "hash", "prev_hash")
# What the offline player reads of each event (an array per event, in this order).
VIEWER_COLUMNS = (
    "seq", "kind", "ts", "step", "tool", "is_error", "payload", "step_state", "cost_total", "tokens_total",
    "errors_total", "steps_total", "elapsed_ms",
)  # fmt: skip
_RUNNING = ("cost_total", "tokens_total", "errors_total", "steps_total", "elapsed_ms")

_RECORDED = slice(1, 1 + len(RECORDED_FIELDS))
_REST = slice(1 + len(RECORDED_FIELDS), len(LINE_FIELDS))
_PAYLOAD, _STEP_STATE = 1 + len(RECORDED_FIELDS), 1 + len(RECORDED_FIELDS) + CONTENT_FIELDS.index("step_state")
_KIND, _TS, _STEP, _TOOL, _IS_ERROR = (
    RECORDED_FIELDS.index(name) for name in ("kind", "ts", "step", "tool", "is_error")
)
_REDACTED = LINE_FIELDS.index("redacted")
_PRETTY = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS


def bundle_filename(session: Session) -> str:
    stem = session.source_session_id or f"session-{session.pk}"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)[:100] + ".replay-bundle.zip"


@dataclass(frozen=True)
class BundleStream:
    """A bundle as it is written, chunk by chunk (iterate it), and what it covers: its events
    and their chain's head, which its audit entry names."""

    events: int
    head: str
    chunks: Generator[bytes, None, None]

    def __iter__(self) -> Iterator[bytes]:
        return self.chunks

    def close(self) -> None:
        """What a response calls when its download ends, whole or cut short: the generator's
        temporary file and zip go at once, not when it is collected."""
        self.chunks.close()


def stream_bundle(*, session: Session, exported_by: str) -> BundleStream:
    """The bundle of `session` (see the module docstring). What it covers is read now, in the
    caller's view (NotVisible when the session was deleted since its lookup: a 404, where the
    stream raised once the download had begun)."""
    # Count and head are written together by ingest; a live session that grows while we read
    # is bundled as it was here.
    found = Session.objects.filter(pk=session.pk).values_list("event_count", "head_hash").first()
    if found is None:
        raise NotVisible(f"session {session.pk} not found")
    count, head = found
    return BundleStream(count, head, _bundle(session, count, head, exported_by=exported_by))


def _bundle(session: Session, count: int, head: str, *, exported_by: str) -> Iterator[bytes]:
    key = signing.server_key()
    exported_at = timezone.now()
    sink = _Sink()
    files: dict[str, str] = {}
    with (
        tempfile.TemporaryFile() as viewer_rows,
        zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL) as bundle,
    ):
        redactions: list[dict[str, Any]] = []
        files["events.jsonl"] = yield from _member(
            bundle, sink, "events.jsonl", _event_lines(session, count, viewer_rows, redactions)
        )
        name = original_name(session)
        if name is not None:
            member = original_member(name)
            files[member] = yield from _member(bundle, sink, member, export_original(session=session))
        # Of the events bundled: a comment or a sign-off made on a live session meanwhile, on an
        # event past `count`, is not (the bundle would not restore).
        comments, reviews = comment_threads(session, count), sign_offs(session, count)
        if not Session.objects.filter(pk=session.pk).exists():
            # Deleted since its events were read: its comments and sign-offs went with it, and
            # a bundle signed without them would say there were none (review).
            raise NotVisible(f"session {session.pk} was deleted while it was exported; the download is cut short")
        files["comments.json"] = yield from _member(
            bundle, sink, "comments.json", [orjson.dumps(comments, option=_PRETTY)]
        )
        files["reviews.json"] = yield from _member(
            bundle, sink, "reviews.json", [orjson.dumps(reviews, option=_PRETTY)]
        )
        files["redactions.json"] = yield from _member(
            bundle, sink, "redactions.json", [orjson.dumps(redactions, option=_PRETTY)]
        )
        manifest = {
            "format": FORMAT,
            "session": session_summary(session, count),
            "files": files,
            "chain": {"head": head if count else GENESIS_HASH, "first_seq": 0, "last_seq": count - 1},
            "exported_at": exported_at.isoformat(),
            "exported_by": exported_by,
            "public_key": key.public_key,
        }
        viewer = {"manifest": manifest, "fingerprint": key.fingerprint, "comments": comments, "reviews": reviews,
                  "redactions": redactions}  # fmt: skip
        files["index.html"] = yield from _member(bundle, sink, "index.html", _index_html(viewer, viewer_rows))
        manifest_bytes = orjson.dumps(manifest, option=_PRETTY)  # after index.html: `files` is complete
        yield from _member(bundle, sink, "manifest.json", [manifest_bytes])
        yield from _member(bundle, sink, "manifest.sig", [key.sign(manifest_bytes).encode("ascii") + b"\n"])
    yield sink.take()


class _Sink:
    """The unseekable file zipfile writes into; what it wrote is taken and yielded as we go."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


def _member(bundle: zipfile.ZipFile, sink: _Sink, name: str, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Write one member from `chunks`, yielding the zip's bytes as they come; its SHA-256."""
    digest = hashlib.sha256()
    # force_zip64: an unseekable zip must decide before the data whether sizes can pass 2 GiB.
    with bundle.open(name, "w", force_zip64=True) as out:
        for chunk in chunks:
            digest.update(chunk)
            out.write(chunk)
            if len(sink.parts) > 0:
                yield sink.take()
    return digest.hexdigest()


def _event_lines(
    session: Session, count: int, viewer_rows: IO[bytes], redactions: list[dict[str, Any]]
) -> Iterator[bytes]:
    """events.jsonl, a chunk of lines at a time; each chunk's rows for the viewer go to
    `viewer_rows` (JSON arrays joined by commas) on the way, and the redacted events' removals
    to `redactions` (redactions.json)."""
    first = True
    for rows in _event_chunks(session, count):
        lines, viewer = [], []
        for row in rows:
            if row[_REDACTED] is not None:
                try:
                    redactions.extend(removals(row[0], parse_redacted(row[_REDACTED])))
                except ValueError:
                    pass  # unreadable: verification names it, and the bundle's reader refuses the line
            # The recorded fields as chain.py hashes them (the same bytes from both databases).
            recorded = recorded_values(row[_RECORDED])
            lines.append(orjson.dumps(dict(zip(LINE_FIELDS, (row[0], *recorded, *row[_REST])))))
            viewer.append(orjson.dumps((
                row[0], recorded[_KIND], recorded[_TS], recorded[_STEP], recorded[_TOOL], recorded[_IS_ERROR],
                row[_PAYLOAD], row[_STEP_STATE], *row[len(LINE_FIELDS):],
            )))  # fmt: skip
        yield b"\n".join(lines) + b"\n"
        # In a <script> element only "</script" and "<!--" could end the data early; a "<"
        # can only be inside a JSON string, where \u003c is the same character.
        viewer_rows.write((b"" if first else b",") + b",".join(viewer).replace(b"<", b"\\u003c"))
        first = False


def _event_chunks(session: Session, count: int) -> Iterator[list[tuple]]:
    # SQLite's stored timestamp text is already the form chain.ts_text gives: read it as text
    # rather than have Django's converter parse it into a datetime that is formatted back.
    ts = "ts || ''" if connection.vendor == "sqlite" else "ts"
    return event_chunks(session, ", ".join(ts if name == "ts" else name for name in (*LINE_FIELDS, *_RUNNING)), count)


def _index_html(viewer: dict[str, Any], viewer_rows: IO[bytes]) -> Iterator[bytes]:
    """The offline player: the page, its style and script, and the data block in between."""
    page = (VIEWER / "index.html").read_text()
    head, tail = page.split("{{DATA}}")
    head = head.replace("{{CSS}}", (VIEWER / "viewer.css").read_text())
    tail = tail.replace("{{JS}}", (VIEWER / "viewer.js").read_text())
    yield head.encode()
    yield orjson.dumps(viewer).replace(b"<", b"\\u003c")[:-1] + b',"columns":' + orjson.dumps(VIEWER_COLUMNS)
    yield b',"events":['
    viewer_rows.seek(0)
    while chunk := viewer_rows.read(1 << 20):
        yield chunk
    yield b"]}"
    yield tail.encode()


# --- what the bundle says besides the events ----------------------------------------------------


def session_summary(session: Session, count: int) -> dict[str, Any]:
    """The manifest's `session`: who the session is and its totals (as the server holds them)."""
    return {
        "id": session.pk,
        "project": session.project.slug,
        "source_session_id": session.source_session_id,
        "run_id": session.run_id,
        "agent_id": session.agent_id,
        "task": session.task,
        "environment": session.environment,
        "model": session.model,
        "format": session.source_format,
        "status": str(session.status),
        "completed": session.completed,
        "started_at": _iso(session.started_at),
        "ended_at": _iso(session.ended_at),
        "final_answer": session.final_answer,
        "counts": {
            "events": count,
            "steps": session.step_count,
            "errors": session.error_count,
            "step_errors": session.step_error_count,
            "by_kind": session.kind_counts or {},
        },
        "totals": {
            "cost_usd": session.cost_usd,
            # No priced event: cost_usd is unpriced, not $0; some unpriced: it leaves those out.
            "priced_events": session.priced_events,
            "unpriced_events": session.unpriced_events,
            "tokens": session.tokens,
            "reward": session.reward,
            "elapsed_ms": session.elapsed_ms,
            "duration_seconds": session.duration_seconds,
        },
    }


def _at(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _comment(comment: Comment) -> dict[str, Any]:
    return {
        "id": comment.pk,
        "seq": comment.seq,
        "author": comment.author_name,
        "created_at": _at(comment.created_at),
        "edited_at": _at(comment.edited_at),
        "deleted_at": _at(comment.deleted_at),
        "body": "" if comment.deleted_at else comment.body,  # a deletion keeps its place only
        "restored_from": comment.restored_from,
        "redacted_at": _at(comment.redacted_at),
        "redacted_by": comment.redacted_by,
        "revisions": [
            {"body": r.body, "written_at": _at(r.written_at), "replaced_at": _at(r.replaced_at)}
            for r in comment.revisions.all()
        ]
        if not comment.deleted_at
        else [],
    }


def original_member(name: str) -> str:
    """The bundle's member holding an original upload named `name`: its file name alone, in
    `original/`, as any tool writes it where it says (bundle_reader refuses any other)."""
    return "original/" + safe_file_name(name.replace("\\", "/").rsplit("/", 1)[-1])


def comment_threads(session: Session, count: int | None = None) -> list[dict[str, Any]]:
    """comments.json: threads in seq order, each with its replies oldest first (on the first
    `count` events, when given)."""
    found = Comment.objects.filter(session=session)
    if count is not None:
        found = found.filter(seq__lt=count)
    found = found.order_by("seq", "created_at", "id").prefetch_related("revisions")
    threads: dict[int, dict[str, Any]] = {}
    replies: list[Comment] = []
    for comment in found:
        if comment.parent_id is None:
            threads[comment.pk] = _comment(comment) | {
                "resolved_at": _at(comment.resolved_at),
                "resolved_by": comment.resolved_by,
                "replies": [],
            }
        else:
            replies.append(comment)
    for reply in replies:
        if reply.parent_id in threads:
            threads[reply.parent_id]["replies"].append(_comment(reply))
    return list(threads.values())


def sign_offs(session: Session, count: int | None = None) -> list[dict[str, Any]]:
    """reviews.json: sign-offs, oldest first, each bound to the head and seqs it verified (of
    the first `count` events, when given)."""
    found = Review.objects.filter(session=session)
    if count is not None:
        found = found.filter(last_seq__lt=count)
    return [
        {
            "id": review.pk,
            "reviewer": review.reviewer_name,
            "verdict": review.verdict,
            "note": review.note,
            "chain_head": review.chain_head,
            "chain_valid": review.chain_valid,
            "first_seq": review.first_seq,
            "last_seq": review.last_seq,
            "created_at": _at(review.created_at),
            "restored_from": review.restored_from,
            "redacted_at": _at(review.redacted_at),
            "redacted_by": review.redacted_by,
        }
        for review in found.order_by("created_at", "id")
    ]
