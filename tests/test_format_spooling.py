"""Files holding many sessions (AgentLens events, flux0 recordings): the file is read once and
each session converted from its own spool (`records.RecordSpool`), so the work stays two
passes over the records whatever the number of sessions, and nothing is left on disk."""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import pytest

from sessions_app.canonical import Problems
from sessions_app.formats import Source, agentlens, flux0
from sessions_app.formats import records as json_records

from .builders_formats import FIXTURES, ingest_file, rows

SESSIONS = 40
# Session ids are the file's own text: none of these may reach a path.
HOSTILE_IDS = ["../../escape", "a/b", "/abs", "nul\u0000byte", "x" * 300, "é 🙂", "."]


def agentlens_file(path: Path, *, newest_first: bool = False) -> dict[str, list[dict]]:
    """SESSIONS sessions of 5 events each, interleaved event by event; their events by id."""
    template = [
        orjson.loads(line) for line in (FIXTURES / "agentlens" / "two_sessions.ndjson").read_bytes().splitlines()
    ]
    deploy = [e for e in template if e["sessionId"] == "ses_deploy_7f3a"][:5]
    ids = HOSTILE_IDS + [f"ses_{n:03d}" for n in range(SESSIONS - len(HOSTILE_IDS))]
    by_id = {sid: rechained([{**e, "id": f"{sid}-{i}", "sessionId": sid} for i, e in enumerate(deploy)]) for sid in ids}
    order = [by_id[sid][i] for i in range(len(deploy)) for sid in ids]
    if newest_first:
        order.reverse()
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in order) + b"\n")
    return by_id


def rechained(events: list[dict]) -> list[dict]:
    """The events with the hashes AgentLens gives them under their new ids and sessions."""
    previous = None
    for event in events:
        event["prevHash"] = previous
        event["hash"] = previous = agentlens.source_hash(event)
    return events


def flux0_file(path: Path) -> dict[str, list[dict]]:
    template = [orjson.loads(line) for line in (FIXTURES / "flux0" / "support_chat.jsonl").read_bytes().splitlines()]
    ids = HOSTILE_IDS + [f"rec{n:03d}" for n in range(SESSIONS - len(HOSTILE_IDS))]
    by_id = {rid: [{**r, "id": f"{rid}-{i}", "recording_id": rid} for i, r in enumerate(template[:6])] for rid in ids}
    order = [by_id[rid][i] for i in range(6) for rid in ids]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in order) + b"\n")
    return by_id


FORMATS = {"agentlens": (agentlens, agentlens_file), "flux0": (flux0, flux0_file)}


@pytest.fixture
def opens(monkeypatch) -> list[Path]:
    """Every opening of a source file, in order."""
    opened: list[Path] = []
    original = Source.open

    def counting(self):
        opened.append(self.path)
        return original(self)

    monkeypatch.setattr(Source, "open", counting)
    return opened


@pytest.fixture
def spool_folders(monkeypatch) -> list[Path]:
    made: list[Path] = []
    original = tempfile.mkdtemp

    def recording(*args, **kwargs):
        folder = original(*args, **kwargs)
        made.append(Path(folder))
        return folder

    monkeypatch.setattr(tempfile, "mkdtemp", recording)
    return made


@pytest.mark.parametrize("open_files", [2, 64])
@pytest.mark.parametrize("name", list(FORMATS))
def test_many_sessions_are_read_from_one_pass_over_the_file(
    name, open_files, project, tmp_path, opens, spool_folders, monkeypatch
):
    module, build = FORMATS[name]
    # Two open spool files for forty sessions: every write reopens one, appending.
    monkeypatch.setattr(json_records, "SPOOL_OPEN_FILES", open_files)
    path = tmp_path / "many.jsonl"
    by_id = build(path)
    sessions, problems = ingest_file(module, path, project)
    assert problems.count == 0
    assert opens == [path]  # one pass over the file, not one per session
    assert len(sessions) == SESSIONS
    for session, (_sid, records) in zip(sessions, by_id.items()):
        # flux0 adds rebuilt messages carrying their last chunk's line and bytes: each source
        # line counts once, and every record is there, in file order.
        lines = {e.line: orjson.loads(e.raw) for e in rows(session)}
        assert [lines[line] for line in sorted(lines)] == records
    assert spool_folders and not any(folder.exists() for folder in spool_folders)


def test_hostile_session_ids_never_become_paths(project, tmp_path, spool_folders):
    path = tmp_path / "hostile.jsonl"
    agentlens_file(path)
    seen: list[list[str]] = []
    problems = Problems()
    for parsed in agentlens.parse(Source(path=path), problems):
        seen.append(sorted(p.name for p in spool_folders[0].iterdir()))
        list(parsed.events)
    assert len(seen) == SESSIONS
    assert all(name.split(".")[0].isdigit() for names in seen for name in names)
    assert not spool_folders[0].exists()
    assert not (tmp_path.parent / "escape").exists()


def test_a_newest_first_file_of_many_sessions_is_put_back_in_time_order(project, tmp_path, opens):
    path = tmp_path / "newest.jsonl"
    by_id = agentlens_file(path, newest_first=True)
    sessions, problems = ingest_file(agentlens, path, project)
    assert opens == [path]
    assert len(sessions) == SESSIONS
    for session, (sid, records) in zip(sessions, reversed(by_id.items())):
        # The column's length; U+0000 is stored as U+FFFD (test_nul_characters.py).
        assert session.source_session_id == sid[:200].replace("\x00", "\ufffd")
        assert session.metadata["agentlens"]["time_order"] == "newest_first"
        assert [orjson.loads(e.raw)["id"] for e in rows(session)] == [r["id"] for r in records]


def test_stopping_after_the_first_session_leaves_no_spool_behind(tmp_path, spool_folders):
    path = tmp_path / "many.jsonl"
    agentlens_file(path)
    sessions = agentlens.parse(Source(path=path), Problems())
    first = next(sessions)
    assert next(first.events) is not None
    sessions.close()
    assert spool_folders and not spool_folders[0].exists()


def test_progress_moves_while_the_sessions_are_read_back_and_ends_at_the_file_size(tmp_path):
    path = tmp_path / "many.jsonl"
    agentlens_file(path)
    reported: list[int] = []
    source = Source(path=path, on_bytes=reported.append)
    per_session: list[int] = []
    for parsed in agentlens.parse(source, Problems()):
        list(parsed.events)
        per_session.append(reported[-1] if reported else 0)
    assert reported == sorted(reported)
    assert reported[-1] == path.stat().st_size
    # Each session read back moves the bar; it does not sit at 100 % from the first one.
    assert per_session == sorted(per_session) and len(set(per_session)) == SESSIONS
    assert per_session[0] < path.stat().st_size // 10


@pytest.mark.parametrize("run", [1, 3, 1 << 16])
def test_records_read_back_by_sort_keys_come_in_key_order_ties_in_file_order(run, monkeypatch):
    # Sorted in runs merged as read (one sort of them all held a Python object a record).
    import random

    monkeypatch.setattr(json_records, "_SORT_RUN", run)
    rng = random.Random(7)
    keys = [rng.randrange(12) for _ in range(100)]
    spool = json_records.RecordSpool()
    try:
        for number, key in enumerate(keys, start=1):
            spool.add("g", number, orjson.dumps({"n": number, "key": key}))
        read = [record.value["n"] for record in spool.records("g", sort_keys=keys)]
    finally:
        spool.close()
    assert read == sorted(range(1, 101), key=lambda n: keys[n - 1])  # sorted() is stable
