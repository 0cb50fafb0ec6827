"""Server-Sent Event streams: paced replay (recorded gaps x pacing, turn pauses, compressed idle
gaps, keyset pages) and the live tail."""

from __future__ import annotations

import time
from datetime import timedelta

import orjson
import pytest
from django.contrib.sessions.models import Session as DjangoSession
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions_app.canonical import CanonicalEvent, Kind, SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.models import ApiKey, Membership, Role, Session
from sessions_app.replay import streaming

from .builders_ingest import T0
from .builders_teams import key_of, member


@pytest.fixture
def api(db) -> Client:
    return Client(headers={"authorization": f"Bearer {key_of(member('viewer', role=Role.VIEWER))}"})


def timed_session(project, spec: list[tuple[str, float | None]], **meta) -> Session:
    """A session whose events have these kinds at these offsets (ms) from T0."""
    session = create_session(project=project, source_format=meta.pop("source_format", "canonical"),
                             meta=SessionMeta(**meta))  # fmt: skip
    events = [
        CanonicalEvent(
            kind=kind,
            source_type=kind,
            raw=orjson.dumps({"n": n, "kind": kind}).decode(),
            payload={"n": n, "text": f"<b>{kind} {n}</b>"},
            timestamp=None if at is None else T0 + timedelta(milliseconds=at),
        )  # fmt: skip
        for n, (kind, at) in enumerate(spec)
    ]
    append_events(session=session, events=events)
    return session


def frames_of(chunks) -> list[tuple[str, dict | None, float]]:
    """(event name, data, arrival time) per SSE frame; comments come as (":", None, t)."""
    out = []
    for chunk in chunks:
        arrived = time.monotonic()
        for block in chunk.decode().split("\n\n"):
            if not block.strip():
                continue
            if block.startswith(":"):
                out.append((":", None, arrived))
                continue
            fields = dict(line.split(": ", 1) for line in block.splitlines())
            out.append((fields["event"], orjson.loads(fields["data"]), arrived))
    return out


def stream(api: Client, session: Session, **params) -> list[tuple[str, dict | None, float]]:
    response = api.get(f"/api/sessions/{session.pk}/stream", params)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-store"
    return frames_of(response.streaming_content)


# --- pacing --------------------------------------------------------------------------------------

GAPS_MS = [0, 300, 120, 0, 450, 200]  # recorded gaps between consecutive events


def gapped_spec() -> list[tuple[str, float]]:
    at, spec = 0.0, []
    for gap in GAPS_MS:
        at += gap
        spec.append((Kind.TOOL_CALL, at))
    return spec


@pytest.mark.parametrize("pacing", [1.0, 0.5, 2.0])
def test_inter_event_waits_match_recorded_gaps_times_pacing_within_50ms(api, project, pacing):
    session = timed_session(project, gapped_spec())
    expected = [gap * pacing for gap in GAPS_MS[1:]]
    # Wall-clock waits on a shared 2-core machine: a busy scheduler can wake a sleeper late,
    # so the stream is played up to three times and the best run must be within 50 ms.
    attempts = []
    for _ in range(3):
        frames = stream(api, session, pacing=pacing)
        events = [f for f in frames if f[0] == "event"]
        assert [data["seq"] for _, data, _ in events] == list(range(len(GAPS_MS)))
        arrivals = [t for _, _, t in events]
        waited = [(b - a) * 1000 for a, b in zip(arrivals, arrivals[1:])]
        attempts.append(max(abs(got - want) for got, want in zip(waited, expected)))
        if attempts[-1] <= 50:
            break
    assert min(attempts) <= 50, (attempts, waited, expected)
    assert [data["wait_ms"] for _, data, _ in events[1:]] == pytest.approx(expected)
    assert [data["gap_ms"] for _, data, _ in events[1:]] == pytest.approx(GAPS_MS[1:])
    assert frames[-1][0] == "end" and frames[-1][1]["last_seq"] == len(GAPS_MS) - 1


def test_pacing_zero_streams_at_once(api, project):
    session = timed_session(project, [(Kind.TOOL_CALL, i * 5000.0) for i in range(20)])
    started = time.monotonic()
    frames = stream(api, session, pacing=0)
    assert time.monotonic() - started < 1.0  # 95 s recorded
    assert len([f for f in frames if f[0] == "event"]) == 20
    assert all(data["wait_ms"] == 0 for name, data, _ in frames if name == "event")


