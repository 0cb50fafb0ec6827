"""Bad input found by fuzzing the readers every format shares (detection, JSON lines, JSON
arrays): each case is a problem on its line and the good records around it still import; none
raises or hangs. (JSON documents: test_format_json_documents.py.)"""

from __future__ import annotations

import gzip

import orjson
import pytest

from sessions_app.formats import Source, detect
from sessions_app.ingest.importing import import_file
from sessions_app.models import Event, Project

GOOD_NATIVE = [
    {"event_type": "session_start", "timestamp": "2026-02-08T10:00:00+00:00", "step": 0,
     "data": {"task": "t", "environment": "e", "model": "m"}, "run_id": "r1"},
    {"event_type": "error", "timestamp": "2026-02-08T10:00:01+00:00", "step": 1,
     "data": {"error": "boom", "recoverable": True}, "run_id": "r1"},
]  # fmt: skip


def native_file(tmp_path, bad_line: bytes):
    """A native rlm-code session: a good line, the bad one (line 2), a good line."""
    first, last = (orjson.dumps(r) for r in GOOD_NATIVE)
    path = tmp_path / "session.jsonl"
    path.write_bytes(first + b"\n" + bad_line + b"\n" + last + b"\n")
    return path


def imported(path, **kwargs):
    outcomes = import_file(path=path, project=Project.get_default(), **kwargs)
    assert len(outcomes) == 1, [o.to_dict() for o in outcomes]
    return outcomes[0]


BAD_LINES = {
    "nested 2000 deep (the stdlib fallback would recurse)": (
        b'{"event_type": "error", "data": ' + b"[" * 2000 + b"]" * 2000 + b"}",
        # Python 3.12's json gives up on this depth (RecursionError); 3.13's reads it, and the
        # record is then too deep to store. A problem on its line either way.
        ("malformed JSON", "cannot be stored: nested deeper than 254 levels"),
    ),
    "nested 300 deep (read, but too deep to store)": (
        b'{"event_type": "error", "step": 1, "data": {"x": ' + b"[" * 300 + b"]" * 300 + b"}}",
        ("cannot be stored: nested deeper than 254 levels",),
    ),
    "a lone surrogate with a bare NaN (only the stdlib reads it)": (
        b'{"event_type": "error", "step": 1, "data": {"error": "\\ud800", "x": NaN}}',
        ("cannot be stored: str is not valid UTF-8",),
    ),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_a_line_that_cannot_be_stored_is_a_problem_and_the_rest_imports(db, tmp_path, case):
    bad, message = BAD_LINES[case]
    outcome = imported(native_file(tmp_path, bad))
    assert outcome.error is None, outcome.error
    assert outcome.events == 2
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(2, "line")]
    assert outcome.problems[0]["message"].startswith(message), outcome.problems


@pytest.mark.parametrize("field,value", [("step", 10**29), ("step", 2**63), ("depth", -(2**64))])
def test_a_number_beyond_64_bits_is_a_problem_on_its_field(db, tmp_path, field, value):
    # orjson writes no integer beyond 64 bits (nor reads it as one: it becomes a float).
    bad = (
        orjson.dumps({k: v for k, v in GOOD_NATIVE[1].items() if k != field})[:-1] + f', "{field}": {value}}}'.encode()
    )
    outcome = imported(native_file(tmp_path, bad))
    assert outcome.events == 3
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(2, field)]
    assert "64 bits" in outcome.problems[0]["message"]


@pytest.mark.parametrize(
    "field,value", [("step", 3_000_000_000), ("step", 2**63 - 1), ("depth", -(2**40)), ("depth", -(2**63))]
)
def test_a_number_beyond_32_bits_but_within_64_is_stored_as_it_is(db, tmp_path, field, value):
    # On PostgreSQL a 32-bit column refused it (the whole import failed), and a binary COPY
    # would wrap it (3,000,000,000 became -1,294,967,296).
    bad = (
        orjson.dumps({k: v for k, v in GOOD_NATIVE[1].items() if k != field})[:-1] + f', "{field}": {value}}}'.encode()
    )
    outcome = imported(native_file(tmp_path, bad))
    assert outcome.error is None and outcome.events == 3 and outcome.problems == []
    assert list(Event.objects.order_by("seq").values_list(field, flat=True))[1] == value


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-23:59"])
def test_a_timestamp_without_a_utc_instant_is_a_problem_not_a_crash(db, tmp_path, stamp):
    bad = orjson.dumps({**GOOD_NATIVE[1], "timestamp": stamp})
    outcome = imported(native_file(tmp_path, bad))
    assert outcome.events == 3  # the event stays, without a time
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(2, "timestamp")]
    assert Event.objects.get(session=outcome.session, seq=1).ts is None


