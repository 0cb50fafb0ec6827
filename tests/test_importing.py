"""The import workflow and the import_sessions command: detection, duplicates, --replace, bad
input reported by line and field, job progress, --json output."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import signal
import zipfile
import zlib
from pathlib import Path

import orjson
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from sessions_app import comments, reviews, sharing, tours
from sessions_app.access import Actor
from sessions_app.canonical import Kind, Problems
from sessions_app.ingest import importing
from sessions_app.ingest.importing import import_file, import_local_file
from sessions_app.models import AuditEntry, Comment, Event, ImportJob, Project, Role, Session, TourStop

from .builders_ingest import watch_job_progress
from .builders_rlm import (
    record_failing_session,
    record_full_session,
    write_documented_trajectory,
    write_runner_steps,
    write_sink_folder,
    write_trajectory_logger_session,
)
from .builders_teams import member

FIXTURES = Path(__file__).parent / "fixtures" / "rlm"


def problem_keys(problems: list[dict]) -> list[tuple]:
    return [(p["line"], p["field"]) for p in problems]


# --- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("writer", "expected"),
    [
        (record_full_session, "rlm_native"),
        (write_documented_trajectory, "rlm_trajectory"),
        (write_trajectory_logger_session, "rlm_trajectory"),
        (write_runner_steps, "rlm_steps"),
    ],
)
@pytest.mark.parametrize("name", ["session.jsonl", "SESSION.JSON", "session.NDJSON", "session.txt", "session.Jsonl.GZ"])
def test_format_is_detected_by_content_whatever_the_name(project, tmp_path, writer, expected, name):
    plain = tmp_path / "plain"
    writer(plain)
    path = tmp_path / name
    if name.lower().endswith(".gz"):
        with plain.open("rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        plain.rename(path)

    outcomes = import_file(path=path, project=project)

    assert [o.format for o in outcomes] == [expected]
    assert outcomes[0].error is None and outcomes[0].steps > 0


def _zip_of_a_run(tmp_path: Path, compression: int = zipfile.ZIP_STORED) -> Path:
    """runs.zip, holding a demo run (no bundle)."""
    packed = tmp_path / "runs.zip"
    with zipfile.ZipFile(packed, "w", compression) as archive:
        archive.write(Path(__file__).resolve().parent.parent / "demo" / "rlm_success.jsonl", "rlm_success.jsonl")
    return packed


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_zip_that_is_no_bundle_is_refused_as_such_not_read_as_lines(project, tmp_path, compression):
    packed = _zip_of_a_run(tmp_path, compression)
    (outcome,) = import_file(path=packed, project=project)
    assert outcome.session is None
    assert outcome.error == f"runs.zip: {importing.NOT_A_BUNDLE}"
    assert not Session.objects.exists()


@pytest.mark.parametrize("kept", [0.5, 0.97])
def test_a_zip_cut_off_before_its_end_is_refused_as_such_not_read_as_lines(project, tmp_path, kept):
    # Without its end record a zip is no zip to zipfile: its stored lines were imported as text.
    packed = _zip_of_a_run(tmp_path)
    data = packed.read_bytes()
    packed.write_bytes(data[: int(len(data) * kept)])
    assert not zipfile.is_zipfile(packed)
    (outcome,) = import_file(path=packed, project=project)
    assert outcome.session is None
    assert outcome.error == f"runs.zip: {importing.CUT_ZIP}"
    assert not Session.objects.exists()


@pytest.mark.parametrize("cut", [False, True], ids=["whole", "cut off"])
def test_a_gzipped_zip_is_refused_as_such_not_read_as_lines(project, tmp_path, cut):
    data = _zip_of_a_run(tmp_path).read_bytes()
    gzipped = tmp_path / "runs.zip.gz"
    gzipped.write_bytes(gzip.compress(data[: len(data) // 2] if cut else data))
    (outcome,) = import_file(path=gzipped, project=project)
    assert outcome.session is None and outcome.error == f"runs.zip.gz: {importing.GZIPPED_ZIP}"
    assert not Session.objects.exists()


def test_a_gzip_whose_bytes_end_like_a_zip_is_still_read_as_gzip(project, tmp_path):
    source = Path(__file__).resolve().parent.parent / "demo" / "rlm_success.jsonl"
    packed = tmp_path / "run.jsonl.gz"
    # A zip's end record (PK 5 6 and 18 bytes) inside a gzip file, as compressed bytes may hold
    # it by chance: here, in the gzip header's comment (FCOMMENT), which gzip readers skip.
    data = source.read_bytes()
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = deflate.compress(data) + deflate.flush()
    header = b"\x1f\x8b\x08\x10" + bytes(4) + b"\x00\xff" + b"PK\x05\x06" + b"\x01" * 18 + b"\x00"
    trailer = zlib.crc32(data).to_bytes(4, "little") + len(data).to_bytes(4, "little")
    packed.write_bytes(header + body + trailer)
    assert zipfile.is_zipfile(packed) and gzip.decompress(packed.read_bytes()) == data
    (outcome,) = import_file(path=packed, project=project)
    assert outcome.error is None and outcome.session is not None, outcome.error


def test_explicit_format_overrides_detection(project, tmp_path):
    path = tmp_path / "native.jsonl"
    record_full_session(path, steps=2)

    outcome = import_file(path=path, project=project, format="rlm_trajectory")[0]

    # Read as a trajectory, the native names are unknown: kept as custom events, each reported.
    assert outcome.format == "rlm_trajectory"
    assert outcome.session.source_format == "rlm_trajectory"
    assert outcome.steps == 0
    assert any(p["field"] == "event_type" and "step_start" in p["message"] for p in outcome.problems)


def test_unknown_explicit_format_is_one_clear_error(project, tmp_path):
    path = tmp_path / "native.jsonl"
    record_full_session(path, steps=1)

    [outcome] = import_file(path=path, project=project, format="bogus")

    assert outcome.session is None
    assert "unknown format 'bogus'" in outcome.error and "rlm_native" in outcome.error
    assert Session.objects.count() == 0


def test_session_id_falls_back_to_the_file_stem_without_a_run_id(project, tmp_path):
    source = tmp_path / "with_run.jsonl"
    record_full_session(source, steps=1)
    lines = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    for record in lines:
        record.pop("run_id", None)
    path = tmp_path / "My Run.JSONL.gz"
    with gzip.open(path, "wb") as out:
        out.write(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")

    session = import_file(path=path, project=project)[0].session

    assert session.source_session_id == session.run_id == "My Run"


# --- bad input ---------------------------------------------------------------------------------


def test_native_bad_input_is_reported_by_line_and_field_and_the_rest_imported(project):
    [outcome] = import_file(path=FIXTURES / "native_bad.jsonl", project=project)

    assert outcome.error is None
    assert problem_keys(outcome.problems) == [
        (1, "line"),  # BOM
        (3, "line"),  # malformed JSON
        (4, "line"),  # invalid UTF-8
        (5, "data.reward"),  # "lots"
        (5, "data.tokens_used"),  # null
        (7, "data"),  # data: null
        (7, "data.notes"),
        (8, "event_type"),  # unknown, kept as custom
        (9, "event_type"),  # missing
        (11, "line"),  # not an object
        (12, "timestamp"),
        (14, "line"),  # truncated last line
    ]
    assert "truncated" in outcome.problems[-1]["message"]
    assert "invalid UTF-8" in outcome.problems[2]["message"]
    session = outcome.session
    lines = list(Event.objects.filter(session=session).order_by("seq").values_list("line", flat=True))
    assert lines == [1, 2, 5, 6, 7, 8, 12, 13]
    assert Event.objects.get(session=session, line=8).kind == Kind.CUSTOM
    step = orjson.loads(Event.objects.get(session=session, line=6).step_state)
    assert step["reward"] == 0.0 and step["tokens_used"] == 0 and step["success"] is True
    # Bare NaN / Infinity are accepted; JSON has no such values, so they are stored as null.
    change = orjson.loads(Event.objects.get(session=session, line=6).state_change)
    assert change["variables"] == {"x": None, "y": None}
    assert session.step_count == 1 and session.error_count == 1


def test_a_file_with_more_problems_than_are_kept_keeps_its_first_lines_and_its_own(project, tmp_path, monkeypatch):
    # More bad lines than are kept, then a cut gzip stream: the file's own problem ("could not
    # read further") comes last of all, and must not be the one dropped.
    monkeypatch.setattr(importing, "PROBLEMS_KEPT", 50)
    source = tmp_path / "run.jsonl"
    record_full_session(source, steps=2)
    good = source.read_bytes().splitlines()
    lines = [good[0], *(b"{not json" for _ in range(80)), *good[1:], *(b"[1]" for _ in range(20))]
    packed = gzip.compress(b"\n".join(lines) + b"\n")
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(packed[: len(packed) - 12])  # the trailer and the last bytes of the stream

    [outcome] = import_file(path=path, project=project)

    # The session was cut short, so nothing is stored; the error names the file's own problem.
    assert outcome.session is None and "first: file: could not read further" in outcome.error
    assert len(outcome.problems) == 50
    assert outcome.problems[0]["line"] is None and "could not read further" in outcome.problems[0]["message"]
    assert [p["line"] for p in outcome.problems[1:]] == list(range(2, 51))  # the first bad lines


def test_problems_found_in_a_later_pass_at_earlier_lines_displace_later_lines():
    # A format's second pass (what records mean) finds problems of lines its first pass (how they
    # read) went beyond: the kept ones are the file's first lines, whatever order they came in.
    problems = Problems(limit=20)
    for line in range(100, 200):
        problems.add(line, "line", "unreadable")
    for line in (5, 1, 5, 3):
        problems.add(line, "data", "meaning")
    problems.add(None, "file", "its own")
    assert problems.count == 105
    kept = [(p.line, p.field) for p in problems.in_line_order()]
    assert kept == [(None, "file"), (1, "data"), (3, "data"), (5, "data"), (5, "data"),
                    *((line, "line") for line in range(100, 115))]  # fmt: skip
    # Of one line's problems, those found first stay, listed in the order found.
    tied = Problems(limit=3)
    for line, message in ((5, "a"), (9, "b"), (5, "c"), (5, "d"), (7, "e")):
        tied.add(line, "f", message)
    assert [(p.line, p.message) for p in tied.in_line_order()] == [(5, "a"), (5, "c"), (5, "d")]
    same = Problems(limit=2)
    for line, message in ((7, "first"), (7, "second"), (1, "new")):
        same.add(line, "f", message)
    assert [(p.line, p.message) for p in same.in_line_order()] == [(1, "new"), (7, "first")]


def test_trajectory_bad_input_is_reported_by_line(project):
    [outcome] = import_file(path=FIXTURES / "trajectory_bad.jsonl", project=project)

    assert problem_keys(outcome.problems) == [
        (4, "tokens_out"), (5, "line"), (6, "data"), (7, "duration_ms"), (8, "event_type"),
    ]  # fmt: skip
    assert outcome.steps == 2 and outcome.events == 8


def test_runner_steps_bad_input_is_reported_by_line(project):
    [outcome] = import_file(path=FIXTURES / "steps_bad.jsonl", project=project)

    assert problem_keys(outcome.problems) == [
        (2, "usage.prompt_tokens"), (3, "action"), (3, "reward"), (4, "line"), (5, "type"),
        (6, "total_reward"),
    ]  # fmt: skip
    assert outcome.steps == 2
    assert outcome.session.tokens == 3 + 12


def test_snapshot_bad_input_keeps_the_good_steps(project):
    [outcome] = import_file(path=FIXTURES / "snapshot_bad.json", project=project)

    assert problem_keys(outcome.problems) == [
        (8, "steps[1].reward"), (8, "steps[1].tokens_used"), (9, "line"),
    ]  # fmt: skip
    # The file ends inside the third step: the two before it import.
    assert outcome.problems[2]["message"].startswith("file ends inside the JSON document (truncated)")
    assert outcome.steps == 2
    assert outcome.session.source_session_id == "bad_snap"
    assert outcome.session.duration_seconds == 10.0


def test_sink_folder_bad_input_names_the_file_of_each_problem(project):
    [outcome] = import_file(path=FIXTURES / "sink_bad", project=project)

    assert sorted(problem_keys(outcome.problems), key=str) == sorted(
        [(2, "runs.jsonl:run_id"), (1, "runs.jsonl:total_reward"),
         (2, "steps/run_x.jsonl:reward"), (3, "steps/run_x.jsonl:line")], key=str,
    )  # fmt: skip
    assert outcome.steps == 2 and outcome.session.task == "sink"


def test_file_with_nothing_importable_fails_with_one_message(project):
    outcomes = import_file(path=FIXTURES / "nothing.jsonl", project=project)

    assert len(outcomes) == 1
    assert outcomes[0].error == "nothing.jsonl: not a recognised session format (nothing importable)"
    assert outcomes[0].unreadable is False
    assert Session.objects.count() == 0


def test_a_file_named_gz_that_is_not_gzip_says_so(project, tmp_path):
    path = tmp_path / "run.jsonl.gz"
    path.write_bytes((FIXTURES / "nothing.jsonl").read_bytes())
    (outcome,) = import_file(path=path, project=project)
    assert outcome.error == (
        "run.jsonl.gz: not a recognised session format (nothing importable); it is named .gz but is not gzip-compressed"
    )
    # A real gzip of nothing importable (blank lines) is not told it is no gzip (security sweep).
    path.write_bytes(gzip.compress(b"\n\n\n"))
    (outcome,) = import_file(path=path, project=project)
    assert outcome.error.endswith("; it is gzip-compressed, and what it holds is no session"), outcome.error


def test_known_format_with_only_bad_lines_fails_with_one_message_naming_the_first_problem(project):
    outcomes = import_file(path=FIXTURES / "nothing.jsonl", project=project, format="rlm_native")

    assert len(outcomes) == 1
    assert outcomes[0].error.startswith("nothing.jsonl: nothing importable as rlm_native (3 problem(s); first: line 1")
    assert problem_keys(outcomes[0].problems) == [(1, "line"), (2, "line"), (3, "line")]


def test_missing_file_is_an_unreadable_error(project, tmp_path):
    [outcome] = import_file(path=tmp_path / "gone.jsonl", project=project)

    assert outcome.unreadable is True and outcome.error == "gone.jsonl: no such file"


# --- duplicates and --replace ------------------------------------------------------------------


def test_importing_the_same_file_twice_returns_the_stored_session(project, tmp_path):
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=3)
    first = import_file(path=path, project=project)[0]
    events_before = Event.objects.count()

    again = import_file(path=path, project=project)[0]

    assert again.duplicate is True and first.duplicate is False
    assert again.session.pk == first.session.pk
    assert Session.objects.count() == 1 and Event.objects.count() == events_before


def test_same_source_id_with_other_content_is_a_new_session(project, tmp_path):
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=3)
    first = import_file(path=path, project=project)[0]
    longer = tmp_path / "longer.jsonl"
    record_full_session(longer, steps=4)  # the same run_id, different content

    second = import_file(path=longer, project=project)[0]

    assert second.duplicate is False and second.session.pk != first.session.pk
    assert first.session.source_session_id == second.session.source_session_id


def test_replace_deletes_the_stored_session_and_imports_again(project, tmp_path):
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=3)
    first = import_file(path=path, project=project)[0].session

    replaced = import_file(path=path, project=project, replace=True)[0]

    assert replaced.duplicate is False and replaced.session.pk != first.pk
    assert not Session.objects.filter(pk=first.pk).exists()
    assert not Event.objects.filter(session_id=first.pk).exists()
    assert Session.objects.count() == 1


def test_replace_with_a_damaged_file_keeps_the_stored_session_and_its_comments(project, tmp_path):
    # A file cut short and a garbled line: replacing would have deleted the whole session, its
    # comments and sign-offs, for one with half its events.
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=3)
    first = import_file(path=path, project=project)[0].session
    comments.create_comment(actor=Actor(user=member("rita", project, Role.REVIEWER)), session=first, seq=1, body="why?")
    lines = path.read_bytes().splitlines()
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"\n".join(lines[: len(lines) // 2] + [b"{not json"]) + b"\n")

    [outcome] = import_file(path=damaged, project=project, replace=True)

    assert outcome.replaced == [] and outcome.session.pk != first.pk
    assert Session.objects.filter(pk=first.pk).exists() and Comment.objects.filter(session=first).count() == 1
    [said] = [p for p in outcome.problems if p["field"] == "replace"]
    assert said["message"].startswith(f"not replaced: its part of the file has 1 problem(s), so session(s) {first.pk}")
    # A sound file of the same source replaces the copy, as asked; the commented session stays.
    [sound] = import_file(path=path, project=project, replace=True)
    assert sound.replaced == [outcome.session.pk]
    assert list(Session.objects.order_by("pk").values_list("pk", flat=True)) == [first.pk, sound.session.pk]


def _comment_on(session, project):
    comments.create_comment(
        actor=Actor(user=member("rita", project, Role.REVIEWER)), session=session, seq=1, body="why?"
    )


def _sign_off_on(session, project):
    reviews.sign_off(session=session, reviewer=Actor(user=member("rita", project, Role.REVIEWER)), verdict="approved")


def _stop_on(session, project):
    tour = tours.create_tour(actor=Actor(user=member("mia", project, Role.MAINTAINER)), project=project, title="t")
    TourStop.objects.create(tour=tour, position=0, session=session, seq=1, title="here")


def _link_to(session, project):
    sharing.create_link(actor=Actor(user=member("mia", project, Role.MAINTAINER)), session=session, note="vendor")


def _from_a_bundle(session, project):
    Session.objects.filter(pk=session.pk).update(bundle_origin={"fingerprint": "ab"})


@pytest.mark.parametrize("work", [_comment_on, _sign_off_on, _stop_on, _link_to, _from_a_bundle])
def test_replace_keeps_a_session_holding_the_teams_work_and_says_so(project, tmp_path, work):
    # `--replace` had deleted them, with their comments, sign-offs, tour stops and share links,
    # without a word: the team's work is not the file's to delete (its page asks first).
    path = tmp_path / "full.jsonl"
    record_full_session(path, run_id="one", steps=2)
    record_full_session(path, run_id="two", steps=2)
    reviewed, plain = (o.session for o in import_file(path=path, project=project))
    work(reviewed, project)
    one, two = import_file(path=path, project=project, replace=True)
    assert one.replaced == [] and two.replaced == [plain.pk]
    assert Session.objects.filter(pk=reviewed.pk).exists() and not Session.objects.filter(pk=plain.pk).exists()
    [said] = [p["message"] for p in one.problems if p["field"] == "replace"]
    assert said.startswith(f"not replaced: session(s) {reviewed.pk} of the same source hold comments, sign-offs")


def test_replace_refuses_only_the_damaged_session_of_a_file(project, tmp_path):
    # The file's problems had blocked its clean sessions too, and counted the refusals' own notes.
    path = tmp_path / "two.jsonl"
    record_full_session(path, run_id="one", steps=2)
    record_full_session(path, run_id="two", steps=2)
    stored = {o.session.run_id: o.session.pk for o in import_file(path=path, project=project)}
    lines = path.read_bytes().splitlines()
    lines.insert(3, b"{not json")  # in session one
    path.write_bytes(b"\n".join(lines) + b"\n")
    one, two = import_file(path=path, project=project, replace=True)
    assert one.replaced == [] and two.replaced == [stored["two"]]
    assert Session.objects.filter(pk=stored["one"]).exists() and not Session.objects.filter(pk=stored["two"]).exists()
    [said] = [p["message"] for p in one.problems if p["field"] == "replace"]
    assert said.startswith(f"not replaced: its part of the file has 1 problem(s), so session(s) {stored['one']} ")


def test_replace_keeps_both_sessions_of_an_appended_file(project, tmp_path):
    path = tmp_path / "appended.jsonl"
    record_full_session(path, run_id="same", steps=2)
    record_failing_session(path, run_id="same")
    import_file(path=path, project=project)

    outcomes = import_file(path=path, project=project, replace=True)

    assert len(outcomes) == 2 and not any(o.duplicate for o in outcomes)
    assert set(Session.objects.values_list("pk", flat=True)) == {o.session.pk for o in outcomes}


def test_duplicates_are_per_project(project, tmp_path):
    path = tmp_path / "full.jsonl"
    record_full_session(path, steps=2)
    other = Project.objects.create(name="Other", slug="other")
    import_file(path=path, project=project)

    outcome = import_file(path=path, project=other)[0]

    assert outcome.duplicate is False and outcome.session.project == other


# --- jobs --------------------------------------------------------------------------------------


def test_job_gets_progress_while_importing_and_its_result_at_the_end(project, tmp_path, monkeypatch):
    path = tmp_path / "long.jsonl"
    record_full_session(path, steps=300, large_output_at=None, checkpoint_at=None, fail_at=frozenset())
    record_failing_session(path)
    job = ImportJob.objects.create(project=project, original_name="long.jsonl", stored_path=str(path))
    seen: list[tuple[int, int]] = []
    write = importing._JobProgress._write

    def spy(self, **values):
        seen.append((values["events_done"], values["bytes_done"]))
        write(self, **values)

    monkeypatch.setattr(importing._JobProgress, "_write", spy)
    monkeypatch.setattr(importing, "PROGRESS_EVERY", 500)
    monkeypatch.setattr("sessions_app.ingest.writer.BATCH_ROWS", 250)

    outcomes = import_file(path=path, project=project, job=job, created_by="alice")

    job.refresh_from_db()
    assert job.status == ImportJob.Status.DONE and job.error == ""
    assert job.detected_format == "rlm_native"
    assert job.sessions_done == 2
    assert job.events_done == sum(o.events for o in outcomes) > 2500
    assert job.bytes_total == job.bytes_done == path.stat().st_size
    assert [r["session"] for r in job.result] == [o.session.pk for o in outcomes]
    assert job.problem_count == 0 and job.problems == []
    assert job.created_by == "alice" and job.started_at and job.finished_at
    assert set(Session.objects.values_list("import_job", flat=True)) == {job.pk}
    # Progress was written while the first session streamed in, growing each time.
    assert len(seen) >= 2
    assert [events for events, _ in seen] == sorted(events for events, _ in seen)
    assert all(0 < done <= job.bytes_total for _, done in seen)


def test_job_of_a_file_with_nothing_importable_fails_with_its_problems(project):
    job = ImportJob.objects.create(project=project, original_name="upload.jsonl", stored_path="x")

    import_file(path=FIXTURES / "nothing.jsonl", project=project, format="rlm_native", job=job)

    job.refresh_from_db()
    assert job.status == ImportJob.Status.FAILED
    assert job.error.startswith("upload.jsonl: nothing importable as rlm_native")
    assert job.problem_count == 3 and len(job.problems) == 3
    assert job.sessions_done == 0


def test_job_records_bad_lines_of_a_good_file(project):
    job = ImportJob.objects.create(project=project, original_name="bad.jsonl", stored_path="x")

    import_file(path=FIXTURES / "native_bad.jsonl", project=project, job=job)

    job.refresh_from_db()
    assert job.status == ImportJob.Status.DONE
    assert job.problem_count == 12 and job.problems[0] == {
        "line": 1, "field": "line", "message": "byte-order mark at the start of the file (ignored)",
    }  # fmt: skip


# --- the command -------------------------------------------------------------------------------


def run_command(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("import_sessions", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_command_prints_a_files_name_without_letting_a_terminal_obey_it(project, tmp_path):
    # A name holding a terminal's escapes had set the title and cleared the operator's screen.
    folder = tmp_path / "runs"
    folder.mkdir()
    record_full_session(folder / "ok_\x1b]0;PWNED\x07\x1b[2J.jsonl", steps=1)
    (folder / "bad\u202e.jsonl").write_text('{"type": "step_start"\n')
    with pytest.raises(CommandError):
        run_command(str(folder / "bad\u202e.jsonl"))
    out, err = run_command(str(folder))
    for printed in (out, err):
        assert not any(ch in printed for ch in "\x1b\x07\u202e"), printed
    assert "ok_\\u001b]0;PWNED\\u0007\\u001b[2J.jsonl: imported as session" in out
    assert "bad\\u202e.jsonl" in err


def test_command_json_prints_one_object_per_session(project, tmp_path):
    path = tmp_path / "appended.jsonl"
    record_full_session(path, run_id="one", steps=2)
    record_failing_session(path, run_id="two")

    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^1 path\(s\) gave no session: 1 imported nothing$") as raised:
        call_command("import_sessions", str(path), str(FIXTURES / "nothing.jsonl"), "--json", stdout=out)
    assert raised.value.returncode == 1  # the file that stored nothing: a script sees it

    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    sessions = {s.source_session_id: s for s in Session.objects.all()}
    assert lines[0] == {
        "path": str(path), "session": sessions["one"].pk, "format": "rlm_native",
        "events": sessions["one"].event_count, "steps": 2, "problems": [], "duplicate": False,
    }  # fmt: skip
    assert lines[1]["session"] == sessions["two"].pk and lines[1]["steps"] == 3
    assert lines[2]["path"] == str(FIXTURES / "nothing.jsonl")
    assert "nothing importable" in lines[2]["error"] and "session" not in lines[2]
    assert len(lines) == 3
    # The project's log says where the sessions came from; the file that stored none, nothing.
    (entry,) = AuditEntry.objects.of_project(project).filter(action="session.import")
    assert (entry.actor, entry.target) == ("manage.py", f"import:{sessions['one'].import_job_id}")
    detail = orjson.loads(entry.detail)
    assert detail["file"] == "appended.jsonl" and sorted(detail["sessions"]) == sorted(s.pk for s in sessions.values())
    assert detail["session_count"] == 2
    run_command(str(path))  # the same file again: duplicates, nothing new to account for
    assert AuditEntry.objects.of_project(project).filter(action="session.import").count() == 1
    # A folder: one entry a file, each naming its file.
    folder = tmp_path / "more"
    folder.mkdir()
    record_full_session(folder / "a.jsonl", run_id="three", steps=1)
    record_full_session(folder / "b.jsonl", run_id="four", steps=1)
    run_command(str(folder))
    files = [
        orjson.loads(e.detail)["file"] for e in AuditEntry.objects.of_project(project).filter(action="session.import")
    ]
    assert sorted(files) == ["a.jsonl", "appended.jsonl", "b.jsonl"]


def test_command_lists_problems_and_exits_zero_for_damaged_files(project):
    out, err = run_command(str(FIXTURES / "native_bad.jsonl"))

    assert "imported as session" in out and "12 problem(s)" in out
    assert "line 3: line: malformed JSON" in err
    assert "line 14: line: truncated record" in err


def test_command_fails_when_a_file_stores_no_session(project, tmp_path):
    path = tmp_path / "ok.jsonl"
    record_full_session(path, steps=1)
    (tmp_path / "notes.txt").write_text("not a session\n")

    with pytest.raises(CommandError) as raised:
        run_command(str(path), str(tmp_path / "missing.jsonl"), str(tmp_path / "notes.txt"), "--json")

    assert raised.value.returncode == 1
    assert str(raised.value) == "2 path(s) gave no session: 1 could not be read, 1 imported nothing"
    assert Session.objects.count() == 1  # the readable file was still imported
    # The same file again is no failure: it is stored, as the command says.
    out, _ = run_command(str(path))
    assert "already imported as session" in out
    # Nor is a folder of sessions beside a README, which is said; a folder of none is one.
    folder = tmp_path / "runs"
    folder.mkdir()
    record_full_session(folder / "b.jsonl", run_id="b", steps=1)
    (folder / "README.md").write_text("# runs\n")
    out, err = run_command(str(folder))
    assert "imported as session" in out and "README.md: not a recognised session format" in err
    (folder / "b.jsonl").unlink()
    with pytest.raises(CommandError, match=r"^1 path\(s\) gave no session: 1 imported nothing$"):
        run_command(str(folder))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_command_stopped_by_a_signal_fails_its_job_and_no_worker_finishes_it(project, tmp_path, monkeypatch, sig):
    # Left running, the watchdog took the job for a dead worker's and had the server finish the
    # import its operator had cancelled; Ctrl-C printed a traceback. (SIGHUP: its terminal closed.)
    from sessions_app import jobs

    done, stopped = tmp_path / "done.jsonl", tmp_path / "stopped.jsonl"
    record_full_session(done, run_id="done", steps=1)
    record_full_session(stopped, run_id="stopped", steps=2)
    real, calls = importing.append_events, []
    before = signal.getsignal(sig)

    def append_then_stop(**kwargs):
        calls.append(1)
        if len(calls) == 2:  # the second file's session
            os.kill(os.getpid(), sig)  # what `kill` sends, received mid-write
        return real(**kwargs)

    monkeypatch.setattr(importing, "append_events", append_then_stop)
    with pytest.raises(CommandError, match="^interrupted: the file being imported was not stored") as raised:
        run_command(str(done), str(stopped))
    assert raised.value.returncode == 130
    assert [s.run_id for s in Session.objects.all()] == ["done"]  # the one finished stays
    job = ImportJob.objects.get(original_name="stopped.jsonl")
    assert job.status == ImportJob.Status.FAILED and job.error.startswith("Interrupted: the command")
    assert jobs.requeue_stalled_imports() == {"requeued": [], "given_up": []}
    assert signal.getsignal(sig) is before  # the command's handler only while it runs


def test_a_copy_stopped_before_its_job_exists_leaves_no_file(project, tmp_path, monkeypatch):
    # Ctrl-C while a stalled pipe was copied left a file in the uploads folder nothing deletes.
    from sessions_app.ingest import uploads

    def stopped(source, target, *args, **kwargs):
        Path(target).write_bytes(b"half")
        raise KeyboardInterrupt

    path = tmp_path / "run.jsonl"
    record_full_session(path, steps=1)
    monkeypatch.setattr(uploads.shutil, "copyfile", stopped)
    before = {p for p in Path(settings.DATA_DIR).rglob("*") if p.is_file()}
    with pytest.raises(CommandError, match="^interrupted"):
        run_command(str(path))
    assert {p for p in Path(settings.DATA_DIR).rglob("*") if p.is_file()} == before
    assert not ImportJob.objects.exists()


def test_a_recording_folders_job_stopped_by_a_signal_is_failed_not_left_running(project, tmp_path, monkeypatch):
    # Its job keeps no file, so the watchdog never takes it up: it stayed "running" for ever.
    base = tmp_path / "observability"
    write_sink_folder(base)
    real, calls = importing.append_events, []

    def append_then_stop(**kwargs):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(**kwargs)

    monkeypatch.setattr(importing, "append_events", append_then_stop)
    with pytest.raises(CommandError, match="^interrupted"):
        run_command(str(base))
    [job] = ImportJob.objects.all()
    assert (job.original_name, job.status) == ("observability/", ImportJob.Status.FAILED)
    assert job.error.startswith("Interrupted: the command")


def test_a_pipe_found_in_a_folder_is_skipped_not_read(project, tmp_path):
    # Reading a pipe no one writes to hung the command for ever.
    folder = tmp_path / "runs"
    folder.mkdir()
    record_full_session(folder / "a.jsonl", run_id="a", steps=1)
    os.mkfifo(folder / "b.pipe")

    def hung(signum, frame):
        raise AssertionError("the import read the pipe (it would have hung for ever)")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        outcomes = import_file(path=folder, project=project)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    assert [o.error for o in outcomes] == [None, "b.pipe: not a regular file (a pipe, socket or device): skipped"]
    assert [s.run_id for s in Session.objects.all()] == ["a"]


@pytest.mark.parametrize(
    "encoding, gz, said",
    [
        ("utf-16", False, "UTF-16"), ("utf-16-le", False, "UTF-16"), ("utf-16-be", False, "UTF-16"),
        ("utf-32", False, "UTF-32"), ("utf-32-le", False, "UTF-32"), ("utf-32-be", False, "UTF-32"),
        ("utf-16", True, "UTF-16"),
    ],
)  # fmt: skip
def test_a_utf16_or_utf32_file_is_said_to_be_so(project, tmp_path, encoding, gz, said):
    # What Windows PowerShell 5.1's `>` writes: "not a recognised session format" said nothing more.
    # UTF-32 had been called UTF-16 (its mark starts like one), and a gzipped one had no hint.
    path = tmp_path / ("run.jsonl.gz" if gz else "run.jsonl")
    record_full_session(path, steps=1)
    data = path.read_text().encode(encoding)
    path.write_bytes(gzip.compress(data) if gz else data)
    [outcome] = import_file(path=path, project=project)
    assert outcome.error == (
        f"{path.name}: not a recognised session format (nothing importable)"
        + ("; it is gzip-compressed, and what it holds is no session" if gz else "")
        + f"; it is {said} text: save it as UTF-8 (PowerShell: Out-File -Encoding utf8)"
    )


def test_a_link_back_up_the_folder_is_skipped_not_followed(project, tmp_path):
    # Followed, it was read 40 levels deep, every file "already imported" 40 times.
    folder = tmp_path / "runs"
    (folder / "more").mkdir(parents=True)
    record_full_session(folder / "more" / "a.jsonl", run_id="a", steps=1)
    (folder / "more" / "up").symlink_to(folder)
    (folder / "elsewhere").symlink_to(tmp_path / "runs" / "more")  # a link down is followed
    outcomes = import_file(path=folder, project=project)
    assert [(o.path.name, o.error, o.duplicate) for o in outcomes] == [
        ("a.jsonl", None, False), ("up", "up: a link back to a folder being read: skipped", False),
        ("a.jsonl", None, True), ("up", "up: a link back to a folder being read: skipped", False),
    ]  # fmt: skip
    # Two folders linking to each other, and a link to nothing.
    loop = tmp_path / "loop"
    (loop / "a").mkdir(parents=True)
    (loop / "b").mkdir()
    record_full_session(loop / "a" / "x.jsonl", run_id="x", steps=1)
    (loop / "a" / "to-b").symlink_to(loop / "b")
    (loop / "b" / "to-a").symlink_to(loop / "a")
    (loop / "gone").symlink_to(tmp_path / "nowhere")
    outcomes = import_file(path=loop, project=project)
    assert [(str(o.path.relative_to(loop)), o.error) for o in outcomes if o.error or not o.duplicate] == [
        ("a/to-b/to-a", "to-a: a link back to a folder being read: skipped"), ("a/x.jsonl", None),
        ("b/to-a/to-b", "to-b: a link back to a folder being read: skipped"),
        ("gone", "gone: a broken link (or a link to itself): skipped"),
    ]  # fmt: skip
    assert len(outcomes) == 5  # b/to-a/x.jsonl, read once more, is the same session
    # A link up above the folder named: what is up there is not the operator's to import.
    top = tmp_path / "top"
    (top / "named").mkdir(parents=True)
    record_full_session(top / "outside.jsonl", run_id="outside", steps=1)
    record_full_session(top / "named" / "in.jsonl", run_id="in", steps=1)
    (top / "named" / "up").symlink_to(top)
    outcomes = import_file(path=top / "named", project=project)
    assert [(o.path.name, o.error) for o in outcomes] == [
        ("in.jsonl", None), ("up", "up: a link back to a folder being read: skipped"),
    ]  # fmt: skip
    assert not Session.objects.filter(run_id="outside").exists()


def test_command_replace_and_project(project, tmp_path):
    path = tmp_path / "ok.jsonl"
    record_full_session(path, steps=1)
    # A slug no project has is refused (a typo would hide the sessions), unless asked to create it.
    with pytest.raises(CommandError, match="no project with the slug 'team-a'"):
        run_command(str(path), "--project", "team-a")
    assert not Session.objects.exists()
    for bad in ("bad slug!", "Team-A", "x" * 101):  # no address would hold it: every page naming it failed
        with pytest.raises(CommandError, match=r"^--project: .* is not a slug"):
            run_command(str(path), "--project", bad, "--new-project")
    assert not Project.objects.filter(slug__in=("bad slug!", "Team-A", "x" * 101)).exists()
    run_command(str(path), "--project", "team-a", "--new-project")
    first = Session.objects.get()

    out, _ = run_command(str(path), "--project", "team-a", "--replace", "--json")

    second = Session.objects.get()
    assert second.pk != first.pk and second.project.slug == "team-a"
    assert orjson.loads(out)["session"] == second.pk
    # The new project's log starts with who made it, then the imports it holds.
    actions = list(AuditEntry.objects.of_project(second.project).order_by("seq").values_list("actor", "action"))
    assert actions[:2] == [("manage.py", "project.create"), ("manage.py", "session.import")]
    # A name another project holds is said, by the workflow the pages use (it was an
    # IntegrityError traceback); nothing is stored.
    Project.objects.create(slug="elsewhere", name="team-b")
    with pytest.raises(CommandError, match=r"^--project: name: a project named 'team-b' exists already$"):
        run_command(str(path), "--project", "team-b", "--new-project")
    assert not Project.objects.filter(slug="team-b").exists() and Session.objects.count() == 1


def test_command_format_option_overrides_detection(project, tmp_path):
    path = tmp_path / "steps.log"
    write_runner_steps(path)

    out, _ = run_command(str(path), "--format", "rlm_steps", "--json")

    assert orjson.loads(out)["format"] == "rlm_steps"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_job_progress_is_visible_to_other_connections_while_a_session_streams_in(tmp_path, monkeypatch):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one writer: progress shows at each session's commit there")
    project = Project.get_default()
    path = tmp_path / "long.jsonl"
    record_full_session(path, steps=150, large_output_at=None, checkpoint_at=None, fail_at=frozenset())
    job = ImportJob.objects.create(project=project, original_name="long.jsonl", stored_path=str(path))
    observed = watch_job_progress(monkeypatch, job)
    monkeypatch.setattr("sessions_app.ingest.writer.BATCH_ROWS", 100)

    import_file(path=path, project=project, job=job)

    assert len(observed) >= 3
    assert all(written == seen for written, seen in observed)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_file_imported_twice_at_once_is_stored_once(tmp_path, monkeypatch):
    # Two workers importing the same content at the same moment: both have written their session
    # (uncommitted) before either checks for a duplicate; the second to check must wait for the
    # first to commit and then find it.
    import threading

    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers need PostgreSQL (SQLite has one writer at a time)")
    project = Project.get_default()
    path = tmp_path / "twice.jsonl"
    record_full_session(path, steps=5, large_output_at=None, checkpoint_at=None, fail_at=frozenset())
    both_written = threading.Barrier(2, timeout=30)
    finish = importing.finish_session

    def finish_then_wait(**kwargs):
        session = finish(**kwargs)
        both_written.wait()
        return session

    monkeypatch.setattr(importing, "finish_session", finish_then_wait)
    outcomes: list = []

    def run() -> None:
        try:
            outcomes.extend(import_file(path=path, project=project))
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcome.duplicate for outcome in outcomes) == [False, True]
    assert Session.objects.filter(project=project).count() == 1
    assert outcomes[0].session.pk == outcomes[1].session.pk


def test_replace_of_a_file_with_more_sessions_than_a_statement_binds_values(project, tmp_path):
    """A file's own sessions are looked up in Python, not bound as `pk__in`: with SQLite's bound
    lowered to 210 values (32,766 by default), 260 appended sessions of one run replace again."""
    import sqlite3

    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("lowers SQLite's own bound")
    path = tmp_path / "appended.jsonl"
    lines = []
    for i in range(260):
        stamp = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}"
        lines.append({"event_type": "session_start", "timestamp": stamp, "run_id": "same", "data": {"task": f"t{i}"}})
        lines.append({"event_type": "step_start", "timestamp": stamp, "run_id": "same", "step": 1, "data": {}})
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    connection.ensure_connection()
    before = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    connection.connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 210)
    try:
        first = import_file(path=path, project=project)
        again = import_file(path=path, project=project, replace=True)
    finally:
        connection.connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, before)

    assert len(first) == len(again) == 260
    assert not any(o.error or o.duplicate for o in first + again)
    assert set(Session.objects.values_list("pk", flat=True)) == {o.session.pk for o in again}


DEMO = Path(__file__).resolve().parent.parent / "demo"


@pytest.mark.parametrize(
    "name",
    ["rlm_success.jsonl", "flux0_support_chat.jsonl", "daycare_interrupted.jsonl", "rlm_trajectory_logger.jsonl"],
)
@pytest.mark.parametrize("gzipped", [False, True])
def test_a_first_record_longer_than_the_head_is_still_detected(tmp_path, name, gzipped):
    from sessions_app.formats import HEAD_BYTES, Source, detect

    original = DEMO / name
    expected = detect(Source(path=original))
    assert expected is not None
    first, rest = original.read_bytes().split(b"\n", 1)
    record = orjson.loads(first)
    record["padding"] = "x" * (HEAD_BYTES + 16 * 1024)  # an 80 KB first record, as a long task makes
    data = orjson.dumps(record) + b"\n" + rest
    path = tmp_path / (name + (".gz" if gzipped else ""))
    path.write_bytes(gzip.compress(data) if gzipped else data)
    assert detect(Source(path=path)) == expected


def test_a_folder_given_on_this_machine_keeps_where_its_sessions_came_from(project, tmp_path):
    from sessions_app.ingest.importing import import_local_file
    from sessions_app.replay.exports import original_file, original_missing

    from .builders_rlm import write_sink_folder

    # A plain folder: each file as if given on its own, kept with its job, so each session's
    # original is its file byte for byte and the imports list names it.
    plain = tmp_path / "plain"
    plain.mkdir()
    record_full_session(plain / "a.jsonl", run_id="run_a", steps=2)
    record_full_session(tmp_path / "b.json", run_id="run_b", steps=1)
    (plain / "b.json").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "b.json").read_bytes().replace(b"\n", b"\r\n"))
    outcomes = import_local_file(path=plain, project=project, created_by="cli")
    assert [o.error for o in outcomes] == [None, None]
    for outcome, name in zip(outcomes, ["a.jsonl", "b.json"]):
        job = outcome.session.import_job
        assert (job.original_name, job.created_by, job.status) == (name, "cli", ImportJob.Status.DONE)
        assert original_file(outcome.session).read_bytes() == (plain / name).read_bytes()
    # No job stands for the folder itself.
    assert ImportJob.objects.count() == 2
    # A folder that is one recording (a LocalJSONLSink's): one job naming it, no copy kept; its
    # events keep their records, which its original export gives.
    sink = tmp_path / "observability"
    write_sink_folder(sink)
    outcomes = import_local_file(path=sink, project=project, created_by="cli")
    assert [o.error for o in outcomes] == [None, None]
    (job,) = {o.session.import_job for o in outcomes}
    assert (job.original_name, job.stored_path, job.status) == ("observability/", "", ImportJob.Status.DONE)
    assert sorted(r["session"] for r in job.result) == sorted(o.session.pk for o in outcomes), job.result
    for outcome in outcomes:
        assert original_file(outcome.session) is None and original_missing(outcome.session) == ""
    # The same folder again stores nothing new, and leaves no job for it.
    again = import_local_file(path=sink, project=project, created_by="cli")
    assert all(o.duplicate for o in again) and ImportJob.objects.count() == 3


def test_command_replace_says_what_it_deleted_and_the_audit_log_keeps_it(project, tmp_path):
    # The command says which sessions went; the project's log has a session.delete for each
    # naming the session that replaced it. One holding the team's work (comments, sign-offs,
    # tour stops) is kept, and the command says so.
    from sessions_app import comments, reviews, tours
    from sessions_app.access import Actor
    from sessions_app.models import Comment, Review, TourStop

    from .builders_teams import member

    path = tmp_path / "run.jsonl"
    record_full_session(path, steps=2)
    run_command(str(path))
    first = Session.objects.get()
    events = first.event_count

    out, _ = run_command(str(path), "--replace")

    second = Session.objects.get()
    assert f"replaced and deleted session(s) {first.pk} of the same source" in out
    (deleted,) = AuditEntry.objects.of_project(project).filter(action="session.delete")
    imported = AuditEntry.objects.of_project(project).filter(action="session.import").order_by("seq").last()
    assert imported.target == f"import:{second.import_job_id}"
    assert imported.actor == "manage.py" and second.import_job.created_by == "manage.py"
    assert (deleted.actor, deleted.target) == ("manage.py", f"session:{first.pk}")
    assert orjson.loads(deleted.detail) == {"events": events, "source_session_id": first.source_session_id,
                                            "replaced_by": f"session:{second.pk}"}  # fmt: skip

    mia = Actor(user=member("mia", project))
    comments.create_comment(actor=mia, session=second, seq=1, body="the turn")
    reviews.sign_off(session=second, reviewer=mia, verdict="approved")
    tour = tours.create_tour(actor=mia, project=project, title="Walk")
    tours.add_stop(actor=mia, tour=tour, session=second, seq=1, title="here")

    out, err = run_command(str(path), "--replace")

    assert f"not replaced: session(s) {second.pk} of the same source hold comments" in out + err
    assert "replaced and deleted" not in out + err
    assert Session.objects.count() == 2 and Comment.objects.get().session == second
    assert Review.objects.get().session == second and TourStop.objects.get().session == second
    assert AuditEntry.objects.of_project(project).filter(action="session.delete").count() == 1


def _checkpoint_on(session, project):
    from sessions_app import checkpoints

    checkpoints.save_checkpoint(actor=Actor(user=member("mia", project, Role.MAINTAINER)), session=session,
                                name="before the bad call", seq=1)  # fmt: skip


def _redaction_in(session, project):
    from sessions_app.stored_redaction import redact_text

    payload = orjson.loads(Event.objects.get(session=session, seq=0).payload)
    word = next(v for v in payload.values() if isinstance(v, str) and len(v) >= 4)
    redact_text(session=session, seq=0, text=word, actor="mia")


@pytest.mark.parametrize("work", [_checkpoint_on, _redaction_in])
def test_replace_keeps_a_session_with_a_checkpoint_someone_set_or_a_value_redacted_since(project, tmp_path, work):
    # Deleted without a word before: the checkpoint gone, the redacted value shown again.
    path = tmp_path / "full.jsonl"
    record_full_session(path, run_id="one", steps=2)
    first = import_file(path=path, project=project)[0].session
    work(first, project)
    [again] = import_file(path=path, project=project, replace=True)
    assert again.replaced == [] and Session.objects.filter(pk=first.pk).exists()
    [said] = [p["message"] for p in again.problems if p["field"] == "replace"]
    assert said.startswith(f"not replaced: session(s) {first.pk} of the same source hold")
    # Without them it is replaced, as asked.
    [third] = import_file(path=path, project=project, replace=True)
    assert third.replaced == [again.session.pk]


def _checkpoint_set_and_deleted(session, project):
    from sessions_app import checkpoints

    actor = Actor(user=member("mia", project, Role.MAINTAINER))
    checkpoint = checkpoints.save_checkpoint(actor=actor, session=session, name="a second look", seq=1)
    checkpoints.delete_checkpoint(actor=actor, checkpoint=checkpoint)


def _rules_run_that_removed_nothing(session, project):
    from sessions_app.models import RedactionRules
    from sessions_app.stored_redaction import redact_with_rules, start_rules_job

    RedactionRules.objects.create(
        project=project, detectors=[], custom=[{"label": "secret", "pattern": "no such secret anywhere"}]
    )
    result = redact_with_rules(job=start_rules_job(session=session, actor="mia"))
    assert result.seqs == [] and not result.session_fields
    RedactionRules.objects.filter(project=project).delete()


@pytest.mark.parametrize("kept", [False, True], ids=["file not kept", "file kept"])
@pytest.mark.parametrize("work", [_checkpoint_set_and_deleted, _rules_run_that_removed_nothing])
def test_replace_replaces_a_session_whose_team_work_left_nothing(project, tmp_path, work, kept):
    # Its log names a checkpoint or a redaction, but nothing of it is left to lose: kept anyway,
    # the session could not be replaced at all. (A kept file, as an upload's, is one the rules
    # run deletes or leaves unchanged: no value removed either.)
    path = tmp_path / "full.jsonl"
    record_full_session(path, run_id="one", steps=2)
    load = import_local_file if kept else import_file
    first = load(path=path, project=project)[0].session
    work(first, project)
    [again] = load(path=path, project=project, replace=True)
    assert again.replaced == [first.pk] and not Session.objects.filter(pk=first.pk).exists()
    assert [p for p in again.problems if p["field"] == "replace"] == []
