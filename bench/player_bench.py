"""The player page and one step's partial near the end of a 100,000-event session, against
rlm-code's own load_session of the same file, timed in one run.

    .venv/bin/python bench/player_bench.py [--steps 20000] [--runs 7] [--file PATH] [--tour]
    .venv/bin/python .ci/with_postgres.py -- .venv/bin/python bench/player_bench.py

1. Generates (unless --file) a native rlm-code session with rlm-code's SessionRecorder (the
   generator of bench/import_bench.py): 20,000 steps, about 105,000 events.
2. In a child process per database (a fresh temporary SQLite file; plus the PostgreSQL of
   DATABASE_URL when it is set), imports it with `importing.import_file`, logs a user in, sends
   each request once (warm-up; its answer is checked), then runs --runs rounds. Each round times
   rlm-code's `load_session(path)` + `get_summary()` (what an rlm-code user pays on every look,
   the yardstick) and then one request of each kind through Django's test Client, i.e. the
   whole stack (middleware, session login, the view, the templates):
     - the player page at an event 20 before the end (full page, what a deep link loads)
     - the step partial there (what each step, key press, scrub or play frame fetches: the
       step list window plus the out-of-band side panels)
     - the same partial with an event-type filter (types=llm_call,tool_call)
     - the charts partial (loaded when scrolled to; plotly.js itself excluded)
   With --tour, a tour of 8 stops over the session (one at that event) is made, and the page and
   the step partial are also asked for in tour mode (`&tour=<id>&stop=<N>`: the narration panel,
   out of band with every step), to compare with the same requests without it.
Prints medians, sizes and ratios, and the page's transferred size: its HTML plus every script,
style sheet and icon it references from our own static files (htmx included; plotly.js, 4.8 MB,
is only fetched with the charts and is excluded, as the target says), raw and gzipped.
Targets: a step partial in under 1/100 of rlm-code's load; the whole page under 500 KB before
charts. The machine is shared: compare ratios, not seconds.
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

CHILD = r"""
import gc, gzip, json, os, re, statistics, sys, time
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
import django
django.setup()
from pathlib import Path
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.db import connection
from django.test import Client
call_command("migrate", verbosity=0)
from sessions_app.ingest.importing import import_file
from sessions_app.models import Membership, Project, Role

path, runs, with_tour = Path(sys.argv[1]), int(sys.argv[3]), sys.argv[4] == "tour"
started = time.perf_counter()
outcome = import_file(path=path, project=Project.get_default())[0]
import_s = time.perf_counter() - started
assert outcome.error is None, outcome.error
session = outcome.session
user = get_user_model().objects.create_user(username="bench", password="bench-password")
# A viewer of the project, as a team member opening the player is (sessions_app/access.py).
Membership.objects.create(project=session.project, user=user, role=Role.VIEWER)
client = Client()
client.force_login(user)
from rlm_code.rlm.session_replay import load_session