def test_idle_gaps_longer_than_max_gap_are_compressed_and_say_so(api, project):
    session = timed_session(project, [(Kind.TOOL_CALL, 0), (Kind.TOOL_RESPONSE, 60_000), (Kind.NOTE, 60_100)])
    frames = stream(api, session, pacing=1, max_gap=0.2)
    events = [f for f in frames if f[0] == "event"]
    first, second, third = events
    assert second[1]["compressed_from_ms"] == 60_000 and second[1]["wait_ms"] == pytest.approx(200)
    assert abs((second[2] - first[2]) * 1000 - 200) <= 50
    assert "compressed_from_ms" not in third[1] and third[1]["wait_ms"] == pytest.approx(100)


def test_events_without_timestamps_and_clock_going_backwards_follow_at_once(project):
    session = timed_session(project, [(Kind.NOTE, 1000), (Kind.NOTE, None), (Kind.NOTE, 400), (Kind.NOTE, 700)])
    slept: list[float] = []
    clock = iter(range(100))
    frames = frames_of(streaming.paced_stream(session=session, pacing=1, sleep=slept.append,
                                              clock=lambda: float(next(clock))))  # fmt: skip
    waits = [data["wait_ms"] for name, data, _ in frames if name == "event"]
    assert waits == [0, 0, 0, 300]  # none, missing ts, 400 after 1000, then 300 after 400


def test_a_long_wait_sends_keepalives_instead_of_going_silent(project):
    session = timed_session(project, [(Kind.NOTE, 0), (Kind.NOTE, 40_000)])
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    frames = frames_of(streaming.paced_stream(session=session, pacing=1, sleep=sleep, clock=lambda: now[0]))
    assert [name for name, _, _ in frames] == ["event", ":", ":", "event", "end"]
    assert sum(slept) == pytest.approx(40.0) and max(slept) <= streaming.MAX_SLEEP_SLICE


def test_a_paced_stream_ends_at_its_time_limit_saying_where_to_resume_and_when_to_reconnect(project):
    session = timed_session(project, [(Kind.NOTE, 0), (Kind.NOTE, 1_000), (Kind.NOTE, 400_000)])
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    chunks = list(streaming.paced_stream(session=session, pacing=1, max_seconds=300, sleep=sleep, clock=lambda: now[0]))
    frames = frames_of(chunks)
    assert [name for name, _, _ in frames] == ["event", "event", "end"]
    end = frames[-1][1]
    assert end["reason"] == "max_duration" and end["resume_after"] == 1 and now[0] < 300
    assert b"retry: 1000\n" in chunks[-1]  # an EventSource reconnects (with Last-Event-ID) a second later


# --- turns ---------------------------------------------------------------------------------------


def conversation(project) -> Session:
    kinds = [Kind.SESSION_START, Kind.USER_MESSAGE, Kind.CHUNK, Kind.CHUNK, Kind.STATUS,
             Kind.USER_MESSAGE, Kind.CHUNK, Kind.STATUS, Kind.USER_MESSAGE, Kind.AGENT_MESSAGE]  # fmt: skip
    return timed_session(project, [(kind, i * 10.0) for i, kind in enumerate(kinds)], source_format="flux0")


def test_stream_stops_before_the_next_user_message_and_says_where_to_resume(api, project):
    session = conversation(project)
    first = stream(api, session, pacing=0)
    # The preamble plays with the first turn; the stream stops before the second user message.
    assert [d["seq"] for n, d, _ in first if n in ("event", "chunk", "status")] == [0, 1, 2, 3, 4]
    assert first[-1][:2] == ("pause", {"resume_after": 4, "next_seq": 5, "reason": "user_message"})
    second = stream(api, session, pacing=0, after=4)
    assert [d["seq"] for n, d, _ in second if n != "pause"] == [5, 6, 7]
    assert second[-1][1]["resume_after"] == 7
    third = stream(api, session, pacing=0, after=7)
    assert [d["seq"] for n, d, _ in third if n not in ("end",)] == [8, 9]
    assert third[-1][0] == "end" and third[-1][1] == {"reason": "end_of_session", "last_seq": 9, "sent": 2}


def test_a_stream_resumed_mid_turn_finishes_that_turn(api, project):
    session = conversation(project)
    frames = stream(api, session, pacing=0, after=2)
    assert [d["seq"] for n, d, _ in frames if n != "pause"] == [3, 4]
    assert frames[-1][1]["resume_after"] == 4


