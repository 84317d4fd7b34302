"""The operators' audit log as the store keeps it: its rows, a page of them, and the
program that writes an entry inside the transaction of the change it records.

An entry's order is its ``seq``: a 63-bit number that grows with time (milliseconds first:
``app.core.ids.CompletionIds``), made by the writing process, so entries of several
processes interleave in time order and a page is one range scan of an index that ends in
``seq``. Its public id is ``audit_<seq>``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from app.core.ids import CompletionIds
from app.store.core import SQLCore
from app.store.program import Program, execute
from app.store.records import Row

AUDIT_ID_PREFIX = "audit_"
_seqs = CompletionIds()


class AuditRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One operator action that changed money, a key or an account."""

    seq: int  # the order of entries (``new_seq``); the public id is audit_<seq>
    account_pid: str
    action: str  # account.create, account.disable, credits.grant, key.rotate, ...
    target: str | None  # what the action changed: a key id, a grant id, ...
    actor: str  # admin_api | cli
    request_id: str | None  # the request's x-request-id (None from the CLI)
    client_address: str | None  # as the failed-auth throttle resolves it (None from the CLI)
    details: str  # a JSON object: what the action did (never a secret)
    created_at: int  # unix seconds

    @property
    def id(self) -> str:
        return f"{AUDIT_ID_PREFIX}{self.seq}"


class AuditQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Which entries to list: newest first, of one account or all, after an entry."""

    limit: int
    account_pid: str | None = None
    after: int | None = None  # the seq of the entry the page follows


def new_seq() -> int:
    return _seqs.next()


def seq_of(audit_id: str) -> int | None:
    """The seq of a public id (``audit_<seq>``), or None for anything else."""
    digits = audit_id.removeprefix(AUDIT_ID_PREFIX)
    if digits == audit_id or not (digits.isascii() and digits.isdigit()) or len(digits) > 19:
        return None
    return int(digits)


_COLUMNS = AuditRecord.__struct_fields__
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM audit_log"
INSERT_AUDIT = (
    f"INSERT INTO audit_log ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
)
GET_AUDIT = f"{_SELECT} WHERE seq = ?"
# a change taken back (its Redis write refused) takes its entry with it
DELETE_AUDIT_OF_TARGET = "DELETE FROM audit_log WHERE account_pid = ? AND target = ?"
DELETE_AUDIT_OF_ACCOUNT = "DELETE FROM audit_log WHERE account_pid = ?"


def audit_page(query: AuditQuery) -> tuple[str, Row]:
    """One page, newest first: a range scan of ``audit_log_account`` (one account's) or of
    the primary key (everyone's)."""
    where: list[str] = []
    args: list[Any] = []
    if query.account_pid is not None:
        where.append("account_pid = ?")
        args.append(query.account_pid)
    if query.after is not None:
        where.append("seq < ?")
        args.append(query.after)
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    return f"{_SELECT}{condition} ORDER BY seq DESC LIMIT ?", (*args, query.limit)


def write_audit(entry: AuditRecord | None) -> Program[None]:
    """Write ``entry`` (None: nothing) in the caller's transaction: the change and its entry
    commit together, or neither does."""
    if entry is not None:
        yield from execute(INSERT_AUDIT, msgspec.structs.astuple(entry))


class AuditSQL(SQLCore):
    """``Store``'s audit log reads (a part of ``SQLStore``); entries are written by the
    changes they record (``write_audit``)."""

    async def list_audit(self, query: AuditQuery) -> list[AuditRecord]:
        return await self._records(AuditRecord, *audit_page(query))

    async def get_audit(self, seq: int) -> AuditRecord | None:
        return await self._record(AuditRecord, GET_AUDIT, (seq,))
