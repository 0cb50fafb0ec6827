"""Scale-out on PostgreSQL, for real: `manage.py serve` with 2 web processes and its job
cluster, plus a second `qcluster`, while 4 agents append live batches concurrently, 2 uploads
import and a viewer steps through a session. Afterwards every event is stored once, seqs are
gapless per session, every chain verifies, and no request failed."""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import timedelta

import orjson
import pytest
from django.db import connection
from django.db.models import Count, Max, Min

from sessions_app.models import Event, ImportJob, Session
from sessions_app.verification import verify_session

from .builders_ingest import T0, write_canonical_file
from .builders_teams import maintainer_key
from .test_jobs import WorkerDatabase, stop, wait_for
from .test_serving import _free_port, _get

pytestmark = pytest.mark.postgres

AGENTS, BATCHES, BATCH = 4, 12, 40
UPLOADS, UPLOAD_SESSIONS, UPLOAD_EVENTS = 2, 3, 400


class Http:
    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key
        self.failures: list[str] = []
        self.lock = threading.Lock()

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(self.base + path, data=body, method=method,
                                         headers={"Authorization": f"Bearer {self.key}", **(headers or {})})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            with self.lock:
                self.failures.append(f"{method} {path}: {exc.code} {exc.read()[:300]!r}")
            return exc.code, b""
        except OSError as exc:
            with self.lock:
                self.failures.append(f"{method} {path}: {exc}")
            return 0, b""

    def json(self, method: str, path: str, payload) -> dict:
        status, body = self.call(method, path, orjson.dumps(payload), {"Content-Type": "application/json"})
        return orjson.loads(body) if body else {}


def agent(http: Http, n: int, ids: list[int]) -> None:
    session = http.json("POST", "/api/sessions", {"task": f"agent {n}", "idempotency_key": f"scale-{n}"})
    if "id" not in session:
        return  # the failure is in http.failures
    ids.append(session["id"])
    for b in range(BATCHES):
        events = [{"kind": "tool_call" if i % 2 else "llm_call", "payload": {"agent": n, "batch": b, "i": i},
                   "timestamp": (T0 + timedelta(seconds=b * BATCH + i)).isoformat()} for i in range(BATCH)]  # fmt: skip
        http.json("POST", f"/api/sessions/{session['id']}/events", {"events": events, "idempotency_key": f"{n}-{b}"})
    http.json("POST", f"/api/sessions/{session['id']}/end", {"status": "completed"})


def upload(http: Http, path, jobs: list[int]) -> None:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{path.name}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + path.read_bytes() + f"\r\n--{boundary}--\r\n".encode()  # fmt: skip
    status, answer = http.call(
        "POST", "/api/imports", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    if status == 202:
        jobs.append(orjson.loads(answer)["job"])


def viewer(http: Http, session: Session, stop_at: float) -> int:
    steps, session_id = 0, session.pk
    while time.monotonic() < stop_at:
        http.call("GET", f"/api/sessions/{session_id}/steps/{steps % session.step_count}")
        http.call("GET", f"/api/sessions/{session_id}/replay?limit=50&offset={steps % 50}")
        steps += 1
    return steps


def test_two_web_processes_two_clusters_agents_uploads_and_a_viewer_lose_nothing(transactional_db, tmp_path,
                                                                                 monkeypatch, make_session):  # fmt: skip
    if connection.vendor != "postgresql":
        pytest.skip("scale-out is PostgreSQL's: SQLite has one writer")
    monkeypatch.setenv("REPLAY_DATA_DIR", str(tmp_path / "data"))  # the server's and the workers'
    worker_db = WorkerDatabase(tmp_path)
    key = maintainer_key("scale")
    watched = make_session(events=300)
    port = _free_port()
    log_web, log_q = tmp_path / "serve.log", tmp_path / "qcluster.log"
    server = worker_db.start("serve", "--port", str(port), "--web-processes", "2", log=log_web, demo=True)
    cluster = worker_db.start("qcluster", log=log_q)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(base), timeout=60, what="the server to answer", log=log_web, every=0.3)
        http = Http(base, key)
        ids: list[int] = []
        jobs: list[int] = []
        files = [write_canonical_file(tmp_path / f"up{u}.jsonl", sessions=UPLOAD_SESSIONS, events=UPLOAD_EVENTS)
                 for u in range(UPLOADS)]  # fmt: skip
        # Distinct content per upload (the importer recognises identical sessions).
        for u, path in enumerate(files):
            path.write_bytes(path.read_bytes().replace(b"file-session-", f"upload{u}-session-".encode()))
        threads = [threading.Thread(target=agent, args=(http, n, ids)) for n in range(AGENTS)]
        threads += [threading.Thread(target=upload, args=(http, path, jobs)) for path in files]
        steps: list[int] = []
        threads.append(threading.Thread(target=lambda: steps.append(viewer(http, watched, time.monotonic() + 15))))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=180)
        assert http.failures == [], f"{http.failures[:5]}\n{_first_traceback(log_web)}"
        wait_for(lambda: ImportJob.objects.filter(pk__in=jobs, status__in=["done", "failed"]).count() == UPLOADS,
                 timeout=180, what="both imports to finish", log=log_q, every=0.5)  # fmt: skip
    finally:
        stop(server, signal.SIGTERM)
        stop(cluster)
    assert len(ids) == AGENTS and len(jobs) == UPLOADS and steps and steps[0] > 10
    assert set(ImportJob.objects.filter(pk__in=jobs).values_list("status", flat=True)) == {"done"}
    live = Session.objects.filter(pk__in=ids)
    assert set(live.values_list("status", flat=True)) == {"completed"}
    assert set(live.values_list("event_count", flat=True)) == {BATCHES * BATCH}
    imported = Session.objects.filter(import_job_id__in=jobs)
    assert imported.count() == UPLOADS * UPLOAD_SESSIONS
    for session in [*live, *imported]:
        seqs = Event.objects.filter(session=session).aggregate(n=Count("seq"), lo=Min("seq"), hi=Max("seq"))
        assert seqs == {"n": session.event_count, "lo": 0, "hi": session.event_count - 1}, session.pk
        assert verify_session(session=session).valid, f"session {session.pk} does not verify"
    # Each agent's payloads are there exactly once.
    for session_id in ids:
        assert Event.objects.filter(session_id=session_id).count() == BATCHES * BATCH


def _first_traceback(log) -> str:
    text = log.read_text(errors="replace")
    at = text.find("Traceback")
    return text[at : at + 4000] if at >= 0 else text[-2000:]


def _up(base: str) -> bool:
    try:
        return _get(base + "/accounts/login/")[0] == 200
    except OSError:
        return False
