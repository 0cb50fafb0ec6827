"""JSON documents (a list of records, or an object whose list holds them) read with ijson: each
record on the line it starts on, whatever the layout and line breaks; a syntax error ends the
document there, reported once by line and column, and the records before it import; memory
stays bounded whatever the document's size. Also the line breaks of JSON lines (CR alone too).
"""

from __future__ import annotations

import json
import random
import re
import tracemalloc
from pathlib import Path

import ijson
import orjson
import pytest

from sessions_app import formats
from sessions_app.canonical import Problems
from sessions_app.formats import Source, read_records
from sessions_app.formats.records import iter_records

EVENT = {"id": "e0", "sessionId": "s1", "eventType": "custom", "payload": {"n": [1, {"k": "v"}]}, "metadata": {}}


def events(count: int) -> list[dict]:
    return [{**EVENT, "id": f"e{n}", "payload": {"n": [n, {"k": "v" * (n % 7)}]}} for n in range(count)]


def read(path: Path, body_keys: tuple[str, ...] = ("events",)) -> tuple[list, list]:
    problems = Problems()
    records = [(r.line, r.value) for r in iter_records(Source(path=path), problems, body_keys=body_keys)]
    return records, [(p.line, p.field, p.message) for p in problems.items]


def write(tmp_path: Path, data: bytes, name: str = "doc.json") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def pretty(value, *, newline: bytes = b"\n") -> bytes:
    return json.dumps(value, indent=2).encode().replace(b"\n", newline)


def starts(text: bytes, indent: bytes) -> list[int]:
    """The lines (any line break) that open an object at `indent`."""
    return [n for n, line in enumerate(text.splitlines(), start=1) if line == indent + b"{"]


def test_ijson_reads_with_its_c_backend():
    # The pure-Python backends read the same but many times slower: a wheel without yajl2_c
    # must not go unnoticed.
    assert ijson.backend == "yajl2_c", ijson.backend


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
def test_each_record_of_a_pretty_printed_document_is_on_the_line_it_starts_on(newline, body, tmp_path):
    records = events(30)
    text = pretty({"events": records} if body else records, newline=newline)
    found, problems = read(write(tmp_path, text))
    assert problems == []
    assert [value for _, value in found] == records
    assert [line for line, _ in found] == starts(text, b"    " if body else b"  ") != []


def test_every_record_of_a_one_line_array_is_on_line_1(tmp_path):
    records = events(2000)  # more than one read block
    found, problems = read(write(tmp_path, orjson.dumps(records)))
    assert problems == [] and [value for _, value in found] == records
    assert {line for line, _ in found} == {1}


def test_the_records_before_a_syntax_error_import_and_it_is_reported_once_by_line_and_column(tmp_path):
    records = events(10)
    text = pretty(records)
    at = text.index(b'"id": "e6"')
    broken = text[:at] + b'"id" "e6"' + text[at + len(b'"id": "e6"') :]  # a colon lost
    found, problems = read(write(tmp_path, broken))
    assert [value for _, value in found] == records[:6]
    line = broken.count(b"\n", 0, at) + 1
    # The parser stops where the token that cannot stand there ends: the quote closing "e6".
    column = at - broken.rfind(b"\n", 0, at) + len(b'"id" "e6')
    assert problems == [
        (line, "line", f"malformed JSON at column {column}: object key and value must be separated by a colon"
                       " (':'); the rest of the document could not be read"),
    ]  # fmt: skip


@pytest.mark.parametrize("newline", [b"\n", b"\r"], ids=["LF", "CR"])
def test_a_truncated_document_keeps_its_whole_records_and_names_its_last_line(newline, tmp_path):
    records = events(10)
    text = pretty(records, newline=newline)
    cut = text[: text.index(b'"eventType"', text.index(b'"e4"'))]
    found, problems = read(write(tmp_path, cut))
    assert [value for _, value in found] == records[:4]
    last = len(cut.rstrip().splitlines())
    assert problems == [(last, "line", "file ends inside the JSON document (truncated); the rest could not be read")]


def test_invalid_utf8_in_a_document_is_reported_on_its_line(tmp_path):
    text = pretty(events(5))
    at = text.index(b'"e3"')
    found, problems = read(write(tmp_path, text[: at + 2] + b"\xff" + text[at + 2 :]))
    assert len(found) == 3
    assert [(line, field) for line, field, _ in problems] == [(text.count(b"\n", 0, at) + 1, "line")]
    assert problems[0][2].startswith("invalid UTF-8 at column ")


