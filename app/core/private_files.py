"""Files only their owner may read: the data folder holds key hashes, balances (the
embedded Valkey's AOF) and generated secrets, so its files are 0600 and its folders 0700."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

PRIVATE_FILE_MODE = 0o600
PRIVATE_FOLDER_MODE = 0o700
_OTHERS = 0o077  # the group's and everyone else's bits

log = logging.getLogger("svc.files")


def make_private(path: Path) -> None:
    """Take the group's and everyone else's access to ``path`` away (0644 → 0600,
    0755 → 0700); the owner's bits stay. A file svc may not change (a read-only mount,
    another owner) is left as it is, with a warning: refusing to start would not make it
    private either."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & _OTHERS:
        return
    try:
        os.chmod(path, mode & ~_OTHERS)
    except OSError as exc:
        log.warning("could not make %s private (mode %o): %s", path, mode, exc)


def private_folder(path: Path) -> None:
    """Create the folder (and its parents) when missing; make it private either way."""
    path.mkdir(mode=PRIVATE_FOLDER_MODE, parents=True, exist_ok=True)
    make_private(path)


def create_private_file(path: Path) -> None:
    """Create an empty 0600 file unless one exists (a program that opens an existing
    file keeps its mode, so SQLite's database then starts out private)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))
