"""Accepting an uploaded file: keep the original under REPLAY_DATA_DIR and create its ImportJob.
The API (POST /api/imports) and the dashboard's upload form both call `accept_upload`, and queue
the import (jobs.enqueue_import, in the job's transaction); it runs in a worker (sessions_app/jobs.py).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from django.conf import settings
from django.core.files.move import file_move_safe
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone

from replay_site.files import private_folder

from ..formats import GZIP_MAGIC, Source, known_formats
from ..models import ImportJob, Project
from ..redaction import LineTooLong, Redactor
from .quotas import check_upload

logger = logging.getLogger(__name__)

# The extensions we keep on the stored copy (decoration only: formats are detected by content).
_KEPT_SUFFIXES = (".jsonl.gz", ".ndjson.gz", ".json.gz", ".jsonl", ".ndjson", ".json", ".gz")
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f]")


class UploadRejected(Exception):
    """An upload refused before any job exists; `status` is the HTTP status to answer."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UploadTooLarge(UploadRejected):
    status = 413


def max_upload_bytes() -> int:
    return int(settings.MAX_UPLOAD_MB * 1024 * 1024)


def too_large_message(size: int | None = None, *, what: str = "upload") -> str:
    limit = f"{settings.MAX_UPLOAD_MB:g} MB"
    stated = f" ({size / 1024 / 1024:.1f} MB)" if size is not None else ""
    return f"The {what}{stated} exceeds the limit of {limit} (REPLAY_MAX_UPLOAD_MB)."


# What a multipart body may hold besides the file (its boundaries, headers and other fields).
MULTIPART_ENVELOPE = 64 * 1024


def check_declared_size(content_length: str | int | None) -> int:
    """Refuse a request body larger than the limit before reading any of it; its declared
    length (0 when it declares none)."""
    try:
        length = max(0, int(content_length or 0))
    except (TypeError, ValueError):
        return 0
    if length > max_upload_bytes() + MULTIPART_ENVELOPE:
        raise UploadTooLarge(too_large_message(length))
    return length


@contextmanager
def accept_upload(
    *,
    uploaded_file: UploadedFile,
    project: Project,
    format: str = "",
    created_by: str = "",
    replace: bool = False,
) -> Iterator[ImportJob]:
    """Keep the uploaded file and create its job, in one transaction with what the caller does
    with the job in the block (queues it, logs it): all or none of it. Raises UploadRejected /
    UploadTooLarge, or quotas.QuotaExceeded when the project's quotas leave no room for it.

    Whatever fails before the commit, the commit too, takes the kept file with it (a file
    without a job is one nothing would ever delete); an upload logged nowhere is no upload. What
    fails after it (a callback of the commit) leaves the committed job its file. The file is kept
    before the transaction begins: moved across file systems it is copied, up to the upload
    limit, and SQLite's write lock, which the transaction takes, would have held every other
    writer meanwhile. The stored name is generated (never derived from the client's file name);
    the client's name is kept on the job for display only.
    """
    stored = _kept_upload(uploaded_file, project, format)
    committed = False

    def on_commit() -> None:
        nonlocal committed
        committed = True

    try:
        with transaction.atomic():
            # The first of the commit's callbacks: any other one that raises comes after it.
            transaction.on_commit(on_commit)
            yield _upload_job(stored, uploaded_file, project, format, created_by, replace)
    except BaseException:
        if not committed:
            stored.unlink(missing_ok=True)
        raise


def _kept_upload(uploaded_file: UploadedFile, project: Project, format: str) -> Path:
    """The uploaded file checked (its format, size and the project's quotas) and kept: where."""
    if format and format not in known_formats():
        known = ", ".join(sorted(known_formats()))
        raise UploadRejected(f"Unknown format {format!r}; known formats: {known}.")
    size = uploaded_file.size or 0
    if size > max_upload_bytes():
        raise UploadTooLarge(too_large_message(size))
    if size == 0:
        raise UploadRejected("The uploaded file is empty.")
    stated = _checked_gzip_size(uploaded_file)
    # A gzip is stored as what it holds (its sessions' records): its stated size, a floor for
    # that, is what the quota is checked against (a 100 KiB gzip of 28 MiB passed a quota
    # with 6 MiB left, security sweep; jobs._import checks the whole once decompressed).
    # QuotaExceeded: 413 past the bytes, 409 the sessions.
    check_upload(project=project, size=max(size, stated))
    return _store(uploaded_file, display_name(uploaded_file.name or "upload"))


