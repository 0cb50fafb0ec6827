"""rlm-code snapshot JSON with bad input (found by fuzzing): a duration no calendar holds, text
around the top-level object, and `steps` that is not an array. Each is a problem naming its line
and field; the rest of the snapshot imports as the undamaged file does.

The snapshots are written by rlm-code's own SessionRecorder (`get_snapshot().to_dict()`, pretty
printed as SessionStore writes them), then damaged as text.
"""

from __future__ import annotations

import io
import json
import random
from datetime import datetime
from pathlib import Path

import orjson
import pytest

from sessions_app.canonical import Problems
from sessions_app.formats import Source, detect, rlm_snapshot

from .builders_formats import ingest_file, problem_keys, rows
from .builders_rlm import record_full_session

BLOCKS = [1, 7, rlm_snapshot.READ_BLOCK]  # the reader refills mid-token at the small ones


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


@pytest.mark.parametrize("block", BLOCKS)
def test_a_stray_closing_brace_before_steps_is_reported_and_the_steps_still_import(
    snapshot, block, project, tmp_path, monkeypatch
):
    monkeypatch.setattr(rlm_snapshot, "READ_BLOCK", block)
    expected = expected_content(snapshot, tmp_path, project)
    good = snapshot_text(snapshot)
    # Used to end the object there: no steps and no problem at all.
    text = good.replace(',\n  "steps": [', '},\n  "steps": [', 1)
    assert text != good
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(line_of(text, '},\n  "steps"'), "line")]
    assert problems.items[0].message == "stray '}' before the end of the snapshot object (ignored)"
    assert content(session) == expected
    assert session.completed is True and session.final_answer  # the members after the steps too


@pytest.mark.parametrize("block", BLOCKS)
def test_an_empty_object_before_the_snapshot_is_reported_and_skipped(snapshot, block, project, tmp_path, monkeypatch):
    monkeypatch.setattr(rlm_snapshot, "READ_BLOCK", block)
    good = snapshot_text(snapshot)
    (first,), _ = imported(good, tmp_path, project, "good.json")
    # Used to end at the first object: no steps and no problem at all.
    (session,), problems = imported("{}\n{ }\n" + good, tmp_path, project)
    assert problem_keys(problems) == [(1, "line"), (2, "line")]
    assert problems.items[0].message == "empty JSON object before the snapshot (ignored)"
    assert first.step_count == 3 and content(session) == content(first)
    assert [e.line for e in rows(session)] == [e.line + 2 for e in rows(first)]


@pytest.mark.parametrize("block", BLOCKS)
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
    monkeypatch.setattr(rlm_snapshot, "READ_BLOCK", block)
    expected = expected_content(snapshot, tmp_path, project)
    text = snapshot_text(snapshot) + "\n\n" + after
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(text.count("\n", 0, text.rindex(found)) + 1, "line")]
    assert problems.items[0].message.startswith("text after the end of the snapshot object (ignored)")
    assert content(session) == expected


def test_blank_lines_after_the_snapshot_object_are_no_problem(snapshot, project, tmp_path):
    (session,), problems = imported(snapshot_text(snapshot) + "\n \n\t\n", tmp_path, project)
    assert problems.count == 0 and session.step_count == 3


@pytest.mark.parametrize(("steps", "kind"), [(5, "int"), (None, "null"), ("x", "str"), ({"step": 1}, "dict")])
@pytest.mark.parametrize("position", ["in_place", "last"])
def test_steps_that_are_not_an_array_are_reported(snapshot, steps, kind, position, project, tmp_path):
    data = dict(snapshot)
    if position == "last":
        del data["steps"]
    data["steps"] = steps  # in place keeps to_dict's order; otherwise the object's last member
    text = json.dumps(data, indent=2)
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(line_of(text, '"steps"'), "steps")]
    assert problems.items[0].message == f"expected an array of StepState objects, got {kind}: no steps read"
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


@pytest.mark.parametrize("block", BLOCKS)
def test_the_steps_opening_line_written_twice_costs_only_that_line(snapshot, block, project, tmp_path, monkeypatch):
    monkeypatch.setattr(rlm_snapshot, "READ_BLOCK", block)
    expected = expected_content(snapshot, tmp_path, project)
    good = snapshot_text(snapshot)
    # Found by fuzzing: its "[" took every step after it in, and the file read as truncated.
    text = good.replace('  "steps": [\n', '  "steps": [\n  "steps": [\n', 1)
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(line_of(text, '  "steps": [\n') + 1, "line")]
    assert problems.items[0].message == "the array's opening line again inside it (skipped)"
    assert content(session) == expected
    assert [e.line for e in rows(session) if e.kind == "step_end"] == [
        line_of(text, '\n      "step": %d,' % n) for n in (1, 2, 3)
    ]


