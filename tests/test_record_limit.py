"""The longest line or record an import reads (REPLAY_MAX_RECORD_BYTES, issue 20): a longer one
is a problem on its line and the rest of the file imports, with memory bounded by the limit
however long the line (JSON lines, and the records of a JSON array or `{"events": [...]}` body)."""

from __future__ import annotations

import gc
import json
import tracemalloc
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from django.test import Client

from sessions_app.canonical import Problems
from sessions_app.formats import Source
from sessions_app.formats.records import iter_records
from sessions_app.ingest.importing import import_file
from sessions_app.jobs import run_import
from sessions_app.models import Event, Session

from .builders_formats import FIXTURES
from .builders_ingest import T0, canonical_records, session_end, session_start
from .builders_teams import maintainer_key

LIMIT = 64 * 1024
AGENTLENS = FIXTURES / "agentlens"


@pytest.fixture
def api(db) -> Client:
    return Client(headers={"authorization": f"Bearer {maintainer_key('agent')}"})


@pytest.fixture
def small_limit(settings) -> int:
    settings.MAX_RECORD_BYTES = LIMIT
    return LIMIT


def canonical_lines(*, long_at: int, long_bytes: int, events: int = 12) -> list[bytes]:
    """A canonical session as JSON lines, the record on line `long_at` given a payload of
    `long_bytes` (an agent's tool output, say)."""
    records = [session_start("long line"), *canonical_records(events), session_end(t=T0 + timedelta(minutes=1))]
    lines = [orjson.dumps(record) for record in records]
    padded = dict(records[long_at - 1], payload={"output": "y" * long_bytes})
    lines[long_at - 1] = orjson.dumps(padded)
    return lines


def upload(api: Client, path: Path) -> dict:
    with path.open("rb") as handle:
        accepted = api.post("/api/imports", {"file": handle})
    assert accepted.status_code == 202, accepted.content
    run_import(job_id=accepted.json()["job"])
    return api.get(accepted.json()["status_url"]).json()


def test_a_line_over_the_limit_is_a_problem_on_its_line_and_every_other_line_imports(api, small_limit, tmp_path):
    lines = canonical_lines(long_at=5, long_bytes=3 * 1024 * 1024)
    path = tmp_path / "agent-run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    status = upload(api, path)
    assert status["status"] == "done" and status["original_name"] == "agent-run.jsonl"
    assert [(p["line"], p["field"]) for p in status["problems"]] == [(5, "line")]
    message = status["problems"][0]["message"]
    assert "3.0 MiB long" in message and "64.0 KiB" in message and "REPLAY_MAX_RECORD_BYTES" in message
    session = Session.objects.get(pk=status["sessions"][0]["session"])
    stored_lines = list(Event.objects.filter(session=session).order_by("seq").values_list("line", flat=True))
    assert 5 not in stored_lines
    assert set(stored_lines) == set(range(1, len(lines) + 1)) - {5}


def test_the_same_line_under_the_default_limit_imports_whole(api, tmp_path):
    lines = canonical_lines(long_at=5, long_bytes=3 * 1024 * 1024)
    path = tmp_path / "agent-run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    status = upload(api, path)
    assert status["problem_count"] == 0
    long_event = Event.objects.get(session_id=status["sessions"][0]["session"], line=5)
    assert len(long_event.payload) > 3 * 1024 * 1024


def test_a_long_last_line_without_a_line_break_and_a_gzip_file_are_bounded_too(small_limit, tmp_path, project):
    import gzip

    lines = canonical_lines(long_at=14, long_bytes=200 * 1024)
    path = tmp_path / "run.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(lines)))  # the long line is the last, unended
    outcome = import_file(path=path, project=project)[0]
    assert [(p["line"], p["field"]) for p in outcome.problems] == [(14, "line")]
    assert outcome.events == len(lines) - 1


def agentlens_events() -> list[dict]:
    return orjson.loads((AGENTLENS / "two_sessions_array.json").read_bytes())