def test_a_byte_order_mark_is_reported_and_the_document_read(tmp_path):
    records = events(3)
    text = pretty(records)
    found, problems = read(write(tmp_path, formats.BOM + text))
    assert [value for _, value in found] == records
    assert [line for line, _ in found] == starts(text, b"  ")
    assert problems == [(1, "line", "byte-order mark at the start of the file (ignored)")]


def test_elements_that_are_not_objects_are_problems_and_the_rest_imports(tmp_path):
    a, b, c = events(3)
    elements = [orjson.dumps(a), b"42", orjson.dumps(b), b'"text"', b"[1, 2]", orjson.dumps(c)]
    found, problems = read(write(tmp_path, b"[" + b", ".join(elements) + b"]"))
    assert found == [(1, a), (1, b), (1, c)]
    assert problems == [
        (1, "line", "expected a JSON object, got a number"),
        (1, "line", "expected a JSON object, got a string"),
        (1, "line", "expected a JSON object, got a list"),
    ]
    # One element a line: each on its own line, the ones that are no object placed by a second
    # reading (only a document holding such an element pays for it).
    found, problems = read(write(tmp_path, b"[\n" + b",\n".join(elements) + b"\n]\n"))
    assert found == [(2, a), (4, b), (7, c)]
    assert problems == [
        (3, "line", "expected a JSON object, got a number"),
        (5, "line", "expected a JSON object, got a string"),
        (6, "line", "expected a JSON object, got a list"),
    ]


def test_a_record_nested_deeper_than_can_be_stored_is_a_problem_on_its_line(tmp_path):
    a, b = events(2)
    deep = {"id": "deep", "payload": json.loads("[" * 300 + "]" * 300)}
    text = (
        b"[\n"
        + b",\n".join(orjson.dumps(v) for v in (a,))
        + b",\n"
        + json.dumps(deep).encode()
        + b",\n"
        + orjson.dumps(b)
        + b"\n]"
    )
    found, problems = read(write(tmp_path, text))
    assert found == [(2, a), (4, b)]
    assert problems == [(3, "line", "cannot be stored: nested deeper than 254 levels")]


def read_measured(path: Path) -> tuple[list, list, int]:
    """`read`, and the most memory Python held meanwhile (ijson's events and paths are Python
    objects, so they count)."""
    tracemalloc.start()
    try:
        found, problems = read(path)
        return found, problems, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_document_nested_absurdly_deep_stops_there_in_little_memory(tmp_path):
    # ijson's path-naming parsers make every event of a piece with its whole path first: an
    # 80 KB document of "[" took 3.9 GB before the record could be refused (a hostile sweep).
    a = events(1)[0]
    deep = b'{"id": "deep", "payload": ' + b"[" * 20000 + b"]" * 20000 + b"}"
    path = write(tmp_path, b"[\n" + orjson.dumps(a) + b",\n" + deep + b"\n]")
    found, problems, peak = read_measured(path)
    assert found == [(2, a)]
    assert problems == [(3, "line", "nested deeper than 508 levels; the rest of the document could not be read")]
    assert peak < 20_000_000, peak


def test_a_document_nested_with_long_keys_stops_before_its_paths_fill_memory(tmp_path):
    # Each open level's path holds every key above it: 505 levels of 1,900-character keys (a
    # 1 MB file, within the depth allowed) took 566 MB, 6 MB of them (7 KB gzipped) 3 GB.
    a = events(1)[0]
    key = "k" * 1900
    deep = '{"x": ' + (f'{{"{key}": ' * 505) + "0" + "}" * 506
    path = write(tmp_path, b'{"events": [\n' + orjson.dumps(a) + b'\n], "more": ' + deep.encode() + b"}")
    found, problems, peak = read_measured(path)
    assert found == [(2, a)]
    [(line, field, message)] = problems
    assert line == 3 and message.startswith("nested ") and "levels deep with keys of up to 1,900 characters" in message
    assert peak < 150_000_000, peak


