"""Import speed and memory against rlm-code's own loader, measured in the same run.

    .venv/bin/python bench/import_bench.py [--steps 20000] [--runs 3] [--file PATH] [--keep]
                                           [--no-postgres]

Generates (unless --file is given) a native rlm-code session with rlm-code's own SessionRecorder:
20,000 steps, about 100,000 events and 50 MB. Then, for each of `--runs` rounds, times in a fresh
child process (so neither pollutes the other's memory figure):
  - rlm-code: `load_session(path)` + `get_summary()` (what it does on every look);
  - ours: `import_local_file` (what `import_sessions` runs: the file kept as an upload is, then
    imported) into a fresh SQLite database, and into a fresh database of a throw-away
    PostgreSQL server that the bench starts itself (.ci/with_postgres.py; or the server
    DATABASE_URL points to; `--no-postgres` skips it).
Prints the medians (wall clock, and CPU time of each child), the ratio ours/rlm (target <= 2.0),
events per second and peak RSS (target <= 250 MiB), and the time of the verification an import
queues (sessions_app/verification.py), run after the import's own figures are taken. The figures depend on the machine and its
load: compare ratios, not seconds; on a busy machine the CPU-time ratio is the steadier one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def generate(path: Path, steps: int) -> None:
    """A realistic session written by rlm-code's SessionRecorder (its own event building and
    json.dumps line format); only the file handle is kept open instead of reopened per event,
    which makes writing 100,000 events take seconds instead of minutes."""
    from rlm_code.rlm.session_replay import SessionRecorder

    class StreamingRecorder(SessionRecorder):
        def __init__(self, *args, handle, **kwargs):
            self._handle = handle
            super().__init__(*args, **kwargs)

        def _write_event(self, event) -> None:
            self._handle.write(json.dumps(event.to_dict()) + "\n")

        def _record_event(self, event_type, data, duration_ms=None):
            event = super()._record_event(event_type, data, duration_ms)
            self._events.clear()  # the recorder keeps every event; the bench needs none
            return event

    with path.open("w", encoding="utf-8") as handle:
        recorder = StreamingRecorder(
            session_id="session_bench", run_id="run_bench",
            task="Analyse the quarterly report and compute the growth figures per region",
            environment="pure_rlm", model="gpt-4o-mini", output_path=path, handle=handle,
        )  # fmt: skip
        notes: list[str] = []
        for step in range(1, steps + 1):
            recorder.record_step_start(step)
            if step % 2:
                recorder.record_llm_request(
                    f"Step {step}: given the variables so far, write the next code cell. " * 4,
                    model="gpt-4o-mini",
                )
                recorder.record_llm_response(
                    f"```python\nregion_{step % 12} = df[df.region == {step % 12}].sum()\n```",
                    tokens_in=820 + step % 50, tokens_out=64, duration_ms=640.0,
                )  # fmt: skip
            code = f"region_{step % 12} = df[df.region == {step % 12}].sum()\nprint(region_{step % 12})"
            action = {"action": "run_python", "code": code}
            recorder.record_action(action, rationale=f"Compute the totals of region {step % 12}")
            failed = step % 9 == 0
            observation = (
                {"success": False, "stdout": "", "stderr": f"KeyError: 'region_{step}'"}
                if failed
                else {"success": True, "output": f"revenue    {step * 17.5:.2f}\ncost    {step * 9.25:.2f}\n"}
            )
            reward = -0.1 if failed else 0.2
            recorder.record_result(observation, reward=reward, success=not failed, duration_ms=35.0, tokens_used=884)
            if step % 4 == 0:
                recorder.record_variable_update(f"region_{step % 12}", {"revenue": step * 17.5, "cost": step * 9.25})
            if step % 50 == 0:
                notes = (notes + [f"region {step % 12} checked at step {step}"])[-8:]
                recorder.record_memory_update(notes)
            recorder.record_step_end(
                action, observation, reward=reward, success=not failed, duration_ms=35.0, tokens_used=884
            )
        recorder.record_final("Growth per region computed", completed=True)
        recorder.end_session()


def session_file(path: Path | None, steps: int, folder: Path) -> Path:
    """The session a bench replays: the file given, or one of `steps` steps generated in `folder`."""
    if path is not None:
        return path
    path = folder / "bench_session.jsonl"
    started = time.perf_counter()
    generate(path, steps)
    print(
        f"generated {path.stat().st_size / 1e6:.1f} MB with rlm-code's SessionRecorder in {time.perf_counter() - started:.1f} s"
    )
    return path


def database_urls(folder: Path) -> list[str]:
    """A fresh SQLite file in `folder`, and the PostgreSQL of DATABASE_URL when it points there."""
    urls = [f"sqlite:///{folder}/bench.sqlite3"]
    if os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        urls.append(os.environ["DATABASE_URL"])
    return urls


RLM_CHILD = r"""
import json, resource, sys, time
from rlm_code.rlm.session_replay import load_session
start, cpu = time.perf_counter(), time.process_time()
replayer = load_session(sys.argv[1])
summary = replayer.get_summary()
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"seconds": elapsed, "cpu": cpu, "events": None, "steps": summary["total_steps"],
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

