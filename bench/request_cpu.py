"""CPU seconds per request of the two requests bench/load_bench.py makes, in process: Django's
WSGI handler with the whole middleware stack, the viewer's login cookie (a player step, the htmx
partial) or API key (a 1000-event replay page with contexts), the garbage collector tuned as a
web process tunes it. Process time, not wall time: on a machine shared with other work it moves
far less than load_bench.py's latencies, so two checkouts can be compared back to back.

    .venv/bin/python bench/request_cpu.py --file var/bench_session.jsonl [--steps 200 --pages 50 --rounds 3]
    .venv/bin/python bench/request_cpu.py --root /path/to/other/checkout --data /tmp/replay-cpu

On PostgreSQL: `.ci/with_postgres.py -- .venv/bin/python bench/request_cpu.py ...`: the session
is imported into DATABASE_URL's database (never point it at one you keep); otherwise SQLite in
`--data`.

`--data`: a directory kept between runs (the session is imported once into it; without it, a
fresh temporary one). `--root`: measure another checkout (its code and templates) on the same data.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=ROOT / "var" / "bench_session.jsonl")
    parser.add_argument("--data", type=Path, default=None, help="a directory to keep the database in")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = args.data or Path(tempfile.mkdtemp(prefix="replay-cpu-"))
    data.mkdir(parents=True, exist_ok=True)
    # PostgreSQL when DATABASE_URL names one (.ci/with_postgres.py sets it), else SQLite in `data`.
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{data / 'cpu.sqlite3'}")
    os.environ["REPLAY_DATA_DIR"] = str(data / "files")
    os.environ["REPLAY_DEMO"] = "1"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
    root = args.root.resolve()
    sys.path[:0] = [str(root), str(root / "bench")]
    os.chdir(root)
    # The setup (ids, cookie, keys) belongs to its database: a new PostgreSQL, on its own port,
    # gets the session imported again.
    setup_file = data / f"setup-{hashlib.sha256(os.environ['DATABASE_URL'].encode()).hexdigest()[:12]}.json"
    if not setup_file.exists():
        import load_bench  # the same session, viewer, cookie and keys as the load benchmark

        if not args.file.is_file():
            sys.exit(
                f"{args.file} is missing: `bench/import_bench.py --runs 1 --no-postgres --keep` generates and keeps it (docs/benchmarks.md)"
            )
        setup_file.write_text(json.dumps(load_bench.prepare(args.file)))
    setup = json.loads(setup_file.read_text())

    from django.core.wsgi import get_wsgi_application

    app = get_wsgi_application()
    from replay_site.serving import tune_garbage_collector

    tune_garbage_collector()

    def call(path: str, query: str, headers: dict[str, str]) -> None:
        environ = {
            "REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query, "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1:8000", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(b""),
            "wsgi.errors": sys.stderr, **headers,
        }  # fmt: skip
        status: list[str] = []
        b"".join(app(environ, lambda s, h, e=None: status.append(s)))
        if not status[0].startswith("200"):
            sys.exit(f"{path}?{query}: {status[0]}")

    session, events = setup["session"], setup["events"]
    page_headers = {"HTTP_COOKIE": setup["cookie"], "HTTP_HX_REQUEST": "true"}
    api_headers = {"HTTP_AUTHORIZATION": f"Bearer {setup['viewer_key']}"}
    kinds = {
        "player step": (args.steps, lambda rng: call(
            f"/sessions/{session}/", f"step={rng.randrange(events)}&speed=1&pace=steps", page_headers)),
        "replay page (1000)": (args.pages, lambda rng: call(
            f"/api/sessions/{session}/replay", f"offset={rng.randrange(events - 1000)}&limit=1000", api_headers)),
    }  # fmt: skip
    print(f"{root}: CPU ms per request, in process (mean / median / min of each round)")
    for name, (count, request) in kinds.items():
        warm = random.Random(0)
        for _ in range(10):
            request(warm)
        figures = []
        for n in range(args.rounds):
            rng = random.Random(n + 1)
            times = []
            for _ in range(count):
                started = time.process_time()
                request(rng)
                times.append((time.process_time() - started) * 1000)
            figures.append(f"{statistics.mean(times):.1f} / {statistics.median(times):.1f} / {min(times):.1f}")
        print(f"  {name:<20} {'   '.join(figures)}")


if __name__ == "__main__":
    main()