@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
def test_an_integer_beyond_64_bits_is_read_as_a_json_line_reads_it_and_the_document_goes_on(body, tmp_path):
    # yajl reads integers into 64 bits: such a number stopped the document there. It is read on
    # with exact numbers, each value then as orjson reads the same record as a JSON line.
    a, b, c = events(3)
    big = {"id": "big", "n": 123456789012345678901234567890, "f": 2.5, "deep": [{"m": -(10**40)}, 10**400]}
    records = [a, big, b, c]
    text = pretty({"events": records} if body else records)
    found, problems = read(write(tmp_path, text))
    assert problems == []
    as_a_line = formats.load_json_line(1, json.dumps(big).encode(), Problems())
    assert as_a_line["n"] == 1.2345678901234568e29 and as_a_line["deep"] == [{"m": -1e40}, None]
    assert [value for _, value in found] == [a, as_a_line, b, c]
    assert [line for line, _ in found] == starts(text, b"    " if body else b"  ")
    # A syntax error after it is still found, by line and column.
    broken = text.replace(b'"id": "e2"', b'"id" "e2"')
    found, problems = read(write(tmp_path, broken))
    assert [value for _, value in found] == [a, as_a_line, b]
    [(line, _, message)] = problems
    assert line == broken[: broken.index(b'"id" "e2"')].count(b"\n") + 1 and message.startswith(
        "malformed JSON at column"
    )


@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
def test_bare_nan_and_infinity_are_read_as_null_on_their_lines_and_the_document_goes_on(body, tmp_path):
    # yajl has no NaN or Infinity (Python's json writes them): the document stopped at the first,
    # nothing after it read. Each is null now, reported on its line; the same words in a
    # string stay text, and the lines of the records after them stay right.
    a, b, c = events(3)
    odd = {"id": "odd", "n": 1.0, "s": 'NaN "Infinity" \\', "l": [2.0, 3.0, 4.0]}
    records = [a, odd, b, c]
    text = pretty({"events": records} if body else records)
    text = text.replace(b'"n": 1.0', b'"n": NaN').replace(b"2.0,", b"Infinity,").replace(b"4.0", b"-Infinity")
    found, problems = read(write(tmp_path, text))
    assert [value for _, value in found] == [a, {**odd, "n": None, "l": [None, 3.0, None]}, b, c]
    assert [line for line, _ in found] == starts(text, b"    " if body else b"  ")
    lines = text.split(b"\n")
    expected = [
        (next(n for n, t in enumerate(lines, 1) if t.strip().startswith(start)), f"{word}: JSON has no such number; read as null")
        for start, word in ((b'"n": NaN', "NaN"), (b"Infinity", "Infinity"), (b"-Infinity", "-Infinity"))
    ]  # fmt: skip
    assert [(line, message) for line, _field, message in problems] == expected


@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
def test_an_integer_of_more_digits_than_python_converts_ends_the_document_as_a_problem(body, tmp_path):
    # Read exactly by yajl2_c, int() refused its 4,400 digits inside the C parser: a segmentation
    # fault or a SystemError stopped the import (the worker, three times). It is a problem.
    a, b, c = events(3)
    records = [a, {**b, "n": 2**70}, {**c, "n": "HUGE"}, a]
    text = pretty({"events": records} if body else records).replace(b'"HUGE"', b"9" * 4400)
    found, problems = read(write(tmp_path, text))
    assert [value["id"] for _, value in found] == ["e0", "e1"]
    [(line, field, message)] = problems
    assert field == "line" and line == text[: text.index(b"9999")].count(b"\n") + 1
    assert message.startswith("malformed JSON at column") and "Unexpected symbol '99999" in message
    assert message.endswith("the rest of the document could not be read") and len(message) < 300


# ijson's pure-Python pipeline, left unread when the document stops, complains when the garbage
# collector closes it (no handle to it is ours to close first): noise, not a failure.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_document_read_exactly_still_stops_an_absurdly_deep_record_in_little_memory(tmp_path):
    # Past a big integer the document is read on with exact numbers: the depth guard must stay
    # in that reading too (without it, 200,000 levels ran for minutes).
    a = {"id": "a", "n": 2**70}
    deep = b'{"id": "deep", "payload": ' + b"[" * 20000 + b"]" * 20000 + b"}"
    path = write(tmp_path, b"[\n" + json.dumps(a).encode() + b",\n" + deep + b"\n]")
    found, problems, peak = read_measured(path)
    assert found == [(2, {"id": "a", "n": float(2**70)})]
    assert problems == [(3, "line", "nested deeper than 508 levels; the rest of the document could not be read")]
    assert peak < 20_000_000, peak