OURS_CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from pathlib import Path
from sessions_app.formats import registry
from sessions_app.ingest.importing import import_local_file
from sessions_app.models import Project

registry()  # import every format module now, as rlm-code's module is imported before its timing
project = Project.get_default()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start, cpu = time.perf_counter(), time.process_time()
outcomes = import_local_file(path=Path(sys.argv[1]), project=project)
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
outcome = outcomes[0]
assert outcome.error is None, outcome.error
own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
# The verification an import queues (a job in production), timed after the import's figures.
from sessions_app.verification import verify_session
verify_start = time.perf_counter()
verified = verify_session(session=outcome.session)
assert verified.valid, verified.findings[:3]
verify_seconds = time.perf_counter() - verify_start
print(json.dumps({"seconds": elapsed, "cpu": cpu, "events": outcome.events, "steps": outcome.steps,
                  "verify_seconds": verify_seconds,
                  "peak_mib": own_peak, "baseline_mib": before}))
"""


def run_child(code: str, args: list[str], env: dict[str, str]) -> dict:
    """Run one timed child; its `peak_mib` is the larger of its own ru_maxrss and the RSS of it
    and any children, sampled every 20 ms by a thread of this process. The peak covers the
    child's whole life, set-up included, which can only make it higher."""
    process = subprocess.Popen(
        [PYTHON, "-c", code, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak = [0]
    sampler = threading.Thread(target=_sample_tree, args=(process, peak), daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"child failed:\n{stderr[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["peak_mib"] = max(result["peak_mib"], peak[0] / 1024)
    return result


def _sample_tree(process: subprocess.Popen, peak: list[int]) -> None:
    while process.poll() is None:
        peak[0] = max(peak[0], _tree_rss_kib(process.pid))
        time.sleep(0.02)


_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def _tree_rss_kib(pid: int) -> int:
    """RSS of `pid` and all its descendants, as they are at this instant. Kept cheap (statm, one
    line), since the sampler shares the machine's two cores with what it measures."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * _PAGE_KIB
            with open(f"/proc/{current}/task/{current}/children", "rb") as children:
                pending.extend(int(child) for child in children.read().split())
        except (OSError, ValueError):
            pass  # exited meanwhile
    return total


def sqlite_env(workdir: Path, n: int) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = f"sqlite:///{workdir / f'bench_{n}.sqlite3'}"
    env["REPLAY_DATA_DIR"] = str(workdir / f"data_{n}")
    return env


class PostgresDatabases:
    """Fresh databases on the server DATABASE_URL points to, dropped afterwards."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.created: list[str] = []

    def env(self, n: int) -> dict[str, str]:
        from urllib.parse import urlsplit, urlunsplit

        import psycopg

        name = f"replay_import_bench_{os.getpid()}_{n}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        parts = urlsplit(self.url)
        env = dict(os.environ)
        env["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{name}"))
        env["REPLAY_DATA_DIR"] = tempfile.mkdtemp(prefix="replay_bench_data_")  # the kept copies
        return env

    def drop_all(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def report(label: str, runs: list[dict], reference: list[dict] | None) -> None:
    seconds = statistics.median(r["seconds"] for r in runs)
    cpu = statistics.median(r["cpu"] for r in runs)
    peak = max(r["peak_mib"] for r in runs)
    events = runs[0]["events"]
    runs_text = ", ".join(f"{r['seconds']:.2f}" for r in runs)
    line = f"{label:<22} median {seconds:6.2f} s (cpu {cpu:5.2f} s)   runs {runs_text}   peak RSS {peak:6.1f} MiB"
    if events:
        line += f"   {events / seconds:8,.0f} events/s"
    if reference:
        wall_ratio = seconds / statistics.median(r["seconds"] for r in reference)
        cpu_ratio = cpu / statistics.median(r["cpu"] for r in reference)
        line += f"   ratio ours/rlm {wall_ratio:.2f} (cpu {cpu_ratio:.2f})"
    print(line, flush=True)


def report_verify(label: str, runs: list[dict], reference: list[dict]) -> None:
    seconds = statistics.median(r["verify_seconds"] for r in runs)
    ratio = seconds / statistics.median(r["seconds"] for r in reference)
    print(f"{label:<22} median {seconds:6.2f} s   ratio verify/rlm load {ratio:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--file", type=Path, help="an existing native session file to use")
    parser.add_argument("--keep", action="store_true", help="keep the generated file")
    parser.add_argument("--no-postgres", action="store_true", help="import into SQLite only")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not args.no_postgres and not url.startswith(("postgres://", "postgresql://")):
        # Run again under a throw-away PostgreSQL server, so one command measures both databases.
        wrapper = [PYTHON, str(ROOT / ".ci" / "with_postgres.py"), "--", PYTHON, *sys.argv]
        raise SystemExit(subprocess.call(wrapper))

    with tempfile.TemporaryDirectory(prefix="import_bench_") as tmp:
        workdir = Path(tmp)
        path = args.file
        if path is None:
            path = workdir / "bench_session.jsonl"
            started = time.perf_counter()
            generate(path, args.steps)
            print(f"generated {path} in {time.perf_counter() - started:.1f} s")
        lines = sum(1 for _ in path.open("rb"))
        print(f"file: {lines:,} events, {path.stat().st_size / 1e6:.1f} MB, {args.steps:,} steps")

        rlm_runs, sqlite_runs, pg_runs = [], [], []
        postgres = None if args.no_postgres else PostgresDatabases(url)
        try:
            for n in range(args.runs):
                rlm_runs.append(run_child(RLM_CHILD, [str(path)], dict(os.environ)))
                sqlite_runs.append(run_child(OURS_CHILD, [str(path), str(ROOT)], sqlite_env(workdir, n)))
                if postgres is not None:
                    pg_runs.append(run_child(OURS_CHILD, [str(path), str(ROOT)], postgres.env(n)))
        finally:
            if postgres is not None:
                postgres.drop_all()

        print(f"rlm-code steps: {rlm_runs[0]['steps']:,}; ours: {sqlite_runs[0]['steps']:,} steps, "
              f"{sqlite_runs[0]['events']:,} events")  # fmt: skip
        report("rlm-code load_session", rlm_runs, None)
        report("ours, SQLite", sqlite_runs, rlm_runs)
        report_verify("verify, SQLite", sqlite_runs, rlm_runs)
        if pg_runs:
            report("ours, PostgreSQL", pg_runs, rlm_runs)
            report_verify("verify, PostgreSQL", pg_runs, rlm_runs)
        print(f"our process before importing (Django loaded): {sqlite_runs[0]['baseline_mib']:.1f} MiB; "
              f"{sys.implementation.name} {sys.version.split()[0]}")  # fmt: skip
        if args.keep and args.file is None:
            kept = ROOT / "var" / path.name
            kept.parent.mkdir(exist_ok=True)
            path.replace(kept)
            print(f"kept {kept}")


if __name__ == "__main__":
    main()