@pytest.mark.parametrize("block", [*BLOCKS, 13, 29])
@pytest.mark.parametrize(
    "stray",
    [
        '    "note": {\n      "a": 1\n    },\n',  # a whole member, over lines
        '  "total_steps": 3,\n',  # a member with its value
    ],
)
def test_another_member_inside_the_steps_is_one_bad_element(snapshot, stray, block, project, tmp_path, monkeypatch):
    # The review of the change above: skipping such a line would unbalance what it opens.
    monkeypatch.setattr(rlm_snapshot, "READ_BLOCK", block)
    expected = expected_content(snapshot, tmp_path, project)
    text = snapshot_text(snapshot).replace('  "steps": [\n', '  "steps": [\n' + stray, 1)
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(line_of(text, '  "steps": [\n') + 1, "steps")]
    assert content(session) == expected
    assert [e.line for e in rows(session) if e.kind == "step_end"] == [
        line_of(text, '\n      "step": %d,' % n) for n in (1, 2, 3)
    ]


# A line left open inside the steps (a brace or bracket never closed, a string never closed):
# before, it took every step after it in and the members after the steps, as one truncated step.
LEFT_OPEN = [
    '    "note": {\n',  # an object never closed
    '    {\n',  # a brace too many
    '  "x": "unclosed,\n',  # a string never closed, at another indentation
    '      "note": "no end\n',  # the same, indented as a step's own members
]


@pytest.mark.parametrize("block", [*BLOCKS, 13, 29])
@pytest.mark.parametrize("where", ["before the first step", "before the second step"])
@pytest.mark.parametrize("stray", LEFT_OPEN)
def test_a_line_left_open_between_steps_costs_only_itself(snapshot, stray, where, block, project, tmp_path, monkeypatch):
    monkeypatch.setattr(rlm_snapshot, "READ_BLOCK", block)
    expected = expected_content(snapshot, tmp_path, project)
    good = snapshot_text(snapshot)
    steps_at = good.index('  "steps": [\n') + len('  "steps": [\n')
    at = steps_at if where == "before the first step" else good.index("\n    {\n", steps_at + 1) + 1
    text = good[:at] + stray + good[at:]
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(text[:at].count("\n") + 1, "steps")]
    assert problems.items[0].message.startswith("malformed JSON")
    assert content(session) == expected
    assert session.final_answer == snapshot["final_answer"] and session.final_answer


@pytest.mark.parametrize("block", [*BLOCKS, 13, 29])
@pytest.mark.parametrize("stray", [s for s in LEFT_OPEN if s.startswith("      ")] + ['      "note": {\n'])
def test_a_line_left_open_inside_a_step_costs_that_step_only(snapshot, stray, block, project, tmp_path, monkeypatch):
    monkeypatch.setattr(rlm_snapshot, "READ_BLOCK", block)
    expected = expected_content(snapshot, tmp_path, project)
    good = snapshot_text(snapshot)
    second = good.index("\n    {\n", good.index('  "steps": [\n') + 20) + 1
    at = second + len("    {\n")
    text = good[:at] + stray + good[at:]
    (session,), problems = imported(text, tmp_path, project)
    assert problem_keys(problems) == [(text[:second].count("\n") + 1, "steps")]
    kept = [row for row in content(session) if row[0] == "step_end"]
    assert [row[1] for row in kept] == [1, 3]
    assert kept == [row for row in expected if row[0] == "step_end" and row[1] != 2]


@pytest.mark.parametrize("block", [*BLOCKS, 13])
def test_a_comma_missing_between_steps_is_reported_and_both_steps_kept(snapshot, block, project, tmp_path, monkeypatch):
    monkeypatch.setattr(rlm_snapshot, "READ_BLOCK", block)
    expected = expected_content(snapshot, tmp_path, project)
    good = snapshot_text(snapshot)
    second = good.index("\n    {\n", good.index('  "steps": [\n') + 20) + 1
    assert good[second - 3 : second] == "},\n"
    text = good[: second - 2] + good[second - 1 :]
    (session,), problems = imported(text, tmp_path, project)
    assert [(p.line, p.field, p.message) for p in problems.items] == [
        (text[:second].count("\n") + 1, "line", "missing ',' between steps")
    ]
    assert content(session) == expected


@pytest.mark.parametrize("layout", ["value on the next line", "a list of objects"])
def test_a_valid_step_laid_out_otherwise_is_not_cut(snapshot, layout, project, tmp_path):
    # A `{` alone at the steps' indentation inside a valid step follows `:` or `[`: never a cut.
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