def test_records_before_a_big_integer_are_read_once(tmp_path):
    # The exact reading starts again from the document's beginning and passes over the records
    # read already: two before the big integer had come twice.
    a, b, c, d = events(4)
    records = [a, b, {**c, "n": 2**70}, d]
    found, problems = read(write(tmp_path, pretty(records)))
    assert problems == [] and [value["id"] for _, value in found] == ["e0", "e1", "e2", "e3"]


def test_an_events_body_without_its_list_is_reported_but_an_empty_list_is_not(tmp_path):
    assert read(write(tmp_path, b'{\n  "events": []\n}\n')) == ([], [])
    assert read(write(tmp_path, b'{\n  "events": {"a": 1}\n}\n')) == (
        [], [(None, "file", 'no top-level array or "events" list found')]
    )  # fmt: skip


def _layout(rng: random.Random, value, out: list[bytes], starts: list[int], line: list[int], depth: int = 0) -> None:
    """`value` as JSON tokens with random whitespace and line breaks (LF, CRLF or CR) between
    them, noting the line each object at depth 1 (an element) starts on."""

    def gap() -> None:
        roll = rng.random()
        if roll < 0.25:
            out.append(rng.choice([b"\n", b"\r\n", b"\r"]) + rng.choice([b"", b"  ", b"    ", b"\t"]))
            line[0] += 1
        elif roll < 0.35:
            out.append(b" ")

    gap()
    if isinstance(value, dict):
        if depth == 1:
            starts.append(line[0])
        out.append(b"{")
        for n, (key, item) in enumerate(value.items()):
            if n:
                gap()
                out.append(b",")
            gap()
            out.append(json.dumps(key).encode())
            gap()
            out.append(b":")
            _layout(rng, item, out, starts, line, depth + 1)
        gap()
        out.append(b"}")
    elif isinstance(value, list):
        out.append(b"[")
        for n, item in enumerate(value):
            if n:
                gap()
                out.append(b",")
            _layout(rng, item, out, starts, line, depth + 1)
        gap()
        out.append(b"]")
    else:
        out.append(json.dumps(value).encode())


def _random_value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 3 or roll < 0.45:
        return rng.choice(
            [0, -7, 2.5, 1e-7, -0.0, 9007199254740993, "s", 'q"}{[,\\', "line\n", "é🚀", None, True, False]
        )
    if roll < 0.75:
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def test_valid_documents_in_random_layouts_read_exactly_as_json_loads(tmp_path):
    rng = random.Random(2026)
    for case in range(200):
        records = [
            {"id": n, **{f"f{i}": _random_value(rng) for i in range(rng.randint(0, 4))}}
            for n in range(rng.randint(0, 6))
        ]
        body = rng.random() < 0.5
        document = {"meta": _random_value(rng, 2), "events": records} if body else records
        out: list[bytes] = []
        element_starts: list[int] = []
        _layout(rng, records, out, element_starts, [1])
        text = b"".join(out)
        if body:  # a first line of its own: the file reads as one document, not as JSON lines
            text = b'{\n"events":' + text + b', "meta": ' + json.dumps(document["meta"]).encode() + b"}"
            element_starts = [line + 1 for line in element_starts]
        assert json.loads(text) == document, case
        found, problems = read(write(tmp_path, text))
        assert problems == [], (case, text)
        assert [value for _, value in found] == records, case
        assert [line for line, _ in found] == element_starts, (case, text)


@pytest.mark.parametrize("one_line", [False, True], ids=["pretty-printed", "one line"])
def test_memory_stays_bounded_while_a_large_document_is_read(one_line, tmp_path):
    records = [{**event, "text": "x" * 400} for event in events(20000)]
    text = orjson.dumps({"events": records}) if one_line else pretty({"events": records})
    path = write(tmp_path, text)
    assert len(text) > 8_000_000
    count = 0
    tracemalloc.start()
    try:
        for _ in iter_records(Source(path=path), Problems(), body_keys=("events",)):
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 20000
    # A read block (1 MiB), a piece (64 KiB at most) and the records it completes: not the
    # document (about 3 MB measured, for 9-10 MB documents).
    assert peak < 5_000_000, peak