def test_flux0_chunks_and_statuses_keep_their_event_names(api, project):
    session = conversation(project)
    names = [(name, data["kind"]) for name, data, _ in stream(api, session, pacing=0) if name != "pause"]
    assert names == [("event", "session_start"), ("event", "user_message"), ("chunk", "chunk"),
                     ("chunk", "chunk"), ("status", "status")]  # fmt: skip


def test_frames_carry_the_event_as_json_with_its_seq_as_id(api, project):
    session = timed_session(project, [(Kind.TOOL_CALL, 0)])
    response = api.get(f"/api/sessions/{session.pk}/stream", {"pacing": 0})
    text = b"".join(response.streaming_content).decode()
    block = text.split("\n\n")[0]
    assert block.splitlines()[:2] == ["event: event", "id: 0"]
    data = orjson.loads(block.splitlines()[2].removeprefix("data: "))
    assert data["payload"] == {"n": 0, "text": "<b>tool_call 0</b>"}  # JSON data, never HTML
    assert data["kind"] == "tool_call" and data["ts"].startswith("2026-02-08T10:30:00")


def test_last_event_id_resumes_a_reconnecting_event_source(api, project):
    session = timed_session(project, [(Kind.NOTE, i * 10.0) for i in range(5)])
    response = api.get(f"/api/sessions/{session.pk}/stream", {"pacing": 0}, headers={"last-event-id": "2"})
    seqs = [d["seq"] for n, d, _ in frames_of(response.streaming_content) if n == "event"]
    assert seqs == [3, 4]


# --- pages ---------------------------------------------------------------------------------------


def test_the_stream_reads_a_page_at_a_time_by_keyset(api, project, monkeypatch):
    monkeypatch.setattr(streaming, "PAGE", 10)
    session = timed_session(project, [(Kind.NOTE, float(i)) for i in range(35)])
    with CaptureQueriesContext(connection) as queries:
        frames = stream(api, session, pacing=0)
    assert len([f for f in frames if f[0] == "event"]) == 35
    reads = [q["sql"] for q in queries.captured_queries if 'FROM "sessions_app_event"' in q["sql"]]
    assert len(reads) == 4
    assert all("LIMIT 10" in sql and "OFFSET" not in sql for sql in reads)
    assert all('"seq" >' in sql for sql in reads)


def test_stream_errors(api, project):
    assert api.get("/api/sessions/404404/stream").status_code == 404
    session = timed_session(project, [(Kind.NOTE, 0)])
    bad_pacing = api.get(f"/api/sessions/{session.pk}/stream", {"pacing": -1})
    bad_gap = api.get(f"/api/sessions/{session.pk}/stream", {"max_gap": 0})
    assert bad_pacing.status_code == bad_gap.status_code == 400
    assert bad_pacing.json()["detail"].startswith("pacing:")
    assert bad_gap.json()["detail"].startswith("max_gap:")
    assert api.get("/api/sessions/404404/tail").status_code == 404


# --- live tail -----------------------------------------------------------------------------------


def test_tail_pushes_events_as_they_are_appended_until_the_session_ends(project):
    session = timed_session(project, [(Kind.NOTE, 0), (Kind.NOTE, 10)])
    arrivals = iter([
        lambda: append_events(session=session, events=[_note(2), _note(3)]),
        lambda: None,  # a poll that finds nothing new
        lambda: append_events(session=session, events=[_note(4)]),
        lambda: finish_session(session=session, status="completed"),
    ])  # fmt: skip
    polls: list[float] = []

    def sleep(seconds: float) -> None:  # time passes: the agent writes meanwhile
        polls.append(seconds)
        next(arrivals)()

    frames = frames_of(streaming.tail_stream(session=session, poll_interval=0.25, sleep=sleep))
    assert [d["seq"] for n, d, _ in frames if n == "event"] == [0, 1, 2, 3, 4]
    assert frames[-1][:2] == ("end", {"reason": "session_ended", "status": "completed", "last_seq": 4})
    assert polls == [0.25] * 4


def _note(n: int) -> CanonicalEvent:
    return CanonicalEvent(kind=Kind.NOTE, source_type="note", raw=f'{{"n":{n}}}', payload={"n": n},
                          timestamp=T0 + timedelta(seconds=n))  # fmt: skip


