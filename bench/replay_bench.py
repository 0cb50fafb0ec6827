"""Replay reads against rlm-code's own load_session of the same file, timed in one run.

    .venv/bin/python bench/replay_bench.py [--steps 20000] [--runs 5] [--file PATH]
    .venv/bin/python .ci/with_postgres.py -- .venv/bin/python bench/replay_bench.py

1. Generates (unless --file) a native rlm-code session with rlm-code's SessionRecorder (the
   generator of bench/import_bench.py): 20,000 steps, about 105,000 events, ~50 MB.
2. Times rlm-code's `load_session(path)` + `get_summary()` on it (median of 3): what an rlm-code
   user pays on every look, and the yardstick for every ratio below.
3. In a child process per database (a fresh temporary SQLite file; plus the PostgreSQL of
   DATABASE_URL when it is set), imports the file with `importing.import_file` twice (two
   projects: two 20,000-step sessions for the compare), then times through Django's test Client,
   i.e. the whole stack (URL routing, API-key auth, ninja, the workflow, orjson), one warm-up
   request then the median of --runs:
     - GET /api/sessions/{id}/replay?offset=N&limit=1000&includeContext=true, N = 0, 50,000, 99,000
     - GET /api/sessions/{id}/steps/{last}  (a single step at the end)
     - GET /api/sessions/{id}/summary
     - GET /api/compare?a=..&b=..            (two 20,000-step sessions, identical: the worst case,
                                             the divergence walk reads both step lists to the end)
Prints medians, response sizes, last/first page ratio and each figure's ratio to the load.
Targets: page <= 1/40 of the load and < 2 MB, last/first <= 1.5, one step <= 1/400 of the load,
compare <= 1/4 of the load. The machine is shared: compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

PAGE_OFFSETS = (0, 50_000, 99_000)

CHILD = r"""
import json, os, statistics, sys, time
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
import django
django.setup()
from pathlib import Path
from django.core.management import call_command
from django.db import connection
from django.test import Client
call_command("migrate", verbosity=0)
from sessions_app.importing import import_file
from sessions_app.models import ApiKey, Project

path, runs, offsets = Path(sys.argv[1]), int(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")]
started = time.perf_counter()
a = import_file(path=path, project=Project.get_default())[0]
import_s = time.perf_counter() - started
b = import_file(path=path, project=Project.objects.create(name="Bench B", slug="bench-b"))[0]
assert a.error is None and b.error is None, (a.error, b.error)
session, other = a.session, b.session
_, key = ApiKey.create_key(name="bench")
client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

def measure(url):
    response = client.get(url)  # warm-up
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - t0)
        assert response.status_code == 200
    return {"url": url, "median_s": statistics.median(times), "min_s": min(times), "bytes": len(response.content),
            "body": json.loads(response.content)}

results = {"vendor": connection.vendor, "events": session.event_count, "steps": session.step_count,
           "import_s": import_s, "pages": []}
for offset in offsets:
    m = measure(f"/api/sessions/{session.pk}/replay?offset={offset}&limit=1000&includeContext=true")
    body = m.pop("body")
    assert len(body["steps"]) == min(1000, session.event_count - offset), len(body["steps"])
    assert body["steps"][0]["event"]["seq"] == offset and body["steps"][0]["context"] is not None
    m["offset"] = offset
    results["pages"].append(m)
m = measure(f"/api/sessions/{session.pk}/steps/{session.step_count - 1}")
assert m.pop("body")["step"] == session.step_count
results["step"] = m
m = measure(f"/api/sessions/{session.pk}/summary")
assert m.pop("body")["total_steps"] == session.step_count
results["summary"] = m
m = measure(f"/api/compare?a={session.pk}&b={other.pk}")
body = m.pop("body")
assert body["a_steps"] == body["b_steps"] == session.step_count and body["first_divergence_step"] is None
results["compare"] = m
print("RESULT " + json.dumps(results))
"""


def time_rlm_load(path: Path, runs: int) -> tuple[float, dict]:
    from rlm_code.rlm.session_replay import load_session

    times = []
    summary: dict = {}
    for _ in range(runs):
        started = time.perf_counter()
        summary = load_session(path).get_summary()
        times.append(time.perf_counter() - started)
    return statistics.median(times), summary


def run_child(path: Path, database_url: str, runs: int) -> dict:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "replay_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(ROOT), str(runs), ",".join(map(str, PAGE_OFFSETS))],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"benchmark child failed on {database_url.split(':')[0]}")
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def report(result: dict, load_s: float) -> None:
    ms = lambda s: f"{s * 1000:8.1f} ms"  # noqa: E731
    print(f"\n== {result['vendor']}: {result['events']:,} events, {result['steps']:,} steps "
          f"(imported in {result['import_s']:.1f} s)")
    print(f"{'what':44} {'median':>11} {'size':>10} {'load/this':>10}  target")
    for page in result["pages"]:
        print(f"{'replay page offset=' + format(page['offset'], ','):44} {ms(page['median_s'])} "
              f"{page['bytes'] / 1e6:8.2f} MB {load_s / page['median_s']:9.0f}x  >= 40x, < 2 MB")
    first, last = result["pages"][0]["median_s"], result["pages"][-1]["median_s"]
    print(f"{'last/first page':44} {last / first:11.2f} {'':>10} {'':>10}  <= 1.5")
    for name, label, target in (
        ("step", "single step at the end", ">= 400x"),
        ("summary", "summary", ""),
        ("compare", "compare two 20,000-step sessions", ">= 4x"),
    ):
        m = result[name]
        print(f"{label:44} {ms(m['median_s'])} {m['bytes'] / 1e3:7.1f} KB {load_s / m['median_s']:9.0f}x  {target}")
    verdicts = [
        all(p["median_s"] <= load_s / 40 for p in result["pages"]),
        all(p["bytes"] < 2 * 1024 * 1024 for p in result["pages"]),
        last / first <= 1.5,
        result["step"]["median_s"] <= load_s / 400,
        result["compare"]["median_s"] <= load_s / 4,
    ]
    print("targets met: " + ", ".join(
        f"{name}={'yes' if ok else 'NO'}"
        for name, ok in zip(("page time", "page size", "last/first", "single step", "compare"), verdicts)
    ))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--file", type=Path, help="an existing native rlm-code JSONL to use")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="replay-bench-")
    path = args.file
    if path is None:
        from import_bench import generate

        path = Path(tmp.name) / "bench_session.jsonl"
        started = time.perf_counter()
        generate(path, args.steps)
        print(f"generated {path.stat().st_size / 1e6:.1f} MB with rlm-code's SessionRecorder in {time.perf_counter() - started:.1f} s")

    load_s, summary = time_rlm_load(path, 3)
    print(f"rlm-code load_session + get_summary: median {load_s:.2f} s over 3 runs "
          f"({summary['total_steps']:,} steps)")
    print("(our figures: Django test Client, full stack: routing, API-key auth, ninja, workflow, orjson)")

    targets = [f"sqlite:///{tmp.name}/bench.sqlite3"]
    if os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        targets.append(os.environ["DATABASE_URL"])
    for url in targets:
        report(run_child(path, url, args.runs), load_s)
    tmp.cleanup()


if __name__ == "__main__":
    main()