@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
def test_a_nan_after_a_big_integer_or_in_a_record_over_the_limit_does_not_end_the_document(body, tmp_path):
    # Read exactly after an integer past 64 bits, the parser stopped past the NaN and it was not
    # recognised; and a record over the limit holding NaN was blanked short of its end once NaN
    # had grown into null: either ended the document.
    a, b, c = events(3)
    big = {"id": "big", "n": 10**30}
    nan = {"id": "nan", "v": 1.5}
    text = pretty({"events": [a, big, b, nan, c]} if body else [a, big, b, nan, c]).replace(b"1.5", b"NaN")
    found, problems = read(write(tmp_path, text))
    assert [value["id"] for _, value in found] == ["e0", "big", "e1", "nan", "e2"]
    assert [message for _, _, message in problems] == ["NaN: JSON has no such number; read as null"]
    long = {"id": "long", "s": "x" * 2_000, "v": [1.5, 1.5, 1.5]}
    text = pretty({"events": [a, long, b, nan, c]} if body else [a, long, b, nan, c]).replace(b"1.5", b"NaN")
    problems = Problems()
    source = Source(path=write(tmp_path, text), max_record_bytes=1_000)
    found = [r.value["id"] for r in iter_records(source, problems, body_keys=("events",))]
    assert found == ["e0", "e1", "nan", "e2"]
    said = [p.message for p in problems.items]
    assert said[-1] == "NaN: JSON has no such number; read as null" and len(said) == 2, said  # the long one's unread
    assert said[0].startswith("record 2.") and "over the limit" in said[0]


def test_memory_stays_bounded_while_a_document_of_many_nans_is_read(tmp_path):
    # Each NaN's place had been kept in a list: a 25 MB document of them took 683 MB.
    text = b"[" + b",".join(b'{"v": NaN, "w": [NaN, Infinity]}' for _ in range(100_000)) + b"]"
    path = write(tmp_path, text)
    count = 0
    tracemalloc.start()
    try:
        for record in iter_records(Source(path=path), Problems(), body_keys=("events",)):
            count += 1
            assert record.value == {"v": None, "w": [None, None]}
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 100_000
    # A read block and its copy with null written in (about 7 MB measured), not a place kept
    # for each of the 300,000 words (their list alone was 20 MB).
    assert peak < 10_000_000, peak


@pytest.mark.parametrize("block", [3, 1 << 20])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_json_lines_end_at_any_line_break_and_keep_their_text(newline, block, tmp_path, monkeypatch):
    monkeypatch.setattr(formats, "READ_BLOCK", block)
    records = events(5)
    lines = [orjson.dumps(r) for r in records]
    path = write(tmp_path, newline.join(lines) + newline, "records.jsonl")
    found, problems = read(path, body_keys=())
    native = list(read_records(Source(path=path), Problems()))
    assert found == list(enumerate(records, start=1)) and problems == []
    assert native == [(n, r, line.decode()) for n, (r, line) in enumerate(zip(records, lines, strict=True), start=1)]


def test_a_line_that_ends_with_cr_alone_among_lf_lines_is_a_line_of_its_own(tmp_path):
    a, b, c = (orjson.dumps(r) for r in events(3))
    path = write(tmp_path, a + b"\n" + b + b"\r" + c + b"\n", "mixed.jsonl")
    assert [line for line, _, _ in read_records(Source(path=path), Problems())] == [1, 2, 3]


@pytest.mark.parametrize("block", [7, 150, 1 << 20])
def test_a_blank_line_longer_than_the_limit_is_skipped_unsaid_and_a_long_record_said(block, tmp_path, monkeypatch):
    # A line of spaces past the limit was "over the limit; skipped", as a record is (a retest).
    monkeypatch.setattr(formats, "READ_BLOCK", block)
    a, b = (orjson.dumps(r) for r in events(2))
    text = a + b"\n" + b" \t" * 250 + b"\n" + b"x" * 500 + b"\n" + b"  " * 300 + b"\n" + b + b"\n" + b" " * 400
    problems = Problems()
    found = [
        (n, raw)
        for n, _, raw in read_records(Source(path=write(tmp_path, text, "l.jsonl"), max_record_bytes=300), problems)
    ]
    assert found == [(1, a.decode()), (5, b.decode())]
    assert [(p.line, p.message.split(" long")[0]) for p in problems.items] == [(3, "501 bytes")]


