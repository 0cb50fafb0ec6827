"""The cost of redaction at ingest: the same import with every built-in detector on, and with
redaction off, in one run (issue 22: target <= 1.3x).

    .venv/bin/python bench/redaction_bench.py [--file var/bench_session.jsonl] [--runs 2]

Each import runs in a fresh child process into a fresh SQLite file (what `import_sessions` runs:
`import_local_file`, the file kept as an upload is, then imported), alternating off and on so a
change in the machine's load falls on both; the medians are compared. With the rules on the
original is not kept (the default), so that import also deletes its kept copy afterwards; in both
the events store no source record (the file is kept, or not kept at all). The rules-on child
checks that the session verifies and prints how many values were redacted (none, for the bench
session, which holds no secrets: the figure is the cost of looking). No file? bench/import_bench.py
generates the 100k-event session (`--keep`). Compare ratios, not seconds: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from pathlib import Path
from sessions_app.formats import registry
from sessions_app.ingest.importing import import_local_file
from sessions_app.models import Project, RedactionRules
from sessions_app.redaction import DETECTORS

registry()
project = Project.get_default()
on = sys.argv[3] == "on"
if on:
    RedactionRules.objects.create(project=project, detectors=list(DETECTORS))
start, cpu = time.perf_counter(), time.process_time()
(outcome,) = import_local_file(path=Path(sys.argv[1]), project=project)
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
assert outcome.error is None, outcome.error
if on:
    from sessions_app.verification import verify_session
    assert verify_session(session=outcome.session).valid
print(json.dumps({"seconds": elapsed, "cpu": cpu, "events": outcome.events,
                  "redactions": outcome.redactions}))
"""


def run(path: Path, mode: str, workdir: Path) -> dict:
    folder = Path(tempfile.mkdtemp(dir=workdir))
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{folder}/bench.sqlite3",
        "REPLAY_DATA_DIR": str(folder / "data"),
        "REPLAY_DEBUG": "0",
    }
    process = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(ROOT), mode], env=env, capture_output=True, text=True
    )
    if process.returncode != 0:
        raise SystemExit(f"child failed:\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=ROOT / "var" / "bench_session.jsonl")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    if not args.file.is_file():
        raise SystemExit(f"{args.file} is missing: bench/import_bench.py --keep generates it")
    results: dict[str, list[dict]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(args.runs):
            for mode in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                result = run(args.file, mode, Path(workdir))
                results[mode].append(result)
                print(f"round {round_ + 1}, redaction {mode:3}: {result['seconds']:.2f} s "
                      f"(cpu {result['cpu']:.2f} s), {result['events']:,} events, "
                      f"redactions {result['redactions']}", flush=True)  # fmt: skip
    off = statistics.median(r["seconds"] for r in results["off"])
    on = statistics.median(r["seconds"] for r in results["on"])
    off_cpu = statistics.median(r["cpu"] for r in results["off"])
    on_cpu = statistics.median(r["cpu"] for r in results["on"])
    print(f"median import, redaction off: {off:.2f} s (cpu {off_cpu:.2f} s)")
    print(f"median import, every detector on: {on:.2f} s (cpu {on_cpu:.2f} s)")
    print(f"ratio on/off: {on / off:.2f}x wall, {on_cpu / off_cpu:.2f}x cpu (target <= 1.3x)")


if __name__ == "__main__":
    main()
