"""rlm-code snapshot JSON with bad input (found by fuzzing): a duration no calendar holds, text
after the top-level object, `steps` that is not an array, and syntax errors. Each is a problem
naming its line and field; a syntax error ends the snapshot there, and the steps before it
import as the undamaged file's do.

The snapshots are written by rlm-code's own SessionRecorder (`get_snapshot().to_dict()`, pretty
printed as SessionStore writes them), then damaged as text.
"""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path

import orjson
import pytest

from sessions_app import formats
from sessions_app.canonical import Problems
from sessions_app.formats import Source, detect, rlm_snapshot
from sessions_app.formats.json_documents import JsonDocument

from .builders_formats import ingest_file, problem_keys, rows
from .builders_rlm import record_full_session


@pytest.fixture
def snapshot(tmp_path: Path) -> dict:
    recorder = record_full_session(tmp_path / "full.jsonl", end=False, steps=3, large_output_at=None)
    return recorder.get_snapshot().to_dict()


def snapshot_text(snapshot: dict, **changes) -> str:
    return json.dumps({**snapshot, **changes}, indent=2)


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def imported(text: str, tmp_path: Path, project, name: str = "snapshot.json"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    sessions, problems = ingest_file(rlm_snapshot, path, project)
    return sessions, problems


def content(session) -> list[tuple]:
    return [(e.kind, e.step, e.step_state, e.state_change, e.raw) for e in rows(session)]


def expected_content(snapshot: dict, tmp_path: Path, project) -> list[tuple]:
    (session,), problems = imported(snapshot_text(snapshot), tmp_path, project, "good.json")
    assert problems.count == 0, problems.to_list()
    assert session.step_count == 3
    return content(session)


@pytest.mark.parametrize(
    ("duration", "message"),
    [
        # timedelta holds it, but the start would be before year 1.
        (1e11, "100000000000.0 seconds before created_at is before year 1: start time left unset"),
        # timedelta itself refuses it.
        (1e300, "expected a finite number within 64 bits, got 1e+300"),
        (10**18, "1000000000000000000 seconds before created_at is before year 1: start time left unset"),
        (-5.0, "negative duration -5.0: start time left unset"),
    ],
)
def test_a_duration_no_calendar_holds_is_reported_and_the_steps_import(snapshot, duration, message, project, tmp_path):
    expected = expected_content(snapshot, tmp_path, project)
    text = snapshot_text(snapshot, duration_seconds=duration)
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(line_of(text, '"duration_seconds"'), "duration_seconds")]
    assert problems.items[0].message == message
    # No start from the duration: the session starts at its first step, as with no duration.
    assert session.started_at == rows(session)[0].ts
    assert session.ended_at == datetime.fromisoformat(snapshot["created_at"])
    assert content(session) == expected


def test_a_usable_duration_still_gives_the_start_time(snapshot, project, tmp_path):
    (session,), problems = imported(snapshot_text(snapshot, duration_seconds=90.0), tmp_path, project)
    assert problems.count == 0
    assert (session.ended_at - session.started_at).total_seconds() == 90.0


@pytest.mark.parametrize("block", [7, 1 << 20])
@pytest.mark.parametrize(
    ("after", "found"),
    [
        ("garbage\n", "garbage"),
        ('{"snapshot_id": "second"}\n', '{"snapshot_id": "second"}'),
        ("}\n", "}\n"),
    ],
)
def test_text_after_the_snapshot_object_is_reported_on_its_line(
    snapshot, after, found, block, project, tmp_path, monkeypatch
):
    monkeypatch.setattr(formats, "READ_BLOCK", block)
    expected = expected_content(snapshot, tmp_path, project)
    text = snapshot_text(snapshot) + "\n\n" + after
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(text.count("\n", 0, text.rindex(found)) + 1, "line")]
    assert problems.items[0].message.startswith("text after the end of the snapshot object (ignored)")
    assert content(session) == expected


def test_blank_lines_after_the_snapshot_object_are_no_problem(snapshot, project, tmp_path):
    (session,), problems = imported(snapshot_text(snapshot) + "\n \n\t\n", tmp_path, project)
    assert problems.count == 0 and session.step_count == 3


