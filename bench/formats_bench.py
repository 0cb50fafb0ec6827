"""Reading and import speed and memory of the AgentLens, flux0 and daycare formats.

    .venv/bin/python bench/formats_bench.py [--events 20000,100000] [--runs 1] [--reading-only]
    .venv/bin/python .ci/with_postgres.py -- .venv/bin/python bench/formats_bench.py

First the reading alone: `iter_records` (ijson) over an AgentLens `{"events": [...]}` document of
100,000 records of about 300 bytes, pretty-printed and on one line: seconds (median of 3),
records per second and the peak of Python's traced memory while reading (a separate pass).

Then the imports: generates realistic files of each size (AgentLens as one pretty-printed JSON
array holding two interleaved sessions, so both the document reader and the per-session spool are
exercised; AgentLens as JSON lines; a flux0 recording of short turns streamed in many chunks; a
daycare history of run_python blocks), then imports each with `import_file` into a fresh SQLite
database (and PostgreSQL when DATABASE_URL points there) in a child process, and prints seconds,
events per second and the child's peak RSS. Memory must not grow with the file: compare the peak
RSS of the two sizes. There is no reference importer for these formats; the figures depend on the
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_bench import PostgresDatabases, run_child, sqlite_env  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sessions_app.formats.agentlens import source_hash  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 2, 8, 10, 30, tzinfo=UTC)

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from pathlib import Path
from sessions_app.ingest.importing import import_file
from sessions_app.models import Project
project = Project.get_default()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start = time.perf_counter()
outcomes = import_file(path=Path(sys.argv[1]), project=project)
elapsed = time.perf_counter() - start
for outcome in outcomes:
    assert outcome.error is None, outcome.error
    assert not outcome.problems, outcome.problems[:3]
print(json.dumps({"seconds": elapsed, "events": sum(o.events for o in outcomes),
                  "sessions": len(outcomes), "format": outcomes[0].format,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "baseline_mib": before}))
"""


