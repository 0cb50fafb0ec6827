"""Many viewers at once: the production server (`manage.py serve`, what `make run` starts) under
concurrent viewers of a 100,000-event session while one agent ingests live.

    .venv/bin/python bench/load_bench.py --file var/bench_session.jsonl [--viewers 1,20,50]
    .venv/bin/python .ci/with_postgres.py -- .venv/bin/python bench/load_bench.py --file var/bench_session.jsonl

1. A fresh temporary SQLite database (or, when DATABASE_URL is set, that PostgreSQL database),
   migrated; the session file imported; a viewer of its project (a login cookie for the player,
   an API key for the API) and a maintainer's key for the agent.
2. `manage.py serve` on a free loopback port (--web-processes, default 2, as `make run`).
3. One agent creates a live session and appends --ingest-rate events a second (batches of 10)
   for the whole run.
4. For each viewer count (default 1, 20, 50), --seconds of load: each viewer, in its own thread
   with its own keep-alive connection, asks for a player step at a random event (the htmx
   partial each step, key press and play frame fetches) and, every fifth time, a replay page of
   1000 events with their context (`/api/sessions/{id}/replay?limit=1000`): "closed" (the
   default), as soon as the last answer arrived; with --paced 0.5, twice a second, as playback
   at normal speed asks.
Prints p50/p95/p99 per endpoint, requests a second, errors, and the throughput at each viewer
count as a ratio of the one-viewer throughput measured in the same run. Targets (issue 20, on a
2-core machine): 0 errors; with 20 viewers the player step p95 <= 250 ms and the replay page
p95 <= 400 ms; throughput at 20 viewers >= 1.5x that at one viewer. The clients share the
machine with the server: compare runs of the same machine.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prepare(path: Path) -> dict:
    """Migrate, import, and make the viewer's cookie and keys (in this process)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command

    from sessions_app.ingest.importing import import_file
    from sessions_app.models import ApiKey, Membership, Project, Role

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    outcome = import_file(path=path, project=Project.get_default())[0]
    assert outcome.error is None, outcome.error
    print(f"imported {outcome.session.event_count:,} events in {time.perf_counter() - started:.1f} s")
    users = get_user_model().objects
    viewer = users.create_user(username="load-viewer", password="unused-password-1")
    agent = users.create_user(username="load-agent", password="unused-password-2")
    Membership.objects.create(project=outcome.session.project, user=viewer, role=Role.VIEWER)
    Membership.objects.create(project=outcome.session.project, user=agent, role=Role.MAINTAINER)
    store = SessionStore()
    store[SESSION_KEY], store[BACKEND_SESSION_KEY] = str(viewer.pk), "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = viewer.get_session_auth_hash()
    store.create()
    _, viewer_key = ApiKey.create_key(name="load viewer", user=viewer)
    _, agent_key = ApiKey.create_key(name="load agent", user=agent)
    from django.db import connections

    connections.close_all()
    return {"session": outcome.session.pk, "events": outcome.session.event_count,
            "cookie": f"{settings.SESSION_COOKIE_NAME}={store.session_key}",
            "viewer_key": viewer_key, "agent_key": agent_key}  # fmt: skip


def start_server(port: int, web_processes: int, log: Path) -> subprocess.Popen:
    env = os.environ | {"REPLAY_DEMO": "1"}
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--web-processes", str(web_processes)],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the server exited:\n{log.read_text()[-2000:]}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthz")
            connection.getresponse().read()
            return server
        except OSError:
            time.sleep(0.3)
    server.terminate()
    sys.exit("the server did not start within 90 s")


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = {}
        self.errors: list[str] = []

    def add(self, name: str, seconds: float) -> None:
        with self.lock:
            self.times.setdefault(name, []).append(seconds)

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)