def test_a_canonical_event_without_a_utc_instant_is_refused_with_its_field(db, tmp_path):
    path = tmp_path / "canonical.jsonl"
    good = {"kind": "user_message", "timestamp": "2026-02-08T10:00:00Z", "payload": {"text": "hi"}}
    bad = {**good, "timestamp": "0001-01-01T00:00:00+14:00"}
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in (good, bad, good)) + b"\n")
    outcome = imported(path, format="canonical")
    assert outcome.events == 2
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(2, "timestamp")]


def test_what_a_canonical_file_says_of_its_session_in_the_wrong_type_is_reported_on_each_field(db, tmp_path):
    # Ignored without a word before: the session went without its task or answer, unsaid.
    records = [
        {"kind": "session_start", "payload": {"task": 5, "model": ["m"], "session_id": "s1", "metadata": "x"}},
        {"kind": "user_message", "payload": {"text": "hi"}},
        {"kind": "session_end", "payload": {"status": "done", "completed": "yes", "final_answer": 3,
                                            "total_reward": "high"}},
    ]  # fmt: skip
    path = tmp_path / "canonical.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    outcome = imported(path, format="canonical")
    assert outcome.events == 3  # every event kept as recorded
    assert [(p["line"], p["field"], p["message"]) for p in outcome.problems] == [
        (1, "payload.task", "not text: 5 (ignored)"),
        (1, "payload.model", 'not text: ["m"] (ignored)'),
        (1, "payload.metadata", "not an object: x (ignored)"),
        (3, "payload.status", 'neither "completed" nor "failed": done (ignored)'),
        (3, "payload.completed", "not true or false: yes (ignored)"),
        (3, "payload.final_answer", "not text: 3 (ignored)"),
        (3, "payload.total_reward", "not a number: high (ignored)"),
    ]
    session = outcome.session
    assert (session.source_session_id, session.task, session.model, session.final_answer) == ("s1", "", "", "")


@pytest.mark.parametrize(
    "line",
    [
        b'{"event_type": ["session_start"], "step": 0}',  # rlm-code's sniffs
        b'{"kind": [], "payload": {}}',  # the canonical sniff
        b'{"recording_id": "r", "offset": 0, "kind": {}}',  # flux0's
        b'{"type": {"a": 1}, "at": 1}',  # daycare's
        b'{"eventType": [], "sessionId": {}}',  # AgentLens'
    ],
)
def test_detection_reads_records_of_any_shape_without_raising(db, tmp_path, line):
    path = tmp_path / "odd.jsonl"
    path.write_bytes(line + b"\n")
    detect(Source(path=path))  # no exception, whatever it decides
    outcome = imported(path)
    assert outcome.error or outcome.problems  # and the import says what it made of it


def test_a_corrupt_gzip_is_reported_not_raised(db, tmp_path):
    body = b"\n".join(orjson.dumps(r) for r in GOOD_NATIVE) + b"\n"
    packed = bytearray(gzip.compress(body))
    packed[10] = 0x07  # the first deflate block: final, of the reserved type 3 (zlib.error)
    path = tmp_path / "session.jsonl.gz"
    path.write_bytes(bytes(packed))
    outcome = imported(path)
    assert outcome.session is None
    assert "invalid block type" in (outcome.error or ""), outcome.error


