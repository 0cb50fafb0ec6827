"""Folders and files readable by the server's user only, made so from their first moment (the
settings make the data folder and the SQLite file; the upload folders are made as uploads come)."""

from __future__ import annotations

import os
from pathlib import Path


def private_folder(path: Path, *, mode: int = 0o700) -> Path:
    """The folder, created with `mode` when missing, and so each missing folder above it (an
    existing one keeps its mode: tightening a deployment's folders is its owner's decision,
    docs/deployment.md)."""
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    # mkdir(parents=True) would give the missing parents the umask's mode, not this one.
    for folder in reversed(missing):
        folder.mkdir(mode=mode, exist_ok=True)
    return path


def private_file(path: Path) -> Path:
    """The file, created empty and readable by its owner only when missing. SQLite takes an empty
    file for a new database, and gives its -wal and -shm files the main file's mode, so the
    database never exists readable by others, not even for a moment."""
    private_folder(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    return path
