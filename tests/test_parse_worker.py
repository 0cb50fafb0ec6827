"""The parse worker (sessions_app/parse_worker.py): a file parsed in a second process is stored
exactly as the in-process import stores it, row for row, with the same problems; and a worker
that breaks down mid-file leaves nothing half-stored and never raises out of import_file.

Each comparison imports one file twice into two projects (duplicates are per project): once
with the worker off (`IMPORT_WORKER_MIN_MB = None`) and once with it forced (`= 0`).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from sessions_app import importing, parse_worker
from sessions_app.event_rows import Batch, EventRows
from sessions_app.importing import ImportOutcome, import_file
from sessions_app.models import Checkpoint, Event, ImportJob, Project, Session, Snapshot
from sessions_app.parse_worker import ParseWorker

from .builders_ingest import write_canonical_file
from .builders_rlm import (
    record_failing_session,
    record_full_session,
    write_documented_trajectory,
    write_runner_steps,
    write_sink_folder,
    write_trajectory_logger_session,
)

FIXTURES = Path(__file__).parent / "fixtures"

EVENT_COLUMNS = [f.attname for f in Event._meta.concrete_fields if f.attname not in ("id", "session_id")]
# Columns that differ between two imports of one file by nature: the row's identity and
# project, and the wall-clock moments of the import itself.
SESSION_COLUMNS_OF_THE_IMPORT = {
    "id", "project_id", "import_job_id", "created_at", "updated_at", "chain_checked_at",
}  # fmt: skip
SESSION_COLUMNS = [f.attname for f in Session._meta.concrete_fields if f.attname not in SESSION_COLUMNS_OF_THE_IMPORT]


@pytest.fixture(autouse=True)
def python_path(settings) -> None:
    """The worker is part of the Python path: rlm-code files would otherwise take the compiled
    one on SQLite, which has its own comparison (test_rlm_native_compiled.py)."""
    settings.IMPORT_COMPILED = False


# --- spying on the worker ----------------------------------------------------------------------


@dataclass
class WorkerSpy:
    """Counts the workers import_file starts, sets their batch size, keeps the batches they
    stream, and can kill the child right after the first batch of its `kill_in_session`-th
    session was written (a child that dies mid-file)."""

    start: str = "fork"  # how the child is started: "fork" or "spawn" (a fresh interpreter)
    started: int = 0
    batch_rows: int | None = None
    kill_in_session: int | None = None
    sessions: int = 0
    batches: list[Batch] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)


@pytest.fixture(params=["fork", "spawn"])
def worker(request, monkeypatch) -> WorkerSpy:
    """Every worker test runs with both ways of starting the child: a fork where this process
    has no other thread, a fresh interpreter where it has."""
    spy = WorkerSpy(start=request.param)
    monkeypatch.setattr(parse_worker, "_can_fork", lambda: spy.start == "fork")

    class SpiedWorker(ParseWorker):
        def __init__(self, **kwargs: Any) -> None:
            # Passed explicitly, the way a caller chooses the batch size.
            if spy.batch_rows is not None:
                kwargs["batch_rows"] = spy.batch_rows
            super().__init__(**kwargs)
            forked = isinstance(self.process, parse_worker._ForkedChild)
            assert forked == (spy.start == "fork")
            spy.started += 1

        def _batches(self, session, session_pk):
            spy.sessions += 1
            for number, batch in enumerate(super()._batches(session, session_pk)):
                spy.batches.append(batch)
                yield batch
                if number == 0 and spy.sessions == spy.kill_in_session:
                    self.process.kill()
                    spy.exit_codes.append(self.process.wait())

    monkeypatch.setattr(importing, "ParseWorker", SpiedWorker)
    return spy


@pytest.fixture
def other_project(db) -> Project:
    return Project.objects.create(name="Worker", slug="worker")


def import_in_process(settings, path: Path, project: Project, **kwargs: Any) -> list[ImportOutcome]:
    settings.IMPORT_WORKER_MIN_MB = None
    return import_file(path=path, project=project, **kwargs)


def import_through_worker(settings, path: Path, project: Project, **kwargs: Any) -> list[ImportOutcome]:
    settings.IMPORT_WORKER_MIN_MB = 0
    return import_file(path=path, project=project, **kwargs)


# --- what is compared --------------------------------------------------------------------------


def stored(session: Session) -> dict[str, Any]:
    """Everything an import writes for a session, without the row ids."""
    session.refresh_from_db()
    columns = {name: getattr(session, name) for name in SESSION_COLUMNS}
    return {
        "session": columns,
        "events": list(Event.objects.filter(session=session).order_by("seq").values(*EVENT_COLUMNS)),
        "snapshots": list(
            Snapshot.objects.filter(session=session)
            .order_by("seq", "kind")
            .values("seq", "step_pos", "kind", "variables", "memory_notes", "stats")
        ),
        "checkpoints": list(
            Checkpoint.objects.filter(session=session)
            .order_by("name")
            .values("name", "seq", "step_pos", "note", "created_by", "created_at")
        ),
    }


def outcome_summary(outcome: ImportOutcome) -> dict[str, Any]:
    return {
        "format": outcome.format, "events": outcome.events, "steps": outcome.steps,
        "problems": outcome.problems, "error": outcome.error, "duplicate": outcome.duplicate,
        "unreadable": outcome.unreadable, "stored": outcome.session is not None,
    }  # fmt: skip


def assert_same_import(here: list[ImportOutcome], there: list[ImportOutcome]) -> None:
    assert [outcome_summary(o) for o in there] == [outcome_summary(o) for o in here]
    for mine, theirs in zip(here, there):
        if mine.session is None:
            continue
        assert theirs.session.pk != mine.session.pk
        expected, actual = stored(mine.session), stored(theirs.session)
        assert actual["session"] == expected["session"]
        assert len(actual["events"]) == len(expected["events"])
        for row, want in zip(actual["events"], expected["events"]):
            assert row == want, f"event seq {want['seq']} differs"
        assert actual["snapshots"] == expected["snapshots"]
        assert actual["checkpoints"] == expected["checkpoints"]


# --- 1. every single-file format stores the same rows both ways -------------------------------


def native_session(tmp_path: Path) -> Path:
    # 30 steps: a few hundred events, so state keyframes are written; a checkpoint and a
    # 300 kB output line too.
    path = tmp_path / "native.jsonl"
    record_full_session(path, steps=30)
    return path


def documented_trajectory(tmp_path: Path) -> Path:
    path = tmp_path / "trajectory.jsonl"
    write_documented_trajectory(path)
    return path


def logger_trajectory(tmp_path: Path) -> Path:
    path = tmp_path / "logger.jsonl"
    write_trajectory_logger_session(path)
    return path


def runner_steps(tmp_path: Path) -> Path:
    path = tmp_path / "steps.jsonl"
    write_runner_steps(path)
    return path


def snapshot_json(tmp_path: Path) -> Path:
    recorder = record_full_session(tmp_path / "full.jsonl", steps=8, end=False)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(recorder.get_snapshot().to_dict(), indent=2), encoding="utf-8")
    return path


def canonical_sessions(tmp_path: Path) -> Path:
    # 600 events a session, so each gets state keyframes.
    return write_canonical_file(tmp_path / "canonical.jsonl", sessions=2, events=600)


def fixture(relative: str) -> Callable[[Path], Path]:
    def build(tmp_path: Path) -> Path:
        return FIXTURES / relative

    build.__name__ = relative
    return build


@dataclass(frozen=True)
class Case:
    build: Callable[[Path], Path]
    format: str
    keyframes: bool = False
    checkpoints: bool = False

    def __str__(self) -> str:
        return self.build.__name__


CASES = [
    Case(native_session, "rlm_native", keyframes=True, checkpoints=True),
    Case(documented_trajectory, "rlm_trajectory"),
    Case(logger_trajectory, "rlm_trajectory"),
    Case(runner_steps, "rlm_steps"),
    Case(snapshot_json, "rlm_snapshot"),
    Case(fixture("agentlens/two_sessions.ndjson"), "agentlens"),
    Case(fixture("agentlens/two_sessions_array.json"), "agentlens"),
    Case(fixture("agentlens/two_sessions_body.json"), "agentlens"),
    Case(fixture("agentlens/triage_newest_first.json"), "agentlens"),
    Case(fixture("flux0/support_chat.jsonl"), "flux0"),
    Case(fixture("daycare/complete_new.jsonl"), "daycare"),
    Case(fixture("daycare/complete_old.jsonl"), "daycare"),
    Case(fixture("daycare/pending_tool_call.jsonl"), "daycare"),
    Case(canonical_sessions, "canonical", keyframes=True),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_worker_stores_every_column_the_in_process_import_stores(
    case, project, other_project, settings, tmp_path, worker
):
    path = case.build(tmp_path)

    here = import_in_process(settings, path, project)
    assert worker.started == 0
    there = import_through_worker(settings, path, other_project)

    assert worker.started == 1 and worker.batches
    assert {o.format for o in here} == {case.format}
    assert all(o.session is not None and o.events > 0 for o in here)
    assert_same_import(here, there)
    assert Snapshot.objects.filter(session=here[0].session).exists() is case.keyframes
    if case.checkpoints:
        assert Checkpoint.objects.filter(session=there[0].session).exists()


# --- 2. a file of several sessions ------------------------------------------------------------


def test_worker_yields_each_session_of_an_appended_native_file_as_in_process(
    project, other_project, settings, tmp_path, worker
):
    path = tmp_path / "appended.jsonl"
    record_full_session(path, run_id="run_one", steps=3)
    record_failing_session(path, run_id="run_two")
    record_full_session(path, run_id="run_one", steps=3)  # the same run again, stored again

    here = import_in_process(settings, path, project)
    there = import_through_worker(settings, path, other_project)

    assert worker.started == 1
    assert [o.session.source_session_id for o in there] == ["run_one", "run_two", "run_one"]
    assert not any(o.duplicate for o in there)
    assert_same_import(here, there)


# --- 3. bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "relative",
    [
        "rlm/native_bad.jsonl", "rlm/trajectory_bad.jsonl", "rlm/steps_bad.jsonl",
        "rlm/snapshot_bad.json", "agentlens/bad_input.ndjson", "flux0/bad_input.jsonl",
        "daycare/bad_input.jsonl",
    ],
)  # fmt: skip
def test_worker_reports_the_same_problems_and_keeps_the_same_good_lines(
    relative, project, other_project, settings, worker
):
    path = FIXTURES / relative

    here = import_in_process(settings, path, project)
    there = import_through_worker(settings, path, other_project)

    assert worker.started == 1
    assert here[0].problems and here[0].session is not None
    assert_same_import(here, there)


def test_bom_malformed_invalid_utf8_and_truncated_lines_through_the_worker(project, settings, worker):
    [outcome] = import_through_worker(settings, FIXTURES / "rlm" / "native_bad.jsonl", project)

    assert worker.started == 1 and outcome.error is None
    by_line = {p["line"]: p for p in outcome.problems if p["field"] == "line"}
    assert by_line[1]["message"] == "byte-order mark at the start of the file (ignored)"
    assert by_line[3]["message"].startswith("malformed JSON")
    assert "invalid UTF-8" in by_line[4]["message"]
    assert "truncated" in by_line[14]["message"]
    lines = list(Event.objects.filter(session=outcome.session).order_by("seq").values_list("line", flat=True))
    assert lines == [1, 2, 5, 6, 7, 8, 12, 13]


def test_file_with_nothing_importable_fails_alike_through_the_worker(project, other_project, settings, worker):
    path = FIXTURES / "rlm" / "nothing.jsonl"

    here = import_in_process(settings, path, project, format="rlm_native")
    there = import_through_worker(settings, path, other_project, format="rlm_native")

    assert worker.started == 1
    assert there[0].error.startswith("nothing.jsonl: nothing importable as rlm_native (3 problem(s)")
    assert_same_import(here, there)
    assert Session.objects.count() == 0


def test_problems_beyond_the_kept_number_are_counted_alike(project, other_project, settings, tmp_path, worker, monkeypatch):
    path = tmp_path / "noisy.jsonl"
    record_full_session(path, steps=2)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + [b"{not json\n"] * 12 + lines[2:]))
    monkeypatch.setattr(importing, "PROBLEMS_KEPT", 5)
    jobs = [
        ImportJob.objects.create(project=p, original_name="noisy.jsonl", stored_path=str(path))
        for p in (project, other_project)
    ]

    here = import_in_process(settings, path, project, job=jobs[0])
    there = import_through_worker(settings, path, other_project, job=jobs[1])

    assert worker.started == 1
    assert_same_import(here, there)
    for job in jobs:
        job.refresh_from_db()
    assert len(there[0].problems) == 5
    assert jobs[1].problem_count == jobs[0].problem_count == 12
    assert jobs[1].problems == jobs[0].problems


# --- 4. gzip ----------------------------------------------------------------------------------


def test_gzipped_file_through_the_worker_stores_what_the_plain_file_stores(
    project, other_project, settings, tmp_path, worker
):
    plain = native_session(tmp_path)
    packed = tmp_path / "NATIVE.JSONL.GZ"
    with plain.open("rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)

    here = import_in_process(settings, plain, project)
    there = import_through_worker(settings, packed, other_project)

    assert worker.started == 1
    assert_same_import(here, there)


def test_gzipped_file_cut_short_stores_nothing_and_says_so_alike(project, other_project, settings, tmp_path, worker):
    plain = tmp_path / "long.jsonl"
    record_full_session(plain, steps=200, large_output_at=None)
    packed = gzip.compress(plain.read_bytes())
    cut = tmp_path / "long.jsonl.gz"
    cut.write_bytes(packed[: len(packed) * 2 // 3])

    here = import_in_process(settings, cut, project)
    there = import_through_worker(settings, cut, other_project)

    assert worker.started == 1
    assert_same_import(here, there)
    # gzip's EOFError is a read error like any OSError, not a crash with a traceback.
    assert there[0].session is None
    assert there[0].problems[-1]["message"].startswith("could not read further: Compressed file ended")
    assert Session.objects.count() == Event.objects.count() == 0


# --- 5. duplicates and replace ----------------------------------------------------------------


def test_worker_import_of_a_stored_file_returns_the_stored_session(project, settings, tmp_path, worker):
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=3)
    first = import_through_worker(settings, path, project)[0]
    events = Event.objects.count()

    again = import_through_worker(settings, path, project)[0]

    assert worker.started == 2
    assert first.duplicate is False and again.duplicate is True
    assert again.session.pk == first.session.pk
    assert (again.events, again.steps) == (first.events, first.steps)
    assert Session.objects.count() == 1 and Event.objects.count() == events


def test_worker_import_finds_a_session_stored_in_process_a_duplicate(project, settings, tmp_path, worker):
    path = native_session(tmp_path)
    first = import_in_process(settings, path, project)[0]

    again = import_through_worker(settings, path, project)[0]

    assert worker.started == 1
    assert again.duplicate is True and again.session.pk == first.session.pk
    assert Session.objects.count() == 1


def test_worker_import_with_replace_replaces_the_stored_session(project, settings, tmp_path, worker):
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=3)
    first = import_through_worker(settings, path, project)[0].session
    events = Event.objects.count()

    replaced = import_through_worker(settings, path, project, replace=True)[0]

    assert worker.started == 2
    assert replaced.duplicate is False and replaced.session.pk != first.pk
    assert not Session.objects.filter(pk=first.pk).exists()
    assert not Event.objects.filter(session_id=first.pk).exists()
    assert Session.objects.get().pk == replaced.session.pk
    assert Event.objects.count() == events


# --- 6. job progress --------------------------------------------------------------------------


def test_job_gets_progress_and_the_same_result_through_the_worker(
    project, other_project, settings, tmp_path, worker, monkeypatch
):
    path = tmp_path / "long.jsonl"
    record_full_session(path, steps=200, large_output_at=None, checkpoint_at=None, fail_at=frozenset())
    record_failing_session(path)
    jobs = [
        ImportJob.objects.create(project=p, original_name="long.jsonl", stored_path=str(path))
        for p in (project, other_project)
    ]
    seen: list[tuple[int, int]] = []
    write = importing._JobProgress._write

    def spy(self, **values):
        if self.job.pk == jobs[1].pk:
            seen.append((values["events_done"], values["bytes_done"]))
        write(self, **values)

    monkeypatch.setattr(importing._JobProgress, "_write", spy)
    monkeypatch.setattr(importing, "PROGRESS_EVERY", 500)
    worker.batch_rows = 250

    here = import_in_process(settings, path, project, job=jobs[0], created_by="alice")
    there = import_through_worker(settings, path, other_project, job=jobs[1], created_by="alice")

    assert worker.started == 1
    here_job, job = (ImportJob.objects.get(pk=j.pk) for j in jobs)
    assert job.status == ImportJob.Status.DONE and job.error == ""
    assert job.detected_format == "rlm_native" and job.sessions_done == 2
    assert job.events_done == sum(o.events for o in there) > 1500
    assert job.bytes_total == job.bytes_done == path.stat().st_size
    assert [r["session"] for r in job.result] == [o.session.pk for o in there]
    assert set(Session.objects.filter(project=other_project).values_list("import_job", flat=True)) == {job.pk}
    for name in ("status", "detected_format", "sessions_done", "events_done", "bytes_total", "bytes_done",
                 "problem_count", "problems", "error", "created_by"):  # fmt: skip
        assert getattr(job, name) == getattr(here_job, name), name
    strip = lambda result: [{k: v for k, v in r.items() if k != "session"} for r in result]  # noqa: E731
    assert strip(job.result) == strip(here_job.result)
    # Progress was written while the first session streamed in from the worker, growing.
    assert len(seen) >= 2
    assert [events for events, _ in seen] == sorted(events for events, _ in seen)
    assert [done for _, done in seen] == sorted(done for _, done in seen)
    assert all(0 < done <= job.bytes_total for _, done in seen)


# --- 7. a worker that breaks down mid-file ----------------------------------------------------


def test_child_killed_mid_file_stores_nothing_and_reports_import_stopped(project, settings, tmp_path, worker):
    path = tmp_path / "long.jsonl"
    # Far more rows than the pipe and the child's buffer hold, so the kill lands mid-file.
    record_full_session(path, steps=300, large_output_at=None)
    worker.batch_rows = 50
    worker.kill_in_session = 1

    outcomes = import_through_worker(settings, path, project)

    assert worker.exit_codes == [-9]
    [outcome] = outcomes
    assert outcome.session is None
    assert outcome.problems == [
        {"line": None, "field": "file", "message": "import stopped: the parse worker exited with status -9"}
    ]
    assert "nothing importable" in outcome.error
    assert Session.objects.count() == Event.objects.count() == Snapshot.objects.count() == 0
    assert Checkpoint.objects.count() == 0


def test_child_killed_mid_file_still_reports_the_lines_it_had_read(project, settings, tmp_path, worker):
    path = tmp_path / "long.jsonl"
    record_full_session(path, steps=300, large_output_at=None)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + [b"{not json\n"] + lines[2:]))
    worker.batch_rows = 50
    worker.kill_in_session = 1

    [outcome] = import_through_worker(settings, path, project)

    # Problems travel with each batch, so line 3's survives the kill that ends the file.
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(3, "line"), (None, "file")]
    assert outcome.problems[-1]["message"] == "import stopped: the parse worker exited with status -9"
    assert Session.objects.count() == Event.objects.count() == 0


def test_child_killed_in_the_second_session_keeps_the_first(project, settings, tmp_path, worker):
    path = tmp_path / "two.jsonl"
    record_full_session(path, run_id="run_one", steps=2)
    record_full_session(path, run_id="run_two", steps=300, large_output_at=None)
    worker.batch_rows = 50
    worker.kill_in_session = 2

    outcomes = import_through_worker(settings, path, project)

    assert worker.exit_codes == [-9]
    assert [o.session.source_session_id for o in outcomes] == ["run_one"]
    assert outcomes[0].problems[-1]["message"].startswith("import stopped")
    kept = Session.objects.get()
    assert kept.pk == outcomes[0].session.pk and kept.step_count == 2
    assert Event.objects.count() == kept.event_count


CHILD_FAULT = textwrap.dedent(
    """
    # Loaded by the parse worker's interpreter at start-up (this folder is on its PYTHONPATH):
    # breaks EventRows.add after a number of events, the way a bug or a crash would.
    import os

    if os.environ.get("REPLAY_TEST_FAULT"):
        from sessions_app import event_rows

        _add = event_rows.EventRows.add
        _after = int(os.environ["REPLAY_TEST_FAULT_AFTER"])
        _seen = [0]

        def add(self, event):
            _seen[0] += 1
            if _seen[0] > _after:
                if os.environ["REPLAY_TEST_FAULT"] == "exit":
                    os._exit(3)
                raise RuntimeError("injected fault")
            _add(self, event)

        event_rows.EventRows.add = add
    """
)


@pytest.fixture
def child_fault(tmp_path, monkeypatch, worker) -> Callable[[str, int], None]:
    """Makes the parse worker's child fail (`raise` or `exit`) after `after` events: a fresh
    interpreter loads the fault at start-up, a fork inherits it from this process (which, once
    armed, must not build rows itself: an `exit` fault would end the test run)."""
    folder = tmp_path / "child_site"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(CHILD_FAULT, encoding="utf-8")

    def arm(how: str, after: int) -> None:
        if worker.start == "spawn":
            monkeypatch.setenv("PYTHONPATH", str(folder))
            monkeypatch.setenv("REPLAY_TEST_FAULT", how)
            monkeypatch.setenv("REPLAY_TEST_FAULT_AFTER", str(after))
            return
        add = EventRows.add
        seen = [0]

        def faulty(self, event):
            seen[0] += 1
            if seen[0] > after:
                if how == "exit":
                    os._exit(3)
                raise RuntimeError("injected fault")
            add(self, event)

        monkeypatch.setattr(EventRows, "add", faulty)

    return arm


def fail_in_process_after(monkeypatch, after: int) -> None:
    add = EventRows.add
    seen = [0]

    def failing(self, event):
        seen[0] += 1
        if seen[0] > after:
            raise RuntimeError("injected fault")
        add(self, event)

    monkeypatch.setattr(EventRows, "add", failing)


def test_bug_in_the_child_stops_the_import_as_it_does_in_process(
    project, other_project, settings, tmp_path, worker, child_fault, monkeypatch
):
    path = tmp_path / "two.jsonl"
    record_full_session(path, run_id="run_one", steps=2)
    record_full_session(path, run_id="run_two", steps=20)
    # run_one has a few dozen events: the fault comes well inside run_two, both ways.
    with monkeypatch.context() as patched:
        fail_in_process_after(patched, 100)
        here = import_in_process(settings, path, project)
    child_fault("raise", 100)

    there = import_through_worker(settings, path, other_project)

    assert worker.started == 1
    assert [o.session.source_session_id for o in here] == ["run_one"]
    assert here[0].problems == [
        {"line": None, "field": "file", "message": "import stopped: RuntimeError: injected fault"}
    ]
    assert_same_import(here, there)
    assert Session.objects.filter(project=other_project).count() == 1


def test_child_that_exits_mid_file_stores_nothing_and_reports_its_status(project, settings, tmp_path, worker, child_fault):
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=20)
    child_fault("exit", 50)

    [outcome] = import_through_worker(settings, path, project)

    assert worker.started == 1 and outcome.session is None
    assert outcome.problems == [
        {"line": None, "field": "file", "message": "import stopped: the parse worker exited with status 3"}
    ]
    assert Session.objects.count() == Event.objects.count() == 0


def test_child_failure_keeps_the_problems_in_file_order(
    project, other_project, settings, tmp_path, worker, child_fault, monkeypatch
):
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=20)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + [b"{not json\n"] + lines[2:]))
    with monkeypatch.context() as patched:
        fail_in_process_after(patched, 100)
        here = import_in_process(settings, path, project)
    child_fault("raise", 100)

    there = import_through_worker(settings, path, other_project)

    assert [p["line"] for p in here[0].problems] == [3, None]
    assert there[0].problems == here[0].problems
    assert there[0].error == here[0].error


# --- 8. pairs and keyframes across batch boundaries -------------------------------------------


@pytest.mark.parametrize("batch_rows", [1, 7])
@pytest.mark.parametrize("build", [native_session, canonical_sessions], ids=lambda b: b.__name__)
def test_pairs_and_keyframes_across_batches_match_the_in_process_import(
    build, batch_rows, project, other_project, settings, tmp_path, worker
):
    path = build(tmp_path)
    worker.batch_rows = batch_rows

    here = import_in_process(settings, path, project)
    there = import_through_worker(settings, path, other_project)

    assert max(len(batch.rows) for batch in worker.batches) == batch_rows
    # The situations under test happened: calls answered in a later batch, keyframes in one.
    assert any(batch.pair_updates for batch in worker.batches)
    assert any(batch.keyframes for batch in worker.batches)
    assert_same_import(here, there)
    for outcome in there:
        calls = Event.objects.filter(session=outcome.session, kind="llm_call")
        assert calls.exists()
        assert not calls.filter(pair_seq=None).exists()
        for seq, pair_seq in calls.values_list("seq", "pair_seq"):
            response = Event.objects.get(session=outcome.session, seq=pair_seq)
            assert response.kind == "llm_response" and pair_seq > seq


def test_native_llm_call_gets_the_recorded_duration_across_a_batch_boundary(project, settings, tmp_path, worker):
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=3)
    worker.batch_rows = 1

    [outcome] = import_through_worker(settings, path, project)

    calls = list(Event.objects.filter(session=outcome.session, kind="llm_call").values("pair_seq", "pair_duration_ms"))
    assert len(calls) == 3
    assert all(c["pair_seq"] is not None and c["pair_duration_ms"] == 412.5 for c in calls)
    updated = {seq for batch in worker.batches for seq, _, _ in batch.pair_updates}
    assert len(updated) >= 3


# --- when the worker is used ------------------------------------------------------------------


def test_worker_starts_only_for_files_of_at_least_the_threshold(project, settings, tmp_path, worker):
    small = tmp_path / "small.jsonl"
    write_runner_steps(small, run_id="small")
    large = tmp_path / "large.jsonl"
    record_full_session(large, steps=3)
    settings.IMPORT_WORKER_MIN_MB = (small.stat().st_size + 1) / (1024 * 1024)
    assert large.stat().st_size > small.stat().st_size + 1

    import_file(path=small, project=project)
    assert worker.started == 0
    import_file(path=large, project=project)
    assert worker.started == 1
    assert Session.objects.count() == 2


def test_folder_is_imported_in_process_even_when_the_worker_is_forced(project, settings, tmp_path, worker):
    write_sink_folder(tmp_path / "sink")

    outcomes = import_through_worker(settings, tmp_path / "sink", project)

    assert worker.started == 0
    assert [o.format for o in outcomes] == ["rlm_sink", "rlm_sink"]
    assert all(o.session is not None for o in outcomes)


@pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_GETPIPE_SZ"), reason="pipe sizes are Linux's")
def test_rows_pipe_holds_a_whole_batch(tmp_path):
    # With Linux's default 64 KiB the child would wait at every batch for the importing process
    # to finish writing the previous one before it could hand over the next.
    import fcntl

    from sessions_app.canonical import Problems
    from sessions_app.formats import Source
    from sessions_app.parse_worker import PIPE_BYTES

    path = tmp_path / "native.jsonl"
    record_full_session(path, steps=2)
    started = ParseWorker(
        source=Source(path=path, display_name=path.name), format="rlm_native",
        problems=Problems(limit=10), vendor="sqlite",
    )  # fmt: skip
    try:
        size = fcntl.fcntl(started.process.stdout.fileno(), fcntl.F_GETPIPE_SZ)
    finally:
        started.close()
    maximum = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    assert size == min(PIPE_BYTES, maximum) > 64 * 1024


def test_child_is_a_fresh_interpreter_while_another_thread_runs():
    # A fork copies only the calling thread; a lock another thread held at that moment would
    # stay locked in the child for ever, so with threads about the child is started afresh.
    # (Earlier tests of the run may have left threads of their own: only the one started here is
    # certain.)
    import threading

    assert parse_worker._can_fork() == (threading.active_count() == 1)
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        assert not parse_worker._can_fork()
    finally:
        release.set()
        thread.join()
    assert parse_worker._can_fork() == (threading.active_count() == 1)


def test_forked_child_reaped_by_the_system_is_waited_for_without_error(tmp_path, monkeypatch):
    # A process that ignores SIGCHLD has its children reaped for it: waiting for the forked one
    # then finds none, which must not raise out of the worker's clean-up.
    import signal

    from sessions_app.canonical import Problems
    from sessions_app.formats import Source

    monkeypatch.setattr(parse_worker, "_can_fork", lambda: True)
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=3)
    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        started = ParseWorker(
            source=Source(path=path, display_name=path.name), format="rlm_native",
            problems=Problems(limit=10), vendor="sqlite",
        )  # fmt: skip
        assert isinstance(started.process, parse_worker._ForkedChild)
        started.process.kill()
        # Waiting blocks until the child is gone, then finds it reaped already.
        assert started.process.wait() == 0
        assert started.process.poll() == 0
        started.close()
    finally:
        signal.signal(signal.SIGCHLD, before)
