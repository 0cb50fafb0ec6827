"""A second process that parses a large file into Event rows while this one writes them.

An import is two jobs of about equal weight: Python work per event (reading and parsing the
line, the format's conversion, the running totals, the hash chain, the JSON of the stored
columns) and the database's bulk write of the rows. In one process they add up; SQLite's
`executemany` cannot overlap with Python work in a thread either, because it takes the GIL back
for every row (measured: no gain). So for a large file `importing.import_file` starts a child
process: a fork of itself, which has every module it needs loaded already, or, where this
process runs other threads (a fork would copy none of them, but could inherit a lock one held),
a fresh interpreter (`python -m sessions_app.parse_worker`). The child runs the format's
parser and `event_rows.EventRows` (the same code the in-process path runs) and streams batches
of rows through a pipe; the importing process, which holds the database transaction, seals them
(hash-chain links and counts by kind, `event_rows.seal_rows`: the last step of building a row,
done there because the child is the slower half) and writes them. On two cores the two halves
run side by side (bench/import_bench.py).

The child never touches the database (a forked one leaves the connection it inherits alone and
ends with `os._exit`, so not even a close is said on it). The conversation on its pipes:

    child -> parent   ("session", SessionMeta)          a session begins (metadata so far)
    parent -> child   "<session pk>\\n"                  the row the events belong to
    child -> parent   ("rows", rows, pair updates,       unsealed rows, in seq order, with
                       keyframes, bytes_read, problems)   the problems found since the last
    child -> parent   ("end", SessionMeta, WriterState)  the session's events are exhausted
                                                         (the state's head and counts by kind
                                                         are the sealing parent's to set)
    ... the next session of the file, if any ...
    child -> parent   ("failed", message, traceback)     reading stopped (then "done")
    child -> parent   ("done", problems)                 the problems not sent yet

Each message is one pickle (or, for rows, one `marshal` dump, which the parent loads in less than
half the time: plain lists of strings and numbers need none of pickle's generality), preceded by
its length and kind. The pipe holds about one batch (PIPE_BYTES), so a slow database makes the
child wait instead of piling rows up in memory.
"""

from __future__ import annotations

import gc
import marshal
import os
import pickle
import struct
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from .canonical import Problems, SessionMeta
from .event_rows import Batch, EventRows, Keyframe, WriterState
from .formats import Source, format_module

# logging, subprocess and traceback are imported where the parent (or a failing child) uses them:
# a child started as a fresh interpreter (where the importing process runs threads) imports this
# module before its first row, and those three modules were a third of its imports.

# Rows per message: big enough that marshalling and the pipe cost little per row, small enough
# that both processes stay busy and that one message (about 0.8 MB) fits in the pipe, so the
# child goes on with the next batch while the writer writes the last (2,000 waited more).
BATCH_ROWS = 1000
_HEADER = struct.Struct("<Qc")
_PICKLED, _MARSHALLED = b"p", b"m"
_PROJECT_ROOT = Path(__file__).resolve().parent.parent


class WorkerFailed(Exception):
    """The child stopped before it finished the file; the message says why."""


def _send(stream: IO[bytes], message: tuple) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data), _PICKLED))
    stream.write(data)


class _NewProblems:
    """The problems found since the last message, as (items, how many in all): sent with every
    batch, so the problems of lines already read survive a child that dies."""

    def __init__(self, problems: Problems) -> None:
        self.problems = problems
        self.sent_items = 0
        self.sent_count = 0

    def take(self) -> tuple[list[tuple[int | None, str, str]], int]:
        problems = self.problems
        items = [(p.line, p.field, p.message) for p in problems.items[self.sent_items :]]
        count = problems.count - self.sent_count
        self.sent_items, self.sent_count = len(problems.items), problems.count
        return items, count


def _send_rows(stream: IO[bytes], batch: Batch, bytes_read: int, new_problems: _NewProblems) -> None:
    keyframes = [
        (k.seq, k.step_pos, k.variables, k.memory_notes, k.stats) for k in batch.keyframes
    ]
    message = ("rows", batch.rows, batch.pair_updates, keyframes, bytes_read, new_problems.take())
    try:
        data = marshal.dumps(message)
    except ValueError:  # a value marshal cannot write (none expected: rows hold JSON types)
        _send(stream, message)
        return
    stream.write(_HEADER.pack(len(data), _MARSHALLED))
    stream.write(data)