@pytest.mark.parametrize("block", [2, 7, 1 << 20])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_blank_lines_keep_the_numbering_and_are_never_parsed(newline, block, tmp_path, monkeypatch):
    # A gzip of 30 MiB of newlines is 31 KB: each blank line once cost a failed JSON parse.
    monkeypatch.setattr(formats, "READ_BLOCK", block)
    a, b, c = (orjson.dumps(r) for r in events(3))
    text = newline * 3 + a + newline + b" \t" + newline * 1000 + b + newline + newline + b"  " + newline + c + b"  "
    path = write(tmp_path, text, "blanks.jsonl")
    parsed = []
    real_loads = orjson.loads

    def counting_loads(data):
        parsed.append(bytes(data))
        return real_loads(data)

    monkeypatch.setattr(orjson, "loads", counting_loads)
    problems = Problems()
    assert [(n, raw) for n, _, raw in read_records(Source(path=path), problems)] == [
        (4, a.decode()), (1005, b.decode()), (1008, c.decode() + "  ")
    ]  # fmt: skip
    assert problems.items == [] and len(parsed) == 3, parsed
    parsed.clear()
    found, problems = read(path, body_keys=())
    assert [n for n, _ in found] == [4, 1005, 1008] and problems == [] and len(parsed) == 3, parsed


def test_the_syntax_error_column_is_right_across_read_blocks(tmp_path, monkeypatch):
    records = events(200)
    text = bytearray(orjson.dumps(records))
    at = text.index(b'"e150"') + 2
    text[at] = ord("\n")  # a line break inside a string
    path = write(tmp_path, bytes(text))
    for block in (7, 4096, 1 << 20):
        monkeypatch.setattr(formats, "READ_BLOCK", block)
        found, problems = read(path)
        assert len(found) == 150
        (problem,) = problems
        assert problem[:2] == (1, "line")
        assert re.match(rf"malformed JSON at column {at + 1}: invalid character inside string;", problem[2]), problem


# --- problems on the line of their record, through the whole import --------------------------

AGENTLENS = {"timestamp": "2026-03-02T14:05:00Z", "sessionId": "s1", "eventType": "custom", "payload": {"n": 1}}


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
def test_a_bad_record_of_a_pretty_printed_document_is_a_problem_on_its_own_line(newline, body, db, tmp_path):
    from sessions_app.ingest.importing import import_file
    from sessions_app.models import Project

    records = [{**AGENTLENS, "id": f"e{n}"} for n in range(6)]
    records[3]["timestamp"] = "not a time"
    text = pretty({"events": records} if body else records, newline=newline)
    lines = text.splitlines()
    at = next(n for n, line in enumerate(lines) if b'"not a time"' in line)
    bad = next(n for n in range(at, 0, -1) if lines[n].strip() == b"{") + 1  # where the record opens
    assert bad > 14
    (outcome,) = import_file(path=write(tmp_path, text), project=Project.get_default())
    assert outcome.error is None and outcome.events == 6
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(bad, "timestamp")]


def test_the_line_of_a_bad_record_on_line_14(db, tmp_path):
    from sessions_app.ingest.importing import import_file
    from sessions_app.models import Project

    records = [{"id": f"e{n}", "timestamp": AGENTLENS["timestamp"], "sessionId": "s1", "eventType": "custom"}
               for n in range(4)]  # fmt: skip
    records[2]["timestamp"] = "yesterday"
    text = pretty(records)  # 2 + 6 lines a record: the third opens on line 14
    assert text.splitlines()[13] == b"  {" and b'"yesterday"' in text.splitlines()[15]  # lines 14 and 16
    (outcome,) = import_file(path=write(tmp_path, text), project=Project.get_default())
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(14, "timestamp")]


@pytest.mark.parametrize("block", [5, 64, 1 << 20])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_an_element_that_is_no_object_is_a_problem_on_the_line_it_starts_on(newline, block, tmp_path, monkeypatch):
    monkeypatch.setattr(formats, "READ_BLOCK", block)
    good = events(300)
    elements = [*good[:250], 7, "text", [1, {"k": [2]}], *good[250:], None]
    text = pretty({"events": elements}, newline=newline)
    lines = text.splitlines()
    expected = [
        (next(n for n, line in enumerate(lines, start=1) if line == marker), kind)
        for marker, kind in (
            (b"    7,", "number"),
            (b'    "text",', "string"),
            (b"    [", "list"),
            (b"    null", "null"),
        )
    ]
    found, problems = read(write(tmp_path, text))
    assert [value for _, value in found] == good
    assert [(line, message.rsplit(" ", 1)[-1]) for line, _, message in problems] == expected