def _iso(ms: float) -> str:
    return (T0 + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def agentlens_events(count: int):
    """Two sessions, interleaved: llm call/response, cost, tool call/response (or error)."""
    prev = {"ses_a": None, "ses_b": None}
    for i in range(count):
        session = "ses_a" if i % 3 else "ses_b"
        n = i // 6
        phase = i % 6
        call = f"c{session}{n}"
        if phase in (0, 1):
            kind, payload = (
                "llm_call",
                {
                    "callId": call,
                    "provider": "openai",
                    "model": "gpt-4o",
                    "messages": [{"role": "user", "content": f"Plan step {n}: summarise ticket {n % 97} " * 6}],
                },
            )
        elif phase in (2, 3):
            kind, payload = (
                "llm_response",
                {
                    "callId": call,
                    "provider": "openai",
                    "model": "gpt-4o",
                    "completion": f"Ticket {n % 97} is a duplicate of #{n % 13}. " * 4,
                    "finishReason": "stop",
                    "usage": {"inputTokens": 820, "outputTokens": 64, "totalTokens": 884},
                    "costUsd": 0.0031,
                    "latencyMs": 640,
                },
            )
        elif phase == 4:
            kind, payload = "tool_call", {"toolName": "search", "callId": f"t{call}", "arguments": {"q": f"ticket {n}"}}
        else:
            failed = n % 9 == 0
            kind = "tool_error" if failed else "tool_response"
            payload = {
                "callId": f"t{call}",
                "toolName": "search",
                "durationMs": 35,
                **({"error": "timeout"} if failed else {"result": {"hits": n % 5}}),
            }
        event = {
            "id": f"evt{i:08d}",
            "timestamp": _iso(i * 50),
            "sessionId": session,
            "agentId": "bench-bot",
            "eventType": kind,
            "severity": "error" if kind == "tool_error" else "info",
            "payload": payload,
            "metadata": {},
            "prevHash": prev[session],
        }
        # AgentLens's own hash, which the importer checks (formats/agentlens.py).
        event["hash"] = source_hash(event)
        prev[session] = event["hash"]
        yield event


def write_agentlens_array(path: Path, count: int) -> None:
    with path.open("w") as out:
        out.write("[\n")
        for i, event in enumerate(agentlens_events(count)):
            out.write((",\n" if i else "") + json.dumps(event, indent=2))
        out.write("\n]\n")


def write_agentlens_lines(path: Path, count: int) -> None:
    with path.open("w") as out:
        for event in agentlens_events(count):
            out.write(json.dumps(event) + "\n")


def write_flux0(path: Path, count: int) -> None:
    """Turns of: user message, processing, typing, 20 text chunks, ready, completed."""
    with path.open("w") as out:
        offset = 0

        def record(kind: str, payload: dict) -> None:
            nonlocal offset
            out.write(
                json.dumps(
                    {
                        "id": f"r{offset:08d}",
                        "recording_id": "RecBench01",
                        "offset": offset,
                        "kind": kind,
                        "created_at": (T0 + timedelta(milliseconds=offset * 40)).isoformat(),
                        "payload": payload,
                    }
                )
                + "\n"
            )
            offset += 1

        record("header", {"source_session_id": "bench_session"})
        turn = 0
        while offset < count:
            turn += 1
            corr = f"corr{turn}"
            record(
                "emitted",
                {
                    "id": f"u{turn}",
                    "source": "user",
                    "type": "message",
                    "correlation_id": corr,
                    "data": {"type": "message", "parts": [{"type": "content", "content": f"Question {turn}?"}]},
                    "metadata": {},
                },
            )
            for status in ("processing", "typing"):
                record(
                    "emitted",
                    {
                        "id": f"run{turn}",
                        "source": "ai_agent",
                        "type": "status",
                        "correlation_id": corr,
                        "data": {"type": "status", "status": status, "data": {}},
                        "metadata": None,
                    },
                )
            for piece in range(20):
                record(
                    "chunk",
                    {
                        "correlation_id": corr,
                        "event_id": f"run{turn}",
                        "seq": 0,
                        "patches": [{"op": "add", "path": "/-", "value": f"word{piece} "}],
                        "metadata": {"agent_id": "agent01", "agent_name": "bench"},
                    },
                )
            for status, event_id in (("ready", f"run{turn}"), ("completed", corr)):
                record(
                    "emitted",
                    {
                        "id": event_id,
                        "source": "ai_agent",
                        "type": "status",
                        "correlation_id": corr,
                        "data": {"type": "status", "status": status, "data": {}},
                        "metadata": None,
                    },
                )


def write_daycare(path: Path, count: int) -> None:
    """Blocks of: assistant_message (run_python), rlm_start, 3 inner calls, rlm_complete, tool_result."""
    at = 1760520000000
    written = 0
    with path.open("w") as out:

        def record(value: dict) -> None:
            nonlocal at, written
            at += 25
            out.write(json.dumps({**value, "at": at}) + "\n")
            written += 1

        record({"type": "user_message", "text": "Process the queue.", "files": []})
        block = 0
        while written < count:
            block += 1
            call = f"toolu_{block}"
            code = f"for i in range(3):\n    fetch(item={block}*10+i)\n'done {block}'"
            record(
                {
                    "type": "assistant_message",
                    "content": [{"type": "toolCall", "id": call, "name": "run_python", "arguments": {"code": code}}],
                    "tokens": {
                        "provider": "anthropic",
                        "model": "claude-sonnet-4-5",
                        "size": {"input": 900, "output": 60, "cacheRead": 0, "cacheWrite": 0, "total": 960},
                    },
                }
            )
            record(
                {"type": "rlm_start", "toolCallId": call, "code": code, "preamble": "def fetch(item: int) -> str: ..."}
            )
            for i in range(3):
                record(
                    {
                        "type": "rlm_tool_call",
                        "toolCallId": call,
                        "snapshotId": f"snap{block}_{i}",
                        "printOutput": [],
                        "toolCallCount": i,
                        "toolName": "fetch",
                        "toolArgs": {"item": block * 10 + i},
                    }
                )
                record(
                    {
                        "type": "rlm_tool_result",
                        "toolCallId": call,
                        "toolName": "fetch",
                        "toolResult": "ok",
                        "toolIsError": block % 11 == 0,
                    }
                )
            record(
                {
                    "type": "rlm_complete",
                    "toolCallId": call,
                    "output": f"done {block}",
                    "printOutput": [],
                    "toolCallCount": 3,
                    "isError": False,
                }
            )
            record(
                {"type": "tool_result", "toolCallId": call, "output": {"toolMessage": {"isError": False}, "files": []}}
            )


def small_agentlens_events(count: int):
    """Tool calls and their responses of one session, about 300 bytes each as compact JSON."""
    prev = None
    for i in range(count):
        call = f"t{i // 2}"
        if i % 2 == 0:
            kind, payload = "tool_call", {"toolName": "search", "callId": call, "arguments": {"q": f"ticket {i // 2}"}}
        else:
            kind, payload = (
                "tool_response",
                {"callId": call, "toolName": "search", "durationMs": 35, "result": {"hits": i % 5}},
            )
        event = {
            "id": f"evt{i:08d}",
            "timestamp": _iso(i * 50),
            "sessionId": "ses_a",
            "agentId": "bench-bot",
            "eventType": kind,
            "severity": "info",
            "payload": payload,
            "metadata": {},
            "prevHash": prev,
        }
        prev = event["hash"] = f"{i * 2654435761 % 2**128:032x}"  # read, never verified, here
        yield event


def reading_figures(workdir: Path, count: int = 100_000) -> None:
    import ijson

    from sessions_app.canonical import Problems
    from sessions_app.formats import Source
    from sessions_app.formats.records import iter_records

    events = list(small_agentlens_events(count))
    layouts = {
        "pretty-printed": lambda out: out.write(json.dumps({"events": events}, indent=2)),
        "one line": lambda out: out.write(json.dumps({"events": events})),
    }
    for layout, write in layouts.items():
        path = workdir / "reading.json"
        with path.open("w") as out:
            write(out)
        size = path.stat().st_size
        lines = path.read_bytes().count(b"\n") + 1

        def read(path: Path = path) -> int:
            problems = Problems()
            read_count = sum(1 for _ in iter_records(Source(path=path), problems, body_keys=("events",)))
            assert read_count == count and problems.count == 0, (read_count, problems.to_list()[:3])
            return read_count

        times = []
        for _ in range(3):
            started = time.perf_counter()
            read()
            times.append(time.perf_counter() - started)
        tracemalloc.start()
        read()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        bare = []  # ijson alone, as the floor: no lines, no records, no checks
        for _ in range(3):
            started = time.perf_counter()
            with path.open("rb") as stream:
                assert sum(1 for _ in ijson.items(stream, "events.item", use_float=True)) == count
            bare.append(time.perf_counter() - started)
        seconds = statistics.median(times)
        print(
            f"reading {layout:<15} {count:>7,} records {size / 1e6:6.1f} MB {lines:>9,} lines"
            f"  {seconds:6.2f} s (runs {', '.join(f'{t:.2f}' for t in times)})"
            f"  {count / seconds:9,.0f} records/s  traced peak {peak / 2**20:5.1f} MiB"
            f"  (ijson.items alone: {statistics.median(bare):.2f} s)",
            flush=True,
        )
        path.unlink()


WRITERS = {
    "agentlens array (2 sessions)": ("agentlens.json", write_agentlens_array),
    "agentlens JSON lines (2 sessions)": ("agentlens.ndjson", write_agentlens_lines),
    "flux0 recording": ("flux0.jsonl", write_flux0),
    "daycare history": ("daycare.jsonl", write_daycare),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="20000,100000", help="comma-separated record counts")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--reading-only", action="store_true", help="only the reading figures")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="formats_bench_") as tmp:
        reading_figures(Path(tmp))
    if args.reading_only:
        return
    sizes = [int(size) for size in args.events.split(",")]
    url = os.environ.get("DATABASE_URL", "")
    postgres = PostgresDatabases(url) if url.startswith(("postgres://", "postgresql://")) else None
    with tempfile.TemporaryDirectory(prefix="formats_bench_") as tmp:
        workdir = Path(tmp)
        n = 0
        try:
            for label, (name, writer) in WRITERS.items():
                for size in sizes:
                    path = workdir / f"{size}_{name}"
                    writer(path, size)
                    megabytes = path.stat().st_size / 1e6
                    targets = [("SQLite", lambda n=n: sqlite_env(workdir, n))]
                    if postgres is not None:
                        targets.append(("PostgreSQL", lambda n=n: postgres.env(n)))
                    for database, env in targets:
                        runs = []
                        for _ in range(args.runs):
                            n += 1
                            runs.append(run_child(CHILD, [str(path), str(ROOT)], env()))
                        seconds = statistics.median(r["seconds"] for r in runs)
                        result = runs[0]
                        print(
                            f"{label:<34} {size:>7,} records {megabytes:6.1f} MB  {database:<10}"
                            f" {result['sessions']} session(s) {result['events']:>8,} events"
                            f"  {seconds:6.2f} s  {result['events'] / seconds:8,.0f} events/s"
                            f"  peak RSS {max(r['peak_mib'] for r in runs):6.1f} MiB"
                            f" (Django loaded: {result['baseline_mib']:.1f})",
                            flush=True,
                        )
                    path.unlink()
        finally:
            if postgres is not None:
                postgres.drop_all()


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - started:.0f} s")
