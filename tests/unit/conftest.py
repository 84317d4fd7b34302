"""Fixtures of the unit suites: a SQLite store, a real PostgreSQL database emptied for
each test, and the mock upstream in process.

The server starts only when a test asks for it (see ``tests/support/postgres.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.store import Store, open_store
from bench.mock_upstream import MockUpstream
from tests.support.databases import Database
from tests.support.postgres import reset_database, session_database


@pytest.fixture(scope="session")
def postgres_database(postgres_server: str) -> Iterator[str]:
    """The session's database on the session's PostgreSQL server; its URL."""
    with session_database(postgres_server) as url:
        yield url


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """The URL of an empty PostgreSQL database (no table, no connection but yours)."""
    reset_database(postgres_database)
    return postgres_database


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A migrated SQLite store in the test's folder (suites that test both stores
    parametrize a ``store`` of their own)."""
    s = open_store(f"sqlite:///{tmp_path / 'svc.db'}")
    await s.migrate()
    yield s
    await s.close()


@pytest.fixture
async def mock() -> AsyncIterator[MockUpstream]:
    """The mock upstream on this test's event loop (its model names pick the faults)."""
    server = MockUpstream()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        path = tmp_path / "svc.db"
        return Database("sqlite", f"sqlite:///{path}", sqlite_path=path)
    return Database("postgresql", request.getfixturevalue("postgres_url"))
