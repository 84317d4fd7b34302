"""One empty database of each driver, for the suites that test both stores (the
``database`` fixture of ``tests/unit/conftest.py``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from app.store import Store, open_store


class Database:
    """One empty database of one driver: stores on it, and plain SQL to look inside."""

    def __init__(self, driver: str, url: str, sqlite_path: Path | None = None) -> None:
        self.driver, self.url, self.sqlite_path = driver, url, sqlite_path

    def open(self) -> Store:
        return open_store(self.url)

    async def query(self, query: str) -> list[tuple[object, ...]]:
        if self.sqlite_path is not None:
            conn = sqlite3.connect(self.sqlite_path)
            try:
                return conn.execute(query).fetchall()
            finally:
                conn.close()
        async with await psycopg.AsyncConnection.connect(self.url) as pg:
            return await (await pg.execute(query)).fetchall()

    async def execute(self, statement: str) -> None:
        if self.sqlite_path is not None:
            conn = sqlite3.connect(self.sqlite_path)
            try:
                with conn:
                    conn.execute(statement)
            finally:
                conn.close()
            return
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as pg:
            await pg.execute(statement)

    async def tables(self) -> set[str]:
        if self.sqlite_path is not None:
            rows = await self.query("SELECT name FROM sqlite_master WHERE type = 'table'")
        else:
            rows = await self.query(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            )
        return {str(name) for (name,) in rows}
