"""The data folder and what svc writes there are the owner's alone: the database holds key
hashes and accounts, the secret files what their names say."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.data_dir import write_private
from app.core.settings import Settings
from app.ops.resolve import resolve
from app.store import open_store

SECRET_FILES = ("admin-token.txt", "key-pepper.txt")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def everyone_may_read() -> Iterator[None]:
    """The usual umask (022): whatever svc does not restrict is world-readable."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


async def _resolve_and_open_the_store(data_dir: Path) -> None:
    settings, owner = resolve(
        Settings(data_dir=str(data_dir), redis_url="redis://127.0.0.1:1"), start_embedded=False
    )
    assert owner is None
    assert settings.database_url == f"sqlite:///{settings.data_dir}/svc.db"
    store = open_store(settings.database_url)
    try:
        await store.migrate()
        # the side files exist while a connection is open (WAL mode)
        for name in ("svc.db", "svc.db-wal", "svc.db-shm"):
            assert mode(data_dir / name) == 0o600, name
    finally:
        await store.close()


async def test_a_new_data_folder_database_and_secrets_are_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await _resolve_and_open_the_store(data_dir)
    assert mode(data_dir) == 0o700
    assert mode(data_dir / "svc.db") == 0o600
    for name in SECRET_FILES:
        assert mode(data_dir / name) == 0o600, name
    write_private(data_dir / "dev-key.txt", "svc_live_x\n")
    assert mode(data_dir / "dev-key.txt") == 0o600


async def test_files_left_readable_by_an_older_version_are_made_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    old = "old-" + "s" * 40 + "\n"  # an admin token is held to 32 characters
    for name in (*SECRET_FILES, "dev-key.txt"):
        (data_dir / name).write_text(old)
        (data_dir / name).chmod(0o644)
    sqlite3.connect(data_dir / "svc.db").close()  # an empty database, 0644 by the umask
    assert mode(data_dir / "svc.db") == 0o644
    await _resolve_and_open_the_store(data_dir)
    assert mode(data_dir) == 0o700
    for name in SECRET_FILES:
        assert mode(data_dir / name) == 0o600, name
        assert (data_dir / name).read_text() == old  # kept, not regenerated
    write_private(data_dir / "dev-key.txt", "svc_live_y\n")
    assert mode(data_dir / "dev-key.txt") == 0o600


async def test_a_database_folder_svc_creates_is_private(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db' / 'svc.db'}")
    try:
        await store.migrate()
    finally:
        await store.close()
    assert mode(tmp_path / "db") == 0o700
    assert mode(tmp_path / "db" / "svc.db") == 0o600