def test_tail_stops_after_its_maximum_duration_saying_where_to_resume(project):
    session = timed_session(project, [(Kind.NOTE, 0)])
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    frames = frames_of(streaming.tail_stream(session=session, after=-1, poll_interval=1.0, max_seconds=40,
                                             heartbeat_seconds=15, sleep=sleep, clock=lambda: now[0]))  # fmt: skip
    names = [name for name, _, _ in frames]
    assert names[0] == "event" and names[-1] == "end"
    assert names.count(":") == 2  # heartbeats at 15 s and 30 s of silence
    assert frames[-1][1] == {"reason": "max_duration", "resume_after": 0, "last_seq": 0}


def test_tail_over_http_sends_what_exists_then_ends_for_an_ended_session(api, project, settings):
    session = timed_session(project, [(Kind.NOTE, 0), (Kind.NOTE, 1)])
    finish_session(session=session, status="completed")
    response = api.get(f"/api/sessions/{session.pk}/tail", {"after": 0})
    frames = frames_of(response.streaming_content)
    assert [(n, d.get("seq")) for n, d, _ in frames] == [("event", 1), ("end", None)]


def test_tail_of_a_live_session_times_out_over_http(api, project, settings):
    settings.TAIL_MAX_SECONDS = 0.3
    settings.TAIL_POLL_SECONDS = 0.05
    session = timed_session(project, [(Kind.NOTE, 0)])
    started = time.monotonic()
    frames = frames_of(api.get(f"/api/sessions/{session.pk}/tail").streaming_content)
    assert 0.3 <= time.monotonic() - started < 2.0
    assert frames[-1][1]["reason"] == "max_duration"


def test_a_status_recorded_with_an_empty_id_is_streamed_with_a_fresh_one(api, project, tmp_path):
    # flux0's replay agent (flux0_server/replay_agent/replay_agent.py) sends a recorded status
    # with its own id, or `uuid.uuid4().hex` when the recorded id is empty.
    from pathlib import Path

    from sessions_app.formats import flux0

    from .builders_formats import ingest_file, payload, rows

    chat = Path(__file__).parent / "fixtures" / "flux0" / "support_chat.jsonl"
    records = [orjson.loads(line) for line in chat.read_bytes().splitlines()]
    assert [r["payload"]["id"] for r in records[2:4]] == ["run_a1", "run_a1"]  # processing, typing
    records[2]["payload"]["id"] = ""
    path = tmp_path / "empty_id.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    (session,), _ = ingest_file(flux0, path, project)
    statuses = [d["payload"]["id"] for n, d, _ in stream(api, session, pacing=0) if n == "status"]
    fresh = statuses[0]
    assert len(fresh) == 32 and int(fresh, 16) >= 0
    assert statuses[1] == "run_a1"  # a recorded id is sent as it is
    again = [d["payload"]["id"] for n, d, _ in stream(api, session, pacing=0) if n == "status"][0]
    assert again != fresh  # fresh at each replay, as flux0 makes it
    stored = next(e for e in rows(session) if e.kind == Kind.STATUS)
    assert payload(stored)["id"] == ""  # the stored event keeps what was recorded


def test_a_streams_thread_closes_its_database_connection_when_the_stream_ends(transactional_db):
    # An ASGI stream's reads run on a thread that ends with the request; Django would keep its
    # connection open at the request's end (CONN_MAX_AGE), to be freed only by the collector.
    # A stream closed from another thread (the event loop finalising an abandoned stream in
    # whichever request's context is current) must leave that thread's connection alone.
    import threading

    from django.db import connection

    from sessions_app.replay.streaming import _Driven

    def steps(seen):
        try:
            yield b"data: 1\n\n"
            yield b"data: 2\n\n"
        finally:
            seen["closed_stream"] = True

    def spied(seen):
        connection.ensure_connection()
        close = connection.close

        def spied_close() -> None:
            seen["close_called"] = True
            close()

        connection.close = spied_close

    def in_thread(target) -> None:
        thread = threading.Thread(target=target)
        thread.start()
        thread.join(timeout=30)

    same: dict[str, object] = {}

    def run_and_close_here() -> None:
        driven = _Driven(steps(same))
        assert driven.advance() == b"data: 1\n\n"
        spied(same)
        try:
            driven.close()
        finally:
            del connection.close
        # SQLite's in-memory test database ignores close(); a real one is closed.
        same["closed"] = connection.connection is None or connection.settings_dict["NAME"].startswith("file:memory")

    in_thread(run_and_close_here)
    assert same == {"closed_stream": True, "close_called": True, "closed": True}

    other: dict[str, object] = {}
    holder: list[_Driven] = []
    in_thread(lambda: holder.append(_Driven(steps(other))) or holder[0].advance())

    def close_from_another_request() -> None:
        spied(other)
        try:
            holder[0].close()
        finally:
            del connection.close
        other["still_open"] = connection.connection is not None

    in_thread(close_from_another_request)
    assert other == {"closed_stream": True, "still_open": True}