def _step_ends(text: str, tmp_path: Path) -> int:
    path = tmp_path / "damaged.json"
    path.write_text(text, encoding="utf-8")
    count = 0
    for parsed in rlm_snapshot.parse(Source(path=path), Problems()):
        count += sum(1 for event in parsed.events if event.kind == "step_end")
    return count


def test_any_one_damaged_line_costs_at_most_its_own_step(snapshot, tmp_path):
    # Every line of the file in turn deleted, written twice, and without its first quote. A line
    # outside the steps costs none of them, a line inside one costs at most that one; only the
    # object's own opening line and the `"steps": [` line (but for its being written twice,
    # which is skipped) take the steps with them.
    lines = snapshot_text(snapshot).split("\n")
    first = lines.index('  "steps": [')
    last = lines.index("  ],", first)
    assert _step_ends("\n".join(lines), tmp_path) == 3
    for i, line in enumerate(lines):
        damaged = {"deleted": lines[:i] + lines[i + 1 :], "twice": lines[: i + 1] + lines[i:]}
        if '"' in line:
            k = line.index('"')
            damaged["no quote"] = lines[:i] + [line[:k] + line[k + 1 :]] + lines[i + 1 :]
        for how, text in damaged.items():
            kept = _step_ends("\n".join(text), tmp_path)
            if i == 0 or (i == first and how != "twice"):
                continue
            # The steps' closing line lost leaves the last step running into the members after
            # the steps: that step is malformed.
            floor = 3 if not first < i <= last else 2
            assert kept >= floor, (i, how, line, kept)


def _members(text: bytes, block: int, monkeypatch) -> tuple[list, dict, list]:
    monkeypatch.setattr(rlm_snapshot, "READ_BLOCK", block)
    problems = Problems()
    found = list(rlm_snapshot.members(io.BytesIO(text), problems, array_key="steps"))
    steps = [orjson.loads(m.raw) for m in found if m.in_array]
    others = {m.key: orjson.loads(m.raw) if rlm_snapshot._parses(m.raw) else m.raw for m in found if not m.in_array}
    return steps, others, [(p.line, p.field, p.message) for p in problems.items]


@pytest.mark.parametrize("block", [*BLOCKS, 13])
def test_a_nested_brace_at_the_steps_indentation_in_a_valid_step_is_not_a_cut(block, monkeypatch):
    # Found by review: a list of objects laid out at the steps' own indentation.
    text = b'{\n  "steps": [\n    {"a": [\n    {"x": 1\n    },\n    {"y": 2}]},\n    {"b": 1}\n  ],\n  "total_steps": 2\n}\n'
    assert _members(text, block, monkeypatch) == (json.loads(text)["steps"], {"total_steps": 2}, [])


@pytest.mark.parametrize("block", [*BLOCKS, 13])
def test_a_line_break_in_a_string_that_goes_on_costs_only_its_member(block, monkeypatch):
    # The text after the break is no structure: the string runs to its quote, and only that
    # member is malformed (found by review: ending it at the break read the next member's value
    # as this one's).
    text = b'{\n  "session_id": "\nx",\n  "total_steps": 3,\n  "steps": [\n    {\n      "step": 1\n    }\n  ]\n}\n'
    # The member comes whole, malformed (its import reports it on its line: _load).
    assert _members(text, block, monkeypatch) == ([{"step": 1}], {"session_id": b'"\nx"', "total_steps": 3}, [])


def _random_value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([1, "s", 'q"}{[,\\', None, True, 2.5, "line\n"])
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


@pytest.mark.parametrize("seed", range(4))
def test_valid_snapshots_in_any_layout_read_exactly_as_json(seed, monkeypatch):
    # Line breaks and indentation (of the steps' own width among others) between any two tokens:
    # whatever the recovery from damage looks for, a valid file reads as json.loads reads it.
    rng = random.Random(seed)
    for _ in range(25):
        steps = [
            {"step": i, **{key: _random_value(rng) for key in ("variables", "raw_action", "output") if rng.random() < 0.7},
             "list": [{"x": _random_value(rng, 1)} for _ in range(rng.randint(1, 3))]}
            for i in range(rng.randint(1, 4))
        ]  # fmt: skip
        doc = {"snapshot_id": "s", "session_id": "x", "total_steps": len(steps), "steps": steps, "variables": {"v": 1}}
        parts = []
        for token in _tokens(doc):
            roll = rng.random()
            if roll < 0.3:
                parts.append("\n" + rng.choice(["", "  ", "    ", "      ", "\t"]))
            elif roll < 0.4:
                parts.append(" ")
            parts.append(token)
        text = "".join(parts).encode()
        for block in (1, 13, 1 << 20):
            expected = ({k: v for k, v in doc.items() if k != "steps"}, [])
            assert _members(text, block, monkeypatch) == (steps, *expected), text
