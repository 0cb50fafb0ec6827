"""The SQLite file and the data folder are created readable by their owner only
(replay_site/files.py: private_folder, private_file)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

from replay_site.files import private_file, private_folder
from replay_site.settings import sqlite_database

ROOT = Path(__file__).resolve().parent.parent


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_fresh_sqlite_path_is_created_empty_and_owner_only(tmp_path):
    path = tmp_path / "deep" / "er" / "replay.sqlite3"
    sqlite_database(path)
    assert path.stat().st_size == 0 and mode(path) == 0o600
    # Every folder it had to make, not only the last one.
    assert mode(tmp_path / "deep") == 0o700 and mode(tmp_path / "deep" / "er") == 0o700


def test_sqlites_own_files_take_the_main_files_mode(tmp_path):
    path = private_file(tmp_path / "replay.sqlite3")
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (1)")
        db.commit()
        assert [mode(Path(f"{path}{suffix}")) for suffix in ("", "-wal", "-shm")] == [0o600] * 3
    finally:
        db.close()


def test_a_fresh_data_folder_is_owner_only(tmp_path):
    private_folder(tmp_path / "var" / "data")
    assert mode(tmp_path / "var") == 0o700 and mode(tmp_path / "var" / "data") == 0o700


def test_existing_files_and_folders_keep_their_modes(tmp_path):
    folder, path = tmp_path / "shared", tmp_path / "shared" / "replay.sqlite3"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    path.write_bytes(b"")
    path.chmod(0o640)
    private_file(path)
    private_folder(folder)
    assert (mode(folder), mode(path)) == (0o755, 0o640)


def test_starting_up_makes_the_configured_database_and_data_folder_owner_only(tmp_path):
    db, data = tmp_path / "db" / "replay.sqlite3", tmp_path / "srv" / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAY_") and k != "DATABASE_URL"}
    env.update(DATABASE_URL=f"sqlite:///{db}", REPLAY_DATA_DIR=str(data))
    result = subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert db.stat().st_size > 0  # SQLite used the file it was given
    assert (mode(db), mode(db.parent), mode(data), mode(data.parent)) == (0o600, 0o700, 0o700, 0o700)


def test_an_uploads_folders_are_made_without_the_umasks_mode(tmp_path, settings):
    # In a data folder an operator made (0755), uploads/ and the year's folder came out 0755
    # from the umask (mkdir(parents=True) gives its mode to the last folder only).
    from sessions_app.ingest.uploads import _new_stored_path

    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir(mode=0o755)
    settings.DATA_DIR.chmod(0o755)
    path = _new_stored_path(".jsonl")
    month, year, uploads = path.parent, path.parent.parent, path.parent.parent.parent
    assert uploads == settings.DATA_DIR / "uploads"
    assert (mode(uploads), mode(year), mode(month)) == (0o750, 0o750, 0o750)
    assert mode(settings.DATA_DIR) == 0o755  # an existing folder keeps its mode
