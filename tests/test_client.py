"""RemoteRecorder against a live server: the same records as rlm-code's SessionRecorder, and no
lost or duplicated event when requests fail (injected by a proxy between client and server)."""

from __future__ import annotations

import http.client
import http.server
import io
import json
import re
import socket
import threading
import time
from collections import deque
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from rlm_code.rlm.session_replay import SessionRecorder

from sessions_app.client import RemoteRecorder, RemoteRecorderError
from sessions_app.ingest.importing import import_file
from sessions_app.models import ApiKey, Checkpoint, Event, IngestBatch, Project, Session

from .builders_teams import maintainer_key


class FaultyProxy:
    """Forwards requests to the live server. `faults` holds what happens to the next matching
    requests: "503" (answer 503 without forwarding), "reset" (close the connection without
    forwarding), "drop" (forward, so the server stores the batch, then close the connection
    without passing the answer back: a lost response)."""

    def __init__(self, upstream: str, pattern: str = r"/events$") -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.pattern = re.compile(pattern)
        self.faults: deque[str] = deque()
        self.log: list[tuple[str, str]] = []  # (path, what happened)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = proxy.faults.popleft() if proxy.faults and proxy.pattern.search(self.path) else ""
                proxy.log.append((self.path, fault or "ok"))
                if fault == "503":
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if fault == "reset":
                    return self._hang_up()
                status, headers, answer = proxy.forward(self.command, self.path, self.headers, body)
                if fault == "drop":
                    return self._hang_up()
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def _hang_up(self) -> None:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                self.wfile = io.BytesIO()  # nothing more reaches the client

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def forward(self, method: str, path: str, headers, body: bytes):
        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            keep = {k: v for k, v in headers.items() if k.lower() in ("authorization", "content-type", "accept")}
            upstream.request(method, path, body=body, headers=keep)
            response = upstream.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            upstream.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count(self, what: str) -> int:
        return sum(1 for _, happened in self.log if happened == what)


@pytest.fixture
def api_key(live_server) -> str:
    Project.get_default()
    return maintainer_key("agent")


@pytest.fixture
def proxy(live_server):
    proxy = FaultyProxy(live_server.url)
    yield proxy
    proxy.close()


def drive(recorder, steps: int = 4) -> None:
    """The same calls an rlm-code agent makes, on either recorder."""
    recorder.record_memory_update(["start"])
    for step in range(1, steps + 1):
        recorder.record_step_start(step)
        recorder.record_llm_request(f"prompt {step} — ünïcode", model="gpt-4o-mini")
        recorder.record_llm_response(f"answer {step}", tokens_in=10 * step, tokens_out=step, duration_ms=12.5)
        action = {"action": "run_python", "code": f"x = {step}", "rationale": "why"}
        recorder.record_action(action, rationale=f"step {step}")
        failed = step == 3
        observation = {"success": not failed, "output": f"out {step}"} if not failed else {"stderr": "boom"}
        recorder.record_result(observation, reward=-0.5 if failed else 1.0, success=not failed,
                               duration_ms=3.0, tokens_used=20 + step)  # fmt: skip
        recorder.record_variable_update(f"x{step}", {"value": step, "items": list(range(step))})
        if failed:
            recorder.record_error("boom", recoverable=True)
        recorder.record_step_end(action, observation, reward=-0.5 if failed else 1.0, success=not failed,
                                 duration_ms=3.0, tokens_used=20 + step)  # fmt: skip
        if step == 2:
            recorder.record_child_spawn("child-1", "sub task", depth=1)
            recorder.record_child_result("child-1", True, "sub result")
            recorder.create_checkpoint("after-two")
    recorder.record_final("the answer", completed=True)


def without_timestamps(record: dict) -> dict:
    record = dict(record, timestamp="T")
    if record["event_type"] == "step_end":
        record["data"] = dict(record["data"], timestamp="T")
    return record


def stored_records(session_id: int) -> list[dict]:
    raws = Event.objects.filter(session_id=session_id).order_by("seq").values_list("raw", flat=True)
    return [json.loads(raw) for raw in raws]


def test_remote_recorder_sends_the_records_rlm_codes_recorder_writes(live_server, api_key, tmp_path):
    path = tmp_path / "reference.jsonl"
    reference = SessionRecorder(session_id="s1", run_id="run-7", task="count things",
                                environment="pure_rlm", model="gpt-4o-mini", output_path=path)  # fmt: skip
    drive(reference)
    reference.end_session()

    remote = RemoteRecorder(live_server.url, api_key, task="count things", environment="pure_rlm",
                            model="gpt-4o-mini", run_id="run-7", batch_size=7, flush_interval=0.05)  # fmt: skip
    drive(remote)
    snapshot = remote.end_session()

    expected = [without_timestamps(json.loads(line)) for line in path.read_text().splitlines()]
    got = stored_records(remote.session_id)
    assert [without_timestamps(r) for r in got] == expected
    assert snapshot["total_steps"] == 4 and snapshot["final_answer"] == "the answer"
    # All of a short session waits for end_session (no batch filled, no interval passed): its
    # snapshot names the session the end created, as docs/ingest.md's example shows.
    short = RemoteRecorder(live_server.url, api_key, task="short", batch_size=1000, flush_interval=3600)
    short.record_step_start(1)
    ended = short.end_session()
    assert short.session_id and ended["session_id"] == str(short.session_id)

    live = Session.objects.get(pk=remote.session_id)
    (outcome,) = import_file(path=path, project=Project.get_default())
    imported = outcome.session
    assert (live.status, live.final_answer, live.source_format) == ("completed", "the answer", "rlm_native")
    assert (live.task, live.run_id, live.model) == ("count things", "run-7", "gpt-4o-mini")
    assert (live.step_count, live.tokens, live.reward, live.step_error_count) == (
        imported.step_count, imported.tokens, imported.reward, imported.step_error_count)  # fmt: skip
    checkpoint = Checkpoint.objects.get(session=live)
    assert checkpoint.name == "after-two"
    assert Event.objects.get(session=live, seq=checkpoint.seq).kind == "checkpoint"