def _upload_job(
    stored: Path, uploaded_file: UploadedFile, project: Project, format: str, created_by: str, replace: bool
) -> ImportJob:
    return ImportJob.objects.create(
        project=project,
        original_name=display_name(uploaded_file.name or "upload"),
        stored_path=str(stored),
        requested_format=format,
        replace=replace,
        bytes_total=uploaded_file.size or 0,
        created_by=created_by[:150],
    )


def keep_local_file(
    *, path: Path, project: Project, format: str = "", created_by: str = "", replace: bool = False
) -> ImportJob:
    """Keep a copy of a file given on this machine (the command line, the demo) as an upload is
    kept, with its job, for the caller to import now: its original stays exportable byte for
    byte even when the file given is later moved or changed."""
    if not path.is_file():  # a pipe (`<(zcat run.jsonl.gz)`, /dev/stdin): read as a stream
        with path.open("rb") as stream:
            return keep_stream(stream=stream, name=path.name, project=project, format=format,
                               created_by=created_by, replace=replace)  # fmt: skip
    target = _new_stored_path(_kept_suffix(display_name(path.name)))
    # copyfile, not a read/write loop: the kernel copies (sendfile), a few times faster on a
    # large session file (bench/import_bench.py times this copy as part of the import).
    _copied(lambda: shutil.copyfile(path, target), target)
    return _kept_job(target, name=path.name, project=project, format=format, created_by=created_by, replace=replace)


