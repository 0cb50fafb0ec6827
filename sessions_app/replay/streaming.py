"""Server-Sent Event streams of a session's events: paced replay (flux0's record & replay) and the
live tail of a session that is still being written.

Both read the database a page at a time by keyset (`seq > last ORDER BY seq LIMIT n`), so a
stream holds at most one page of a session, whatever its length. Frames (docs/ingest.md):

    event: event | chunk | status      one stored event, as JSON (chunk/status: flux0 kinds)
    id: <seq>
    data: {"seq": 12, "kind": "llm_call", ..., "payload": {...}, "wait_ms": 250.0, ...}

    event: pause    data: {"resume_after": 41, "next_seq": 42, "reason": "user_message"}
    event: end      data: {"reason": "end_of_session" | "session_ended" | "max_duration", ...}
    : keepalive     (an SSE comment while nothing else is sent)

The stream logic is written once, as a generator of frames and `Sleep` instructions; two small
drivers run it. Under WSGI (and the test client) `paced_stream`/`tail_stream` sleep in their
thread. Under ASGI (the production server, docs/deployment.md) `paced_stream_async` /
`tail_stream_async` await the sleeps and run each step of the generator (its database reads) in
the request's own thread for a moment only, so a stream waiting for the next event holds no
thread at all. Drivers take `sleep` and `clock` so tests can check the timing they ask for.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections

from ..canonical import Kind
from ..models import Event, Session

logger = logging.getLogger(__name__)

PAGE = 500
# Longest single sleep; a longer wait is cut into pieces with a keep-alive comment between them
# so proxies do not drop an idle connection.
MAX_SLEEP_SLICE = 15.0
# A wait at least this long first gives the database connection back (WSGI threads would
# otherwise hold an idle PostgreSQL connection for the whole recorded gap).
RELEASE_CONNECTION_AFTER = 2.0

_COLUMNS = (
    "seq", "kind", "source_type", "ts", "step", "step_pos", "depth", "agent_id", "tool",
    "pair_id", "pair_seq", "duration_ms", "cost_usd", "tokens", "reward", "is_error", "payload",
    "step_state", "cost_total", "tokens_total", "elapsed_ms",
)  # fmt: skip
_FRAGMENTS = {"payload", "step_state"}  # stored JSON text, spliced without decoding
_FRAME_NAMES = {Kind.CHUNK: b"chunk", Kind.STATUS: b"status"}
_PAYLOAD = _COLUMNS.index("payload")


@dataclass(slots=True)
class _Row:
    seq: int
    kind: str
    ts_ms: float | None
    body: dict


def frame(name: str | bytes, data: dict, *, event_id: int | None = None, retry_ms: int | None = None) -> bytes:
    """One SSE frame. orjson never writes a raw newline, so `data` fits on one line. `retry_ms`
    tells an EventSource how soon to reconnect (the hint of a stream ended by its time limit)."""
    head = name if isinstance(name, bytes) else name.encode()
    out = b"event: " + head + b"\n"
    if event_id is not None:
        out += b"id: %d\n" % event_id
    if retry_ms is not None:
        out += b"retry: %d\n" % retry_ms
    return out + b"data: " + orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS) + b"\n\n"


KEEPALIVE = b": keepalive\n\n"
RECONNECT_MS = 1000  # the `retry:` of an `end` frame sent because the stream reached its time limit


@dataclass(frozen=True, slots=True)
class Sleep:
    """An instruction to the driver: wait this many seconds before the next step."""

    seconds: float


_Step = bytes | Sleep


def _pages(session_id: int, after: int) -> Iterator[list[_Row]]:
    """Pages of events with seq > after, in seq order, one keyset query per page."""
    page = PAGE
    last = after
    while True:
        rows = list(
            Event.objects.filter(session_id=session_id, seq__gt=last).order_by("seq").values_list(*_COLUMNS)[:page]
        )
        if not rows:
            return
        out = []
        for values in rows:
            body = dict(zip(_COLUMNS, values))
            for name in _FRAGMENTS:
                if body[name] is not None:
                    body[name] = orjson.Fragment(body[name])
            if body["kind"] == Kind.STATUS and body["payload"] is not None:
                # Read, not spliced: the paced stream may give it an id (_with_an_id).
                body["payload"] = orjson.loads(values[_PAYLOAD])
            ts = body["ts"]
            out.append(_Row(body["seq"], body["kind"], ts.timestamp() * 1000.0 if ts else None, body))
        last = out[-1].seq
        yield out
        if len(rows) < page:
            return


def _release_connection() -> None:
    # Inside a transaction (a test's, or ATOMIC_REQUESTS) the connection must stay; otherwise
    # Django opens a new one at the next query.
    if not connection.in_atomic_block:
        connection.close()


def _event_frame(row: _Row, extra: dict) -> bytes:
    row.body.update(extra)
    return frame(_FRAME_NAMES.get(row.kind, b"event"), row.body, event_id=row.seq)


def _wait(seconds: float, clock: Callable[[], float], until: float) -> Iterator[_Step]:
    """Wait until `until` on `clock`, with keep-alives through long waits."""
    if seconds >= RELEASE_CONNECTION_AFTER:
        _release_connection()
    while True:
        left = until - clock()
        if left <= 0:
            return
        if left > MAX_SLEEP_SLICE:
            yield Sleep(MAX_SLEEP_SLICE)
            yield KEEPALIVE
        else:
            yield Sleep(left)
            return


def _run(steps: Iterator[_Step], sleep: Callable[[float], None]) -> Iterator[bytes]:
    """The thread driver: sleep where the stream says, pass its frames on."""
    for step in steps:
        if isinstance(step, Sleep):
            sleep(step.seconds)
        else:
            yield step


_DONE = object()


class _Driven:
    """A stream driven from the event loop, remembering the database connection its reads used
    (the request thread's own), so that only that one is closed when it ends."""

    def __init__(self, steps: Iterator[_Step]) -> None:
        self.steps = steps
        self.used: Any = None

    def advance(self) -> object:
        self.used = connections[DEFAULT_DB_ALIAS]  # this thread's connection object
        return next(self.steps, _DONE)

    def close(self) -> None:
        """End the stream and close the connection its reads used: the request's thread ends
        with the request, and Django keeps a connection younger than CONN_MAX_AGE open at a
        request's end (a persistent one is for the web threads, which live on). An unfinished
        stream may be closed later, from whatever request's thread is current then (the event
        loop finalises an abandoned async generator in the context of the moment): closing *that*
        thread's connection broke another request in the middle ("Cannot operate on a closed
        database", a security sweep's burst of tails closed early)."""
        try:
            self.steps.close()
        finally:
            if self.used is not None and self.used is connections[DEFAULT_DB_ALIAS]:
                connection.close()


async def _run_async(steps: Iterator[_Step], sleep: Callable[[float], Awaitable[None]]) -> AsyncIterator[bytes]:
    """The ASGI driver: each step of the stream (its reads) runs in the request's thread, the
    waits between them in the event loop, holding no thread."""
    driven = _Driven(steps)
    advance = sync_to_async(driven.advance)  # thread-sensitive: one thread per request, in turn
    try:
        while (step := await advance()) is not _DONE:
            if isinstance(step, Sleep):
                await sleep(step.seconds)
            else:
                yield step
    finally:
        await sync_to_async(driven.close)()


def paced_stream(
    *,
    session: Session,
    after: int = -1,
    pacing: float = 1.0,
    max_gap: float | None = None,
    max_seconds: float = 300.0,
    may_go_on: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[bytes]:
    """Replay a session's events after seq `after` at the recorded pace, one turn at a time.

    The first frame goes at once; each next one after the recorded gap to the previous event
    (never negative; events without a timestamp follow at once), capped at `max_gap` seconds
    when set, times `pacing` (0 instant, 1 recorded time, 0.5 twice as fast). The gap counts
    from when the previous frame was handed to the server, so slow reads never accumulate.

    The stream stops before the next user message (a turn boundary) with a `pause` frame
    naming where to resume; the events before a session's first user message play together
    with its first turn. At the end of the session comes an `end` frame; one comes too, with
    where to resume and a reconnect hint, when the next wait would pass `max_seconds`, and
    one when `may_go_on` (asked every RECHECK_SECONDS) says the caller may no longer read it.
    """
    return _run(_paced_steps(session, after, pacing, max_gap, max_seconds, clock, may_go_on), sleep)


def paced_stream_async(
    *,
    session: Session,
    after: int = -1,
    pacing: float = 1.0,
    max_gap: float | None = None,
    max_seconds: float = 300.0,
    may_go_on: Callable[[], bool] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[bytes]:
    """`paced_stream` for an ASGI server: the same frames, waiting without a thread."""
    return _run_async(_paced_steps(session, after, pacing, max_gap, max_seconds, clock, may_go_on), sleep)


def _paced_steps(session, after, pacing, max_gap, max_seconds, clock, may_go_on) -> Iterator[_Step]:
    try:
        yield from _paced(session, after, pacing, max_gap, max_seconds, clock, may_go_on)
    except DatabaseError:
        logger.exception("stream of session %s failed", session.pk)
        yield frame("error", {"message": "the stream stopped: database error"})
    finally:
        _release_connection()


def _paced(session, after, pacing, max_gap, max_seconds, clock, may_go_on) -> Iterator[_Step]:
    started = last_check = clock()
    from_start = after < 0
    sent = 0
    user_turns = 0
    last_seq = after
    last_ts: float | None = None
    last_sent_at = 0.0
    for page in _pages(session.pk, after):
        for row in page:
            if row.kind == Kind.USER_MESSAGE and sent and (user_turns or not from_start):
                yield frame(
                    "pause",
                    {"resume_after": last_seq, "next_seq": row.seq, "reason": "user_message"},
                )
                return
            extra: dict = {}
            if sent:
                gap_ms = 0.0
                if row.ts_ms is not None and last_ts is not None:
                    gap_ms = max(0.0, row.ts_ms - last_ts)
                wait_ms = gap_ms
                if max_gap is not None and gap_ms > max_gap * 1000.0:
                    wait_ms = max_gap * 1000.0
                    extra["compressed_from_ms"] = gap_ms
                wait_ms *= pacing
                extra["gap_ms"] = gap_ms
                extra["wait_ms"] = wait_ms
                if wait_ms > 0:
                    if last_sent_at + wait_ms / 1000.0 - started > max_seconds:
                        yield frame("end", {"reason": "max_duration", "resume_after": last_seq, "last_seq": last_seq,
                                            "sent": sent}, retry_ms=RECONNECT_MS)  # fmt: skip
                        return
                    yield from _wait(wait_ms / 1000.0, clock, last_sent_at + wait_ms / 1000.0)
                if may_go_on is not None and clock() - last_check >= RECHECK_SECONDS:
                    last_check = clock()
                    if not may_go_on():
                        yield frame("end", {"reason": "access_revoked", "last_seq": last_seq, "sent": sent})
                        return
            else:
                extra["gap_ms"] = 0.0
                extra["wait_ms"] = 0.0
            if row.ts_ms is not None:
                last_ts = row.ts_ms
            if row.kind == Kind.USER_MESSAGE:
                user_turns += 1
            elif row.kind == Kind.STATUS:
                _with_an_id(row.body["payload"])
            last_seq = row.seq
            sent += 1
            last_sent_at = clock()
            yield _event_frame(row, extra)
    yield frame("end", {"reason": "end_of_session", "last_seq": last_seq, "sent": sent})


def _with_an_id(payload: Any) -> None:
    """A status recorded with an empty id is sent with a fresh one, as flux0's replay agent
    sends it (flux0_server/replay_agent/replay_agent.py: `uuid.uuid4().hex`, for the client's
    SSE idempotency); the stored event keeps what was recorded."""
    if isinstance(payload, dict) and not payload.get("id"):
        payload["id"] = uuid.uuid4().hex


def tail_stream(
    *,
    session: Session,
    after: int = -1,
    poll_interval: float = 0.5,
    max_seconds: float = 300.0,
    heartbeat_seconds: float = 15.0,
    may_go_on: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[bytes]:
    """Push a live session's events as they are appended, polling by keyset after the last
    seq sent. Ends when the session has ended and everything was sent, after `max_seconds`
    (the `end` frame then says where to resume), or once `may_go_on` (asked every
    RECHECK_SECONDS) says the caller may no longer read the session."""
    steps = _tail_steps(session, after, poll_interval, max_seconds, heartbeat_seconds, clock, may_go_on)
    return _run(steps, sleep)


def tail_stream_async(
    *,
    session: Session,
    after: int = -1,
    poll_interval: float = 0.5,
    max_seconds: float = 300.0,
    heartbeat_seconds: float = 15.0,
    may_go_on: Callable[[], bool] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[bytes]:
    """`tail_stream` for an ASGI server: the same frames, waiting without a thread."""
    steps = _tail_steps(session, after, poll_interval, max_seconds, heartbeat_seconds, clock, may_go_on)
    return _run_async(steps, sleep)


def _tail_steps(session, after, poll_interval, max_seconds, heartbeat_seconds, clock, may_go_on) -> Iterator[_Step]:
    try:
        yield from _tail(session, after, poll_interval, max_seconds, heartbeat_seconds, clock, may_go_on)
    except DatabaseError:
        logger.exception("tail of session %s failed", session.pk)
        yield frame("error", {"message": "the stream stopped: database error"})
    finally:
        _release_connection()


# How often a tail asks again whether its caller may still read the session: a key revoked, a
# member removed, a share link revoked or a sign-out ends the stream within this long.
RECHECK_SECONDS = 5.0


def _tail(session, after, poll_interval, max_seconds, heartbeat_seconds, clock, may_go_on) -> Iterator[_Step]:
    started = clock()
    last_beat = last_check = started
    last_seq = after
    while True:
        if may_go_on is not None and clock() - last_check >= RECHECK_SECONDS:
            last_check = clock()
            if not may_go_on():
                yield frame("end", {"reason": "access_revoked", "last_seq": last_seq})
                return
        for page in _pages(session.pk, last_seq):
            for row in page:
                last_seq = row.seq
                yield _event_frame(row, {})
            last_beat = clock()
        state = Session.objects.filter(pk=session.pk).values_list("status", "event_count").first()
        if state is None:
            yield frame("end", {"reason": "session_deleted", "last_seq": last_seq})
            return
        status, event_count = state
        if status != Session.Status.LIVE and last_seq >= event_count - 1:
            yield frame("end", {"reason": "session_ended", "status": status, "last_seq": last_seq})
            return
        now = clock()
        if now - started >= max_seconds:
            yield frame("end", {"reason": "max_duration", "resume_after": last_seq, "last_seq": last_seq},
                        retry_ms=RECONNECT_MS)  # fmt: skip
            return
        if now - last_beat >= heartbeat_seconds:
            last_beat = now
            yield KEEPALIVE
        if poll_interval >= RELEASE_CONNECTION_AFTER:
            _release_connection()
        yield Sleep(poll_interval)