@pytest.mark.parametrize("container", ["array", "pretty array", "body", "lines"])
def test_an_agentlens_record_over_the_limit_is_a_problem_and_the_rest_of_the_document_imports(
    container, small_limit, tmp_path, project
):
    events = agentlens_events()
    long = dict(events[3], output="z" * (2 * 1024 * 1024))
    events = [*events[:3], long, *events[3:]]  # one more event, the 4th, too long
    if container == "array":
        data, line = orjson.dumps(events), 1
    elif container == "pretty array":
        data = orjson.dumps(events, option=orjson.OPT_INDENT_2)
        line = data[: data.rindex(b"\n  {", 0, data.index(b'"zzz'))].count(b"\n") + 2  # where its `{` is
    elif container == "body":
        data = b'{"events": [\n' + b",\n".join(orjson.dumps(e) for e in events) + b'\n], "batch": 1}'
        line = 5
    else:
        data, line = b"\n".join(orjson.dumps(e) for e in events) + b"\n", 4
    path = tmp_path / "events.json"
    path.write_bytes(data)
    outcomes = import_file(path=path, project=project, format="agentlens")
    problems = outcomes[0].problems
    assert [(p["line"], p["field"]) for p in problems] == [(line, "line")]
    assert "2.0 MiB long" in problems[0]["message"]
    assert sum(o.events for o in outcomes) == len(events) - 1  # the 24 events of the fixture, all of them


def test_several_records_over_the_limit_in_one_json_array_are_each_a_problem(small_limit, tmp_path):
    events = agentlens_events()
    long = [dict(events[i], output="z" * (300 * 1024 + i)) for i in (1, 2)]
    path = tmp_path / "events.json"
    path.write_bytes(orjson.dumps([events[0], long[0], events[1], long[1], events[2]]))
    problems = Problems()
    records = list(iter_records(Source(path=path, max_record_bytes=small_limit), problems))
    assert [r.value["id"] for r in records] == [events[i]["id"] for i in range(3)]
    assert len(problems.items) == 2 and all(p.message.startswith("record 300.") for p in problems.items)


def _peak_while(read) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("container", ["lines", "array"])
def test_reading_a_line_far_over_the_limit_takes_memory_near_the_limit_not_the_line(container, small_limit, tmp_path):
    """tracemalloc's peak while reading a file whose one record is 40 MiB, with the limit at 64
    KiB: a few times the limit (the read blocks are that size too), where reading the line whole
    would take the line's size several times over."""
    events = agentlens_events()[:3]
    long = orjson.dumps(dict(events[1], output="w" * (40 * 1024 * 1024)))
    if container == "lines":
        data = b"\n".join([orjson.dumps(events[0]), long, orjson.dumps(events[2])]) + b"\n"
    else:
        data = b"[" + b",".join([orjson.dumps(events[0]), long, orjson.dumps(events[2])]) + b"]"
    path = tmp_path / "big.json"
    path.write_bytes(data)
    del data, long
    problems = Problems()
    found: list[int] = []

    def read() -> None:
        source = Source(path=path, max_record_bytes=small_limit)
        found.extend(r.line for r in iter_records(source, problems))

    peak = _peak_while(read)
    assert len(found) == 2 and problems.count == 1
    assert peak < 12 * small_limit, f"peak {peak} bytes"


def test_a_whole_import_of_a_line_far_over_the_limit_stays_near_the_limit(small_limit, tmp_path, project):
    lines = canonical_lines(long_at=3, long_bytes=40 * 1024 * 1024, events=4)
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    del lines
    outcomes: list = []
    import_file(path=path, project=project)  # warm: first-use imports and caches are not the line's
    Session.objects.all().delete()
    peak = _peak_while(lambda: outcomes.extend(import_file(path=path, project=project)))
    assert outcomes[0].events == 5 and [p["line"] for p in outcomes[0].problems] == [3]
    assert peak < 32 * small_limit, f"peak {peak} bytes"


def test_the_limit_is_read_from_the_environment_and_refused_below_a_kilobyte():
    from .test_settings import manage

    shown = manage("shell", "-c", "from django.conf import settings; print(settings.MAX_RECORD_BYTES)",
                   REPLAY_MAX_RECORD_BYTES="65536")  # fmt: skip
    assert shown.returncode == 0 and shown.stdout.split()[-1] == "65536", shown.stderr
    refused = manage("check", REPLAY_MAX_RECORD_BYTES="100")
    assert refused.returncode != 0 and "REPLAY_MAX_RECORD_BYTES must be at least 1024" in refused.stderr