def _receive(stream: IO[bytes]) -> tuple | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    size, kind = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return marshal.loads(data) if kind == _MARSHALLED else pickle.loads(data)


# --- the child -----------------------------------------------------------------------------


def _run_child(request: dict[str, Any], out: IO[bytes], answers: IO[bytes]) -> None:
    # The child allocates millions of short-lived acyclic objects and exits when done: the
    # cyclic collector would only rescan them.
    gc.disable()
    module = format_module(request["format"])
    problems = Problems(limit=request["problems_kept"])
    read = [0]
    source = Source(
        path=Path(request["path"]),
        display_name=request["display_name"],
        on_bytes=lambda count: read.__setitem__(0, count),
    )
    batch_rows = request["batch_rows"]
    new_problems = _NewProblems(problems)
    try:
        for parsed in module.parse(source, problems):
            _send(out, ("session", parsed.meta))
            out.flush()
            session_pk = int(answers.readline())
            state = WriterState()
            # Unsealed: the importing process adds the chain and counts by kind as it writes.
            rows = EventRows(session_pk=session_pk, state=state, vendor=request["vendor"], sealed=False)
            add = rows.add
            for event in parsed.events:
                add(event)
                if len(rows.rows) >= batch_rows:
                    _send_rows(out, rows.take(), read[0], new_problems)
            _send_rows(out, rows.take(), read[0], new_problems)
            _send(out, ("end", parsed.meta, state))
    except (OSError, EOFError, zlib.error) as exc:  # the stream broke (a cut or corrupt .gz, a vanished file)
        problems.add(None, "file", f"could not read further: {exc}")
    except Exception as exc:  # a bug: reported as a problem, with the traceback for the log
        import traceback

        _send(out, ("failed", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    _send(out, ("done", new_problems.take()))
    out.flush()


def main() -> None:
    request = pickle.loads(bytes.fromhex(sys.argv[1]))
    out = os.fdopen(sys.stdout.fileno(), "wb", buffering=1 << 16, closefd=False)
    _run_child(request, out, sys.stdin.buffer)


# --- the parent ----------------------------------------------------------------------------

# The rows pipe holds this much (Linux's default is 64 KiB, its unprivileged maximum 1 MiB):
# room for a whole batch lets the child go on building the next one while this process is
# still writing the last, instead of waiting for it to read.
PIPE_BYTES = 1 << 20


def _widen_pipe(stream: IO[bytes]) -> None:
    try:
        import fcntl

        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass  # not Linux, or a lower limit: the default pipe works, with less slack


def _can_fork() -> bool:
    # A fork copies only the calling thread: with others running, a lock one of them held
    # (logging's, an import's) would stay locked in the child for ever. Python warns of it too.
    import threading

    return hasattr(os, "fork") and threading.active_count() == 1


def _spawn_child(request: dict[str, Any]) -> Any:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PROJECT_ROOT), env.get("PYTHONPATH")]))
    import subprocess

    return subprocess.Popen(
        [sys.executable, "-m", "sessions_app.parse_worker", pickle.dumps(request).hex()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=_PROJECT_ROOT,
        env=env,
        bufsize=1 << 16,
    )


class _ForkedChild:
    """The child as a fork of this process: what `subprocess.Popen` offers the parent here
    (stdin, stdout, poll, wait, kill), without starting a fresh interpreter.

    A fresh interpreter spends about 0.12 s importing the formats before it reads a line, while
    this process waits for its first rows; a fork has them all already (bench/import_bench.py).
    """

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self._reap(0)
        return self.returncode  # type: ignore[return-value]

    def _reap(self, options: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, options)
        except ChildProcessError:
            # Reaped already, by a process that ignores SIGCHLD: its status is lost, as
            # subprocess.Popen also reports it (0); the pipe's last message says how it ended.
            self.returncode = 0
            return
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass


def _fork_child(request: dict[str, Any]) -> _ForkedChild:
    rows_read, rows_write = os.pipe()
    answers_read, answers_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(rows_read)
            os.close(answers_write)
            import signal

            # The parent's handlers (a server's, a job runner's) are not the child's to run.
            for number in (signal.SIGINT, signal.SIGTERM):
                signal.signal(number, signal.SIG_DFL)
            out = os.fdopen(rows_write, "wb", buffering=1 << 16)
            _run_child(request, out, os.fdopen(answers_read, "rb"))
            out.flush()
            code = 0
        finally:
            # Straight out: no exit handlers, no finalisers, nothing flushed twice, and above all
            # nothing said on the database connection this process shares with its parent.
            os._exit(code)
    os.close(rows_write)
    os.close(answers_read)
    return _ForkedChild(
        pid, os.fdopen(answers_write, "wb", buffering=1 << 16), os.fdopen(rows_read, "rb", buffering=1 << 16)
    )


@dataclass
class WorkerSession:
    """One session of the file as the child streams it: `meta` is complete (the child's final
    metadata) once `batches()` is exhausted, like a ParsedSession's after its events."""

    worker: "ParseWorker"
    meta: SessionMeta
    final_state: WriterState | None = None

    def batches(self, session_pk: int) -> Iterator[Batch]:
        """The rows of this session, built for the session row `session_pk`."""
        return self.worker._batches(self, session_pk)

    def state(self) -> WriterState:
        if self.final_state is None:
            raise WorkerFailed("the parse worker stopped before the end of the session")
        return self.final_state


class ParseWorker:
    """The parent's side: starts the child, yields its sessions, merges its problems."""

    def __init__(
        self,
        *,
        source: Source,
        format: str,
        problems: Problems,
        vendor: str,
        batch_rows: int | None = None,
    ) -> None:
        self.source = source
        self.problems = problems
        request = {
            "path": str(source.path),
            "display_name": source.display_name,
            "format": format,
            "vendor": vendor,
            "problems_kept": problems.limit,
            "batch_rows": batch_rows or BATCH_ROWS,
        }
        self.process = _fork_child(request) if _can_fork() else _spawn_child(request)
        _widen_pipe(self.process.stdout)
        self.finished = False

    def sessions(self) -> Iterator[WorkerSession]:
        """The file's sessions, in order; the child is stopped however the caller leaves."""
        try:
            while True:
                message = self._next()
                if message is None:
                    return
                if message[0] != "session":
                    raise WorkerFailed(f"unexpected message {message[0]!r} from the parse worker")
                session = WorkerSession(worker=self, meta=message[1])
                yield session
                if session.final_state is None:
                    # The caller did not read this session's rows (it failed before): nothing
                    # more can follow in order, so stop here.
                    return
        finally:
            self.close()

    def _batches(self, session: WorkerSession, session_pk: int) -> Iterator[Batch]:
        try:
            self.process.stdin.write(f"{session_pk}\n".encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # the child is gone: _next reports how it ended
        on_bytes = self.source.on_bytes
        while True:
            message = self._next()
            if message is None:
                return
            if message[0] == "rows":
                _, rows, pair_updates, keyframes, bytes_read, new_problems = message
                self._take_problems(new_problems)
                if on_bytes is not None:
                    on_bytes(bytes_read)
                yield Batch(rows, pair_updates, [Keyframe(*values) for values in keyframes])
            elif message[0] == "end":
                session.meta, session.final_state = message[1], message[2]
                return
            else:
                raise WorkerFailed(f"unexpected message {message[0]!r} from the parse worker")

    def _next(self) -> tuple | None:
        """The next message about sessions; None once the child has said all it will."""
        if self.finished:
            return None
        message = _receive(self.process.stdout)
        failure = None
        if message is not None and message[0] == "failed":
            import logging

            logging.getLogger(__name__).error(
                "import of %s failed in the parse worker:\n%s", self.source.path, message[2]
            )
            failure = f"import stopped: {message[1]}"
            message = _receive(self.process.stdout)
        if message is None:
            self.finished = True
            code = self.process.wait()
            self.problems.add(
                None, "file", failure or f"import stopped: the parse worker exited with status {code}"
            )
            return None
        if message[0] == "done":
            self.finished = True
            # The child's problems first, then why it stopped: the order of the in-process path.
            self._take_problems(message[1])
            if failure is not None:
                self.problems.add(None, "file", failure)
            return None
        return message

    def _take_problems(self, new: tuple[list[tuple[int | None, str, str]], int]) -> None:
        items, count = new
        for line, field, text in items:
            self.problems.add(line, field, text)
        # Problems past the child's limit arrive as a count only.
        self.problems.count += count - len(items)

    def close(self) -> None:
        process = self.process
        if process.poll() is None and not self.finished:
            process.kill()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        process.wait()


if __name__ == "__main__":
    main()