def timed(connection: http.client.HTTPConnection, path: str, headers: dict, name: str, rec: Recorder,
          body: bytes | None = None) -> http.client.HTTPConnection:  # fmt: skip
    """One request on a keep-alive connection (reopened after an error)."""
    started = time.perf_counter()
    try:
        connection.request("POST" if body is not None else "GET", path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status >= 400:
            rec.error(f"{name}: {response.status}")
        else:
            rec.add(name, time.perf_counter() - started)
        return connection
    except (OSError, http.client.HTTPException) as exc:
        rec.error(f"{name}: {type(exc).__name__}: {exc}")
        connection.close()
        return http.client.HTTPConnection(connection.host, connection.port, timeout=60)


def viewer(port: int, setup: dict, stop_at: float, rec: Recorder, seed: int, every: float = 0.0) -> None:
    """Closed (every=0): the next request as soon as the last answer arrived. Paced: one player
    step each `every` seconds, as playback at normal speed asks (twice a second)."""
    rng = random.Random(seed)
    next_at = time.monotonic() + rng.random() * every  # paced viewers do not start in step
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    page = {"Cookie": setup["cookie"], "HX-Request": "true"}
    api = {"Authorization": f"Bearer {setup['viewer_key']}"}
    n = 0
    while time.monotonic() < stop_at:
        if every:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += every
        seq = rng.randrange(setup["events"])
        connection = timed(connection, f"/sessions/{setup['session']}/?step={seq}&speed=1&pace=steps", page,
                           "player step", rec)  # fmt: skip
        if n % 5 == 4:
            offset = rng.randrange(max(1, setup["events"] - 1000))
            connection = timed(connection, f"/api/sessions/{setup['session']}/replay?offset={offset}&limit=1000",
                               api, "replay page (1000)", rec)  # fmt: skip
        n += 1
    connection.close()


def agent(port: int, setup: dict, rate: float, stop: threading.Event, rec: Recorder) -> None:
    """Appends `rate` events a second to a live session, in batches of 10."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {setup['agent_key']}", "Content-Type": "application/json"}
    connection.request("POST", "/api/sessions", body=orjson.dumps({"task": "load bench agent"}), headers=headers)
    response = connection.getresponse()
    session_id = orjson.loads(response.read())["id"]
    every = 10 / rate
    next_at, batch = time.monotonic(), 0
    while not stop.is_set():
        events = [{"kind": "tool_call", "payload": {"batch": batch, "i": i}} for i in range(10)]
        connection = timed(connection, f"/api/sessions/{session_id}/events", headers, "agent batch (10)", rec,
                           body=orjson.dumps({"events": events, "idempotency_key": f"b{batch}"}))  # fmt: skip
        batch += 1
        next_at += every
        stop.wait(max(0.0, next_at - time.monotonic()))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(port: int, setup: dict, viewers: int, seconds: float, rec: Recorder, every: float = 0.0) -> float:
    stop_at = time.monotonic() + seconds
    threads = [threading.Thread(target=viewer, args=(port, setup, stop_at, rec, n, every)) for n in range(viewers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=ROOT / "var" / "bench_session.jsonl")
    parser.add_argument("--viewers", default="1,20,50")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--ingest-rate", type=float, default=100.0, help="live events a second")
    parser.add_argument("--web-processes", type=int, default=2)
    parser.add_argument(
        "--paced",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="each viewer asks once every SECONDS (0.5: playback at normal speed) instead of closed load",
    )
    args = parser.parse_args()
    if not args.file.is_file():
        sys.exit(
            f"{args.file} is missing: `bench/import_bench.py --runs 1 --no-postgres --keep` generates and keeps it (docs/benchmarks.md)"
        )
    work = Path(tempfile.mkdtemp(prefix="replay-load-"))
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = f"sqlite:///{work / 'load.sqlite3'}"
    os.environ["REPLAY_DATA_DIR"] = str(work / "data")
    database = "PostgreSQL" if os.environ["DATABASE_URL"].startswith("postgres") else "SQLite"
    setup = prepare(args.file)
    port = free_port()
    server = start_server(port, args.web_processes, work / "serve.log")
    load = f"paced: a step every {args.paced:g} s per viewer" if args.paced else "closed load"
    print(f"{database}, manage.py serve with {args.web_processes} web processes, {os.cpu_count()} cores, {load}; "
          f"one agent ingesting {args.ingest_rate:g} events/s; {args.seconds:g} s per viewer count")  # fmt: skip
    results = []
    stop = threading.Event()
    ingest = Recorder()
    feeder = threading.Thread(target=agent, args=(port, setup, args.ingest_rate, stop, ingest))
    feeder.start()
    try:
        run(port, setup, 1, 3.0, Recorder())  # warm-up: every web process has its connection and caches
        for viewers in [int(v) for v in args.viewers.split(",")]:
            rec = Recorder()
            elapsed = run(port, setup, viewers, args.seconds, rec, args.paced)
            results.append((viewers, rec, elapsed))
    finally:
        stop.set()
        feeder.join()
        server.terminate()
        server.wait(timeout=30)
    base_rate = None
    print(
        f"\n{'viewers':>7}  {'endpoint':<20} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}  {'req/s':>7}  errors"
    )
    for viewers, rec, elapsed in results:
        total = sum(len(t) for t in rec.times.values())
        rate = total / elapsed
        base_rate = base_rate or rate
        for name, times in sorted(rec.times.items()):
            print(f"{viewers:>7}  {name:<20} {len(times):>6} {percentile(times, 50) * 1000:>8.0f} "
                  f"{percentile(times, 95) * 1000:>8.0f} {percentile(times, 99) * 1000:>8.0f}  "
                  f"{len(times) / elapsed:>7.1f}")  # fmt: skip
        print(f"{viewers:>7}  {'all':<20} {total:>6} {'':>8} {'':>8} {'':>8}  {rate:>7.1f}  {len(rec.errors)}"
              f"   throughput {rate / base_rate:.2f}x one viewer's")  # fmt: skip
        if rec.errors:
            print(f"         errors, first ones: {rec.errors[:5]}")
    batches = ingest.times.get("agent batch (10)", [])
    ingest_seconds = sum(elapsed for _, _, elapsed in results) + 3.0
    print(f"\nagent: {len(batches)} batches of 10 appended ({len(batches) * 10 / ingest_seconds:.0f} events/s of "
          f"{args.ingest_rate:g} asked), p95 {percentile(batches, 95) * 1000 if batches else 0:.0f} ms, "
          f"{len(ingest.errors)} errors {ingest.errors[:3]}")  # fmt: skip
    for viewers, rec, elapsed in results:
        if viewers == 20:
            step = percentile(rec.times.get("player step", [0]), 95) * 1000
            page = percentile(rec.times.get("replay page (1000)", [0]), 95) * 1000
            rate = sum(len(t) for t in rec.times.values()) / elapsed
            print(f"targets at 20 viewers: errors {len(rec.errors)} (0), player step p95 {step:.0f} ms (<= 250), "
                  f"replay page p95 {page:.0f} ms (<= 400), throughput {rate / base_rate:.2f}x (>= 1.5x)")  # fmt: skip


if __name__ == "__main__":
    main()