def test_the_writer_flushes_large_records_by_their_bytes_so_memory_does_not_grow_with_them(tmp_path, project,
                                                                                         monkeypatch):  # fmt: skip
    """Records of 1 MiB (each under the limit): the rows waiting for a bulk write are cut by their
    bytes (writer.BATCH_BYTES, 2 MiB here), so the import's peak is the same for 16 of them as for
    48; cut only every 5000 rows, the batch would hold every record two or three times over."""
    from sessions_app.ingest import writer

    monkeypatch.setattr(writer, "BATCH_BYTES", 2 * 1024 * 1024)

    def peak_of(count: int) -> int:
        lines = canonical_lines(long_at=2, long_bytes=10, events=count)
        big = [orjson.dumps(dict(orjson.loads(line), payload={"out": "v" * 1024 * 1024})) for line in lines[1:-1]]
        path = tmp_path / f"large-{count}.jsonl"
        path.write_bytes(b"\n".join([lines[0], *big, lines[-1]]) + b"\n")
        del lines, big
        outcomes: list = []
        peak = _peak_while(lambda: outcomes.extend(import_file(path=path, project=project)))
        assert outcomes[0].events == count + 2 and not outcomes[0].problems
        return peak

    peak_of(4)  # warm: first-use imports and caches
    few, many = peak_of(16), peak_of(48)
    assert many < 1.25 * few, f"16 records: {few / 2**20:.1f} MiB, 48: {many / 2**20:.1f} MiB"
    assert many < 48 * 1024 * 1024  # less than the records themselves


def test_an_rlm_snapshot_step_over_the_limit_ends_the_snapshot_there_with_a_problem(small_limit, tmp_path, project):
    """A snapshot's members are built in Python from ijson's events: a step over the limit is
    not read on past (the steps before it import), and not held whole either."""
    import json

    from sessions_app.formats import rlm_snapshot

    from .builders_rlm import record_full_session

    recorder = record_full_session(tmp_path / "full.jsonl", end=False, steps=3, large_output_at=None)
    snapshot = recorder.get_snapshot().to_dict()
    snapshot["steps"][1]["output"] = "o" * (3 * 1024 * 1024)
    text = json.dumps(snapshot, indent=2)
    path = tmp_path / "snapshot.json"
    path.write_text(text)
    problems = Problems()
    source = Source(path=path, max_record_bytes=small_limit)
    sessions = list(rlm_snapshot.parse(source, problems))
    steps = [event for parsed in sessions for event in parsed.events if event.kind == "step_end"]
    assert [p.field for p in problems.items] == ["line"]
    assert "a value over the limit of 64.0 KiB" in problems.items[0].message
    opens = text[: text.index('"step": 2')].rfind("{")
    assert problems.items[0].line == text[:opens].count("\n") + 1  # the line the step's object opens on
    assert len(steps) == 1


@pytest.mark.parametrize("block", [1, 2, 7, 64, 1 << 20])
@pytest.mark.parametrize("container", ["array", "body"])
def test_the_scan_that_finds_a_long_item_reads_strings_escapes_and_nesting_across_blocks(block, container):
    """json_documents._item_range: each item's exact bytes, however the blocks cut the document
    (an escape at a block's end, a key split over two), past brackets, commas and quotes in strings."""
    from sessions_app.formats.json_documents import _item_range

    items = [
        {"a": "x]y,z", "b": [1, {"c": "}{"}]},
        'a string, with "quotes" and a \\ backslash]',
        [[], {}, [{"d": "]é"}]],
        12.5e3,
        {"e": '\\"', "f": None},
    ]
    texts = [json.dumps(item, indent=1) for item in items]
    if container == "array":
        document, prefix = ("[ " + ",\n ".join(texts) + " ]").encode(), "item"
    else:
        # A key written with an escape is the key: ijson reads `"ev\\u0065nts"` as "events".
        head = '{"meta": {"events": [0]}, "event": [1], "ev\\u0065nts": [\n'
        document, prefix = (head + ",\n".join(texts) + '\n], "after": ["]"]}').encode(), "events.item"
    blocks = [document[i : i + block] for i in range(0, len(document), block)]
    for index, text in enumerate(texts):
        start, end, line = _item_range(iter(blocks), prefix, index)
        assert document[start:end].decode().strip() == text
        assert line == document[:start].count(b"\n") + 1
    assert _item_range(iter(blocks), prefix, len(texts)) is None
