"""Deleting a session of 100,000 events: one database-side cascade, timed.

    .venv/bin/python bench/delete_bench.py [--events 100000] [--runs 3]

Uses a fresh temporary SQLite database, or the PostgreSQL of DATABASE_URL when it is set
(e.g. `.venv/bin/python .ci/with_postgres.py -- .venv/bin/python bench/delete_bench.py`).
Prints the median time of `Session.objects.filter(pk=...).delete()` and the SQL statements it
sent: with `on_delete=DB_CASCADE` down the chain, Django issues a single DELETE of the session
row and the database removes its events, snapshots and checkpoints itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="replay-bench-")
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp.name}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from sessions_app.canonical import SessionMeta
    from sessions_app.ingest.writer import append_events, create_session
    from sessions_app.models import Event, Project, Session
    from tests.conftest import synthetic_events

    call_command("migrate", verbosity=0)
    project = Project.get_default()
    print(f"database: {connection.vendor}; session of {args.events:,} events; {args.runs} runs")
    times = []
    statements: list[str] = []
    for run in range(args.runs):
        session = create_session(project=project, source_format="canonical", meta=SessionMeta())
        started = time.perf_counter()
        append_events(session=session, events=synthetic_events(args.events))
        load_s = time.perf_counter() - started
        assert Event.objects.filter(session=session).count() == args.events
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            Session.objects.filter(pk=session.pk).delete()
            elapsed = time.perf_counter() - started
        assert not Event.objects.filter(session_id=session.pk).exists()
        times.append(elapsed)
        statements = [q["sql"] for q in captured.captured_queries]
        print(f"  run {run + 1}: loaded in {load_s:.2f} s, deleted in {elapsed * 1000:.1f} ms")
    print(f"delete median: {statistics.median(times) * 1000:.1f} ms")
    deletes = [s for s in statements if s.lstrip().upper().startswith("DELETE")]
    print(f"SQL statements sent by the delete: {len(statements)} ({len(deletes)} DELETE)")
    for sql in statements:
        print(f"  {sql[:160]}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
