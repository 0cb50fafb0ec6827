"""The evidence bundle of the 100k-event bench session: export time and memory against rlm-code's
load of the same file in the same run, and the offline player's steps in headless Chromium.

    .venv/bin/python bench/bundle_bench.py [--file var/bench_session.jsonl] [--runs 3] [--steps 60]

1. Imports the file (unless it is missing: then generates one as bench/import_bench.py does)
   with `import_local_file` into a fresh SQLite database (the original kept, as an upload is),
   in a child process.
2. --runs rounds, each of two fresh child processes: rlm-code's `load_session` + `get_summary`
   of the file (the yardstick), then `bundles.stream_bundle` of the imported session written to
   a file (what GET /api/sessions/{id}/bundle streams). Peak RSS of each child is the larger of
   its ru_maxrss and the RSS sampled every 20 ms, Django's set-up included.
   Targets: export <= 2x the load (medians), peak <= 300 MiB.
3. Opens the last bundle's index.html from disk (file://, every other request blocked) in
   headless Chromium (/usr/bin/chromium) and times: the load until the first step shows, then
   --steps steps with the keyboard at the start, in the middle and at the end, and as many jumps
   of the scrubber to random places; each timed inside the page from the key event to the next
   frame having been produced (requestAnimationFrame, then a task). Target: each step <= 100 ms.

It prints its figures; it is never a test. The machine is shared: compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from import_bench import RLM_CHILD, run_child, session_file  # noqa: E402

CHROMIUM = "/usr/bin/chromium"

_SETUP = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
import django
django.setup()
"""

IMPORT_CHILD = (
    _SETUP
    + r"""
from django.core.management import call_command
call_command("migrate", verbosity=0)
from pathlib import Path
from sessions_app.ingest.importing import import_local_file
from sessions_app.models import Project
(outcome,) = import_local_file(path=Path(sys.argv[1]), project=Project.get_default())
assert outcome.error is None, outcome.error
print(json.dumps({"session": outcome.session.pk, "events": outcome.events, "peak_mib": 0}))
"""
)