@pytest.mark.parametrize(
    ("steps", "kind"), [(5, "a number"), (None, "null"), ("x", "a string"), ({"step": 1}, "an object")]
)
@pytest.mark.parametrize("position", ["in_place", "last"])
def test_steps_that_are_not_an_array_are_reported(snapshot, steps, kind, position, project, tmp_path):
    data = dict(snapshot)
    if position == "last":
        del data["steps"]
    data["steps"] = steps  # in place keeps to_dict's order; otherwise the object's last member
    text = json.dumps(data, indent=2)
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(line_of(text, '"steps"'), "steps")]
    assert problems.items[0].message == f"expected a list of StepState objects, got {kind}: no steps read"
    assert session.step_count == 0
    assert session.source_session_id == data["session_id"]
    # The snapshot's final variables still arrive, as the state event the missing steps leave.
    (state,) = rows(session)
    assert orjson.loads(state.state_change)["variables"] == data["variables"]


def test_the_damaged_snapshots_are_still_detected(snapshot, tmp_path):
    for name, text in {
        "stray.json": snapshot_text(snapshot).replace(',\n  "steps": [', '},\n  "steps": [', 1),
        "huge.json": snapshot_text(snapshot, duration_seconds=1e300),
        "steps.json": snapshot_text(snapshot, steps=5),
    }.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        assert detect(Source(path=path)) == "rlm_snapshot", name


def step_lines(text: str) -> list[int]:
    """The lines on which the steps of a json.dumps(indent=2) snapshot open."""
    return [n for n, line in enumerate(text.split("\n"), start=1) if line == "    {"]


# A syntax error in the third step: (the text replaced, its replacement, the text on the line
# where the parser stops).
SYNTAX_ERRORS = {
    "comma lost between steps": (
        '    },\n    {\n      "step": 3,',
        '    }\n    {\n      "step": 3,',
        '{\n      "step": 3,',
    ),
    "string never closed": ('"rationale": "because 3"', '"rationale": "because 3', '"rationale": "because 3'),
    "closing brace lost": ('"because 3"\n      },', '"because 3"', '"raw_observation"'),
}


@pytest.mark.parametrize("name", list(SYNTAX_ERRORS))
def test_a_syntax_error_ends_the_snapshot_there_and_the_steps_before_it_import(snapshot, name, project, tmp_path):
    old, new, stops_at = SYNTAX_ERRORS[name]
    expected = expected_content(snapshot, tmp_path, project)
    good = snapshot_text(snapshot)
    assert good.count(old) == 1
    text = good.replace(old, new)
    (session,), problems = imported(text, tmp_path, project)
    third = text.index('\n      "step": 3,')  # the step's, not the header's
    assert problem_keys(problems) == [(text.count("\n", 0, text.index(stops_at, third - 20)) + 1, "line")]
    message = problems.items[0].message
    assert message.startswith("malformed JSON at column ") and message.endswith(
        "the rest of the document could not be read"
    )
    assert content(session) == [row for row in expected if row[0] == "step_end" and row[1] in (1, 2)]
    # The members before the steps still describe the session.
    assert session.final_answer == snapshot["final_answer"] and session.source_session_id == snapshot["session_id"]


def test_a_truncated_snapshot_keeps_its_whole_steps(snapshot, project, tmp_path):
    expected = expected_content(snapshot, tmp_path, project)
    good = snapshot_text(snapshot)
    text = good[: good.index('"rationale": "because 3"')]  # ends inside the third step
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(text.rstrip().count("\n") + 1, "line")]
    assert problems.items[0].message.startswith("file ends inside the JSON document (truncated)")
    assert content(session) == [row for row in expected if row[0] == "step_end" and row[1] in (1, 2)]