def _reader(user, *, cookie: bool) -> Client:
    """A client of `user`: signed in by the login cookie, or with a key of theirs."""
    if not cookie:
        return Client(headers={"authorization": f"Bearer {key_of(user)}"})
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "how", ["key revoked", "member removed", "user deactivated", "signed out", "password changed", "login expired"]
)
def test_a_tail_ends_within_its_recheck_once_the_caller_may_no_longer_read(project, settings, monkeypatch, how):
    settings.TAIL_MAX_SECONDS = 30
    settings.TAIL_POLL_SECONDS = 0.01
    monkeypatch.setattr(streaming, "RECHECK_SECONDS", 0.05)
    session = timed_session(project, [(Kind.NOTE, 0)])
    user = member("tailer", project, Role.VIEWER)
    cookie = how in ("signed out", "password changed", "login expired")  # the player's own tail, by the cookie
    client = _reader(user, cookie=cookie)
    url = f"/sessions/{session.pk}/tail/" if cookie else f"/api/sessions/{session.pk}/tail"
    chunks = iter(client.get(url).streaming_content)
    assert frames_of([next(chunks)])[0][1]["seq"] == 0
    if how == "key revoked":
        ApiKey.objects.filter(user=user).update(revoked_at=timezone.now())
    elif how == "member removed":
        Membership.objects.filter(user=user, project=project).delete()
    elif how == "user deactivated":
        type(user).objects.filter(pk=user.pk).update(is_active=False)
    elif how == "password changed":
        user.set_password("a new one, elsewhere")
        user.save()
    elif how == "login expired":
        DjangoSession.objects.update(expire_date=timezone.now() - timedelta(seconds=1))
    else:
        client.logout()
    append_events(session=session, events=[_note(5)])  # written after: never sent
    time.sleep(0.06)  # past the recheck (the stream's own waits run as it is read)
    rest = frames_of(list(chunks))
    assert [name for name, _, _ in rest if name == "event"] == []
    assert rest[-1][1] == {"reason": "access_revoked", "last_seq": 0}


@pytest.mark.parametrize("how", ["key", "login cookie, the API's tail", "login cookie, the player's tail"])
def test_a_tail_goes_on_while_its_caller_may_read(project, settings, monkeypatch, how):
    settings.TAIL_MAX_SECONDS = 0.3
    settings.TAIL_POLL_SECONDS = 0.01
    monkeypatch.setattr(streaming, "RECHECK_SECONDS", 0.02)
    session = timed_session(project, [(Kind.NOTE, 0)])
    # By the login cookie, request.user is Django's lazy wrapper of the user.
    client = _reader(member("reader", project, Role.VIEWER), cookie=how != "key")
    url = f"/sessions/{session.pk}/tail/" if "player" in how else f"/api/sessions/{session.pk}/tail"
    frames = frames_of(client.get(url).streaming_content)
    assert frames[-1][1]["reason"] == "max_duration"  # rechecked a dozen times, and went on


def test_a_paced_stream_ends_once_its_key_is_revoked(project, settings, monkeypatch):
    settings.TAIL_MAX_SECONDS = 30
    monkeypatch.setattr(streaming, "RECHECK_SECONDS", 0.05)
    # Three events 100 ms apart (recorded), streamed at the recorded pace.
    session = timed_session(project, [(Kind.NOTE, 0), (Kind.NOTE, 100), (Kind.NOTE, 200)])
    finish_session(session=session, status="completed")
    user = member("watcher", project, Role.VIEWER)
    client = Client(headers={"authorization": f"Bearer {key_of(user)}"})
    chunks = iter(client.get(f"/api/sessions/{session.pk}/stream", {"pacing": 1}).streaming_content)
    assert frames_of([next(chunks)])[0][1]["seq"] == 0
    ApiKey.objects.filter(user=user).update(revoked_at=timezone.now())
    time.sleep(0.06)
    rest = frames_of(list(chunks))
    assert [name for name, _, _ in rest if name == "event"] == []
    assert rest[-1][1] == {"reason": "access_revoked", "last_seq": 0, "sent": 1}
