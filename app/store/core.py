"""``SQLCore``: the engine's side of ``SQLStore`` that each of its parts (``app.store.base``,
``app.store.accounts``, ``app.store.audit``, ``app.store.webhooks``) is written on: running a
program in a transaction, and the locks an engine names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, TypeVar

import msgspec

from app.store.program import Program, Transaction, rows
from app.store.records import Row, to_record

T = TypeVar("T")
R = TypeVar("R", bound=msgspec.Struct)


class SQLCore(ABC):
    """What every part of ``SQLStore`` runs on: an engine runs programs (``_run``) and names
    the locks below; the parts read and write through the helpers here."""

    # Locks (shared-dialect statements, run first in the transaction), None where every
    # write transaction holds the database's one write lock, which serializes them all.
    MIGRATION_LOCK: ClassVar[str | None] = None
    """Taken by each migration step: processes starting at once apply a version once."""
    SHARD_LOCK: ClassVar[str | None] = None
    """Taken (argument: the shard) by a usage batch before it reads the shard's cursor."""
    ACCOUNT_LOCK: ClassVar[str | None] = None
    """Taken (argument: the pid) before an account's keys or webhooks are counted or added."""
    SCHEMA_PRESENT: ClassVar[str]
    """A row when svc's migrations table exists (the catalogue's own words for it)."""

    @abstractmethod
    async def _run(self, program: Program[T], transaction: Transaction = Transaction.NONE) -> T:
        """Run ``program`` on one connection in ``transaction``: its result, or
        ``StoreConflict`` / ``StoreError`` for what the engine raised."""

    async def _write(self, program: Program[T]) -> T:
        return await self._run(program, Transaction.WRITE)

    async def _rows(self, query: str, args: Row = ()) -> list[Row]:
        return await self._run(rows(query, args))

    async def _record(self, record: type[R], query: str, args: Row) -> R | None:
        found = await self._rows(query, args)
        return to_record(record, found[0]) if found else None

    async def _records(self, record: type[R], query: str, args: Row = ()) -> list[R]:
        return [to_record(record, r) for r in await self._rows(query, args)]