def test_any_one_damaged_line_keeps_every_step_before_it(snapshot, tmp_path):
    # Every line in turn deleted, written twice, or without its first quote. The text before the
    # damage is the start of a valid snapshot, so the parser cannot stop there: every step that
    # ends before it imports, and a syntax error is reported at or after it (a file that ends
    # too soon, on the last line that holds anything).
    lines = snapshot_text(snapshot).split("\n")
    steps_from, steps_to = lines.index('  "steps": ['), lines.index("  ],")
    step_ends = [n for n in range(steps_from, steps_to) if lines[n] in ("    },", "    }")]
    assert len(step_ends) == 3
    for i, line in enumerate(lines):
        damaged = {"deleted": (lines[:i] + lines[i + 1 :], i), "twice": (lines[: i + 1] + lines[i:], i + 1)}
        if '"' in line:
            k = line.index('"')
            damaged["no quote"] = (lines[:i] + [line[:k] + line[k + 1 :]] + lines[i + 1 :], i)
        for how, (text, first_changed) in damaged.items():
            path = tmp_path / "damaged.json"
            path.write_text("\n".join(text), encoding="utf-8")
            problems = Problems()
            steps = [
                event.step for parsed in rlm_snapshot.parse(Source(path=path), problems)
                for event in parsed.events if event.kind == "step_end"
            ]  # fmt: skip
            whole_before = sum(1 for end in step_ends if end < first_changed)
            assert steps[:whole_before] == [1, 2, 3][:whole_before], (i, how, steps)
            ending = [p for p in problems.items if p.field == "line"]
            assert len(ending) <= 1, (i, how, problems.to_list())
            if how == "no quote":  # never valid JSON: the error must be reported, not only bounded
                assert len(ending) == 1, (i, how, problems.to_list())
            for problem in ending:
                if problem.message.startswith("file ends"):
                    assert problem.line == len("\n".join(text).rstrip().split("\n")), (i, how, problem)
                else:
                    assert problem.line > first_changed, (i, how, problem)


@pytest.mark.parametrize("layout", ["value on the next line", "a list of objects"])
def test_a_valid_step_in_another_layout_reads_as_json_does(snapshot, layout, project, tmp_path):
    expected = expected_content(snapshot, tmp_path, project)
    good = snapshot_text(snapshot)
    if layout == "value on the next line":
        text = good.replace('"raw_action": {\n', '"raw_action":\n    {\n', 1)
    else:
        text = good.replace('"raw_action": {\n', '"raw_action": {"list": [\n    {"a": 1},\n    {"b": 2}\n    ],\n', 1)
    assert text != good
    (session,), problems = imported(text, tmp_path, project)
    assert problems.count == 0, problems.to_list()
    steps = [row[2] for row in content(session) if row[0] == "step_end"]
    expected_steps = [row[2] for row in expected if row[0] == "step_end"]
    assert len(steps) == 3 and steps[1:] == expected_steps[1:]
    if layout == "a list of objects":
        assert orjson.loads(steps[0])["raw_action"]["list"] == [{"a": 1}, {"b": 2}]
    else:
        assert steps[0] == expected_steps[0]


def _members(text: bytes, tmp_path: Path) -> tuple[list, dict, list]:
    path = tmp_path / "snapshot.json"
    path.write_bytes(text)
    problems = Problems()
    steps, others = [], {}
    for _, key, value, in_steps in JsonDocument(Source(path=path), problems).members("steps"):
        if in_steps:
            steps.append(value)
        else:
            others[key] = value
    return steps, others, [(p.line, p.field, p.message) for p in problems.items]


def _random_value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([1, "s", 'q"}{[,\\', None, True, 2.5, "line\n", -0.0, 1e-7, 12345678901234, "é🚀"])
    if roll < 0.7:
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def _tokens(value):
    if isinstance(value, dict):
        yield "{"
        for n, (key, item) in enumerate(value.items()):
            yield from ([","] if n else [])
            yield json.dumps(key)
            yield ":"
            yield from _tokens(item)
        yield "}"
    elif isinstance(value, list):
        yield "["
        for n, item in enumerate(value):
            yield from ([","] if n else [])
            yield from _tokens(item)
        yield "]"
    else:
        yield json.dumps(value)