def test_a_json_lines_file_opening_with_an_array_line_reads_the_lines_after_it(db, tmp_path):
    path = tmp_path / "history.jsonl"
    lines = [{"type": "user_message", "at": 1760520000000 + n, "text": f"hi {n}"} for n in range(3)]
    path.write_bytes(b"[]\n" + b"\n".join(orjson.dumps(r) for r in lines) + b"\n")
    outcome = imported(path, format="daycare")
    assert outcome.events == 3
    assert [(p["line"], p["message"]) for p in outcome.problems] == [
        (2, "text after the end of the JSON document: read as JSON lines")
    ]
    assert [e.line for e in Event.objects.filter(session=outcome.session).order_by("seq")] == [2, 3, 4]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_json_lines_with_any_line_break_import_every_record_and_count_lines_on_it(db, tmp_path, newline):
    # Old Mac files end lines with CR alone: each is a line, not one long line.
    good = [orjson.dumps(r) for r in GOOD_NATIVE]
    extra = orjson.dumps({**GOOD_NATIVE[1], "timestamp": "2026-02-08T10:00:02+00:00", "step": 2})
    path = tmp_path / "old-mac.jsonl"
    path.write_bytes(newline.join([good[0], b"{broken", good[1], extra]) + newline)
    outcome = imported(path)
    assert outcome.error is None and outcome.format == "rlm_native"
    assert Event.objects.filter(session=outcome.session).count() == outcome.events >= 3
    assert list(Event.objects.filter(session=outcome.session).order_by("seq").values_list("line", flat=True)) == [
        1,
        3,
        4,
    ]
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(2, "line")]


def test_an_integer_past_64_bits_beside_a_bare_nan_reads_as_orjson_reads_it(db, tmp_path):
    # The stdlib parser (only it reads NaN) kept the integer whole, which nothing stores: the
    # line was skipped, though either value alone imported. Now it reads as the float orjson
    # reads it as: in a payload it is stored so, in a numeric field it is the same problem.
    base = {k: v for k, v in GOOD_NATIVE[1].items() if k != "step"}
    data = orjson.dumps({**base, "data": {"n": 1}})[:-1] + b', "x": NaN, "big": 99999999999999999999999999}'
    outcome = imported(native_file(tmp_path, data))
    assert outcome.error is None and outcome.events == 3 and outcome.problems == []
    stepped = orjson.dumps(base)[:-1] + b', "x": NaN, "step": 100000000000000000000000000000}'
    outcome = imported(native_file(tmp_path, stepped), replace=True)
    # (A file with problems replaces nothing: the first one is kept, and that is said too.)
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(None, "replace"), (2, "step")]
    assert "64 bits" in outcome.problems[1]["message"]


def test_a_line_in_latin_1_is_a_problem_that_says_how_to_convert_the_file(db, tmp_path):
    # One byte é (Latin-1) in a task: the line was dropped with no word on why.
    bad = orjson.dumps({**GOOD_NATIVE[1], "data": {"error": "café"}}).replace("é".encode(), b"\xe9")
    outcome = imported(native_file(tmp_path, bad))
    assert outcome.events == 2
    [problem] = outcome.problems
    assert problem["line"] == 2 and problem["message"].startswith("invalid UTF-8 at byte ")
    assert "iconv -f latin1 -t utf-8" in problem["message"]


def test_canonical_detection_takes_a_typo_on_one_line_but_not_another_logs_kinds(db, tmp_path):
    good = {"kind": "user_message", "payload": {"text": "hi"}}
    typo = {"kind": "llm_call", "tokenz": 3}
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in (good, typo, good)) + b"\n")
    assert detect(Source(path=path)) == "canonical"
    outcome = imported(path)
    assert outcome.events == 2 and [(p["line"], p["field"]) for p in outcome.problems] == [(2, "tokenz")]
    # Another log whose records have a `kind` among keys of their own is no canonical file.
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"\n".join(orjson.dumps({"kind": "error", "msg": f"m{n}", "host": "a"}) for n in range(3)))
    assert detect(Source(path=other)) is None


def test_a_garbage_line_is_parsed_once_and_only_what_python_alone_reads_goes_to_it(tmp_path, monkeypatch):
    # A gzip of a million lines of "x" is 2 KB: each had cost two orjson failures and Python's
    # reader's (26 s of CPU a million, holding SQLite's write lock).
    from sessions_app import formats
    from sessions_app.canonical import Problems

    tried = []
    monkeypatch.setattr(formats, "_load_with_nan", lambda data: tried.append(data) or None)
    path = tmp_path / "garbage.jsonl"
    lines = [b"x", b"{not json", b'{"a": NaN}', b'{"a": "\\ud800"}', b"]"]
    path.write_bytes(b"\n".join(lines) + b"\n")
    problems = Problems()
    assert list(formats.read_records(Source(path=path), problems)) == []
    assert tried == lines[2:4]
    assert [p.line for p in problems.items] == [1, 2, 3, 4, 5]