def test_no_event_is_lost_or_duplicated_when_requests_fail(live_server, api_key, proxy):
    proxy.faults.extend(["503", "drop", "reset", "ok", "drop", "503", "drop"])
    recorder = RemoteRecorder(proxy.url, api_key, task="flaky network", batch_size=10,
                              flush_interval=0.02, max_retries=6, backoff=0.01)  # fmt: skip
    drive(recorder, steps=6)
    recorder.end_session()
    records = stored_records(recorder.session_id)
    reference = []
    drive(_Collector(reference), steps=6)
    kinds = ["session_start", *[r["event_type"] for r in reference], "session_end"]
    assert [r["event_type"] for r in records] == kinds
    assert list(Event.objects.filter(session_id=recorder.session_id).order_by("seq")
                .values_list("seq", flat=True)) == list(range(len(kinds)))  # fmt: skip
    # Three responses were lost after the server had stored the batch: their retries were
    # answered from the idempotency record instead of being stored again.
    assert proxy.count("drop") == 3 and proxy.count("503") == 2 and proxy.count("reset") == 1
    # Every batch stored exactly once, back to back, none larger than batch_size.
    batches = list(IngestBatch.objects.filter(session_id=recorder.session_id).order_by("first_seq"))
    assert [b.first_seq for b in batches] == [sum(b.count for b in batches[:i]) for i in range(len(batches))]
    assert sum(b.count for b in batches) == len(kinds) and max(b.count for b in batches) <= 10
    assert Session.objects.get(pk=recorder.session_id).status == "completed"


class _Collector:
    """A stand-in recorder that only lists the event types drive() produces."""

    def __init__(self, out: list) -> None:
        self.out = out

    def __getattr__(self, name: str):
        mapping = {"record_step_start": "step_start", "record_action": "step_action",
                   "record_result": "step_result", "record_step_end": "step_end",
                   "record_memory_update": "memory_update", "record_variable_update": "variable_update",
                   "record_llm_request": "llm_request", "record_llm_response": "llm_response",
                   "record_child_spawn": "child_spawn", "record_child_result": "child_result",
                   "record_final": "final_detected", "record_error": "error",
                   "create_checkpoint": "checkpoint"}  # fmt: skip
        return lambda *a, **k: self.out.append({"event_type": mapping[name]})


def test_a_lost_create_response_does_not_create_a_second_session(live_server, api_key):
    proxy = FaultyProxy(live_server.url, pattern=r"/api/sessions$")
    try:
        proxy.faults.append("drop")
        recorder = RemoteRecorder(proxy.url, api_key, task="once", background=False, backoff=0.01)
        recorder.record_step_start(1)
        recorder.flush()
    finally:
        proxy.close()
    assert proxy.count("drop") == 1
    assert Session.objects.count() == 1
    assert Event.objects.filter(session_id=recorder.session_id).count() == 2


def test_an_outage_longer_than_the_retries_keeps_events_queued_until_it_ends(live_server, api_key, proxy):
    recorder = RemoteRecorder(proxy.url, api_key, task="outage", background=False, max_retries=2, backoff=0.01)
    recorder.flush()  # the session exists and session_start is stored
    for step in range(5):
        recorder.record_step_start(step)
    proxy.faults.extend(["reset"] * 3)  # more failures than 1 try + 2 retries
    with pytest.raises(RemoteRecorderError) as failed:
        recorder.flush()
    assert "after 3 attempts" in str(failed.value)
    assert recorder.pending == 5
    assert Event.objects.filter(session_id=recorder.session_id).count() == 1
    recorder.flush()  # the network is back
    assert recorder.pending == 0
    steps = [r["data"]["step"] for r in stored_records(recorder.session_id)[1:]]
    assert steps == [0, 1, 2, 3, 4]


def test_the_background_thread_sends_without_being_asked(live_server, api_key):
    recorder = RemoteRecorder(live_server.url, api_key, task="bg", flush_interval=0.05)
    recorder.record_step_start(1)
    recorder.record_error("oops")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and recorder.pending:
        time.sleep(0.02)
    assert recorder.pending == 0
    assert Event.objects.filter(session_id=recorder.session_id).count() == 3
    recorder.close()
    assert Session.objects.get(pk=recorder.session_id).status == "live"  # closed, not ended


def test_a_refused_request_is_not_retried(live_server, proxy):
    Project.get_default()
    recorder = RemoteRecorder(proxy.url, "rpl_not-a-key", task="x", background=False, max_retries=5, backoff=0.01)
    with pytest.raises(RemoteRecorderError) as refused:
        recorder.flush()
    # 401 from the key check, or 403 when ninja's SessionAuth fallback runs its CSRF check
    # first (no session cookie either): refused both ways, and never retried.
    assert refused.value.status in (401, 403)
    assert len(proxy.log) == 1
    assert recorder.pending == 1


def test_records_are_also_written_to_a_local_file_rlm_code_can_read(live_server, api_key, tmp_path):
    from rlm_code.rlm.session_replay import load_session

    path = tmp_path / "local.jsonl"
    recorder = RemoteRecorder(live_server.url, api_key, task="local copy", run_id="r1",
                              output_path=path, background=False)  # fmt: skip
    drive(recorder, steps=2)
    recorder.end_session()
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert lines == stored_records(recorder.session_id)
    replayer = load_session(path)
    assert replayer.total_steps == 2 and replayer.snapshot.final_answer == "the answer"