def keep_stream(
    *, stream: IO[bytes], name: str, project: Project, format: str = "", created_by: str = "", replace: bool = False
) -> ImportJob:
    """Keep a copy of what `stream` reads (an original carried in an evidence bundle) as an
    upload is kept, with its job."""
    target = _new_stored_path(_kept_suffix(display_name(name)))

    def copy() -> None:
        with target.open("wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)

    _copied(copy, target)
    return _kept_job(target, name=name, project=project, format=format, created_by=created_by, replace=replace)


def _copied(copy: Callable[[], None], target: Path) -> None:
    """Run `copy` to `target`; a copy that stops (a full disk, Ctrl-C on a pipe that stalled)
    leaves no file behind: it has no job yet, and nothing would ever delete it."""
    try:
        copy()
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def _kept_suffix(original_name: str) -> str:
    lowered = original_name.lower()
    return next((s for s in _KEPT_SUFFIXES if lowered.endswith(s)), "")


def _kept_job(target: Path, *, name: str, project: Project, format: str, created_by: str, replace: bool) -> ImportJob:
    """The job of a file kept at `target`; the file goes again if its row cannot be written (a
    kept file without a job is one nothing would ever delete)."""
    try:
        os.chmod(target, 0o640)
        return ImportJob.objects.create(
            project=project,
            original_name=display_name(name),
            stored_path=str(target),
            requested_format=format,
            replace=replace,
            bytes_total=target.stat().st_size,
            created_by=created_by[:150],
        )
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def display_name(name: str) -> str:
    """The client's file name without any folder part or control characters (display only)."""
    base = re.split(r"[\\/]", name)[-1]
    base = _UNSAFE_NAME.sub("", base).strip()
    return (base or "upload")[:500]


def _new_stored_path(suffix: str) -> Path:
    now = timezone.now()
    # Each missing folder with this mode (mkdir(parents=True) gave uploads/ and the year's folder
    # the umask's, 0755, in a data folder an operator made).
    folder = private_folder(Path(settings.DATA_DIR) / "uploads" / f"{now:%Y}" / f"{now:%m}", mode=0o750)
    return folder / f"{uuid.uuid4().hex}{suffix}"


def _store(uploaded_file: UploadedFile, original_name: str) -> Path:
    target = _new_stored_path(_kept_suffix(original_name))
    temporary_path = getattr(uploaded_file, "temporary_file_path", None)

    def copy() -> None:
        if temporary_path is not None:
            # Large uploads are already on disk: a rename, not a second copy of a 1 GB file (a
            # copy across file systems, which may stop midway as the other does).
            file_move_safe(temporary_path(), str(target), allow_overwrite=False)
        else:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
            with os.fdopen(fd, "wb") as out:
                for chunk in uploaded_file.chunks():
                    out.write(chunk)
        os.chmod(target, 0o640)

    _copied(copy, target)
    return target


# zlib's documented bound: deflate makes at most 1,032 bytes of each compressed byte.
DEFLATE_MAX_RATIO = 1032


def _checked_gzip_size(uploaded_file: UploadedFile) -> int:
    """A gzip file's last 4 bytes state its (last member's) size modulo 2**32. A stated size
    above the limit proves a whole file's content is larger (the true size is at least that),
    so it is refused at once, without inflating a possible bomb; smaller claims prove nothing
    and the import checks while decompressing. A cut or damaged file's last 4 bytes are not its
    size: the message says where the figure comes from, and how to check the file. Returns the
    stated size (0 for a file that is no gzip): what its last member holds (below 4 GiB), so a
    floor for what the file holds; the import job checks the whole."""
    uploaded_file.seek(0)
    magic = uploaded_file.read(2)
    if magic != GZIP_MAGIC or (uploaded_file.size or 0) < 18:
        uploaded_file.seek(0)
        return 0
    uploaded_file.seek(-4, os.SEEK_END)
    stated = int.from_bytes(uploaded_file.read(4), "little")
    uploaded_file.seek(0)
    size = uploaded_file.size or 0
    if stated > DEFLATE_MAX_RATIO * size:
        # More than deflate can make of these bytes: no intact gzip file states it.
        raise UploadRejected(
            f"The gzip file is cut off or damaged: its last 4 bytes state {stated:,} bytes, more than gzip can"
            f" make of its {size:,} (at most {DEFLATE_MAX_RATIO:,} times). `gzip -t` checks the file."
        )
    if stated > max_upload_bytes():
        raise UploadTooLarge(
            too_large_message(stated, what="decompressed upload")
            + " The size is the one the gzip file's last 4 bytes state; a cut or damaged file states"
            " a meaningless one (`gzip -t` checks the file)."
        )
    return stated


def decompressed_size_within_limit(path: Path) -> tuple[bool, int]:
    """Stream a stored gzip file to count its decompressed bytes, stopping at the limit.

    (True, size) when within the limit (or not gzip: its size on disk), (False, bytes counted)
    as soon as the limit is passed, so a gzip bomb costs at most the limit's worth of work."""
    import gzip
    import zlib

    limit = max_upload_bytes()
    with path.open("rb") as raw:
        if raw.read(2) != GZIP_MAGIC:
            return True, path.stat().st_size
        raw.seek(0)
        total = 0
        try:
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                while chunk := stream.read(1024 * 1024):
                    total += len(chunk)
                    if total > limit:
                        return False, total
        except (OSError, EOFError, zlib.error):
            # A damaged or truncated gzip: the import reports what it could read.
            return True, total
    return True, total


def settle_original(*, path: Path, redactor: Redactor, line_by_line: bool = True) -> LineTooLong | None:
    """What becomes of a kept file once its import is done, under the project's redaction rules
    (`redactor`): not kept (the default), it is deleted; kept, it is replaced by a copy redacted
    line by line (gzip undone: redaction.Redactor.lines), so the original export and a bundle
    give the redacted text. A file that cannot be redacted line by line (`line_by_line=False`,
    an evidence bundle's zip), read through, or holds a line too long to redact (returned, for
    the import's problems) is deleted rather than kept as received."""
    if not path.is_file():
        return None
    if not redactor.keep_originals or not line_by_line:
        path.unlink(missing_ok=True)
        return None
    redacted = path.with_name(path.name + ".redacting")
    try:
        with Source(path=path).open() as source, redacted.open("wb") as out:
            for line in redactor.lines(source, max_line=settings.MAX_RECORD_BYTES):
                out.write(line)
        os.chmod(redacted, 0o640)
        redacted.replace(path)
    except LineTooLong as too_long:
        redacted.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        return too_long
    except (OSError, EOFError, zlib.error):
        logger.warning("could not redact the kept original %s; deleted instead", path.name, exc_info=True)
        redacted.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
    return None
