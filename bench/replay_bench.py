"""Replay reads against rlm-code's own load_session of the same file, timed in one run.

    .venv/bin/python bench/replay_bench.py [--steps 20000] [--runs 5] [--repeat 3] [--file PATH]
    .venv/bin/python .ci/with_postgres.py -- .venv/bin/python bench/replay_bench.py

1. Generates (unless --file) a native rlm-code session with rlm-code's SessionRecorder (the
   generator of bench/import_bench.py): 20,000 steps, about 105,000 events, ~50 MB.
2. In a child process per database (a fresh temporary SQLite file; plus the PostgreSQL of
   DATABASE_URL when it is set), imports the file with `importing.import_file` twice (two
   projects: two 20,000-step sessions for the compare), sends each request once (warm-up, and
   its answer is checked), then runs --runs rounds; each round times rlm-code's
   `load_session(path)` + `get_summary()` (what an rlm-code user pays on every look, the
   yardstick of every ratio) and then --repeat requests of each kind below, through Django's
   test Client, i.e. the whole stack (URL routing, API-key auth, ninja, the workflow, orjson).
   Interleaving keeps both sides under the same machine load. Timed requests:
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
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from import_bench import database_urls, session_file  # noqa: E402

PAGE_OFFSETS = (0, 50_000, 99_000)

CHILD = r"""
import gc, json, os, statistics, sys, time
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
import django
django.setup()
from pathlib import Path
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test import Client
call_command("migrate", verbosity=0)
from sessions_app.ingest.importing import import_file
from sessions_app.models import ApiKey, Membership, Project, Role

path, runs, offsets = Path(sys.argv[1]), int(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")]
repeat = int(sys.argv[5])
started = time.perf_counter()
a = import_file(path=path, project=Project.get_default())[0]
import_s = time.perf_counter() - started
b = import_file(path=path, project=Project.objects.create(name="Bench B", slug="bench-b"))[0]
assert a.error is None and b.error is None, (a.error, b.error)
session, other = a.session, b.session
# The key of a viewer of both projects, as a team member's script is (sessions_app/access.py).
user = get_user_model().objects.create_user(username="bench")
for project in (session.project, other.project):
    Membership.objects.create(project=project, user=user, role=Role.VIEWER)
_, key = ApiKey.create_key(name="bench", user=user)
client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

from rlm_code.rlm.session_replay import load_session

urls = {f"page {offset}": f"/api/sessions/{session.pk}/replay?offset={offset}&limit=1000&includeContext=true" for offset in offsets}
urls["step"] = f"/api/sessions/{session.pk}/steps/{session.step_count - 1}"
urls["summary"] = f"/api/sessions/{session.pk}/summary"
urls["compare"] = f"/api/compare?a={session.pk}&b={other.pk}"
bodies = {}
for name, url in urls.items():  # warm-up, and the answers checked below
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    bodies[name] = (json.loads(response.content), len(response.content))
# Rounds interleave rlm-code's load with our requests, so both see the same machine load.
times = {name: [] for name in urls}
loads = []
for _ in range(runs):
    t0 = time.perf_counter()
    load_session(path).get_summary()
    loads.append(time.perf_counter() - t0)
    gc.collect()  # rlm-code's garbage is collected here, not during our requests
    for name, url in urls.items():
        for _ in range(repeat):
            t0 = time.perf_counter()
            response = client.get(url)
            times[name].append(time.perf_counter() - t0)
            assert response.status_code == 200

def figure(name):
    return {"url": urls[name], "median_s": statistics.median(times[name]), "min_s": min(times[name]),
            "bytes": bodies[name][1]}

results = {"vendor": connection.vendor, "events": session.event_count, "steps": session.step_count,
           "import_s": import_s, "load_s": statistics.median(loads), "pages": []}
for offset in offsets:
    body = bodies[f"page {offset}"][0]
    assert len(body["steps"]) == min(1000, session.event_count - offset), len(body["steps"])
    assert body["steps"][0]["event"]["seq"] == offset and body["steps"][0]["context"] is not None
    results["pages"].append({**figure(f"page {offset}"), "offset": offset})
assert bodies["step"][0]["step"] == session.step_count
assert bodies["summary"][0]["total_steps"] == session.step_count
body = bodies["compare"][0]
assert body["a_steps"] == body["b_steps"] == session.step_count and body["first_divergence_step"] is None
for name in ("step", "summary", "compare"):
    results[name] = figure(name)
print("RESULT " + json.dumps(results))
"""


def run_child(path: Path, database_url: str, runs: int, repeat: int) -> dict:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "replay_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(ROOT), str(runs), ",".join(map(str, PAGE_OFFSETS)), str(repeat)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"benchmark child failed on {database_url.split(':')[0]}")
    line = next(text for text in done.stdout.splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def report(result: dict) -> None:
    load_s = result["load_s"]
    ms = lambda s: f"{s * 1000:8.1f} ms"  # noqa: E731
    print(
        f"\n== {result['vendor']}: {result['events']:,} events, {result['steps']:,} steps "
        f"(imported in {result['import_s']:.1f} s)"
    )
    print(f"rlm-code load_session + get_summary, interleaved with the requests: median {load_s:.2f} s")
    print(f"{'what':44} {'median':>11} {'size':>10} {'load/this':>10}  target")
    for page in result["pages"]:
        print(
            f"{'replay page offset=' + format(page['offset'], ','):44} {ms(page['median_s'])} "
            f"{page['bytes'] / 1e6:8.2f} MB {load_s / page['median_s']:9.0f}x  >= 40x, < 2 MB"
        )
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
    print(
        "targets met: "
        + ", ".join(
            f"{name}={'yes' if ok else 'NO'}"
            for name, ok in zip(("page time", "page size", "last/first", "single step", "compare"), verdicts)
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5, help="rounds, each with one rlm-code load")
    parser.add_argument("--repeat", type=int, default=3, help="requests of each kind per round")
    parser.add_argument("--file", type=Path, help="an existing native rlm-code JSONL to use")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="replay-bench-")
    path = session_file(args.file, args.steps, Path(tmp.name))

    print("our figures: Django test Client, full stack (routing, API-key auth, ninja, workflow, orjson);")
    print(f"{args.runs} rounds, each = one rlm-code load, then {args.repeat} requests of each kind; medians")

    for url in database_urls(Path(tmp.name)):
        report(run_child(path, url, args.runs, args.repeat))
    tmp.cleanup()


if __name__ == "__main__":
    main()
