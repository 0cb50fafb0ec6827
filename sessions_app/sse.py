"""Server-Sent Events over HTTP, for the API's streams (api/live.py) and the player's own tail
(views/player.py): the response, whether an ASGI server serves it, where a client that
reconnects resumes, and the live tail both answer with. The frames themselves are
replay/streaming.py's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse

from . import access
from .models import Session
from .models.bounds import MAX_POSITION
from .replay import streaming


def under_asgi(request: HttpRequest) -> bool:
    """Whether an ASGI server serves this request (replay_site/asgi.py sends the streams to
    Django's ASGI handler): a stream then waits without holding a thread. Under WSGI an
    asynchronous stream would be read to its end before anything is sent."""
    return isinstance(request, ASGIRequest)


def response(frames: Iterator[bytes] | AsyncIterator[bytes]) -> StreamingHttpResponse:
    answer = StreamingHttpResponse(frames, content_type="text/event-stream; charset=utf-8")
    answer["Cache-Control"] = "no-store"  # session data: no cache may keep it
    answer["X-Accel-Buffering"] = "no"  # nginx: pass frames through as they come
    return answer


def resume_after(request: HttpRequest, after: int | None) -> int:
    """The seq a stream starts after: `after` when given, else the id of the last frame an
    EventSource received before it reconnected (-1: from the start). ValueError, naming the
    header, for an id no event can have."""
    if after is not None:
        return after
    last = request.headers.get("Last-Event-ID", "")
    if not last.lstrip("-").isdigit():
        return -1
    if not -1 <= int(last) <= MAX_POSITION:
        raise ValueError(f"Last-Event-ID: {last} is no event's seq (from -1 to {MAX_POSITION})")
    return int(last)


def tail(request: HttpRequest, session: Session, after: int) -> StreamingHttpResponse:
    """A live session's events after seq `after` as they are appended (docs/ingest.md), for the
    caller of `request`, who fetched `session` through access.py: the stream ends once they may
    no longer read it (`access.still_reads`)."""
    stream = streaming.tail_stream_async if under_asgi(request) else streaming.tail_stream
    return response(
        stream(
            session=session,
            after=after,
            poll_interval=settings.TAIL_POLL_SECONDS,
            max_seconds=settings.TAIL_MAX_SECONDS,
            may_go_on=lambda: access.still_reads(request, session.pk),
        )  # fmt: skip
    )
