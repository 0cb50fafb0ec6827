"""The compiled fast path for rlm-code's native JSONL (sessions_app/formats/_rlm_native_c.c).

It must store exactly what the Python path stores (rlm_native.py + event_rows.py), row for row,
or decline the file so that the Python path imports it (and reports its problems). Each
comparison imports one file twice into two projects: compiled path on, then off. The JSON
reader inside it is held to orjson (what it writes back) and to Python's == (what it compares).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from sessions_app import importing
from sessions_app.formats import rlm_native
from sessions_app.importing import import_file
from sessions_app.ingest import CompiledPathDeclined
from sessions_app.models import Event, Project, Session

from .builders_rlm import record_failing_session, record_full_session
from .test_parse_worker import assert_same_import

compiled = rlm_native.compiled
needs_compiled = pytest.mark.skipif(compiled is None, reason="the compiled module is not built here")


def test_the_compiled_module_is_built_where_required():
    # `make test` requires it (REPLAY_REQUIRE_COMPILED=1): CI tests what an installation runs.
    if os.environ.get("REPLAY_REQUIRE_COMPILED") == "1":
        assert compiled is not None, "sessions_app/formats/_rlm_native_c.c was not built (make install)"
    elif compiled is None:
        pytest.skip("not built here, and not required")


# --- the JSON reader against orjson and Python ------------------------------------------------


def random_string(rng: random.Random) -> str:
    pools = [
        "abcdefghijklmnopqrstuvwxyz ",
        "\"\\/\b\f\n\r\t\x01\x1f\x7f",
        "éàüßçñø€☕—",
        "第一节答案",
        "\U0001f600\U0001f4a9",
        "\u2028\u2029\ufeff",
    ]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 12)))


def random_number(rng: random.Random, *, clean: bool) -> Any:
    kind = rng.randint(0, 5)
    if kind == 0:
        return rng.randint(-1000, 1000)
    if kind == 1:
        return rng.choice([2**63 - 1, -(2**63), 0, -1, 10**15])
    if kind == 2:
        return round(rng.uniform(-1000, 1000), rng.randint(0, 6))
    if kind == 3:
        return rng.uniform(0.001, 1.0)  # 16-17 significant digits
    if kind == 4:
        return rng.choice([0.0, -0.0, 1.0, 0.1 + 0.2, 640.0, 1e15, 123456789012.5])
    if clean:
        return rng.uniform(1, 1e6)
    return rng.choice([1e-7, 1e16, 2.5e-5, 1e300, rng.uniform(-1e20, 1e20)])


def random_value(rng: random.Random, depth: int = 0, *, clean: bool = False) -> Any:
    kind = rng.randint(0, 6 if depth < 4 else 3)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return random_number(rng, clean=clean)
    if kind in (2, 3):
        return random_string(rng)
    if kind == 4:
        return [random_value(rng, depth + 1, clean=clean) for _ in range(rng.randint(0, 4))]
    return {random_string(rng): random_value(rng, depth + 1, clean=clean) for _ in range(rng.randint(0, 5))}


def writings(value: Any) -> list[bytes]:
    return [
        json.dumps(value).encode(),  # rlm-code's writer (ASCII with \\u escapes)
        json.dumps(value, ensure_ascii=False).encode(),
        json.dumps(value, indent=2).encode(),
        orjson.dumps(value),
    ]


@needs_compiled
@pytest.mark.parametrize("seed", range(4))
def test_the_reader_writes_back_what_orjson_writes_or_declines(seed):
    rng = random.Random(seed)
    accepted = 0
    for _ in range(500):
        for text in writings(random_value(rng)):
            written, why = compiled.jcompact(text)
            if written is None:
                assert why
                continue
            accepted += 1
            assert written == orjson.dumps(orjson.loads(text)), text
    assert accepted > 1000  # most of it is taken, so the fast path is not declined by default


@needs_compiled
@pytest.mark.parametrize("seed", range(3))
def test_the_reader_takes_every_plain_value_rlm_code_writes(seed):
    # Values without exponent floats, NUL or lone surrogates, as json.dumps writes them: the
    # fast path must not decline any (else it would silently be the slow path).
    rng = random.Random(100 + seed)
    for _ in range(400):
        value = random_value(rng, clean=True)
        for text in writings(value):
            written, why = compiled.jcompact(text)
            assert why is None, (why, text)
            assert written == orjson.dumps(orjson.loads(text))


@needs_compiled
@pytest.mark.parametrize(
    "text, why",
    [
        (b'{"a": 1e-07}', "number with an exponent"),
        (b'{"a": 1E+16}', "number with an exponent"),
        (b'{"a": 1, "a": 2}', "duplicate key"),
        (b'{"a": 1, "\\u0061": 2}', "duplicate key"),
        (b'{"a": -0}', "-0"),
        (b'{"a": 0.10}', "float not in repr form"),
        (b'{"a": 0.00001}', "float repr with an exponent"),
        (b'{"a": 10000000000000000.0}', "float repr with an exponent"),
        (b'{"a": 0.30000000000000000001}', "float not in repr form"),
        (b'{"a": 9223372036854775808}', "integer beyond 64 bits"),
        (b'{"a": NaN}', "not JSON"),
        (b'{"a": "\\ud800"}', "lone surrogate"),
        (b'{"a": "\\udc00\\ud800"}', "lone surrogate"),
        (b'{"a": "\\u0000"}', "NUL in a string"),
        (b'{"a": "\x01"}', "control character in a string"),
        (b'{"a": "\xff"}', "invalid UTF-8"),
        (b'{"a": "\xed\xa0\x80"}', "invalid UTF-8"),
        (b'{"a": 1} x', "text after the value"),
        (b'{"a": [1, 2}', "expected ',' or a closing bracket"),
        (b'{"a": 01}', "expected ',' or a closing bracket"),
        (b"[" * 255 + b"]" * 255, "nested too deep"),  # orjson writes back 254 levels at most
    ],
)
def test_the_reader_declines_what_would_be_written_back_differently(text, why):
    assert compiled.jcompact(text) == (None, why)


@needs_compiled
def test_the_reader_takes_as_deep_a_value_as_orjson_writes_back():
    text = b"[" * 254 + b"]" * 254
    assert compiled.jcompact(text) == (orjson.dumps(orjson.loads(text)), None)


def variants(rng: random.Random, value: Any) -> Any:
    """A value Python may or may not call equal to `value`: numbers of another type, keys in
    another order, or one element changed."""
    kind = type(value)
    if kind is bool:
        return rng.choice([value, int(value), float(value), not value])
    if kind is int:
        as_float = float(value) if abs(value) < 10**15 else value  # larger: written with an exponent
        return rng.choice([value, as_float, value + 1 if value < 2**63 - 1 else value - 1, value == 1])
    if kind is float:
        return rng.choice([value, int(value) if value == int(value) else value, value + 1.5])
    if kind is list:
        return [variants(rng, item) for item in value] if rng.random() < 0.8 else value[:-1]
    if kind is dict:
        items = list(value.items())
        rng.shuffle(items)
        return {key: variants(rng, item) for key, item in items}
    return rng.choice([value, value + "x"]) if kind is str else value


@needs_compiled
@pytest.mark.parametrize("seed", range(3))
def test_the_reader_compares_as_python_does(seed):
    rng = random.Random(200 + seed)
    verdicts = set()
    for _ in range(1500):
        value = random_value(rng, clean=True)
        other = variants(rng, value)
        same = compiled.jequal(json.dumps(value).encode(), json.dumps(other).encode())
        assert same == (value == other), (value, other)
        verdicts.add(same)
    assert verdicts == {True, False}


# --- whole imports, compiled against Python ---------------------------------------------------


@pytest.fixture
def other_project(db) -> Project:
    return Project.objects.create(name="Python path", slug="python-path")


@pytest.fixture
def spy(monkeypatch, db) -> dict[str, list]:
    """What the compiled path did: the files it wrote, and the ones it declined (and why)."""
    seen: dict[str, list] = {"written": [], "declined": []}
    real = importing.append_compiled

    def watched(**kwargs: Any):
        try:
            result = real(**kwargs)
        except CompiledPathDeclined as declined:
            seen["declined"].append(declined.why)
            raise
        seen["written"].append(kwargs["path"])
        return result

    monkeypatch.setattr(importing, "append_compiled", watched)
    return seen


def import_both_ways(settings, path: Path, project: Project, other: Project, **kwargs: Any):
    settings.IMPORT_WORKER_MIN_MB = None
    settings.IMPORT_COMPILED = True
    compiled_outcomes = import_file(path=path, project=project, **kwargs)
    settings.IMPORT_COMPILED = False
    python_outcomes = import_file(path=path, project=other, **kwargs)
    return compiled_outcomes, python_outcomes


def line(**record: Any) -> str:
    record.setdefault("timestamp", "2026-11-22T05:47:01.346935+00:00")
    return json.dumps(record)


def stamp(second: int, micro: int = 123456) -> str:
    minute, second = divmod(second, 60)
    return f"2026-11-22T05:{minute % 60:02d}:{second:02d}.{micro:06d}+00:00"


def edge_case_session() -> list[str]:
    """Every record type and the shapes the converter treats specially, written as rlm-code's
    recorder writes JSON (json.dumps), with a few lines of other spacing and endings."""
    out = [
        line(event_type="session_start", step=0, run_id="run_edge", data={"task": "T ☕ \u2028", "environment": "env", "model": "m-1"}),
        # a step_end with no step_start: its own fields and the legacy action/observation shape
        line(event_type="step_end", step=1, timestamp=stamp(1), data={"step": 1, "action": {"action": "run", "code": "x=1", "reasoning": "why"}, "observation": {"stdout": "out", "stderr": "boom"}, "success": False, "reward": 1, "variables": {"x": 1, "y": [1, 2.5]}, "memory_notes": ["a"]}),
        line(event_type="step_start", step=2, timestamp=stamp(2), data={"step": 2}),
        line(event_type="llm_request", step=2, timestamp=stamp(3), data={"prompt_preview": "p", "model": "m-2"}),
        line(event_type="llm_request", step=2, timestamp=stamp(4), data={"prompt_preview": "no model: the session's"}),
        line(event_type="llm_response", step=2, timestamp=stamp(5), duration_ms=12, data={"response_preview": "r", "tokens_in": 3, "tokens_out": True}),
        line(event_type="llm_response", step=2, timestamp=stamp(6), data={"response_preview": "r2"}),
        line(event_type="llm_response", step=2, timestamp=stamp(7), data={"response_preview": "unanswered"}),
        line(event_type="step_action", step=2, timestamp=stamp(8), data={"action": {"action": None, "code": ["not", "text"]}, "rationale": None}),
        line(event_type="step_result", step=2, timestamp=stamp(9), duration_ms=0, data={"observation": {"output": None, "error": ""}, "success": "yes", "reward": 0.1, "tokens_used": 7}),
        line(event_type="variable_update", step=2, timestamp=stamp(10), data={"name": "z", "preview": "[1, 2, 3]..."}),
        line(event_type="memory_update", step=2, timestamp=stamp(11), data={"notes": ["a", "b"]}),
        # variables equal to Python but written otherwise (1.0 for 1 nested, keys reordered)
        line(event_type="step_end", step=2, timestamp=stamp(12), data={"step": 2, "success": True, "variables": {"y": [1.0, 2.5], "x": 1, "z": {"k": 1, "j": True}}, "memory_notes": ["a", "b"], "extra": {"kept": "in the payload"}}),
        line(event_type="step_start", step=3, timestamp=stamp(13), data={}),
        line(event_type="step_result", step=3, timestamp=stamp(14), duration_ms=35.5, data={"observation": {"stdout": "s", "stderr": "e"}, "success": False, "reward": -0.25, "cumulative_reward": 2, "tokens_used": 0}),
        # x becomes 1.0 at the top level: a change (the types differ); z disappears: replace
        line(event_type="step_end", step=3, timestamp=stamp(15), data={"step": 3, "variables": {"x": 1.0, "y": [1, 2.5]}, "memory_notes": []}),
        line(event_type="child_spawn", step=3, timestamp=stamp(16), depth=1, parent_id="run_edge", data={"child_id": "c1", "task": "t"}),
        line(event_type="child_spawn", step=3, timestamp=stamp(17), depth=1, data={"child_id": "c1", "task": "again, same id"}),
        line(event_type="child_result", step=3, timestamp=stamp(18), depth=1, data={"child_id": "c1", "success": 0}),
        line(event_type="child_result", step=3, timestamp=stamp(19), data={"child_id": "nobody"}),
        line(event_type="checkpoint", step=3, timestamp=stamp(20), data={"checkpoint_name": "named"}),
        line(event_type="checkpoint", step=4, timestamp=stamp(21), data={}),
        line(event_type="error", step=3, timestamp=stamp(22), data={"error": "E", "recoverable": True}),
        line(event_type="state_snapshot", step=3, timestamp=stamp(23), data={"anything": [1, {"a": None}]}),
        line(event_type="step_start", timestamp=stamp(24), data={"step": 9}),
        line(event_type="step_end", timestamp=None, data={"tokens_used": 5, "duration_ms": 2.5, "raw_action": {"r": 1}, "raw_observation": "not a dict", "timestamp": "their own", "variables": {}}),
        "   ",
        "",
        line(event_type="final_detected", step=9, timestamp=stamp(25), data={"answer": "42 — 答案", "completed": False}),
        line(event_type="session_end", step=9, timestamp=stamp(26), data={"completed": True, "final_response": "done", "total_reward": 3}),
    ]
    out[3] = "  " + out[3] + "  "  # spaces around a record stay in its raw text
    out[4] = out[4] + "\r"  # a CRLF line ending
    return out


def long_session(steps: int) -> list[str]:
    """Enough events for state keyframes (every 256 while the state changes) and more calls
    waiting for their answers at once than the compiled path keeps in memory (64)."""
    out = [line(event_type="session_start", step=0, run_id="run_long", data={"task": "long", "model": "m"})]
    second = 0
    for step in range(1, steps + 1):
        second += 1
        out.append(line(event_type="step_start", step=step, timestamp=stamp(second, step), data={"step": step}))
        out.append(line(event_type="llm_request", step=step, timestamp=stamp(second, step + 1), data={"model": "m"}))
        out.append(line(event_type="step_result", step=step, timestamp=stamp(second, step + 2), duration_ms=1.5, data={"observation": {"output": f"o{step}"}, "success": step % 5 != 0, "reward": 0.1, "tokens_used": step}))
        out.append(line(event_type="step_end", step=step, timestamp=stamp(second, step + 3), data={"step": step, "variables": {f"v{step % 7}": step, "fixed": [1, 2]}, "memory_notes": [f"n{step // 10}"]}))
    for index in range(steps):
        out.append(line(event_type="llm_response", timestamp=stamp(second + 1, index + 1), data={"tokens_in": index}))
    return out


def repeated_calls() -> list[str]:
    """Calls by the same ids again before any answer (the newer takes the older's place in the
    open pairs, as Python's dict keeps a key), and many never answered at all."""
    out = [line(event_type="session_start", step=0, run_id="run_calls", data={"task": "calls"})]
    for index in range(300):
        child = f"c{index % 7}"
        out.append(line(event_type="child_spawn", step=1, timestamp=stamp(index % 3000, index + 1), data={"child_id": child}))
        if index % 11 == 0:
            out.append(line(event_type="child_result", step=1, timestamp=stamp(index % 3000, index + 2), data={"child_id": child, "success": True}))
        out.append(line(event_type="llm_request", step=1, timestamp=stamp(index % 3000, index + 3), data={"model": f"m{index % 3}"}))
    return out


def stored_text(session: Session) -> tuple:
    """The session's JSON columns as the database holds their text (dict comparison would
    not see a different key order)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ingest_state, metadata, models_used, tools_used FROM sessions_app_session WHERE id = %s",
            [session.pk],
        )
        return cursor.fetchone()


def write_lines(path: Path, lines: list[str], *, final_newline: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if final_newline else ""), encoding="utf-8")
    return path


@needs_compiled
@pytest.mark.django_db
@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda p: record_full_session(p) and p, id="recorder-every-method"),
        pytest.param(lambda p: record_failing_session(p) and p, id="recorder-failing"),
        pytest.param(lambda p: write_lines(p, edge_case_session()), id="edge-cases"),
        pytest.param(lambda p: write_lines(p, edge_case_session(), final_newline=False), id="no-final-newline"),
        pytest.param(lambda p: write_lines(p, long_session(300)), id="keyframes-and-late-answers"),
        pytest.param(lambda p: write_lines(p, repeated_calls()), id="repeated-and-unanswered-calls"),
    ],
)
def test_the_compiled_path_stores_what_the_python_path_stores(build, tmp_path, settings, other_project, spy):
    path = build(tmp_path / "session.jsonl")
    project = Project.get_default()
    here, there = import_both_ways(settings, path, project, other_project)
    assert spy == {"written": [path], "declined": []}
    assert here[0].session is not None and here[0].events > 0
    assert_same_import(there, here)
    assert stored_text(here[0].session) == stored_text(there[0].session)


@needs_compiled
@pytest.mark.django_db
def test_reimporting_through_the_compiled_path_finds_the_stored_session(tmp_path, settings, spy):
    path = write_lines(tmp_path / "s.jsonl", edge_case_session())
    settings.IMPORT_COMPILED = True
    project = Project.get_default()
    first = import_file(path=path, project=project)[0]
    again = import_file(path=path, project=project)[0]
    assert again.duplicate and again.session.pk == first.session.pk
    replaced = import_file(path=path, project=project, replace=True)[0]
    assert not replaced.duplicate and replaced.session.pk != first.session.pk
    assert Session.objects.filter(project=project).count() == 1
    assert Event.objects.filter(session=replaced.session).count() == first.events
    assert len(spy["written"]) == 3


DECLINED = {
    "malformed line": ('{"event_type": "step_start", "step": ', "unexpected end"),
    "exponent": (line(event_type="step_result", step=1, data={"reward": 1e-07}), "number with an exponent"),
    "NaN": ('{"event_type": "step_result", "timestamp": "2026-11-22T05:47:01.346935+00:00", "step": 1, "data": {"reward": NaN}}', "not JSON"),
    "unknown type": (line(event_type="telepathy", step=1, data={}), "unknown event_type"),
    "null number": (line(event_type="step_result", step=1, data={"reward": None}), "a numeric field holds another type"),
    "other timestamp": (line(event_type="step_start", step=1, timestamp="2026-11-22T05:47:01Z", data={}), "timestamp not in rlm-code's shape"),
    "second session": (line(event_type="session_start", step=0, run_id="run_2", data={"task": "two"}), "a second session in the file"),
    "NUL": (line(event_type="error", step=1, data={"error": "a\u0000b"}), "NUL in a string"),
    # A double holds the microseconds since 1970 exactly only until 2255 (and from 1685).
    "far year": (line(event_type="error", step=1, timestamp="2300-01-01T00:00:00.586143+00:00", data={}), "timestamp beyond 2**53 microseconds"),
    # orjson writes back 254 nested levels at most: the Python path refuses deeper records.
    "deep nesting": (json.dumps({"event_type": "error", "timestamp": stamp(1), "data": {"x": json.loads("[" * 253 + "]" * 253)}}), "nested too deep"),
}


@needs_compiled
@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(DECLINED))
def test_a_file_the_compiled_path_declines_is_imported_by_the_python_path(case, tmp_path, settings, other_project, spy):
    bad, why = DECLINED[case]
    lines = long_session(40)
    lines.insert(len(lines) - 5, bad)  # late, after many rows were written: all rolled back
    path = write_lines(tmp_path / "s.jsonl", lines)
    here, there = import_both_ways(settings, path, Project.get_default(), other_project)
    assert spy == {"written": [], "declined": [why]}
    assert_same_import(there, here)
    assert Session.objects.filter(project=Project.get_default()).count() == len([o for o in here if o.session])


@needs_compiled
@pytest.mark.django_db
def test_a_byte_order_mark_or_gzip_takes_the_python_path(tmp_path, settings, other_project, spy):
    import gzip

    plain = "\n".join(edge_case_session()) + "\n"
    marked = tmp_path / "bom.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.encode())
    packed = tmp_path / "s.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.encode()))
    here, there = import_both_ways(settings, marked, Project.get_default(), other_project)
    assert spy["declined"] == ["a byte-order mark"]
    assert_same_import(there, here)
    assert here[0].problems and here[0].problems[0]["line"] == 1
    settings.IMPORT_COMPILED = True
    import_file(path=packed, project=Project.objects.create(name="gz", slug="gz"))
    assert spy["written"] == []  # gzip never reaches it


@needs_compiled
@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(3))
def test_damaged_lines_give_the_same_import_either_way(seed, tmp_path, settings, spy, monkeypatch):
    # Random byte damage to one line of a recorded session: the compiled path either stores
    # exactly what the Python path stores, or declines and the Python path imports the file.
    # (A checkpoint whose timestamp key is damaged is dated "now" by both: one fixed now.)
    from django.utils import timezone

    fixed = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: fixed)
    rng = random.Random(seed)
    source = record_full_session(tmp_path / "clean.jsonl", large_output_at=None) and tmp_path / "clean.jsonl"
    lines = source.read_bytes().split(b"\n")
    for attempt in range(12):
        damaged = list(lines)
        index = rng.randrange(len(damaged) - 1)
        body = bytearray(damaged[index])
        position = rng.randrange(len(body))
        action = rng.randint(0, 2)
        if action == 0:
            del body[position]
        elif action == 1:
            body.insert(position, rng.choice(b'"{}[],:0.-e\\ \xff\x00x'))
        else:
            body[position] = rng.randrange(256)
        damaged[index] = bytes(body)
        path = tmp_path / f"damaged_{attempt}.jsonl"
        path.write_bytes(b"\n".join(damaged))
        mine = Project.objects.create(name=f"c{seed}-{attempt}", slug=f"c{seed}-{attempt}")
        theirs = Project.objects.create(name=f"p{seed}-{attempt}", slug=f"p{seed}-{attempt}")
        here, there = import_both_ways(settings, path, mine, theirs)
        assert_same_import(there, here)
    assert len(spy["written"]) + len(spy["declined"]) == 12


@pytest.mark.django_db
def test_a_cumulative_reward_past_64_bits_is_reported_and_the_rest_imports(tmp_path, settings):
    # Both paths: the compiled one declines (its sum would overflow), the Python one reports it.
    limit = 2**63 - 1
    lines = [
        line(event_type="session_start", step=0, run_id="run_big", data={"task": "t"}),
        line(event_type="step_start", step=1, data={}),
        line(event_type="step_result", step=1, data={"reward": limit, "cumulative_reward": limit, "success": True}),
        line(event_type="step_end", step=1, data={"step": 1}),
        line(event_type="step_start", step=2, data={}),
        line(event_type="step_result", step=2, data={"reward": 5, "success": True}),
        line(event_type="step_end", step=2, data={"step": 2}),
        line(event_type="session_end", step=2, data={}),
    ]
    path = write_lines(tmp_path / "big.jsonl", lines)
    for compiled_on in (True, False):
        settings.IMPORT_COMPILED = compiled_on
        project = Project.objects.create(name=f"big {compiled_on}", slug=f"big-{compiled_on}")
        outcome = import_file(path=path, project=project)[0]
        assert outcome.error is None and outcome.events == len(lines) and outcome.steps == 2
        assert [(p["line"], p["field"]) for p in outcome.problems] == [(6, "data.cumulative_reward")]
        step = Event.objects.get(session=outcome.session, step_pos=1)
        assert json.loads(step.step_state)["cumulative_reward"] == float(limit + 5)

