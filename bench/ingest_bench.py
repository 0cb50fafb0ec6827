"""Live ingest through the HTTP API against the file import of the same events, in one run.

    .venv/bin/python bench/ingest_bench.py [--events 100000] [--batch 1000] [--runs 1]
    .venv/bin/python .ci/with_postgres.py -- .venv/bin/python bench/ingest_bench.py

Migrates a fresh temporary SQLite database (or uses the PostgreSQL of DATABASE_URL), starts
`manage.py serve` (the production server) on a free loopback port against it, and then:

1. API: creates a live session (POST /api/sessions) and appends the events in batches of
   `--batch` (POST /api/sessions/{id}/events, canonical events, an idempotency key each), one
   request after another on one HTTP connection, as a recording agent would;
2. file: writes the same events as a canonical NDJSON file and imports it with
   `importing.import_file` in this process (the path the upload job takes).

Both sessions must hold the same events (the file has one session_start line more) and the same
totals (tokens, cost, steps). Prints events/s of each and the ratio API / file (target: >= 0.5).
Request bodies are encoded before the clock starts; the server runs in its own process, the
import in this one, one after the other, on the same database.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def bench_events(count: int) -> list[dict]:
    """~500-byte canonical events: LLM calls/responses, tool calls/results, closed steps."""
    t0 = datetime(2026, 2, 8, 10, 30, tzinfo=UTC)
    text = "The quick brown fox jumps over the lazy dog. " * 6
    out = []
    for i in range(count):
        ts = (t0 + timedelta(milliseconds=137 * i)).isoformat().replace("+00:00", "Z")
        phase = i % 5
        if phase == 0:
            event = {"kind": "llm_call", "tool": "gpt-4o", "pair_id": f"c{i}",
                     "payload": {"messages": [{"role": "user", "content": f"{i}: {text}"}]}}  # fmt: skip
        elif phase == 1:
            event = {"kind": "llm_response", "tool": "gpt-4o", "pair_id": f"c{i - 1}", "tokens": 120 + i % 50,
                     "cost_usd": 0.0012, "payload": {"completion": f"{i}: {text}"}}  # fmt: skip
        elif phase == 2:
            event = {"kind": "tool_call", "tool": "read_file", "pair_id": f"t{i}",
                     "payload": {"arguments": {"path": f"/src/module_{i % 97}.py"}, "note": text}}  # fmt: skip
        elif phase == 3:
            failed = i % 11 == 3
            event = {"kind": "tool_error" if failed else "tool_response", "tool": "read_file",
                     "pair_id": f"t{i - 1}", "is_error": failed, "failed": failed,
                     "payload": {"result": f"{i}: {text}"}}  # fmt: skip
        else:
            event = {"kind": "step_end", "step": i // 5, "reward": 0.1, "tokens": 3,
                     "payload": {"summary": text[:120]},
                     "step_state": {"step": i // 5, "success": i % 7 != 0, "error": "", "reward": 0.1,
                                    "action_type": "run_python", "action_code": "x = 1", "tokens_used": 3},
                     "state_change": {"variables": {f"v{i % 50}": i}}}  # fmt: skip
        out.append({"timestamp": ts, **event})
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, env: dict, log: Path) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT, env=env | {"REPLAY_DEMO": "1"}, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the server exited:\n{log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return server
        except OSError:
            time.sleep(0.1)
    server.terminate()
    sys.exit("the server did not start within 60 s")


class Api:
    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def post(self, path: str, body: bytes) -> dict:
        for attempt in (1, 2):
            try:
                self.conn.request("POST", path, body=body, headers=self.headers)
                response = self.conn.getresponse()
                data = response.read()
                break
            except (http.client.HTTPException, ConnectionError):
                # The development server may close a kept-alive connection: open a new one.
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
                if attempt == 2:
                    raise
        if response.status >= 300:
            sys.exit(f"POST {path}: HTTP {response.status}: {data[:500]!r}")
        return orjson.loads(data)


def run_api(api: Api, events: list[dict], batch: int, project: str, label: str) -> tuple[float, int]:
    session = api.post("/api/sessions", orjson.dumps({"project": project, "task": label}))
    bodies = [
        orjson.dumps(
            {"events": events[i : i + batch], "format": "canonical", "idempotency_key": f"{label}-{i}"}
        )  # fmt: skip
        for i in range(0, len(events), batch)
    ]
    path = f"/api/sessions/{session['id']}/events"
    started = time.perf_counter()
    for body in bodies:
        api.post(path, body)
    return time.perf_counter() - started, session["id"]


def run_file(events: list[dict], folder: Path, project, label: str) -> tuple[float, int]:
    from sessions_app.ingest.importing import import_file

    path = folder / f"{label}.jsonl"
    start = {"kind": "session_start", "payload": {"task": label, "session_id": label}}
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in [start, *events]))
    started = time.perf_counter()
    (outcome,) = import_file(path=path, project=project, format="canonical")
    elapsed = time.perf_counter() - started
    if outcome.error:
        sys.exit(f"import failed: {outcome.error}")
    return elapsed, outcome.session.pk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1, help="alternate API and file runs; medians")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="replay-ingest-bench-")
    folder = Path(tmp.name)
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = f"sqlite:///{folder}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
    os.environ["REPLAY_DATA_DIR"] = str(folder / "data")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from sessions_app.models import ApiKey, Event, Membership, Project, Role, Session

    call_command("migrate", verbosity=0)
    stamp = datetime.now().strftime("%H%M%S")
    project = Project.objects.create(name=f"ingest bench {stamp}", slug=f"ingest-bench-{stamp}")
    owner = get_user_model().objects.create_user(username=f"ingest-bench-{stamp}")
    Membership.objects.create(project=project, user=owner, role=Role.MAINTAINER)
    api_key, key = ApiKey.create_key(name=f"ingest bench {stamp}", user=owner)
    events = bench_events(args.events)
    size = sum(len(orjson.dumps(e)) for e in events[:1000]) / 1000
    print(f"database: {connection.vendor}; {args.events:,} canonical events (~{size:.0f} B each), "
          f"API batches of {args.batch}; {args.runs} run(s)", flush=True)  # fmt: skip

    port = free_port()
    log = folder / "server.log"
    server = start_server(port, dict(os.environ), log)
    api_times, file_times = [], []
    try:
        api = Api(port, key)
        for run in range(args.runs):
            api_s, api_session = run_api(api, events, args.batch, project.slug, f"api-{run}")
            file_s, file_session = run_file(events, folder, project, f"file-{run}")
            a, f = Session.objects.get(pk=api_session), Session.objects.get(pk=file_session)
            assert a.event_count == f.event_count - 1 == args.events, (a.event_count, f.event_count)
            same_totals = (a.tokens, round(a.cost_usd, 6), a.step_count) == (
                f.tokens,
                round(f.cost_usd, 6),
                f.step_count,
            )
            print(f"run {run + 1}: API {api_s:.2f} s ({args.events / api_s:,.0f} events/s), "
                  f"file import {file_s:.2f} s ({(args.events + 1) / file_s:,.0f} events/s); "
                  f"same totals: {same_totals}", flush=True)  # fmt: skip
            api_times.append(api_s)
            file_times.append(file_s)
            for pk in (api_session, file_session):
                Session.objects.filter(pk=pk).delete()
    finally:
        server.terminate()
        server.wait(timeout=30)
        # The project stays: its audit log (the sessions the bench made) is append-only and keeps
        # naming it. In the bench's own temporary SQLite database nothing stays at all.
        Session.objects.filter(project=project).delete()
        api_key.delete()
        connection.close()

    api_rate = args.events / statistics.median(api_times)
    file_rate = (args.events + 1) / statistics.median(file_times)
    ratio = api_rate / file_rate
    print(f"API (HTTP, batches of {args.batch}): {api_rate:,.0f} events/s")
    print(f"file import (import_file):   {file_rate:,.0f} events/s")
    print(f"ratio API / file import: {ratio:.2f} (target >= 0.50: {'met' if ratio >= 0.5 else 'NOT met'})")
    assert Event.objects.filter(session__project_id=project.pk).count() == 0


if __name__ == "__main__":
    main()