def test_a_file_is_read_no_further_after_a_long_run_of_lines_that_give_no_record(tmp_path, monkeypatch):
    # A 2 KB gzip holds a million lines of garbage, each a problem to find while the import
    # holds its transaction: past a run of them the rest is not read, and that is said.
    from sessions_app import formats
    from sessions_app.canonical import Problems
    from sessions_app.formats import records

    monkeypatch.setattr(formats, "MAX_UNUSABLE_RUN", 3)
    monkeypatch.setattr(records, "MAX_UNUSABLE_RUN", 3)
    good = b'{"id": 1}'
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(b"\n".join([good, b"x", b"\n\n", b"x", good, b"x", b"1", b"[]", good, good]) + b"\n")
    for read in (
        lambda problems: [n for n, _, _ in formats.read_records(Source(path=path), problems)],
        lambda problems: [r.line for r in records.iter_records(Source(path=path), problems)],
    ):
        problems = Problems()
        assert read(problems) == [1, 7]  # blank lines do not count
        said = [(p.line, p.field) for p in problems.items]
        assert said == [(2, "line"), (6, "line"), (8, "line"), (9, "line"), (10, "line"), (None, "file")]
        assert problems.items[-1].message.startswith("read no further than line 11: the 3 lines before it")


def test_a_file_read_no_further_says_so_among_the_problems_kept(db, tmp_path):
    # At the real run: its 100,000 line problems came first in line order, so the note that the
    # rest was not read, on the line after them, was never among the 1,000 problems kept.
    from sessions_app.formats import MAX_UNUSABLE_RUN

    first, last = (orjson.dumps(r) for r in GOOD_NATIVE)
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(first + b"\n" + b"xx\n" * MAX_UNUSABLE_RUN + last + b"\n")
    outcome = imported(path)
    assert outcome.events == 1
    assert outcome.problems[0] == {
        "line": None,
        "field": "file",
        "message": f"read no further than line {MAX_UNUSABLE_RUN + 2:,}: the {MAX_UNUSABLE_RUN:,} lines before it "
        "gave no record (a file of something else, or damaged); the records before them are kept",
    }


@pytest.mark.parametrize(
    "line",
    [
        b'{"event_type": "error", "step": 1, "data": {"error": "x", "latency": 1e400}, "run_id": "r1"}',
        b'{"event_type": "error", "step": 1, "data": {"error": "x", "latency": -1E+999}, "run_id": "r1"}',
        b'{"event_type": "error", "step": 1, "data": {"error": "x"}, "run_id": "r1"}\x0b',
        b'{"event_type": "error", "step": 1, "data": {"error": "x"}, "run_id": "r1"}\x0c',
    ],
    ids=["1e400", "-1E+999", "vertical tab", "form feed"],
)
def test_a_line_python_reads_and_orjson_refuses_is_still_imported(db, tmp_path, line):
    # A number past a double (Python reads it as infinity, stored as null) and a line ending in
    # a vertical tab or form feed (white space to Python, not to JSON) imported before orjson
    # read lines first; they had become "malformed JSON".
    outcome = imported(native_file(tmp_path, line))
    assert (outcome.events, outcome.problems) == (3, [])
    stored = Event.objects.get(session=outcome.session, seq=1)
    assert stored.kind == "error" and orjson.loads(stored.payload)["error"] == "x"


@pytest.mark.parametrize("number", [b"1e400", b"-1E+999", b"NaN", b"Infinity"])
def test_a_non_finite_number_in_a_variable_is_stored_as_null_not_a_failed_import(db, tmp_path, number):
    # A variable's value reaches the session's stored state (ingest_state, a JSON column) as
    # the converter holds it: 1e400 read as infinity there failed the whole import ("CHECK
    # constraint failed: JSON_VALID", "invalid input syntax for type json").
    line = (
        b'{"event_type": "step_end", "timestamp": "2026-02-08T10:00:00.5+00:00", "step": 1, "run_id": "r1",'
        b' "data": {"action": {}, "observation": {}, "variables": {"growth": {"a": ' + number + b', "b": 2}}}}'
    )
    outcome = imported(native_file(tmp_path, line))
    assert outcome.error is None and outcome.events == 3
    stored = Event.objects.get(session=outcome.session, seq=1)
    assert orjson.loads(stored.state_change)["variables"] == {"growth": {"a": None, "b": 2}}