EXPORT_CHILD = (
    _SETUP
    + r"""
from sessions_app.bundles import stream_bundle
from sessions_app.models import Session
session = Session.objects.select_related("project").get(pk=int(sys.argv[1]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start, cpu = time.perf_counter(), time.process_time()
chunks = largest = written = 0
with open(sys.argv[3], "wb") as out:
    for chunk in stream_bundle(session=session, exported_by="bench"):
        out.write(chunk)
        chunks += 1
        largest = max(largest, len(chunk))
        written += len(chunk)
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"seconds": elapsed, "cpu": cpu, "bytes": written, "chunks": chunks, "largest_chunk": largest,
                  "baseline_mib": before, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
)

# One step, timed inside the page: from the key event to the next frame having been produced.
STEP = """async (key) => {
  const t0 = performance.now();
  document.dispatchEvent(new KeyboardEvent("keydown", {key: key, bubbles: true}));
  await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
  return performance.now() - t0;
}"""
JUMP = """async (index) => {
  const scrubber = document.getElementById("scrubber");
  const t0 = performance.now();
  scrubber.value = String(index);
  scrubber.dispatchEvent(new Event("input", {bubbles: true}));
  await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
  return performance.now() - t0;
}"""


def export_rounds(path: Path, workdir: Path, runs: int) -> tuple[list[dict], list[dict], Path, int]:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{workdir / 'bundle_bench.sqlite3'}",
           "REPLAY_DATA_DIR": str(workdir / "data"), "DJANGO_SETTINGS_MODULE": "replay_site.settings"}  # fmt: skip
    started = time.perf_counter()
    imported = run_child(IMPORT_CHILD, [str(path), str(ROOT)], env)
    print(f"imported {imported['events']:,} events in {time.perf_counter() - started:.1f} s (SQLite)")
    loads, exports = [], []
    bundle = workdir / "bundle.zip"
    for _ in range(runs):
        loads.append(run_child(RLM_CHILD, [str(path)], dict(os.environ)))
        exports.append(run_child(EXPORT_CHILD, [str(imported["session"]), str(ROOT), str(bundle)], env))
    return loads, exports, bundle, imported["events"]


def browse(bundle: Path, workdir: Path, steps: int) -> dict:
    from playwright.sync_api import sync_playwright

    folder = workdir / "unpacked"
    with zipfile.ZipFile(bundle) as archive:
        archive.extract("index.html", folder)
    page_path = folder / "index.html"
    url = page_path.as_uri()
    blocked: list[str] = []
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1280, "height": 900})

        def route(route) -> None:
            if route.request.url.startswith("file://"):
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_default_timeout(300_000)
        t0 = time.perf_counter()
        page.goto(url, wait_until="commit")
        page.locator("#position").filter(has_text="event 1 of").wait_for()
        load_s = time.perf_counter() - t0
        count = int(page.evaluate("document.getElementById('scrubber').max")) + 1
        timings: dict[str, list[float]] = {"start": [], "middle": [], "end": [], "scrubber jumps": []}
        for _ in range(steps):
            timings["start"].append(page.evaluate(STEP, "ArrowRight"))
        page.evaluate(JUMP, int(count) // 2)
        for _ in range(steps):
            timings["middle"].append(page.evaluate(STEP, "ArrowRight"))
        page.evaluate(JUMP, int(count) - 1)
        for _ in range(steps):
            timings["end"].append(page.evaluate(STEP, "ArrowLeft"))
        rng = random.Random(18)
        for _ in range(steps):
            timings["scrubber jumps"].append(page.evaluate(JUMP, rng.randrange(int(count))))
        # Round trips through Playwright's real keyboard (protocol overhead included).
        pressed = []
        for _ in range(min(steps, 30)):
            t = time.perf_counter()
            page.keyboard.press("ArrowRight")
            page.locator("#event-title").text_content()
            pressed.append((time.perf_counter() - t) * 1000)
        timings["keyboard.press round trip"] = pressed
        rows = page.evaluate("document.querySelectorAll('#steps .row').length")
        heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null")
        browser.close()
    return {"load_s": load_s, "events": int(count), "timings": timings, "rows": rows, "heap": heap,
            "html_mb": page_path.stat().st_size / 1e6, "blocked": blocked, "errors": errors}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=ROOT / "var" / "bench_session.jsonl")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60, help="steps timed at each place in the player")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="replay-bundle-bench-") as tmp:
        workdir = Path(tmp)
        path = session_file(args.file if args.file.is_file() else None, 20_000, workdir)
        print(f"session file: {path} ({path.stat().st_size / 1e6:.1f} MB)")
        loads, exports, bundle, events = export_rounds(path, workdir, args.runs)
        load_s = statistics.median(r["seconds"] for r in loads)
        export_s = statistics.median(r["seconds"] for r in exports)
        export_cpu = statistics.median(r["cpu"] for r in exports)
        load_cpu = statistics.median(r["cpu"] for r in loads)
        peak = max(r["peak_mib"] for r in exports)
        last = exports[-1]
        print(f"\n== bundle export, {events:,} events, {args.runs} rounds (medians)")
        print(
            f"rlm-code load_session + get_summary: {load_s:6.2f} s  (cpu {load_cpu:.2f} s), peak {max(r['peak_mib'] for r in loads):.0f} MiB"
        )
        print(f"bundle export (stream_bundle)     : {export_s:6.2f} s  (cpu {export_cpu:.2f} s), peak {peak:.0f} MiB "
              f"(Django set-up alone {last['baseline_mib']:.0f} MiB)")  # fmt: skip
        print(f"ratio export/load: {export_s / load_s:.2f} (cpu {export_cpu / load_cpu:.2f})   target <= 2.0")
        print(
            f"bundle: {last['bytes'] / 1e6:.1f} MB in {last['chunks']:,} chunks, largest {last['largest_chunk'] / 1e6:.2f} MB"
        )
        with zipfile.ZipFile(bundle) as archive:
            for info in archive.infolist():
                print(f"  {info.filename:32} {info.file_size / 1e6:9.2f} MB -> {info.compress_size / 1e6:8.2f} MB")
        print(f"targets met: time={'yes' if export_s <= 2 * load_s else 'NO'}, memory={'yes' if peak <= 300 else 'NO'}")

        sys.path.insert(0, str(ROOT))
        from sessions_app.bundle_reader import read_bundle  # no Django set-up needed

        started = time.perf_counter()
        read_bundle(bundle)
        print(f"read_bundle (signature, hashes, chain of every event): {time.perf_counter() - started:.2f} s")

        seen = browse(bundle, workdir, args.steps)
        print(
            f"\n== offline player (index.html {seen['html_mb']:.1f} MB, {seen['events']:,} events), headless Chromium"
        )
        print(f"open from disk until the first step shows: {seen['load_s']:.2f} s; JS heap "
              f"{(seen['heap'] or 0) / 2**20:.0f} MiB; step-list rows in the DOM: {seen['rows']}")  # fmt: skip
        worst = 0.0
        for name, values in seen["timings"].items():
            print(
                f"  {name:28} median {statistics.median(values):7.1f} ms   max {max(values):7.1f} ms   (n={len(values)})"
            )
            if name != "keyboard.press round trip":
                worst = max(worst, max(values))
        print(f"requests outside the file: {len(seen['blocked'])}; page errors: {len(seen['errors'])}")
        print(f"target met: each step <= 100 ms: {'yes' if worst <= 100 else 'NO'} (worst {worst:.1f} ms)")


if __name__ == "__main__":
    main()