def test_valid_snapshots_in_any_layout_read_exactly_as_json(tmp_path):
    # Line breaks (LF, CRLF or CR) and indentation between any two tokens, 200 seeded cases.
    rng = random.Random(11)
    for case in range(200):
        steps = [
            {"step": i, **{key: _random_value(rng) for key in ("variables", "raw_action", "output") if rng.random() < 0.7},
             "list": [{"x": _random_value(rng, 1)} for _ in range(rng.randint(1, 3))]}
            for i in range(rng.randint(1, 4))
        ]  # fmt: skip
        doc = {"snapshot_id": "s", "session_id": "x", "total_steps": len(steps), "steps": steps, "variables": {"v": 1}}
        if rng.random() < 0.5:  # a member after the steps too
            doc["metadata"] = _random_value(rng, 1)
        parts = []
        for token in _tokens(doc):
            roll = rng.random()
            if roll < 0.3:
                parts.append(rng.choice(["\n", "\r\n", "\r"]) + rng.choice(["", "  ", "    ", "      ", "\t"]))
            elif roll < 0.4:
                parts.append(" ")
            parts.append(token)
        text = "".join(parts).encode()
        assert json.loads(text) == doc
        assert _members(text, tmp_path) == (steps, {k: v for k, v in doc.items() if k != "steps"}, []), case


def test_a_json_lines_file_given_as_a_snapshot_is_said_to_be_none_at_its_first_line():
    problems = Problems()
    native = Path(__file__).resolve().parent.parent / "demo" / "rlm_success.jsonl"
    sessions = list(rlm_snapshot.parse(Source(path=native), problems))
    assert [list(s.events) for s in sessions] == [[]]
    first = problems.to_list()[0]
    assert (first["line"], first["field"]) == (1, "steps")
    assert first["message"].startswith("not a SessionSnapshot: no steps array nor session_id (its members: event_type")


def test_a_snapshot_without_steps_but_with_its_id_is_no_such_problem(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(orjson.dumps({"session_id": "s1", "steps": [], "task": "t"}))
    problems = Problems()
    for session in rlm_snapshot.parse(Source(path=path), problems):
        list(session.events)
    assert not [p for p in problems.to_list() if p["field"] == "steps"]


def test_detecting_a_head_with_an_integer_past_4300_digits_leaves_the_process_sound(tmp_path):
    # The head's top-level keys are read by ijson's C parser: asked for exact numbers, it makes
    # each integer with int(), whose refusal past 4,300 digits it does not hand on (a SystemError
    # at the next call, then a segmentation fault: a worker's every later job). In a process of
    # its own, as it would crash the suite's.
    import subprocess
    import sys

    path = tmp_path / "big.json"
    path.write_text('{\n  "steps": [],\n  "n": 9' + "9" * 5000 + "\n}\n")
    script = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'replay_site.settings'); django.setup()\n"
        "from pathlib import Path; from sessions_app.formats import Source, detect\n"
        f"print([detect(Source(path=Path({str(path)!r}))) for _ in range(3)])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[None, None, None]", (done.returncode, done.stderr[-300:])


def test_the_head_s_keys_are_read_no_deeper_than_a_document_may_nest():
    # Past the depth at which a document stops (twice MAX_DEPTH) nothing is read: a one-line
    # head of millions of "[" cost seconds of detection for nothing.
    from sessions_app.formats import MAX_DEPTH
    from sessions_app.formats.json_documents import top_level_keys

    deep = 2 * MAX_DEPTH + 5
    head = b'{"snapshot_id": 1, "a": ' + b"[" * deep + b"]" * deep + b', "b": 2}'
    assert top_level_keys(head) == {"snapshot_id", "a"}
    shallow = 2 * MAX_DEPTH - 5
    head = b'{"snapshot_id": 1, "a": ' + b"[" * shallow + b"]" * shallow + b', "b": 2}'
    assert top_level_keys(head) == {"snapshot_id", "a", "b"}


def test_the_head_s_keys_are_read_past_an_integer_yajl_s_floats_cannot_hold():
    from sessions_app.formats.json_documents import top_level_keys

    assert top_level_keys(b'{"n": 18446744073709551616, "event_type": "x"}') == {"n", "event_type"}
    assert top_level_keys(b'{"n": 1e400, "steps": [], "snapshot_id": 1}') == {"n", "steps", "snapshot_id"}
