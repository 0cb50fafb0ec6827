"""The cost of redaction after the fact: "apply the project's current rules to this session" (the
RedactionJob, every built-in detector on) over the whole 100k-event bench session, against that
session's own import with redaction off, in one run (issue 22: target <= 2x the import's time).

    .venv/bin/python bench/redaction_after_bench.py [--file var/bench_session.jsonl] [--runs 2]
                                                    [--plant 100]

Each round runs in a fresh child process with a fresh SQLite file: the import (`import_local_file`,
what `import_sessions` runs, no rule on), then the job as a worker runs it (jobs.run_redaction:
every event read and scanned, the changed ones rewritten with their commitments kept, the other
stored copies, the kept original rewritten, then the purge: VACUUM and an emptied WAL). The
session is the bench's (bench/import_bench.py generates it; without --file one is generated
here), with a secret planted in one event out of `--plant` (an email, an OpenAI key and a
card number appended to the event's first string), so the job has something to rewrite; the
child checks the session verifies after. Printed: the medians of the import, of the job, of its
purge alone, and the ratio job/import. Compare ratios, not seconds: the machine is shared.
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
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
PLANTED = (
    " mail ada.lovelace@example.org, key sk-proj-4fR9tY2uI8oP1aS6dF3gH7jK0lZ5xC9vB4nM2qW8, card 4111 1111 1111 1111"
)

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from pathlib import Path
from sessions_app import jobs
from sessions_app.formats import registry
from sessions_app.ingest.importing import import_local_file
from sessions_app.models import Project, RedactionJob, RedactionRules
from sessions_app.redaction import DETECTORS
from sessions_app.stored_redaction import start_rules_job
from sessions_app.verification import verify_session

registry()
project = Project.get_default()
start = time.perf_counter()
(outcome,) = import_local_file(path=Path(sys.argv[1]), project=project)
imported = time.perf_counter() - start
assert outcome.error is None, outcome.error
RedactionRules.objects.create(project=project, detectors=list(DETECTORS), keep_originals=True)
job = start_rules_job(session=outcome.session, actor="bench")
start = time.perf_counter()
result = jobs.run_redaction(job_id=job.pk)
redacted = time.perf_counter() - start
job = RedactionJob.objects.get(pk=job.pk)
assert job.status == "done" and not job.error, job.error
checked = verify_session(session=outcome.session)
assert checked.valid, checked.findings[:3]
print(json.dumps({"import": imported, "job": redacted, "purge": result["purge"]["seconds"],
                  "events": outcome.events, "redacted_events": job.events_redacted, "counts": job.counts}))
"""


def plant(source: Path, target: Path, every: int) -> int:
    """A copy of `source` with PLANTED appended to the first string of every `every`th line."""
    planted = 0
    with source.open("rb") as lines, target.open("wb") as out:
        for number, line in enumerate(lines):
            if every and number % every == 0 and line.strip():
                record = orjson.loads(line)
                if _append_to_first_string(record):
                    line = orjson.dumps(record) + b"\n"
                    planted += 1
            out.write(line)
    return planted


def _append_to_first_string(value: Any) -> bool:
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(item, str) and key not in ("event_type", "type", "timestamp", "run_id", "kind"):
            value[key] = item + PLANTED
            return True
        if isinstance(item, (dict, list)) and _append_to_first_string(item):
            return True
    return False


def run(path: Path, workdir: Path, round_: int) -> dict:
    folder = workdir / f"round-{round_}"
    folder.mkdir()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{folder}/bench.sqlite3", "REPLAY_DATA_DIR": str(folder / "data"),
           "REPLAY_DEBUG": "0"}  # fmt: skip
    process = subprocess.run([sys.executable, "-c", CHILD, str(path), str(ROOT)], env=env, capture_output=True,
                             text=True)  # fmt: skip
    if process.returncode != 0:
        raise SystemExit(f"child failed:\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=ROOT / "var" / "bench_session.jsonl")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--plant", type=int, default=100, help="a secret in one event out of this many (0: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redaction_after_bench_") as tmp:
        workdir = Path(tmp)
        source = args.file
        if not source.is_file():
            sys.path.insert(0, str(ROOT / "bench"))
            from import_bench import generate

            source = workdir / "bench_session.jsonl"
            generate(source, 20_000)
        path = workdir / "planted.jsonl"
        planted = plant(source, path, args.plant)
        print(f"{source.name}: a secret planted in {planted:,} events", flush=True)
        results = []
        for round_ in range(args.runs):
            result = run(path, workdir, round_)
            results.append(result)
            print(f"round {round_ + 1}: import {result['import']:.2f} s, job {result['job']:.2f} s "
                  f"(purge {result['purge']:.2f} s), {result['events']:,} events, "
                  f"{result['redacted_events']:,} redacted {result['counts']}", flush=True)  # fmt: skip
    imported = statistics.median(r["import"] for r in results)
    job = statistics.median(r["job"] for r in results)
    purge = statistics.median(r["purge"] for r in results)
    print(f"median import, redaction off: {imported:.2f} s")
    print(f"median rules job over the session, every detector on: {job:.2f} s (of which the purge {purge:.2f} s)")
    print(f"ratio job/import: {job / imported:.2f}x (target <= 2x); without the purge {(job - purge) / imported:.2f}x")


if __name__ == "__main__":
    main()