def test_a_document_of_objects_only_is_read_once(tmp_path, monkeypatch):
    from sessions_app.formats import json_documents

    def second_reading(*args, **kwargs):
        raise AssertionError("read again")

    monkeypatch.setattr(json_documents, "_ItemLines", second_reading)
    records = events(50)
    found, problems = read(write(tmp_path, pretty(records)))
    assert [value for _, value in found] == records and problems == []


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["LF", "CRLF"])
def test_a_nan_after_a_syntax_error_is_not_taken_for_the_stop_nor_reported(newline, tmp_path):
    # The syntax error on line 3 stops the document; the NaN on line 4 is never read. It had
    # been reported "read as null" on that line, the syntax error after it.
    text = newline.join([b"[", b'{"id": 0},', b'{"id": 1,,},', b'{"id": 2, "v": NaN}', b"]"])
    found, problems = read(write(tmp_path, text), body_keys=())
    assert [value for _, value in found] == [{"id": 0}]
    assert [(line, field) for line, field, _ in problems] == [(3, "line")]
    assert problems[0][2].startswith("malformed JSON")
    # A NaN read before the error is reported; one after it, never read, is not.
    text = newline.join(
        [b"[", b'{"a": NaN},', b'{"a": 2},', b'{"a": 3,,},', b'{"a": 4},', b'{"a": Infinity},', b'{"a": 6}', b"]"]
    )
    found, problems = read(write(tmp_path, text), body_keys=())
    assert [value for _, value in found] == [{"a": None}, {"a": 2}]
    said = sorted((line, message.split(":")[0]) for line, _, message in problems)
    assert said == [(2, "NaN"), (4, "malformed JSON at column 9")]


@pytest.mark.parametrize("body", [False, True], ids=["array", "events body"])
def test_a_number_past_a_double_is_read_as_null_and_the_document_goes_on(body, tmp_path):
    # yajl refuses 1e400 ("numeric (floating point) overflow") when it reads doubles: the
    # document stopped there, though a JSON line holding it is read (as null).
    a, b, c = events(3)
    big = {"id": "big", "v": 1.5, "w": [2.5]}
    text = pretty({"events": [a, big, b, c]} if body else [a, big, b, c])
    text = text.replace(b"1.5", b"1e400").replace(b"2.5", b"-1E+999")
    found, problems = read(write(tmp_path, text))
    assert [value["id"] for _, value in found] == ["e0", "big", "e1", "e2"]
    assert dict(found)[next(line for line, value in found if value["id"] == "big")] == {
        "id": "big", "v": None, "w": [None],
    }  # fmt: skip
    assert problems == []


def test_a_nan_after_the_syntax_error_of_a_one_line_document_is_not_reported(tmp_path):
    # The words past the stop were left out by their line: on the stop's own line (a document
    # written on one line) one after the error was still said to be "read as null".
    text = b'[{"id": "e0", "a": NaN}, {"id": "e1", "a": 2}, {"id": "e2", "a": 3,,}, {"id": "e3", "a": Infinity}]'
    found, problems = read(write(tmp_path, text))
    assert [value["id"] for _, value in found] == ["e0", "e1"]
    said = [message for _, _, message in problems]
    assert "NaN: JSON has no such number; read as null" in said
    assert not any(message.startswith("Infinity") for message in said), said


def test_the_column_of_a_syntax_error_is_the_files_after_a_nan_on_its_line(tmp_path):
    # Counted in the text read, where NaN is "null" (a byte longer) and Infinity four shorter.
    text = b'[{"id": "e0", "a": NaN}, {"id": "e1", "a": -Infinity}, {"id": "e2", "a": 3,,}]'
    _, problems = read(write(tmp_path, text))
    said = [message for _, _, message in problems if message.startswith("malformed")]
    assert said and said[0].startswith(f"malformed JSON at column {text.index(b',,') + 2}:"), said