seq = session.event_count - 20
base = f"/sessions/{session.pk}/"
requests = {
    "page": (f"{base}?step={seq}", {}),
    "step": (f"{base}?step={seq}&speed=1&pace=steps", {"HTTP_HX_REQUEST": "true"}),
    "step filtered": (f"{base}?step={seq}&types=llm_call&types=tool_call&speed=1&pace=steps", {"HTTP_HX_REQUEST": "true"}),
    "charts": (f"/sessions/{session.pk}/charts/", {"HTTP_HX_REQUEST": "true"}),
}
if with_tour:
    from sessions_app import tours
    from sessions_app.access import Actor

    author = get_user_model().objects.create_user(username="bench-maintainer", password="bench-password")
    Membership.objects.create(project=session.project, user=author, role=Role.MAINTAINER)
    tour = tours.create_tour(actor=Actor(user=author), project=session.project, title="Bench tour")
    seqs = [session.event_count * n // 8 for n in range(7)] + [seq]  # the last stop: the event asked for
    tours.set_stops(actor=Actor(user=author), tour=tour, stops=[
        tours.StopSpec(session=session.pk, seq=s, title=f"Stop at {s}", narration=f"Why event {s} **matters**.\n\n" * 20)
        for s in seqs
    ])
    params = f"&tour={tour.pk}&stop=8"
    requests["page tour"] = (f"{base}?step={seq}{params}", {})
    requests["step tour"] = (f"{base}?step={seq}&speed=1&pace=steps{params}", {"HTTP_HX_REQUEST": "true"})
bodies = {}
for name, (url, headers) in requests.items():  # warm-up, and the answers checked below
    response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    bodies[name] = response.content
assert f'"seq": {seq}' in bodies["page"].decode() and b"<html" in bodies["page"]
assert bodies["step"].lstrip().startswith(b'<section id="step-list"') and b'hx-swap-oob="true"' in bodies["step"]
# The panel names its event as people count (1-based) or, before issue 19, by its seq.
assert any(f"Context at event #{n}".encode() in bodies["step"] for n in (seq, seq + 1))
assert b"kind-llm_call" in bodies["step filtered"] and b"kind-step_end" not in bodies["step filtered"]
assert b'id="chart-data"' in bodies["charts"]
if with_tour:
    assert b"Stop 8 of 8" in bodies["page tour"] and b'id="tour-params"' in bodies["page tour"]
    assert bodies["step tour"].lstrip().startswith(b'<section id="step-list"')
    assert b'<aside id="tour-narration"' in bodies["step tour"] and b"Stop 8 of 8" in bodies["step tour"]

times = {name: [] for name in requests}
loads = []
for _ in range(runs):
    t0 = time.perf_counter()
    load_session(path).get_summary()
    loads.append(time.perf_counter() - t0)
    gc.collect()  # rlm-code's garbage is collected here, not during our requests
    for name, (url, headers) in requests.items():
        t0 = time.perf_counter()
        response = client.get(url, **headers)
        times[name].append(time.perf_counter() - t0)
        assert response.status_code == 200

# What the browser downloads for the page before the charts: the HTML and every asset it
# references from our own static files (plotly.js is only requested by the charts section).
html = bodies["page"].decode()
assets = {}
for ref in sorted(set(re.findall(r'(?:src|href)="/static/([^"]+)"', html))):
    found = finders.find(ref)
    assert found, ref
    assets[ref] = Path(found).read_bytes()
assert not any("plotly" in ref for ref in assets), assets.keys()
transfer = {
    "html": len(bodies["page"]), "html_gz": len(gzip.compress(bodies["page"])),
    "assets": {ref: [len(data), len(gzip.compress(data))] for ref, data in assets.items()},
}
transfer["total"] = transfer["html"] + sum(raw for raw, _ in transfer["assets"].values())
transfer["total_gz"] = transfer["html_gz"] + sum(gz for _, gz in transfer["assets"].values())

results = {"vendor": connection.vendor, "events": session.event_count, "steps": session.step_count,
           "seq": seq, "import_s": import_s, "load_s": statistics.median(loads),
           "requests": {name: {"url": requests[name][0], "median_s": statistics.median(times[name]),
                               "min_s": min(times[name]), "bytes": len(bodies[name])} for name in requests},
           "transfer": transfer}
print("RESULT " + json.dumps(results))
"""


def run_child(path: Path, database_url: str, runs: int, tour: bool = False) -> dict:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "replay_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(ROOT), str(runs), "tour" if tour else "-"],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"benchmark child failed on {database_url.split(':')[0]}")
    line = next(text for text in done.stdout.splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def report(result: dict) -> None:
    load_s = result["load_s"]
    print(
        f"\n== {result['vendor']}: {result['events']:,} events, {result['steps']:,} steps "
        f"(imported in {result['import_s']:.1f} s); player at event {result['seq']:,}"
    )
    print(f"rlm-code load_session + get_summary, interleaved with the requests: median {load_s:.2f} s")
    print(f"{'request':36} {'median':>10} {'min':>10} {'size':>10} {'load/this':>10}  target")
    targets = {"step": ">= 100x", "step filtered": ">= 100x", "step tour": ">= 100x"}
    for name, figure in result["requests"].items():
        print(
            f"{name:36} {figure['median_s'] * 1000:7.1f} ms {figure['min_s'] * 1000:7.1f} ms "
            f"{figure['bytes'] / 1e3:7.1f} KB {load_s / figure['median_s']:9.0f}x  {targets.get(name, '')}"
        )
    transfer = result["transfer"]
    print("player page transfer before charts (raw / gzip):")
    print(f"  {'HTML':34} {transfer['html'] / 1e3:7.1f} KB {transfer['html_gz'] / 1e3:7.1f} KB")
    for ref, (raw, gz) in transfer["assets"].items():
        print(f"  {'/static/' + ref:34} {raw / 1e3:7.1f} KB {gz / 1e3:7.1f} KB")
    print(f"  {'total':34} {transfer['total'] / 1e3:7.1f} KB {transfer['total_gz'] / 1e3:7.1f} KB   target < 500 KB")
    step = result["requests"]["step"]["median_s"]
    verdicts = {
        "step partial <= load/100": step <= load_s / 100,
        "page < 500 KB before charts": transfer["total"] < 500 * 1000,
    }
    if "step tour" in result["requests"]:
        verdicts["tour-mode step partial <= load/100"] = result["requests"]["step tour"]["median_s"] <= load_s / 100
    print("targets met: " + ", ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in verdicts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--file", type=Path, help="an existing native rlm-code JSONL to use")
    parser.add_argument("--tour", action="store_true", help="also time the page and the step partial in tour mode")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="replay-player-bench-")
    path = session_file(args.file, args.steps, Path(tmp.name))
    print("our figures: Django test Client, full stack (middleware, login session, view, templates);")
    print(f"medians of {args.runs} rounds, each round = one rlm-code load, then one request of each kind")

    for url in database_urls(Path(tmp.name)):
        report(run_child(path, url, args.runs, args.tour))
    tmp.cleanup()


if __name__ == "__main__":
    main()
